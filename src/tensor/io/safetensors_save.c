/* safetensors writing: mi_safetensors_save builds the JSON header (padded to
 * 8 bytes) and writes header length, header and tensor bytes. The header's
 * __metadata__ gets a CRC-32C of each tensor's bytes ("crc32c.<name>") after
 * the caller's entries, so a flipped byte or a shifted data buffer is caught
 * on load. Reading and the
 * format description are in safetensors_load.c.
 *
 * Writing goes through mi_write_atomic_parts (file.c): "<path>.tmp.<pid>",
 * fsync'ed, then renamed over path, so a crash leaves either the old file or
 * the new one, never a torn one. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "safetensors_internal.h"
#include "tensor.h"

/* ---------------------------------------------------------------- writing */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->cap - b->len < n + 1) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc - b->len < n + 1) {
            if (nc > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            nc *= 2;
        }
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(strbuf *b, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRIu64, v);
    sb_put(b, t, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control characters
 * escaped; the (validated) UTF-8 is written as is. */
static void sb_json_string(strbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                sb_put(b, esc, 6);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first duplicate among n strings, or NULL (-1 on out of memory). */
static int find_duplicate(const char *const *s, int n, const char **dup)
{
    *dup = NULL;
    if (n < 2) return 0;
    const char **v = malloc((size_t)n * sizeof *v);
    if (!v) return -1;
    memcpy(v, s, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_cstr);
    for (int i = 1; i < n && !*dup; i++)
        if (!strcmp(v[i - 1], v[i])) *dup = v[i];
    free(v);
    return 0;
}

static int check_save_args(const char *path, const mi_named_tensor *tensors, int count,
                           const mi_metadata *md)
{
    if (count < 0 || (count > 0 && !tensors)) {
        st_fail(path, "save: %d tensors from %s", count, tensors ? "an array" : "NULL");
        return -1;
    }
    for (int i = 0; i < count; i++) {
        const char *nm = tensors[i].name;
        const mi_tensor *t = tensors[i].tensor;
        if (!nm || !*nm) {
            st_fail(path, "save: tensor %d has an empty name", i);
            return -1;
        }
        if (!strcmp(nm, "__metadata__")) {
            st_fail(path, "save: tensor %d: the name \"__metadata__\" is reserved", i);
            return -1;
        }
        if (!json_utf8_valid(nm, strlen(nm), NULL)) {
            st_fail(path, "save: tensor %d: name is not valid UTF-8", i);
            return -1;
        }
        if (!t) {
            st_fail(path, "save: tensor '%.*s' is NULL", name_shown(strlen(nm)), nm);
            return -1;
        }
        if ((unsigned)t->dtype >= MI_DTYPE_COUNT || t->rank < 0 || t->rank > MI_MAX_RANK ||
            t->numel < 0 || mi_shape_numel(t->rank, t->shape) != t->numel ||
            (t->numel > 0 && !t->data)) {
            st_fail(path, "save: tensor '%.*s' is malformed (dtype %d, rank %d)",
                    name_shown(strlen(nm)), nm, (int)t->dtype, t->rank);
            return -1;
        }
    }
    const char **names = malloc((size_t)(count ? count : 1) * sizeof *names);
    if (!names) {
        st_fail(path, "save: out of memory");
        return -1;
    }
    for (int i = 0; i < count; i++) names[i] = tensors[i].name;
    const char *dup;
    int rc = find_duplicate(names, count, &dup);
    free(names);
    if (rc != 0 || dup) {
        if (rc != 0) st_fail(path, "save: out of memory");
        else st_fail(path, "save: duplicate tensor name '%.*s'", name_shown(strlen(dup)), dup);
        return -1;
    }
    if (!md) return 0;
    if (md->count < 0 || (md->count > 0 && (!md->keys || !md->values))) {
        st_fail(path, "save: metadata with %d entries and NULL arrays", md->count);
        return -1;
    }
    for (int i = 0; i < md->count; i++) {
        const char *k = md->keys[i], *v = md->values[i];
        if (!k || !v) {
            st_fail(path, "save: metadata entry %d has a NULL %s", i, !k ? "key" : "value");
            return -1;
        }
        if (!json_utf8_valid(k, strlen(k), NULL) || !json_utf8_valid(v, strlen(v), NULL)) {
            st_fail(path, "save: metadata entry %d is not valid UTF-8", i);
            return -1;
        }
        if (!strncmp(k, ST_CRC_PREFIX, ST_CRC_PREFIX_LEN)) {
            st_fail(path, "save: metadata key '%.*s': the prefix \"" ST_CRC_PREFIX
                          "\" is reserved for checksums", name_shown(strlen(k)), k);
            return -1;
        }
    }
    if (find_duplicate(md->keys, md->count, &dup) != 0) {
        st_fail(path, "save: out of memory");
        return -1;
    }
    if (dup) {
        st_fail(path, "save: duplicate metadata key '%.*s'", name_shown(strlen(dup)), dup);
        return -1;
    }
    return 0;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes. */
static int build_header(strbuf *b, const mi_named_tensor *tensors, int count,
                        const mi_metadata *md, const uint32_t *crc)
{
    bool first = true;
    sb_put(b, "{", 1);
    int n_md = md ? md->count : 0;
    if (n_md > 0 || count > 0) {
        sb_puts(b, "\"__metadata__\":{");
        for (int i = 0; i < n_md; i++) {
            if (i) sb_put(b, ",", 1);
            sb_json_string(b, md->keys[i]);
            sb_put(b, ":", 1);
            sb_json_string(b, md->values[i]);
        }
        for (int i = 0; i < count; i++) {
            if (i || n_md) sb_put(b, ",", 1);
            /* the key is escaped as a whole: the name may hold quotes */
            size_t nl = strlen(tensors[i].name);
            char *key = malloc(ST_CRC_PREFIX_LEN + nl + 1);
            if (!key) return -1;
            memcpy(key, ST_CRC_PREFIX, ST_CRC_PREFIX_LEN);
            memcpy(key + ST_CRC_PREFIX_LEN, tensors[i].name, nl + 1);
            sb_json_string(b, key);
            free(key);
            char hex[16];
            snprintf(hex, sizeof hex, ":\"%08" PRIx32 "\"", crc[i]);
            sb_puts(b, hex);
        }
        sb_put(b, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < count; i++) {
        const mi_tensor *t = tensors[i].tensor;
        uint64_t bytes = (uint64_t)t->numel * mi_dtype_size(t->dtype);
        if (!first) sb_put(b, ",", 1);
        first = false;
        sb_json_string(b, tensors[i].name);
        sb_puts(b, ":{\"dtype\":\"");
        sb_puts(b, st_dtype_names[t->dtype]);
        sb_puts(b, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++) {
            if (d) sb_put(b, ",", 1);
            sb_u64(b, (uint64_t)t->shape[d]);
        }
        sb_puts(b, "],\"data_offsets\":[");
        sb_u64(b, off);
        sb_put(b, ",", 1);
        if (bytes > UINT64_MAX - off) return -1;
        off += bytes;
        sb_u64(b, off);
        sb_puts(b, "]}");
    }
    sb_put(b, "}", 1);
    while (!b->oom && b->len % 8 != 0) sb_put(b, " ", 1);
    return b->oom || b->len > HEADER_MAX ? -1 : 0;
}

int mi_safetensors_save(const char *path, const mi_named_tensor *tensors, int count,
                        const mi_metadata *metadata)
{
    if (!path || !*path) {
        st_fail(NULL, "save: empty path");
        return -1;
    }
    if (check_save_args(path, tensors, count, metadata) != 0) return -1;
    uint32_t *crc = malloc((size_t)(count ? count : 1) * sizeof *crc);
    if (!crc) {
        st_fail(path, "save: out of memory");
        return -1;
    }
    for (int i = 0; i < count; i++) {
        const mi_tensor *t = tensors[i].tensor;
        crc[i] = mi_crc32c(0, t->data, (size_t)t->numel * mi_dtype_size(t->dtype));
    }
    strbuf hb = {0};
    int hrc = build_header(&hb, tensors, count, metadata, crc);
    free(crc);
    if (hrc != 0) {
        free(hb.p);
        st_fail(path, "save: header too large or out of memory");
        return -1;
    }
    /* length, header, then each tensor's bytes, through the one atomic writer */
    mi_bytes *parts = malloc(sizeof *parts * (size_t)(count + 2));
    if (!parts) {
        free(hb.p);
        st_fail(path, "save: out of memory");
        return -1;
    }
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)hb.len >> (8 * i));
    parts[0] = (mi_bytes){prefix, 8};
    parts[1] = (mi_bytes){hb.p, hb.len};
    for (int i = 0; i < count; i++) {
        const mi_tensor *t = tensors[i].tensor;
        parts[i + 2] = (mi_bytes){t->data, (size_t)t->numel * mi_dtype_size(t->dtype)};
    }
    int rc = mi_write_atomic_parts(path, parts, count + 2);
    free(parts);
    free(hb.p);
    if (rc != 0) {
        char why[480];
        snprintf(why, sizeof why, "%s", mi_error());
        mi_error_clear();
        st_fail(path, "save: %s", why);
    }
    return rc;
}
