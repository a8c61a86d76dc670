/* safetensors I/O: round trips of every dtype, atomic saves, and a loader
 * that refuses every malformed input with a message instead of crashing. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

/* ---------------------------------------------------------------- helpers */
/* Names of the entries in a directory, sorted, joined with '|'. */
static const char *dir_listing(const char *dir)
{
    static char out[1024];
    char names[16][128];
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < 16)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(names[n++], sizeof names[0], "%.127s", e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char t[128];
                memcpy(t, names[i], sizeof t);
                memcpy(names[i], names[j], sizeof t);
                memcpy(names[j], t, sizeof t);
            }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i) strcat(out, "|");
        strcat(out, names[i]);
    }
    return out;
}

/* A file image: the header as given (unpadded) and data bytes 0, 1, 2, … */
static unsigned char image[1 << 16];

static size_t make_image_n(const char *header, size_t hlen, size_t data_len)
{
    ck_assert(8 + hlen + data_len <= sizeof image);
    for (int i = 0; i < 8; i++) image[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(image + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) image[8 + hlen + i] = (unsigned char)i;
    return 8 + hlen + data_len;
}

static size_t make_image(const char *header, size_t data_len)
{
    return make_image_n(header, strlen(header), data_len);
}

static void set_header_len(unsigned char *b, uint64_t n)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
}

/* The parse fails, says so once, and the message mentions `phrase`. */
#define EXPECT_BAD_BYTES(bytes, size, phrase)                                               \
    do {                                                                                    \
        mi_error_clear();                                                                   \
        mi_safetensors *_st = mi_safetensors_parse(bytes, size);                            \
        ck_assert_msg(_st == NULL, "accepted input that should fail with \"%s\"", phrase);  \
        ck_assert_msg(strncmp(mi_error(), "safetensors: ", 13) == 0, "message \"%s\"",      \
                      mi_error());                                                          \
        ck_assert_error_has(phrase);                                                        \
        mi_error_clear();                                                                   \
    } while (0)

#define EXPECT_BAD(header, data_len, phrase)                                      \
    do {                                                                          \
        size_t _n = make_image(header, data_len);                                 \
        EXPECT_BAD_BYTES(image, _n, phrase);                                      \
    } while (0)

#define W_OK_HEADER "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}"

static bool same_tensor(const mi_tensor *a, const mi_tensor *b)
{
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank || a->numel != b->numel)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return memcmp(a->data, b->data, (size_t)a->numel * mi_dtype_size(a->dtype)) == 0;
}

/* Every dtype, rank 0 to MI_MAX_RANK, zero-size tensors, awkward names. */
static int sample_tensors(mi_named_tensor *out)
{
    mi_rng r;
    mi_rng_seed(&r, 7);
    mi_tensor *f32 = mi_randn(&r, MI_F32, MI_SHAPE(2, 3), 0, 1);
    ((float *)f32->data)[0] = -0.0f;
    ((float *)f32->data)[1] = INFINITY;
    ((float *)f32->data)[2] = NAN;
    mi_tensor *f64 = mi_randn(&r, MI_F64, MI_SHAPE(4), 0, 1);
    mi_tensor *i32 = mi_tensor_new(MI_I32, MI_SHAPE(3, 1, 2));
    for (int i = 0; i < 6; i++) ((int32_t *)i32->data)[i] = (i - 3) * 1000003;
    ((int32_t *)i32->data)[5] = INT32_MIN;
    mi_tensor *i64 = mi_tensor_new(MI_I64, 0, NULL);
    *(int64_t *)i64->data = INT64_MAX - 3; /* not representable as a double */
    mi_tensor *i64v = mi_tensor_new(MI_I64, MI_SHAPE(2));
    ((int64_t *)i64v->data)[0] = INT64_MIN;
    ((int64_t *)i64v->data)[1] = -1;
    int n = 0;
    out[n++] = (mi_named_tensor){"f32", f32};
    out[n++] = (mi_named_tensor){"f64 \"quoted\" \\ back/slash", f64};
    out[n++] = (mi_named_tensor){"i32\ttab\nnewline", i32};
    out[n++] = (mi_named_tensor){"i64 scalar \xc3\xbcn\xc3\xaf\xe2\x82\xac\xf0\x9f\x98\x80", i64};
    out[n++] = (mi_named_tensor){"\x01\x1f control", i64v};
    out[n++] = (mi_named_tensor){"empty", mi_zeros(MI_F32, MI_SHAPE(0, 5))};
    out[n++] = (mi_named_tensor){"empty64", mi_zeros(MI_F64, MI_SHAPE(0))};
    out[n++] = (mi_named_tensor){"rank6", mi_arange(MI_F32, 8)};
    out[n - 1].tensor = mi_tensor_alias(out[n - 1].tensor, MI_SHAPE(1, 2, 1, 2, 1, 2), 0);
    out[n++] = (mi_named_tensor){"f64 scalar", mi_scalar(MI_F64, 3.25)};
    out[n++] = (mi_named_tensor){"i32 scalar", mi_scalar(MI_I32, -7)};
    for (int i = 0; i < n; i++) ck_assert_ptr_nonnull(out[i].tensor);
    return n;
}

static const char *meta_keys[] = {"format", "quote\"key\\", "", "unicode \xe2\x82\xac"};
static const char *meta_values[] = {"pt", "va\\lue\n\t\x01\x7f end", "",
                                    "\xc3\xbc\xf0\x9f\x98\x80 \"q\""};

static void check_loaded(const mi_safetensors *st, const mi_named_tensor *ts, int n)
{
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(st->count, n);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(st->tensors[i].name, ts[i].name); /* file order */
        ck_assert_msg(same_tensor(st->tensors[i].tensor, ts[i].tensor), "tensor %s differs",
                      ts[i].name);
        ck_assert_ptr_eq(mi_safetensors_get(st, ts[i].name), st->tensors[i].tensor);
    }
    ck_assert_int_eq(st->metadata.count, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(st->metadata.keys[i], meta_keys[i]);
        ck_assert_str_eq(mi_safetensors_meta(st, meta_keys[i]), meta_values[i]);
    }
    ck_assert_ptr_null(mi_safetensors_get(st, "absent"));
    ck_assert_ptr_null(mi_safetensors_get(st, "f3"));
    ck_assert_ptr_null(mi_safetensors_meta(st, "absent"));
    ck_assert_ptr_null(mi_safetensors_get(NULL, "f32"));
    ck_assert_ptr_null(mi_safetensors_meta(st, NULL));
}

/* ---------------------------------------------------------------- round trips */
START_TEST(round_trip_every_dtype)
{
    mi_named_tensor ts[16];
    int n = sample_tensors(ts);
    mi_metadata md = {4, meta_keys, meta_values};
    const char *path = tmp_path("model.safetensors");
    ck_assert_msg(mi_safetensors_save(path, ts, n, &md) == 0, "%s", mi_error());
    ck_assert(!mi_error_pending());
    /* only the target is left behind: the temporary file was renamed */
    ck_assert_str_eq(dir_listing(test_tmpdir), "model.safetensors");

    size_t used = mi_scope_stats_get(test_scope).bytes_used;
    mi_safetensors *st = mi_safetensors_load(path);
    ck_assert_msg(st != NULL, "%s", mi_error());
    check_loaded(st, ts, n);
    ck_assert(mi_scope_stats_get(test_scope).bytes_used > used); /* lives in the scope */
    ck_assert_str_eq(st->tensors[0].tensor->name, "f32");
    ck_assert_int_eq(st->tensors[3].tensor->rank, 0);
    ck_assert(*(int64_t *)st->tensors[3].tensor->data == INT64_MAX - 3);

    /* the same bytes through the in-memory parser */
    size_t size;
    unsigned char *bytes = read_file(path, &size);
    mi_safetensors *sm = mi_safetensors_parse(bytes, size);
    ck_assert_msg(sm != NULL, "%s", mi_error());
    check_loaded(sm, ts, n);

    /* the header is padded with spaces to a multiple of 8 */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    ck_assert_int_eq(hlen % 8, 0);
    ck_assert(8 + hlen <= size);
    size_t last = 8 + hlen - 1;
    while (bytes[last] == ' ') last--;
    ck_assert_int_eq(bytes[last], '}');
    ck_assert_int_eq(bytes[8], '{');
    free(bytes);

    /* saving again replaces the file, still leaving no temporary behind */
    ck_assert_int_eq(mi_safetensors_save(path, ts, 1, NULL), 0);
    ck_assert_str_eq(dir_listing(test_tmpdir), "model.safetensors");
    st = mi_safetensors_load(path);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(st->count, 1);
    ck_assert_int_eq(st->metadata.count, 0);
    ck_assert_ptr_null(mi_safetensors_meta(st, "format"));
    ck_assert(same_tensor(st->tensors[0].tensor, ts[0].tensor));

    /* an empty file: no tensors, no metadata */
    ck_assert_int_eq(mi_safetensors_save(path, NULL, 0, NULL), 0);
    st = mi_safetensors_load(path);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(st->count, 0);
}
END_TEST

/* Hand-written headers: escapes, surrogate pairs, whitespace, padding,
 * zero-size tensors sharing an offset, unknown fields. */
START_TEST(parse_accepts_valid_variants)
{
    const char *h = " {\"__metadata__\" : {\"k\":\"\\u0041\\/\\\"\", \"e\":\"\"},\n"
                    "\t\"\\u00fc\\ud83d\\ude00\":{\"dtype\":\"I32\",\"shape\":[2],"
                    "\"data_offsets\":[0,8],\"extra\":[1,{\"x\":null}]},\r\n"
                    "\"s\":{\"shape\":[],\"data_offsets\":[8,12],\"dtype\":\"F32\"},"
                    "\"z1\":{\"dtype\":\"F64\",\"shape\":[3,0],\"data_offsets\":[8,8]},"
                    "\"z2\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[8,8]}}      ";
    size_t n = make_image(h, 12);
    mi_safetensors *st = mi_safetensors_parse(image, n);
    ck_assert_msg(st != NULL, "%s", mi_error());
    ck_assert_int_eq(st->count, 4);
    ck_assert_str_eq(st->tensors[0].name, "\xc3\xbc\xf0\x9f\x98\x80");
    mi_tensor *t = mi_safetensors_get(st, "\xc3\xbc\xf0\x9f\x98\x80");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, MI_I32);
    ck_assert_int_eq(((int32_t *)t->data)[0], 0x03020100);
    ck_assert_int_eq(((int32_t *)t->data)[1], 0x07060504);
    mi_tensor *sc = mi_safetensors_get(st, "s");
    ck_assert_int_eq(sc->rank, 0);
    ck_assert_int_eq(*(uint32_t *)sc->data, 0x0b0a0908u);
    ck_assert_int_eq(mi_safetensors_get(st, "z1")->numel, 0);
    ck_assert_int_eq(mi_safetensors_get(st, "z1")->shape[0], 3);
    ck_assert_str_eq(mi_safetensors_meta(st, "k"), "A/\"");
    ck_assert_str_eq(mi_safetensors_meta(st, "e"), "");

    /* the baseline used by the malformed cases below is valid */
    n = make_image(W_OK_HEADER, 16);
    ck_assert_ptr_nonnull(mi_safetensors_parse(image, n));
    /* an empty object header is a valid empty file */
    n = make_image("{}", 0);
    st = mi_safetensors_parse(image, n);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(st->count, 0);
}
END_TEST

START_TEST(parse_needs_a_scope)
{
    size_t n = make_image(W_OK_HEADER, 16);
    mi_scope_enter(NULL);
    ck_assert_ptr_null(mi_safetensors_parse(image, n));
    mi_scope_leave();
    ck_assert_error_has("safetensors: no current scope");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- saving errors */
START_TEST(save_to_missing_or_unwritable_directory)
{
    mi_named_tensor ts[16];
    sample_tensors(ts);
    const char *p = tmp_path("missing/dir/model.safetensors");
    ck_assert_int_eq(mi_safetensors_save(p, ts, 2, NULL), -1);
    ck_assert_error_has(p);
    ck_assert_error_has(strerror(ENOENT));
    mi_error_clear();

    /* a path component that is a file */
    write_file(tmp_path("plain"), "x", 1);
    p = tmp_path("plain/model.safetensors");
    ck_assert_int_eq(mi_safetensors_save(p, ts, 2, NULL), -1);
    ck_assert_error_has(p);
    ck_assert_error_has(strerror(ENOTDIR));
    mi_error_clear();

    /* the rename fails (the target is a directory): the temp file is removed */
    ck_assert_int_eq(mkdir(tmp_path("target"), 0700), 0);
    ck_assert_int_eq(mi_safetensors_save(tmp_path("target"), ts, 2, NULL), -1);
    ck_assert_error_has("rename");
    ck_assert_error_has(strerror(EISDIR));
    mi_error_clear();
    ck_assert_str_eq(dir_listing(test_tmpdir), "plain|target");

    /* a read-only directory (root ignores permissions, so only as a user) */
    if (geteuid() != 0) {
        ck_assert_int_eq(mkdir(tmp_path("ro"), 0500), 0);
        p = tmp_path("ro/model.safetensors");
        ck_assert_int_eq(mi_safetensors_save(p, ts, 2, NULL), -1);
        ck_assert_error_has(strerror(EACCES));
        mi_error_clear();
    }
}
END_TEST

START_TEST(save_rejects_bad_arguments)
{
    mi_named_tensor ts[16];
    sample_tensors(ts);
    const char *p = tmp_path("bad.safetensors");
    mi_named_tensor dup[2] = {{"w", ts[0].tensor}, {"w", ts[1].tensor}};
    ck_assert_int_eq(mi_safetensors_save(p, dup, 2, NULL), -1);
    ck_assert_error_has("duplicate tensor name 'w'");
    mi_error_clear();
    mi_named_tensor empty[1] = {{"", ts[0].tensor}};
    ck_assert_int_eq(mi_safetensors_save(p, empty, 1, NULL), -1);
    ck_assert_error_has("empty name");
    mi_error_clear();
    mi_named_tensor noname[1] = {{NULL, ts[0].tensor}};
    ck_assert_int_eq(mi_safetensors_save(p, noname, 1, NULL), -1);
    ck_assert_error_has("empty name");
    mi_error_clear();
    mi_named_tensor nul[1] = {{"w", NULL}};
    ck_assert_int_eq(mi_safetensors_save(p, nul, 1, NULL), -1);
    ck_assert_error_has("'w' is NULL");
    mi_error_clear();
    mi_named_tensor reserved[1] = {{"__metadata__", ts[0].tensor}};
    ck_assert_int_eq(mi_safetensors_save(p, reserved, 1, NULL), -1);
    ck_assert_error_has("reserved");
    mi_error_clear();
    mi_named_tensor latin1[1] = {{"caf\xe9", ts[0].tensor}};
    ck_assert_int_eq(mi_safetensors_save(p, latin1, 1, NULL), -1);
    ck_assert_error_has("UTF-8");
    mi_error_clear();
    const char *k2[] = {"a", "a"}, *v2[] = {"1", "2"};
    mi_metadata md = {2, k2, v2};
    ck_assert_int_eq(mi_safetensors_save(p, ts, 1, &md), -1);
    ck_assert_error_has("duplicate metadata key 'a'");
    mi_error_clear();
    const char *v3[] = {"1", NULL};
    const char *k3[] = {"a", "b"};
    mi_metadata md3 = {2, k3, v3};
    ck_assert_int_eq(mi_safetensors_save(p, ts, 1, &md3), -1);
    ck_assert_error_has("NULL value");
    mi_error_clear();
    ck_assert_int_eq(mi_safetensors_save(p, ts, -1, NULL), -1);
    mi_error_clear();
    /* nothing was written */
    ck_assert_str_eq(dir_listing(test_tmpdir), "");
}
END_TEST

/* ---------------------------------------------------------------- loading errors */
START_TEST(load_file_errors)
{
    const char *p = tmp_path("nope.safetensors");
    ck_assert_ptr_null(mi_safetensors_load(p));
    ck_assert_error_has("safetensors: ");
    ck_assert_error_has(p);
    ck_assert_error_has(strerror(ENOENT));
    mi_error_clear();
    ck_assert_ptr_null(mi_safetensors_load(test_tmpdir));
    ck_assert_error_has("not a regular file");
    mi_error_clear();
    /* a FIFO with no writer: refused at once, where a plain open would wait */
    const char *fifo = tmp_path("fifo.safetensors");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_ptr_null(mi_safetensors_load(fifo));
    ck_assert_error_has("not a regular file (a FIFO)");
    mi_error_clear();
    unlink(fifo);
    write_file(p, "\x10\0\0\0", 4);
    ck_assert_ptr_null(mi_safetensors_load(p));
    ck_assert_error_has("truncated");
    mi_error_clear();
    /* a valid file cut inside its data: the last tensor runs past the end */
    size_t n = make_image(W_OK_HEADER, 16);
    write_file(p, image, n - 1);
    ck_assert_ptr_null(mi_safetensors_load(p));
    ck_assert_error_has("run past the end of the data");
    mi_error_clear();
    /* cut inside the header */
    write_file(p, image, 20);
    ck_assert_ptr_null(mi_safetensors_load(p));
    ck_assert_error_has("runs past the end");
    mi_error_clear();
    /* huge header length */
    set_header_len(image, (uint64_t)1 << 63);
    write_file(p, image, n);
    ck_assert_ptr_null(mi_safetensors_load(p));
    ck_assert_error_has("exceeds");
    mi_error_clear();
    /* and a good one loads */
    n = make_image(W_OK_HEADER, 16);
    write_file(p, image, n);
    mi_safetensors *st = mi_safetensors_load(p);
    ck_assert_msg(st != NULL, "%s", mi_error());
    ck_assert_int_eq(((unsigned char *)st->tensors[0].tensor->data)[15], 15);
}
END_TEST

START_TEST(truncated_and_bad_lengths)
{
    EXPECT_BAD_BYTES(NULL, 0, "truncated");
    EXPECT_BAD_BYTES(image, 5, "need at least 8");
    size_t n = make_image(W_OK_HEADER, 16);
    /* header cut short */
    EXPECT_BAD_BYTES(image, 8 + 10, "runs past the end");
    EXPECT_BAD_BYTES(image, 8, "runs past the end");
    /* header length one past the end of the file */
    set_header_len(image, n - 8 + 1);
    EXPECT_BAD_BYTES(image, n, "runs past the end");
    /* huge header lengths are refused before anything is trusted */
    set_header_len(image, (uint64_t)1 << 63);
    EXPECT_BAD_BYTES(image, n, "exceeds");
    set_header_len(image, UINT64_MAX);
    EXPECT_BAD_BYTES(image, n, "exceeds");
    set_header_len(image, 100000001);
    EXPECT_BAD_BYTES(image, n, "limit");
    /* an empty header is not JSON */
    set_header_len(image, 0);
    EXPECT_BAD_BYTES(image, n, "unterminated JSON");
    /* data cut short */
    n = make_image(W_OK_HEADER, 16);
    EXPECT_BAD_BYTES(image, n - 4, "run past the end of the data");
}
END_TEST

START_TEST(bad_offsets)
{
    /* overlapping, adjacent in sorted order */
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, "tensors 'a' [0, 16] and 'b' [8, 16] overlap");
    /* identical ranges */
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               8, "overlap");
    /* overlap with a tensor that is not the previous one in offset order */
    EXPECT_BAD("{\"big\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
               "\"s1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
               "\"s2\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]}}",
               32, "overlap");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
               "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[4,12]}}",
               16, "tensors 'a' [0, 8] and 'c' [4, 12] overlap");
    /* out of range */
    EXPECT_BAD(W_OK_HEADER, 8, "tensor 'w': data_offsets [0, 16] run past the end of the data (8 bytes)");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,"
               "18446744073709551616]}}",
               16, "not an integer in range");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,"
               "9223372036854775804]}}",
               16, "run past the end of the data");
    /* begin > end */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,0]}}", 16,
               "data_offsets [16, 0] have begin > end");
    /* negative */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 16,
               "negative data_offsets entry -4");
    /* shape and byte count disagree */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16,
               "data_offsets [0, 12] do not match");
    mi_error_clear();
    size_t n = make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16);
    ck_assert_ptr_null(mi_safetensors_parse(image, n));
    ck_assert_str_eq(mi_error(), "safetensors: tensor 'w': data_offsets [0, 12] do not match "
                                 "shape [2,2] of F32 (16 bytes)");
    mi_error_clear();
    EXPECT_BAD("{\"w\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,4]}}", 16,
               "shape [] of I64 (8 bytes)");
    /* malformed data_offsets */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 16,
               "[begin, end]");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":0}}}", 16,
               "[begin, end]");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 16,
               "must be integers, not a string");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 16,
               "data_offsets entry 4.0 is not an integer");
}
END_TEST

/* The tensors must tile the data buffer: no hole, nothing before the first
 * or after the last. A header length one byte short, its JSON still valid
 * (one padding space less), would otherwise read every tensor shifted. */
START_TEST(data_buffer_is_entirely_indexed)
{
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
               16, "data bytes [8, 12) before tensor 'b' belong to no tensor");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[4,20]}}", 20,
               "data bytes [0, 4) before tensor 'w'");
    EXPECT_BAD(W_OK_HEADER, 20, "the tensors cover 16 of the 20 data bytes");
    EXPECT_BAD("{}", 4, "4 data bytes but no tensor");
    EXPECT_BAD("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 4,
               "cover 0 of the 4");
    /* the header length one short: the data start one byte early */
    size_t n = make_image(W_OK_HEADER "  ", 16);
    ck_assert_ptr_nonnull(mi_safetensors_parse(image, n));
    set_header_len(image, strlen(W_OK_HEADER "  ") - 1);
    EXPECT_BAD_BYTES(image, n, "the tensors cover 16 of the 17 data bytes");
}
END_TEST

START_TEST(bad_dtypes_and_shapes)
{
    EXPECT_BAD("{\"w\":{\"dtype\":\"XYZ\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "tensor 'w': unknown dtype 'XYZ'");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[0,1]}}", 16,
               "dtype 'F8_E5M2'");
    EXPECT_BAD("{\"w\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 16,
               "unsupported dtype 'BF16'");
    EXPECT_BAD("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "unknown dtype 'f32'");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "unknown dtype");
    EXPECT_BAD("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "dtype is a number, not a string");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,2],\"data_offsets\":[0,16]}}", 16,
               "tensor 'w': negative dimension -2 in shape");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 16,
               "rank 7 exceeds MI_MAX_RANK (6)");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
               "\"data_offsets\":[0,4]}}",
               16, "overflows");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976,8],"
               "\"data_offsets\":[0,0]}}",
               16, "overflows");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 16,
               "shape entry 2.5 is not an integer");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,4]}}", 16,
               "shape entry 1e2 is not an integer");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
               16, "not an integer in range");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,4]}}", 16,
               "not null");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,4]}}", 16,
               "shape is a number, not an array");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 16, "missing \"shape\"");
    EXPECT_BAD("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 16, "missing \"dtype\"");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 16, "missing \"data_offsets\"");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               16, "duplicate field \"dtype\"");
    EXPECT_BAD("{\"w\":[1,2]}", 16, "tensor 'w': entry is an array, not an object");
}
END_TEST

START_TEST(bad_names_and_metadata)
{
    /* non-UTF-8 bytes in a name: invalid lead, overlong, surrogate, cut sequence */
    EXPECT_BAD("{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "not valid UTF-8");
    EXPECT_BAD("{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "not valid UTF-8");
    EXPECT_BAD("{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "not valid UTF-8");
    EXPECT_BAD("{\"\xf4\x90\x80\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               16, "not valid UTF-8");
    EXPECT_BAD("{\"a\xe2\x82\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "not valid UTF-8");
    /* an empty name: the saver refuses one, so the loader does too */
    EXPECT_BAD("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "empty tensor name");
    /* a NUL (escaped) cannot be part of a C-string name */
    EXPECT_BAD("{\"w\\u0000x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16,
               "NUL");
    /* duplicates */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               16, "duplicate tensor name 'w'");
    /* the same name written with an escape is still the same name */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"\\u0077\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               16, "duplicate tensor name 'w'");
    /* metadata */
    EXPECT_BAD("{\"__metadata__\":{\"a\":\"x\",\"n\":1}}", 0,
               "__metadata__ value of 'n' is a number, not a string");
    EXPECT_BAD("{\"__metadata__\":{\"a\":null}}", 0, "not a string");
    EXPECT_BAD("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0, "not a string");
    EXPECT_BAD("{\"__metadata__\":[\"a\"]}", 0, "__metadata__ is an array, not an object");
    EXPECT_BAD("{\"__metadata__\":\"x\"}", 0, "not an object");
    EXPECT_BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate \"__metadata__\"");
    EXPECT_BAD("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "duplicate __metadata__ key 'a'");
    EXPECT_BAD("{\"__metadata__\":{\"a\":\"1\\u0000\"}}", 0, "NUL");
}
END_TEST

START_TEST(malformed_json)
{
    /* unterminated at several depths */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}", 16,
               "unterminated object");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16", 16,
               "unterminated array");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F3", 16, "unterminated string");
    EXPECT_BAD("{\"w\":", 16, "unterminated JSON");
    EXPECT_BAD("{", 16, "unterminated object");
    EXPECT_BAD("{\"w\\\"}", 16, "unterminated string");
    EXPECT_BAD("{\"w\":-", 16, "unterminated");
    EXPECT_BAD("   ", 16, "unterminated JSON");
    /* trailing garbage */
    EXPECT_BAD(W_OK_HEADER "x", 16, "trailing characters");
    EXPECT_BAD(W_OK_HEADER "{}", 16, "trailing characters");
    {
        static const char h[] = W_OK_HEADER "  \0";
        size_t n = make_image_n(h, sizeof h - 1, 16);
        EXPECT_BAD_BYTES(image, n, "trailing characters");
    }
    /* top level that is not an object */
    EXPECT_BAD("[1,2]", 16, "header is not a JSON object (it is an array)");
    EXPECT_BAD("\"w\"", 16, "not a JSON object");
    EXPECT_BAD("42", 16, "not a JSON object");
    EXPECT_BAD("null", 16, "not a JSON object");
    /* strictness */
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},}", 16,
               "expected a string key");
    EXPECT_BAD("{\"a\":[1,]}", 16, "expected a value");
    EXPECT_BAD("{'a':1}", 16, "expected a string key");
    EXPECT_BAD("{\"a\" 1}", 16, "expected ':'");
    EXPECT_BAD("{\"a\":1 \"b\":2}", 16, "expected ',' or '}'");
    EXPECT_BAD("{\"a\":[1 2]}", 16, "expected ',' or ']'");
    EXPECT_BAD("{\"a\":01}", 16, "leading zero");
    EXPECT_BAD("{\"a\":+1}", 16, "unexpected character '+'");
    EXPECT_BAD("{\"a\":1.}", 16, "digit expected");
    EXPECT_BAD("{\"a\":1e}", 16, "digit expected");
    EXPECT_BAD("{\"a\":tru}", 16, "expected a value");
    EXPECT_BAD("{\"a\":NaN}", 16, "expected a value");
    EXPECT_BAD("/* c */{}", 16, "unexpected character '/'");
    EXPECT_BAD("{\"a\\x\":1}", 16, "invalid escape '\\x'");
    EXPECT_BAD("{\"a\\u12\":1}", 16, "invalid \\u escape");
    EXPECT_BAD("{\"a\\u12G4\":1}", 16, "invalid \\u escape");
    EXPECT_BAD("{\"a\\ud800\":1}", 16, "unpaired surrogate");
    EXPECT_BAD("{\"a\\ud800\\u0041\":1}", 16, "unpaired surrogate");
    EXPECT_BAD("{\"a\\udc00\":1}", 16, "unpaired surrogate");
    EXPECT_BAD("{\"a\tb\":1}", 16, "control character 0x09");
    EXPECT_BAD("{\"a\":1}\x0b", 16, "trailing");
    /* nesting deep enough to exhaust a naive recursive parser's stack */
    {
        static char deep[20002];
        memset(deep, '[', 10000);
        memset(deep + 10000, ']', 10000);
        deep[20000] = '\0';
        EXPECT_BAD(deep, 0, "nested deeper than");
        memcpy(deep, "{\"a\":", 5);
        EXPECT_BAD(deep, 0, "nested deeper than");
    }
}
END_TEST

/* ---------------------------------------------------------------- fuzz */
static void check_valid_result(const mi_safetensors *st)
{
    ck_assert(st->count >= 0);
    for (int i = 0; i < st->count; i++) {
        const mi_tensor *t = st->tensors[i].tensor;
        ck_assert_ptr_nonnull(st->tensors[i].name);
        ck_assert_ptr_nonnull(t);
        ck_assert((unsigned)t->dtype < MI_DTYPE_COUNT);
        ck_assert(t->rank >= 0 && t->rank <= MI_MAX_RANK);
        ck_assert_int_eq(t->numel, mi_shape_numel(t->rank, t->shape));
        /* touch every byte, so a sanitizer sees any bad buffer */
        unsigned sum = 0;
        const unsigned char *b = t->data;
        for (size_t k = 0; k < (size_t)t->numel * mi_dtype_size(t->dtype); k++) sum += b[k];
        (void)sum;
        ck_assert_ptr_eq(mi_safetensors_get(st, st->tensors[i].name), t);
    }
    for (int i = 0; i < st->metadata.count; i++) {
        ck_assert_ptr_nonnull(st->metadata.keys[i]);
        ck_assert_ptr_nonnull(st->metadata.values[i]);
    }
}

START_TEST(fuzz_never_crashes)
{
    mi_named_tensor ts[16];
    int nt = sample_tensors(ts);
    mi_metadata md = {4, meta_keys, meta_values};
    const char *path = tmp_path("fuzz.safetensors");
    ck_assert_int_eq(mi_safetensors_save(path, ts, nt, &md), 0);
    size_t size;
    unsigned char *orig = read_file(path, &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | orig[i];
    mi_scope_reset(test_scope);

    static const char special[] = "{}[],:\"\\-0123456789e.u \t\xff\x80\xc3";
    mi_rng r;
    mi_rng_seed(&r, 20240611);
    int ok = 0, failed = 0;
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = size;
        unsigned char *b = malloc(size); /* exact size: ASan catches over-reads */
        ck_assert_ptr_nonnull(b);
        memcpy(b, orig, size);
        /* mostly in the length prefix and the header, sometimes in the data */
        size_t span = mi_rng_below(&r, 4) ? (size_t)(8 + hlen) : size;
        size_t pos = (size_t)mi_rng_below(&r, span);
        int edits = 1 + (int)mi_rng_below(&r, 3);
        for (int e = 0; e < edits; e++) {
            if (e > 0) pos = (size_t)mi_rng_below(&r, n ? n : 1);
            if (n == 0) break;
            switch (mi_rng_below(&r, 5)) {
            case 0: b[pos] ^= (unsigned char)(1u << mi_rng_below(&r, 8)); break;
            case 1: b[pos] = (unsigned char)mi_rng_next(&r); break;
            case 2: b[pos] = (unsigned char)special[mi_rng_below(&r, sizeof special - 1)]; break;
            case 3: n = pos; break; /* truncate */
            case 4: /* delete one byte, shifting the rest */
                memmove(b + pos, b + pos + 1, n - pos - 1);
                n--;
                break;
            }
            if (pos >= n) break;
        }
        mi_error_clear();
        mi_safetensors *st = mi_safetensors_parse(b, n);
        if (st) {
            ck_assert_msg(!mi_error_pending(), "success with message %s", mi_error());
            check_valid_result(st);
            ok++;
        } else {
            ck_assert_msg(strncmp(mi_error(), "safetensors: ", 13) == 0,
                          "iteration %d: message \"%s\"", iter, mi_error());
            failed++;
        }
        free(b);
        mi_error_clear();
        mi_scope_reset(test_scope);
    }
    free(orig);
    /* both outcomes occur, so the loop exercised the checks and the builder */
    ck_assert_int_gt(ok, 5); /* few: the checksums refuse any edit of the data */
    ck_assert_int_gt(failed, 500);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *mem = tcase_slow("parse");
    tcase_add_test(mem, parse_accepts_valid_variants);
    tcase_add_test(mem, parse_needs_a_scope);
    tcase_add_test(mem, truncated_and_bad_lengths);
    tcase_add_test(mem, bad_offsets);
    tcase_add_test(mem, data_buffer_is_entirely_indexed);
    tcase_add_test(mem, bad_dtypes_and_shapes);
    tcase_add_test(mem, bad_names_and_metadata);
    tcase_add_test(mem, malformed_json);
    suite_add_tcase(s, mem);
    TCase *files = tcase_slow("files");
    tcase_add_checked_fixture(files, tmpdir_setup, tmpdir_teardown);
    tcase_add_test(files, round_trip_every_dtype);
    tcase_add_test(files, save_to_missing_or_unwritable_directory);
    tcase_add_test(files, save_rejects_bad_arguments);
    tcase_add_test(files, load_file_errors);
    tcase_add_test(files, fuzz_never_crashes);
    suite_add_tcase(s, files);
    return s;
}
