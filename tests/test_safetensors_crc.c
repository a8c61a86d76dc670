/* safetensors checksums: CRC-32C itself, the "crc32c.<name>" metadata that
 * mi_safetensors_save writes, and the loader refusing flipped data bytes and
 * shifted data (a header length off by one) while still loading files that
 * carry no checksums. */
#include <stdio.h>
#include <unistd.h>

#include "harness.h"

/* ---------------------------------------------------------------- helpers */
static uint64_t header_len(const unsigned char *b)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n;
}

static void set_header_len(unsigned char *b, uint64_t n)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
}

/* Bit at a time, straight from the definition: the slice-by-8 code's oracle. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? c >> 1 ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

/* Two tensors ("a" then "b") and one metadata entry, saved to `name`. */
static const char *save_pair(const char *name, mi_tensor **a, mi_tensor **b)
{
    *a = mi_arange(MI_F32, 6);
    *b = mi_tensor_new(MI_I64, MI_SHAPE(3));
    ck_assert_ptr_nonnull(*a);
    ck_assert_ptr_nonnull(*b);
    for (int i = 0; i < 3; i++) ((int64_t *)(*b)->data)[i] = (int64_t)i * 0x0102030405060708;
    mi_named_tensor ts[2] = {{"a", *a}, {"b", *b}};
    const char *k[] = {"format"}, *v[] = {"pt"};
    mi_metadata md = {1, k, v};
    const char *path = tmp_path(name);
    ck_assert_msg(mi_safetensors_save(path, ts, 2, &md) == 0, "%s", mi_error());
    return path;
}

#define EXPECT_LOAD_FAILS(path, phrase)                                                  \
    do {                                                                                 \
        mi_error_clear();                                                                \
        ck_assert_msg(mi_safetensors_load(path) == NULL, "loaded a file that should fail " \
                      "with \"%s\"", phrase);                                            \
        ck_assert_error_has(phrase);                                                     \
        mi_error_clear();                                                                \
    } while (0)

/* ---------------------------------------------------------------- tests */
START_TEST(crc32c_known_vectors)
{
    ck_assert_uint_eq(mi_crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(mi_crc32c(0, NULL, 0), 0);
    /* RFC 3720 (iSCSI) appendix B.4 */
    unsigned char buf[300];
    memset(buf, 0, 32);
    ck_assert_uint_eq(mi_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, 32);
    ck_assert_uint_eq(mi_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    ck_assert_uint_eq(mi_crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    ck_assert_uint_eq(mi_crc32c(0, buf, 32), 0x113FDB5Cu);
    /* every length and alignment around the 8-byte stride, and continuation */
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 100; n++) {
            uint32_t want = crc32c_bitwise(buf + off, n);
            ck_assert_uint_eq(mi_crc32c(0, buf + off, n), want);
            size_t h = n / 3;
            ck_assert_uint_eq(mi_crc32c(mi_crc32c(0, buf + off, h), buf + off + h, n - h), want);
        }
}
END_TEST

START_TEST(round_trip_stores_checksums)
{
    mi_tensor *a, *b;
    const char *path = save_pair("rt.safetensors", &a, &b);
    size_t size;
    unsigned char *raw = read_file(path, &size);
    char want[64];
    snprintf(want, sizeof want, "\"crc32c.a\":\"%08x\"", mi_crc32c(0, a->data, 24));
    ck_assert_msg(strstr((char *)raw + 8, want), "header lacks %s", want);
    snprintf(want, sizeof want, "\"crc32c.b\":\"%08x\"", mi_crc32c(0, b->data, 24));
    ck_assert_msg(strstr((char *)raw + 8, want), "header lacks %s", want);
    ck_assert_ptr_nonnull(strstr((char *)raw + 8, "\"format\":\"pt\""));
    free(raw);

    mi_safetensors *st = mi_safetensors_load(path);
    ck_assert_msg(st != NULL, "%s", mi_error());
    ck_assert_int_eq(st->count, 2);
    ck_assert_mem_eq(mi_safetensors_get(st, "a")->data, a->data, 24);
    ck_assert_mem_eq(mi_safetensors_get(st, "b")->data, b->data, 24);
    /* the checksums are the file's, not the caller's metadata */
    ck_assert_int_eq(st->metadata.count, 1);
    ck_assert_str_eq(mi_safetensors_meta(st, "format"), "pt");
    ck_assert_ptr_null(mi_safetensors_meta(st, "crc32c.a"));
    /* so loaded metadata saves again unchanged */
    ck_assert_int_eq(mi_safetensors_save(tmp_path("again.safetensors"), st->tensors, st->count,
                                         &st->metadata),
                     0);
}
END_TEST

START_TEST(flipped_data_byte_is_refused)
{
    mi_tensor *a, *b;
    const char *path = save_pair("flip.safetensors", &a, &b);
    size_t size;
    unsigned char *raw = read_file(path, &size);
    /* the last byte belongs to "b", the first data byte to "a" */
    raw[size - 1] ^= 0x01;
    write_file(path, raw, size);
    EXPECT_LOAD_FAILS(path, "tensor 'b': checksum mismatch (file corrupt?)");
    raw[size - 1] ^= 0x01;
    size_t data0 = 8 + (size_t)header_len(raw);
    raw[data0] ^= 0x80;
    mi_error_clear();
    ck_assert_ptr_null(mi_safetensors_parse(raw, size));
    ck_assert_error_has("tensor 'a': checksum mismatch");
    mi_error_clear();
    raw[data0] ^= 0x80;
    ck_assert_ptr_nonnull(mi_safetensors_parse(raw, size));
    free(raw);
}
END_TEST

START_TEST(header_length_off_by_one_is_refused)
{
    mi_tensor *a, *b;
    const char *path = save_pair("shift.safetensors", &a, &b);
    size_t size;
    unsigned char *raw = read_file(path, &size);
    uint64_t n = header_len(raw);
    /* the header's last byte must be padding, or the JSON alone would fail */
    ck_assert_int_eq(raw[8 + n - 1], ' ');
    set_header_len(raw, n - 1);
    write_file(path, raw, size);
    /* the data buffer is a byte longer than the tensors cover: refused before
     * the checksums are even needed (they would catch the shift too) */
    EXPECT_LOAD_FAILS(path, "the header length is wrong");
    /* one long: a data byte joins the header, which no longer parses or
     * leaves a tensor running past the data */
    set_header_len(raw, n + 1);
    write_file(path, raw, size);
    mi_error_clear();
    ck_assert_ptr_null(mi_safetensors_load(path));
    mi_error_clear();
    free(raw);
}
END_TEST

START_TEST(files_without_checksums_load)
{
    static const char *headers[] = {
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    };
    for (int h = 0; h < 2; h++) {
        size_t hl = strlen(headers[h]);
        unsigned char img[256];
        set_header_len(img, hl);
        memcpy(img + 8, headers[h], hl);
        float w[2] = {1.5f, -2.0f};
        memcpy(img + 8 + hl, w, 8);
        write_file(tmp_path("plain.safetensors"), img, 8 + hl + 8);
        mi_safetensors *st = mi_safetensors_load(tmp_path("plain.safetensors"));
        ck_assert_msg(st != NULL, "%s", mi_error());
        ck_assert_mem_eq(mi_safetensors_get(st, "w")->data, w, 8);
        ck_assert_int_eq(st->metadata.count, h);
    }
}
END_TEST

/* Checksum keys that cannot be trusted are errors, not silently skipped. */
START_TEST(bad_checksum_metadata)
{
    static const struct {
        const char *meta, *phrase;
    } cases[] = {
        {"\"crc32c.w\":\"xyz\"", "checksum 'xyz' is not 8 hex digits"},
        {"\"crc32c.w\":\"0123456789\"", "is not 8 hex digits"},
        {"\"crc32c.w\":\"0000000g\"", "is not 8 hex digits"},
        {"\"crc32c.w\":\"00000000\",\"crc32c.v\":\"00000000\"", "tensor 'v', which is not"},
        {"\"crc32c.v\":\"00000000\"", "tensor 'v', which is not in the file"},
        {"\"crc32c.w\":\"00000000\"", "tensor 'w': checksum mismatch"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr,
                 "{\"__metadata__\":{%s},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}",
                 cases[c].meta);
        size_t hl = strlen(hdr);
        unsigned char img[300];
        set_header_len(img, hl);
        memcpy(img + 8, hdr, hl);
        memcpy(img + 8 + hl, "\x01\x02\x03\x04", 4);
        mi_error_clear();
        ck_assert_msg(mi_safetensors_parse(img, 8 + hl + 4) == NULL, "case %zu loaded", c);
        ck_assert_error_has(cases[c].phrase);
        mi_error_clear();
    }
    /* one tensor of two without a checksum */
    char hdr[256];
    snprintf(hdr, sizeof hdr,
             "{\"__metadata__\":{\"crc32c.w\":\"%08x\"},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             mi_crc32c(0, "\x01\x02\x03\x04", 4));
    size_t hl = strlen(hdr);
    unsigned char img[300];
    set_header_len(img, hl);
    memcpy(img + 8, hdr, hl);
    memcpy(img + 8 + hl, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    ck_assert_ptr_null(mi_safetensors_parse(img, 8 + hl + 8));
    ck_assert_error_has("tensor 'u': no checksum");
    mi_error_clear();
    /* the saver keeps the prefix for itself */
    mi_tensor *t = mi_scalar(MI_F32, 1);
    mi_named_tensor ts[1] = {{"t", t}};
    const char *k[] = {"crc32c.t"}, *v[] = {"00000000"};
    mi_metadata md = {1, k, v};
    ck_assert_int_eq(mi_safetensors_save(tmp_path("reserved.safetensors"), ts, 1, &md), -1);
    ck_assert_error_has("reserved");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("safetensors_crc");
    TCase *tc = tcase_slow("crc");
    tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
    tcase_add_test(tc, crc32c_known_vectors);
    tcase_add_test(tc, round_trip_stores_checksums);
    tcase_add_test(tc, flipped_data_byte_is_refused);
    tcase_add_test(tc, header_length_off_by_one_is_refused);
    tcase_add_test(tc, files_without_checksums_load);
    tcase_add_test(tc, bad_checksum_metadata);
    suite_add_tcase(s, tc);
    return s;
}
