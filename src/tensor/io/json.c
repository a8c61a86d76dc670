/* A small strict JSON parser (see json.h): recursive descent over a byte
 * range, values built in a private arena. Every read checks the end of the
 * input first; nothing is trusted. */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */
typedef struct json_block {
    struct json_block *next;
    size_t size, used;
    max_align_t data[];
} json_block;

#define BLOCK_MIN ((size_t)64 << 10)

static void *arena_alloc(json_doc *d, size_t n)
{
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    json_block *b = d->blocks;
    if (!b || b->size - b->used < n) {
        size_t size = n > BLOCK_MIN ? n : BLOCK_MIN;
        b = malloc(sizeof *b + size);
        if (!b) return NULL;
        b->size = size;
        b->used = 0;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *p = (unsigned char *)b->data + b->used;
    b->used += n;
    return p;
}

/* A copy of bytes[0..n) in the document's memory; NULL when out of memory. */
static void *arena_dup(json_doc *d, const void *bytes, size_t n)
{
    void *p = arena_alloc(d, n);
    if (p) memcpy(p, bytes, n);
    return p;
}

void mi_json_doc_free(json_doc *doc)
{
    if (!doc) return;
    for (json_block *b = doc->blocks, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    doc->blocks = NULL;
    memset(&doc->root, 0, sizeof doc->root);
}

/* ---------------------------------------------------------------- UTF-8 */
/* Length of the well-formed UTF-8 sequence at s (n bytes available), 0 if
 * there is none (Unicode 15, table 3-7). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    unsigned lo = 0x80, hi = 0xBF;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F; /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F; /* at most U+10FFFF */
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

bool json_utf8_valid(const char *s, size_t len, size_t *bad)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(u + i, len - i);
        if (k == 0) {
            if (bad) *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}

static size_t utf8_put(unsigned char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---------------------------------------------------------------- parser */
typedef struct parser {
    const unsigned char *start, *p, *end;
    json_doc *doc;
    json_error *err;
    int depth;
} parser;

static int fail_at(parser *ps, const unsigned char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(parser *ps, const unsigned char *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err->msg, sizeof ps->err->msg, fmt, ap);
    va_end(ap);
    ps->err->pos = (size_t)(at - ps->start);
    return -1;
}

static int fail_oom(parser *ps) { return fail_at(ps, ps->p, "out of memory"); }

static int fail_char(parser *ps, const char *what)
{
    unsigned c = *ps->p;
    if (c >= 0x20 && c < 0x7F)
        return fail_at(ps, ps->p, "unexpected character '%c' (%s)", (char)c, what);
    return fail_at(ps, ps->p, "unexpected byte 0x%02x (%s)", c, what);
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(const unsigned char *s, const unsigned char *end, uint32_t *out)
{
    if (end - s < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* At an opening quote: decodes the string into the arena. */
static int parse_string(parser *ps, char **out, size_t *out_len)
{
    const unsigned char *open = ps->p;
    /* Find the closing quote first: it bounds both the scan and the output
     * (decoding never lengthens: an escape is at least as long as its bytes). */
    const unsigned char *q = open + 1;
    while (q < ps->end && *q != '"') {
        if (*q == '\\' && q + 1 < ps->end) q++;
        q++;
    }
    if (q >= ps->end) return fail_at(ps, open, "unterminated string");
    unsigned char *o = arena_alloc(ps->doc, (size_t)(q - open));
    if (!o) return fail_oom(ps);
    size_t n = 0;
    const unsigned char *s = open + 1;
    while (s < q) {
        unsigned c = *s;
        if (c < 0x20)
            return fail_at(ps, s, "control character 0x%02x in string (must be escaped)", c);
        if (c >= 0x80) {
            size_t k = utf8_seq(s, (size_t)(q - s));
            if (k == 0) return fail_at(ps, s, "invalid UTF-8 byte 0x%02x in string", c);
            memcpy(o + n, s, k);
            n += k;
            s += k;
            continue;
        }
        if (c != '\\') {
            o[n++] = (unsigned char)c;
            s++;
            continue;
        }
        /* an escape; s + 1 < q holds because the scan above skipped it */
        unsigned e = s[1];
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(s + 2, q, &cp) != 0)
                return fail_at(ps, s, "invalid \\u escape (need 4 hex digits)");
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail_at(ps, s, "unpaired surrogate \\u%04X in string", (unsigned)cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (q - (s + 6) < 6 || s[6] != '\\' || s[7] != 'u' || hex4(s + 8, q, &lo) != 0 ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return fail_at(ps, s, "unpaired surrogate \\u%04X in string", (unsigned)cp);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            n += utf8_put(o + n, cp);
            s += 6;
            continue;
        }
        default:
            if (e >= 0x20 && e < 0x7F)
                return fail_at(ps, s, "invalid escape '\\%c' in string", (char)e);
            return fail_at(ps, s, "invalid escape (byte 0x%02x) in string", e);
        }
        s += 2;
    }
    o[n] = '\0';
    *out = (char *)o;
    *out_len = n;
    ps->p = q + 1;
    return 0;
}

static bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *ps, json_value *v)
{
    const unsigned char *s = ps->p, *p = s, *end = ps->end;
    bool neg = false, is_int = true, overflow = false;
    uint64_t mag = 0;
    if (*p == '-') {
        neg = true;
        p++;
    }
    if (p == end) return fail_at(ps, p, "unterminated JSON: number ends after '-'");
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p)) return fail_at(ps, s, "leading zero in number");
    } else if (is_digit(*p)) {
        for (; p < end && is_digit(*p); p++) {
            unsigned d = *p - '0';
            if (mag > (UINT64_MAX - d) / 10) overflow = true;
            else mag = mag * 10 + d;
        }
    } else {
        return fail_at(ps, s, "invalid number");
    }
    if (p < end && *p == '.') {
        p++;
        if (p == end || !is_digit(*p)) return fail_at(ps, p, "digit expected after '.' in number");
        while (p < end && is_digit(*p)) p++;
        is_int = false;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p == end || !is_digit(*p)) return fail_at(ps, p, "digit expected in exponent");
        while (p < end && is_digit(*p)) p++;
        is_int = false;
    }
    v->type = JSON_NUMBER;
    v->len = (size_t)(p - s);
    v->is_int = false;
    v->u.i = 0;
    const uint64_t lim = (uint64_t)INT64_MAX;
    if (is_int && !overflow && (neg ? mag <= lim + 1 : mag <= lim)) {
        v->is_int = true;
        v->u.i = neg ? (mag == lim + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    }
    ps->p = p;
    return 0;
}

static int parse_literal(parser *ps, json_value *v, const char *word, json_type t)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail_char(ps, "expected a value");
    v->type = t;
    ps->p += n;
    return 0;
}

static int parse_value(parser *ps, json_value *v);

/* A growable temporary vector of one container's elements, copied into the
 * arena when the container closes. */
static void *grow(void *buf, size_t *cap, size_t elem)
{
    size_t nc = *cap ? *cap * 2 : 8;
    if (nc > SIZE_MAX / elem) return NULL;
    void *nb = realloc(buf, nc * elem);
    if (nb) *cap = nc;
    return nb;
}

static int parse_array(parser *ps, json_value *v)
{
    const unsigned char *open = ps->p;
    json_value *tmp = NULL;
    size_t n = 0, cap = 0;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        goto done;
    }
    for (;;) {
        if (n == cap) {
            json_value *nt = grow(tmp, &cap, sizeof *tmp);
            if (!nt) goto oom;
            tmp = nt;
        }
        if (parse_value(ps, &tmp[n]) != 0) goto fail;
        n++;
        skip_ws(ps);
        if (ps->p == ps->end) {
            fail_at(ps, open, "unterminated array");
            goto fail;
        }
        if (*ps->p == ']') {
            ps->p++;
            break;
        }
        if (*ps->p != ',') {
            fail_char(ps, "expected ',' or ']' in array");
            goto fail;
        }
        ps->p++;
    }
done:
    v->type = JSON_ARRAY;
    v->len = n;
    v->u.items = NULL;
    if (n && !(v->u.items = arena_dup(ps->doc, tmp, n * sizeof *tmp))) goto oom;
    free(tmp);
    return 0;
oom:
    fail_oom(ps);
fail:
    free(tmp);
    return -1;
}

static int parse_object(parser *ps, json_value *v)
{
    const unsigned char *open = ps->p;
    json_member *tmp = NULL;
    size_t n = 0, cap = 0;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        goto done;
    }
    for (;;) {
        if (ps->p == ps->end) {
            fail_at(ps, open, "unterminated object");
            goto fail;
        }
        if (*ps->p != '"') {
            fail_char(ps, "expected a string key in object");
            goto fail;
        }
        if (n == cap) {
            json_member *nt = grow(tmp, &cap, sizeof *tmp);
            if (!nt) goto oom;
            tmp = nt;
        }
        json_member *m = &tmp[n];
        m->pos = (size_t)(ps->p - ps->start);
        if (parse_string(ps, &m->key, &m->key_len) != 0) goto fail;
        skip_ws(ps);
        if (ps->p == ps->end) {
            fail_at(ps, open, "unterminated object");
            goto fail;
        }
        if (*ps->p != ':') {
            fail_char(ps, "expected ':' after an object key");
            goto fail;
        }
        ps->p++;
        if (parse_value(ps, &m->value) != 0) goto fail;
        n++;
        skip_ws(ps);
        if (ps->p == ps->end) {
            fail_at(ps, open, "unterminated object");
            goto fail;
        }
        if (*ps->p == '}') {
            ps->p++;
            break;
        }
        if (*ps->p != ',') {
            fail_char(ps, "expected ',' or '}' in object");
            goto fail;
        }
        ps->p++;
        skip_ws(ps);
    }
done:
    v->type = JSON_OBJECT;
    v->len = n;
    v->u.members = NULL;
    if (n && !(v->u.members = arena_dup(ps->doc, tmp, n * sizeof *tmp))) goto oom;
    free(tmp);
    return 0;
oom:
    fail_oom(ps);
fail:
    free(tmp);
    return -1;
}

static int parse_value(parser *ps, json_value *v)
{
    skip_ws(ps);
    memset(v, 0, sizeof *v);
    if (ps->p == ps->end) return fail_at(ps, ps->p, "unterminated JSON: a value is missing");
    v->pos = (size_t)(ps->p - ps->start);
    int rc;
    switch (*ps->p) {
    case '{':
    case '[':
        if (ps->depth >= JSON_MAX_DEPTH)
            return fail_at(ps, ps->p, "nested deeper than %d levels", JSON_MAX_DEPTH);
        ps->depth++;
        rc = *ps->p == '{' ? parse_object(ps, v) : parse_array(ps, v);
        ps->depth--;
        return rc;
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->u.s, &v->len);
    case 't': return parse_literal(ps, v, "true", JSON_TRUE);
    case 'f': return parse_literal(ps, v, "false", JSON_FALSE);
    case 'n': return parse_literal(ps, v, "null", JSON_NULL);
    default:
        if (*ps->p == '-' || is_digit(*ps->p)) return parse_number(ps, v);
        return fail_char(ps, "expected a value");
    }
}

int mi_json_parse(json_doc *doc, const char *text, size_t len, json_error *err)
{
    memset(doc, 0, sizeof *doc);
    err->pos = 0;
    err->msg[0] = '\0';
    parser ps = {.start = (const unsigned char *)text,
                 .p = (const unsigned char *)text,
                 .end = (const unsigned char *)text + len,
                 .doc = doc,
                 .err = err,
                 .depth = 0};
    if (!text && len) return fail_at(&ps, ps.p, "no input");
    if (parse_value(&ps, &doc->root) != 0) return -1;
    skip_ws(&ps);
    if (ps.p != ps.end) return fail_char(&ps, "trailing characters after the JSON value");
    return 0;
}
