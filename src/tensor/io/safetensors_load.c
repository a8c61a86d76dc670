/* safetensors reading: parse (from memory), load (from a file), get, meta.
 * Writing is in safetensors_save.c.
 *
 * Format (https://huggingface.co/docs/safetensors):
 *
 *   file = u64 N (little-endian) | N bytes of UTF-8 JSON header | data buffer
 *   header = {"name": {"dtype": "F32", "shape": [2, 2], "data_offsets": [begin, end]}, …,
 *             "__metadata__": {"key": "value", …}}        (offsets relative to the data buffer)
 *
 * Reading trusts nothing: the header length is checked against the input and
 * a 100 MB cap before anything is allocated, the header must be valid UTF-8
 * and strict JSON, and every tensor's dtype, rank, dims, byte count and
 * offsets are checked (no overflow, begin <= end <= data size, end - begin ==
 * numel * dtype size, no two tensors overlapping) before the first tensor is
 * made. Holes between tensors and bytes after the last one are accepted.
 * Only then is the result built, all of it in the current scope.
 *
 * Checksums: files miras writes carry "crc32c.<name>" = CRC-32C of the
 * tensor's bytes in __metadata__ (see safetensors_internal.h). When a file has
 * any, every tensor must have one, each is checked as the tensor is read, and
 * a mismatch fails the load. This is also what catches a header length that
 * is a few bytes short: the JSON may still end in its space padding, and the
 * offsets still fit, but every tensor's bytes are shifted. (A length too long
 * swallows data bytes into the header, which then fails to parse or leaves a
 * tensor running past the end of the data.) Files without checksum keys,
 * written by other tools, load as before. The checksum keys are dropped from
 * the loaded metadata: they describe this file's bytes, not the caller's data,
 * and readers of the metadata (model configs) reject keys they do not know.
 *
 * Byte order: safetensors data is little-endian and load and save move tensor
 * bytes with memcpy/read/write, so they support little-endian hosts only
 * (checked at compile time in safetensors_internal.h). The header length is
 * decoded byte by byte. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "safetensors_internal.h"
#include "tensor.h"

const char *const st_dtype_names[MI_DTYPE_COUNT] = {"F32", "F64", "I32", "I64"};
/* Valid safetensors dtypes that miras does not load; named as "unsupported". */
static const char *const st_other_dtypes[] = {"BOOL", "U8",      "I8",      "I16",     "U16",
                                              "F16",  "BF16",    "U32",     "U64",     "F8_E5M2",
                                              "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
                                              "C64"};

/* ---------------------------------------------------------------- errors */
void st_fail(const char *path, const char *fmt, ...)
{
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path) mi_error_set("safetensors: '%s': %s", path, msg);
    else mi_error_set("safetensors: %s", msg);
}

static const char *json_type_name(json_type t)
{
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_FALSE:
    case JSON_TRUE: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---------------------------------------------------------------- header validation */
typedef struct entry {
    const char *name; /* in the JSON document */
    size_t name_len;
    mi_dtype dtype;
    int rank;
    int64_t shape[MI_MAX_RANK];
    uint64_t begin, end;
    bool has_crc;
    uint32_t crc;
} entry;

typedef struct plan {
    json_doc doc;
    entry *entries; /* header order */
    size_t count;
    const json_value *meta; /* the "__metadata__" object, or NULL */
} plan;

static void plan_free(plan *pl)
{
    mi_json_doc_free(&pl->doc);
    free(pl->entries);
    pl->entries = NULL;
}

static int cmp_entry_name(const void *a, const void *b)
{
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_entry_range(const void *a, const void *b)
{
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_member_key(const void *a, const void *b)
{
    const json_member *x = *(const json_member *const *)a, *y = *(const json_member *const *)b;
    return strcmp(x->key, y->key);
}

/* A non-negative integer field, or -1 with a message. */
static int get_uint(const char *path, const entry *e, const char *what, const json_value *v,
                    const char *text, uint64_t *out)
{
    if (v->type != JSON_NUMBER) {
        st_fail(path, "tensor '%.*s': %s entries must be integers, not %s",
                name_shown(e->name_len), e->name, what, json_type_name(v->type));
        return -1;
    }
    if (!v->is_int) {
        st_fail(path, "tensor '%.*s': %s entry %.*s is not an integer in range",
                name_shown(e->name_len), e->name, what, (int)(v->len < 40 ? v->len : 40),
                text + v->pos);
        return -1;
    }
    if (v->u.i < 0) {
        st_fail(path, "tensor '%.*s': negative %s entry %" PRId64, name_shown(e->name_len),
                e->name, what, v->u.i);
        return -1;
    }
    *out = (uint64_t)v->u.i;
    return 0;
}

static int check_tensor(const char *path, entry *e, const json_value *v, const char *text,
                        uint64_t data_size)
{
    const char *nm = e->name;
    int nl = name_shown(e->name_len);
    if (e->name_len == 0) {
        st_fail(path, "empty tensor name (the saver writes none)");
        return -1;
    }
    if (v->type != JSON_OBJECT) {
        st_fail(path, "tensor '%.*s': entry is %s, not an object", nl, nm, json_type_name(v->type));
        return -1;
    }
    const json_value *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (size_t i = 0; i < v->len; i++) {
        const json_member *m = &v->u.members[i];
        const json_value **slot = !strcmp(m->key, "dtype")          ? &dtype
                                  : !strcmp(m->key, "shape")        ? &shape
                                  : !strcmp(m->key, "data_offsets") ? &offsets
                                                                    : NULL;
        if (!slot || m->key_len != strlen(m->key)) continue; /* other fields are ignored */
        if (*slot) {
            st_fail(path, "tensor '%.*s': duplicate field \"%s\"", nl, nm, m->key);
            return -1;
        }
        *slot = &m->value;
    }
    if (!dtype || !shape || !offsets) {
        st_fail(path, "tensor '%.*s': missing \"%s\"", nl, nm,
                !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
        return -1;
    }

    /* dtype */
    if (dtype->type != JSON_STRING) {
        st_fail(path, "tensor '%.*s': dtype is %s, not a string", nl, nm,
                json_type_name(dtype->type));
        return -1;
    }
    int dt = -1;
    for (int k = 0; k < MI_DTYPE_COUNT; k++)
        if (!strcmp(dtype->u.s, st_dtype_names[k]) && dtype->len == strlen(st_dtype_names[k]))
            dt = k;
    if (dt < 0) {
        bool known = false;
        for (size_t k = 0; k < sizeof st_other_dtypes / sizeof *st_other_dtypes; k++)
            if (!strcmp(dtype->u.s, st_other_dtypes[k])) known = true;
        st_fail(path, "tensor '%.*s': %s dtype '%.*s' (miras reads F32, F64, I32, I64)", nl, nm,
                known ? "unsupported" : "unknown", name_shown(dtype->len), dtype->u.s);
        return -1;
    }
    e->dtype = (mi_dtype)dt;

    /* shape */
    if (shape->type != JSON_ARRAY) {
        st_fail(path, "tensor '%.*s': shape is %s, not an array", nl, nm,
                json_type_name(shape->type));
        return -1;
    }
    if (shape->len > MI_MAX_RANK) {
        st_fail(path, "tensor '%.*s': rank %zu exceeds MI_MAX_RANK (%d)", nl, nm, shape->len,
                MI_MAX_RANK);
        return -1;
    }
    e->rank = (int)shape->len;
    bool has_zero = false;
    for (int d = 0; d < e->rank; d++) {
        const json_value *dim = &shape->u.items[d];
        if (dim->type == JSON_NUMBER && dim->is_int && dim->u.i < 0) {
            st_fail(path, "tensor '%.*s': negative dimension %" PRId64 " in shape", nl, nm,
                    dim->u.i);
            return -1;
        }
        uint64_t u;
        if (get_uint(path, e, "shape", dim, text, &u) != 0) return -1;
        e->shape[d] = (int64_t)u;
        if (u == 0) has_zero = true;
    }
    char sbuf[160];
    mi_shape_str(sbuf, sizeof sbuf, e->rank, e->shape);
    uint64_t bytes = mi_dtype_size(e->dtype);
    if (has_zero) {
        bytes = 0;
    } else {
        for (int d = 0; d < e->rank; d++) {
            uint64_t dim = (uint64_t)e->shape[d];
            if (bytes > (uint64_t)INT64_MAX / dim) {
                st_fail(path, "tensor '%.*s': shape %s overflows the byte count", nl, nm, sbuf);
                return -1;
            }
            bytes *= dim;
        }
    }

    /* data_offsets */
    if (offsets->type != JSON_ARRAY || offsets->len != 2) {
        st_fail(path, "tensor '%.*s': data_offsets must be an array [begin, end]", nl, nm);
        return -1;
    }
    if (get_uint(path, e, "data_offsets", &offsets->u.items[0], text, &e->begin) != 0 ||
        get_uint(path, e, "data_offsets", &offsets->u.items[1], text, &e->end) != 0)
        return -1;
    if (e->begin > e->end) {
        st_fail(path, "tensor '%.*s': data_offsets [%" PRIu64 ", %" PRIu64 "] have begin > end",
                nl, nm, e->begin, e->end);
        return -1;
    }
    if (e->end > data_size) {
        st_fail(path,
                "tensor '%.*s': data_offsets [%" PRIu64 ", %" PRIu64
                "] run past the end of the data (%" PRIu64 " bytes)",
                nl, nm, e->begin, e->end, data_size);
        return -1;
    }
    if (e->end - e->begin != bytes) {
        st_fail(path,
                "tensor '%.*s': data_offsets [%" PRIu64 ", %" PRIu64
                "] do not match shape %s of %s (%" PRIu64 " bytes)",
                nl, nm, e->begin, e->end, sbuf, st_dtype_names[e->dtype], bytes);
        return -1;
    }
    return 0;
}

static int check_metadata(const char *path, const json_value *m)
{
    if (m->type != JSON_OBJECT) {
        st_fail(path, "__metadata__ is %s, not an object of strings", json_type_name(m->type));
        return -1;
    }
    for (size_t i = 0; i < m->len; i++) {
        const json_member *kv = &m->u.members[i];
        if (kv->value.type != JSON_STRING) {
            st_fail(path, "__metadata__ value of '%.*s' is %s, not a string",
                    name_shown(kv->key_len), kv->key, json_type_name(kv->value.type));
            return -1;
        }
        if (kv->key_len != strlen(kv->key) || kv->value.len != strlen(kv->value.u.s)) {
            st_fail(path, "__metadata__ entry '%.*s' contains a NUL character",
                    name_shown(kv->key_len), kv->key);
            return -1;
        }
    }
    if (m->len < 2) return 0;
    const json_member **by_key = malloc(m->len * sizeof *by_key);
    if (!by_key) {
        st_fail(path, "out of memory checking __metadata__");
        return -1;
    }
    for (size_t i = 0; i < m->len; i++) by_key[i] = &m->u.members[i];
    qsort(by_key, m->len, sizeof *by_key, cmp_member_key);
    int rc = 0;
    for (size_t i = 1; i < m->len && rc == 0; i++)
        if (!strcmp(by_key[i - 1]->key, by_key[i]->key)) {
            st_fail(path, "duplicate __metadata__ key '%.*s'", name_shown(by_key[i]->key_len),
                    by_key[i]->key);
            rc = -1;
        }
    free(by_key);
    return rc;
}

/* Names unique, byte ranges disjoint (zero-byte tensors overlap nothing). */
/* Names are unique and the non-empty byte ranges tile the data buffer: no
 * overlap, no hole, nothing after the last (the format's rule: "the byte
 * buffer needs to be entirely indexed, and cannot contain holes"). A file
 * whose header length is off by a byte or two, its JSON still valid, has a
 * buffer that is not tiled, so it is refused rather than read shifted. */
static int check_entries(const char *path, plan *pl, uint64_t data_size)
{
    if (pl->count == 0) {
        if (data_size == 0) return 0;
        st_fail(path, "%" PRIu64 " data bytes but no tensor: the buffer is not entirely indexed",
                data_size);
        return -1;
    }
    entry **v = malloc(pl->count * sizeof *v);
    if (!v) {
        st_fail(path, "out of memory checking %zu tensors", pl->count);
        return -1;
    }
    for (size_t i = 0; i < pl->count; i++) v[i] = &pl->entries[i];
    int rc = 0;
    qsort(v, pl->count, sizeof *v, cmp_entry_name);
    for (size_t i = 1; i < pl->count && rc == 0; i++)
        if (!strcmp(v[i - 1]->name, v[i]->name)) {
            st_fail(path, "duplicate tensor name '%.*s'", name_shown(v[i]->name_len), v[i]->name);
            rc = -1;
        }
    if (rc == 0) {
        qsort(v, pl->count, sizeof *v, cmp_entry_range);
        const entry *last = NULL; /* the non-empty range reaching furthest so far */
        for (size_t i = 0; i < pl->count && rc == 0; i++) {
            const entry *e = v[i];
            if (e->begin == e->end) continue;
            if (last && e->begin < last->end) {
                st_fail(path,
                        "tensors '%.*s' [%" PRIu64 ", %" PRIu64 "] and '%.*s' [%" PRIu64
                        ", %" PRIu64 "] overlap",
                        name_shown(last->name_len), last->name, last->begin, last->end,
                        name_shown(e->name_len), e->name, e->begin, e->end);
                rc = -1;
            } else if (e->begin != (last ? last->end : 0)) {
                st_fail(path, "data bytes [%" PRIu64 ", %" PRIu64 ") before tensor '%.*s' belong "
                        "to no tensor: the buffer is not entirely indexed",
                        last ? last->end : 0, e->begin, name_shown(e->name_len), e->name);
                rc = -1;
            }
            if (!last || e->end > last->end) last = e;
        }
        uint64_t end = last ? last->end : 0;
        if (rc == 0 && end != data_size) {
            st_fail(path, "the tensors cover %" PRIu64 " of the %" PRIu64 " data bytes: the "
                    "buffer is not entirely indexed (or the header length is wrong)", end,
                    data_size);
            rc = -1;
        }
    }
    free(v);
    return rc;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool is_crc_key(const json_member *kv)
{
    return kv->key_len > ST_CRC_PREFIX_LEN && !strncmp(kv->key, ST_CRC_PREFIX, ST_CRC_PREFIX_LEN);
}

/* Attaches each "crc32c.<name>" value to its tensor: 8 hex digits, naming a
 * tensor of this file, and then one for every tensor. */
static int plan_checksums(const char *path, plan *pl)
{
    const json_value *m = pl->meta;
    size_t n_crc = 0;
    for (size_t i = 0; m && i < m->len; i++) n_crc += is_crc_key(&m->u.members[i]);
    if (n_crc == 0) return 0;
    entry **v = malloc((pl->count ? pl->count : 1) * sizeof *v);
    if (!v) {
        st_fail(path, "out of memory checking checksums");
        return -1;
    }
    for (size_t i = 0; i < pl->count; i++) v[i] = &pl->entries[i];
    qsort(v, pl->count, sizeof *v, cmp_entry_name);
    int rc = 0;
    for (size_t i = 0; i < m->len && rc == 0; i++) {
        const json_member *kv = &m->u.members[i];
        if (!is_crc_key(kv)) continue;
        entry key = {.name = kv->key + ST_CRC_PREFIX_LEN}, *kp = &key;
        entry **hit = pl->count ? bsearch(&kp, v, pl->count, sizeof *v, cmp_entry_name) : NULL;
        int nl = name_shown(kv->key_len - ST_CRC_PREFIX_LEN);
        if (!hit) {
            st_fail(path, "__metadata__ has a checksum for tensor '%.*s', which is not in the file",
                    nl, key.name);
            rc = -1;
            break;
        }
        uint32_t crc = 0;
        bool ok = kv->value.len == 8;
        for (size_t k = 0; ok && k < 8; k++) {
            int d = hex_digit(kv->value.u.s[k]);
            ok = d >= 0;
            crc = crc << 4 | (uint32_t)(d & 0xf);
        }
        if (!ok) {
            st_fail(path, "tensor '%.*s': checksum '%.*s' is not 8 hex digits", nl, key.name,
                    name_shown(kv->value.len), kv->value.u.s);
            rc = -1;
            break;
        }
        (*hit)->has_crc = true;
        (*hit)->crc = crc;
    }
    for (size_t i = 0; i < pl->count && rc == 0; i++)
        if (!pl->entries[i].has_crc) {
            st_fail(path, "tensor '%.*s': no checksum, though the file has checksums",
                    name_shown(pl->entries[i].name_len), pl->entries[i].name);
            rc = -1;
        }
    free(v);
    return rc;
}

/* Validates header text[0..n) for a data buffer of data_size bytes. */
static int plan_header(const char *path, plan *pl, const char *text, size_t n, uint64_t data_size)
{
    memset(pl, 0, sizeof *pl);
    size_t bad;
    if (!json_utf8_valid(text, n, &bad)) {
        st_fail(path, "header is not valid UTF-8 (byte 0x%02x at header offset %zu)",
                (unsigned char)text[bad], bad);
        return -1;
    }
    json_error jerr;
    if (mi_json_parse(&pl->doc, text, n, &jerr) != 0) {
        st_fail(path, "malformed header JSON at byte %zu: %s", jerr.pos, jerr.msg);
        return -1;
    }
    const json_value *root = &pl->doc.root;
    if (root->type != JSON_OBJECT) {
        st_fail(path, "header is not a JSON object (it is %s)", json_type_name(root->type));
        return -1;
    }
    if (root->len > INT_MAX) {
        st_fail(path, "too many tensors (%zu)", root->len);
        return -1;
    }
    pl->entries = calloc(root->len ? root->len : 1, sizeof *pl->entries);
    if (!pl->entries) {
        st_fail(path, "out of memory reading a header of %zu entries", root->len);
        return -1;
    }
    for (size_t i = 0; i < root->len; i++) {
        const json_member *m = &root->u.members[i];
        if (m->key_len != strlen(m->key)) {
            st_fail(path, "tensor name '%.*s...' contains a NUL character", name_shown(strlen(m->key)),
                    m->key);
            return -1;
        }
        if (!strcmp(m->key, "__metadata__")) {
            if (pl->meta) {
                st_fail(path, "duplicate \"__metadata__\"");
                return -1;
            }
            if (check_metadata(path, &m->value) != 0) return -1;
            pl->meta = &m->value;
            continue;
        }
        entry *e = &pl->entries[pl->count];
        e->name = m->key;
        e->name_len = m->key_len;
        if (check_tensor(path, e, &m->value, text, data_size) != 0) return -1;
        pl->count++;
    }
    if (check_entries(path, pl, data_size) != 0) return -1;
    return plan_checksums(path, pl);
}

/* 0 when an 8-byte prefix announcing n header bytes fits in `size` bytes. */
static int check_prefix(const char *path, uint64_t n, uint64_t size)
{
    if (n > HEADER_MAX) {
        st_fail(path, "header length %" PRIu64 " exceeds the %" PRIu64 " byte limit", n,
                HEADER_MAX);
        return -1;
    }
    if (n > size - 8) {
        st_fail(path,
                "truncated: header length %" PRIu64 " runs past the end of the input (%" PRIu64
                " bytes after the length)",
                n, size - 8);
        return -1;
    }
    return 0;
}

static uint64_t read_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* ---------------------------------------------------------------- building the result */
typedef struct source {
    const unsigned char *mem; /* the data buffer, or NULL to read from fd */
    int fd;
    uint64_t data_start; /* file offset of the data buffer */
    const char *path;
} source;

static int source_read(const source *src, void *dst, uint64_t off, size_t n)
{
    if (n == 0) return 0;
    if (src->mem) {
        memcpy(dst, src->mem + off, n);
        return 0;
    }
    unsigned char *o = dst;
    uint64_t at = src->data_start + off;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : (size_t)1 << 30;
        ssize_t r = pread(src->fd, o, chunk, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st_fail(src->path, "read failed: %s", strerror(errno));
            return -1;
        }
        if (r == 0) {
            st_fail(src->path, "truncated: the file shrank while it was read");
            return -1;
        }
        o += r;
        at += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

static char *scope_strdup(mi_scope *sc, const char *s, size_t len)
{
    char *d = mi_scope_alloc(sc, len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

static mi_safetensors *plan_build(const plan *pl, const source *src)
{
    mi_scope *sc = mi_scope_current();
    mi_safetensors *st = mi_scope_alloc(sc, sizeof *st);
    if (!st) return NULL;
    memset(st, 0, sizeof *st);
    st->count = (int)pl->count;
    st->tensors = mi_scope_alloc(sc, (pl->count ? pl->count : 1) * sizeof *st->tensors);
    if (!st->tensors) return NULL;
    for (size_t i = 0; i < pl->count; i++) {
        const entry *e = &pl->entries[i];
        mi_tensor *t = mi_tensor_new(e->dtype, e->rank, e->shape);
        char *name = scope_strdup(sc, e->name, e->name_len);
        if (!t || !name) return NULL;
        t->name = name;
        size_t bytes = (size_t)(e->end - e->begin);
        if (source_read(src, t->data, e->begin, bytes) != 0) return NULL;
        if (e->has_crc && mi_crc32c(0, t->data, bytes) != e->crc) {
            st_fail(src->path, "tensor '%.*s': checksum mismatch (file corrupt?)",
                    name_shown(e->name_len), e->name);
            return NULL;
        }
        st->tensors[i] = (mi_named_tensor){.name = name, .tensor = t};
    }
    if (pl->meta && pl->meta->len > 0) {
        size_t m = pl->meta->len;
        st->metadata.keys = mi_scope_alloc(sc, m * sizeof(char *));
        st->metadata.values = mi_scope_alloc(sc, m * sizeof(char *));
        if (!st->metadata.keys || !st->metadata.values) return NULL;
        int kept = 0;
        for (size_t i = 0; i < m; i++) {
            const json_member *kv = &pl->meta->u.members[i];
            if (is_crc_key(kv)) continue;
            st->metadata.keys[kept] = scope_strdup(sc, kv->key, kv->key_len);
            st->metadata.values[kept] = scope_strdup(sc, kv->value.u.s, kv->value.len);
            if (!st->metadata.keys[kept] || !st->metadata.values[kept]) return NULL;
            kept++;
        }
        st->metadata.count = kept;
    }
    return st;
}

static bool have_scope(const char *path)
{
    if (mi_scope_current()) return true;
    st_fail(path, "no current scope to load into (call mi_scope_enter first)");
    return false;
}

mi_safetensors *mi_safetensors_parse(const void *bytes, size_t size)
{
    if (!have_scope(NULL)) return NULL;
    if (!bytes && size) {
        st_fail(NULL, "parse: bytes is NULL");
        return NULL;
    }
    if (size < 8) {
        st_fail(NULL, "truncated: %zu bytes, need at least 8 for the header length", size);
        return NULL;
    }
    const unsigned char *b = bytes;
    uint64_t n = read_le64(b);
    if (check_prefix(NULL, n, size) != 0) return NULL;
    plan pl;
    uint64_t data_size = size - 8 - n;
    mi_safetensors *st = NULL;
    if (plan_header(NULL, &pl, (const char *)b + 8, (size_t)n, data_size) == 0) {
        source src = {.mem = b + 8 + n, .fd = -1, .data_start = 8 + n, .path = NULL};
        st = plan_build(&pl, &src);
    }
    plan_free(&pl);
    return st;
}

static int read_full(int fd, void *dst, size_t n, uint64_t at)
{
    unsigned char *o = dst;
    while (n > 0) {
        ssize_t r = pread(fd, o, n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        o += r;
        at += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads the header, validates it against the file size, then reads each
 * tensor straight into its storage (no copy of the whole file in memory). */
mi_safetensors *mi_safetensors_load(const char *path)
{
    if (!path) {
        st_fail(NULL, "load: path is NULL");
        return NULL;
    }
    if (!have_scope(path)) return NULL;
    char why[128];
    int64_t file_size;
    int fd = mi_open_regular(path, &file_size, why, sizeof why);
    if (fd < 0) {
        st_fail(path, "cannot open: %s", why);
        return NULL;
    }
    mi_safetensors *st = NULL;
    char *header = NULL;
    unsigned char prefix[8];
    uint64_t size = (uint64_t)file_size;
    if (size < 8) {
        st_fail(path, "truncated: %" PRIu64 " bytes, need at least 8 for the header length", size);
        goto out;
    }
    errno = 0;
    if (read_full(fd, prefix, 8, 0) != 0) {
        st_fail(path, "cannot read the header length: %s", errno ? strerror(errno) : "short read");
        goto out;
    }
    uint64_t n = read_le64(prefix);
    if (check_prefix(path, n, size) != 0) goto out;
    header = malloc(n ? (size_t)n : 1);
    if (!header) {
        st_fail(path, "out of memory for a %" PRIu64 " byte header", n);
        goto out;
    }
    errno = 0;
    if (read_full(fd, header, (size_t)n, 8) != 0) {
        st_fail(path, "cannot read the header: %s", errno ? strerror(errno) : "short read");
        goto out;
    }
    plan pl;
    if (plan_header(path, &pl, header, (size_t)n, size - 8 - n) == 0) {
        source src = {.mem = NULL, .fd = fd, .data_start = 8 + n, .path = path};
        st = plan_build(&pl, &src);
    }
    plan_free(&pl);
out:
    free(header);
    close(fd);
    return st;
}

mi_tensor *mi_safetensors_get(const mi_safetensors *st, const char *name)
{
    if (!st || !name) return NULL;
    for (int i = 0; i < st->count; i++)
        if (!strcmp(st->tensors[i].name, name)) return st->tensors[i].tensor;
    return NULL;
}

const char *mi_safetensors_meta(const mi_safetensors *st, const char *key)
{
    if (!st || !key) return NULL;
    for (int i = 0; i < st->metadata.count; i++)
        if (!strcmp(st->metadata.keys[i], key)) return st->metadata.values[i];
    return NULL;
}
