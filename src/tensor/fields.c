/* Field tables (fields.h): parsing, range checks, formatting and the
 * description of a configuration struct's parameters, from one table. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "tensor.h"

#define MAX_KEY 64

/* A message's "WHAT: " (what NULL or "": none) */
static const char *name(const char *what) { return what ? what : ""; }
static const char *sep(const char *what) { return what && *what ? ": " : ""; }

static void *member(void *obj, const mi_field *f) { return (char *)obj + f->offset; }
static const void *cmember(const void *obj, const mi_field *f)
{
    return (const char *)obj + f->offset;
}

const mi_field *mi_fields_find(const mi_field *table, int n, const char *key)
{
    for (int i = 0; table && key && i < n; i++)
        if (!strcmp(table[i].key, key)) return &table[i];
    return NULL;
}

/* The field for a key, groups included: *offset grows by each group's
 * member offset (the field's struct is at obj + *offset). */
static const mi_field *resolve(const mi_field *table, int n, const char *key, size_t *offset)
{
    for (int i = 0; table && key && i < n; i++) {
        const mi_field *f = &table[i];
        size_t len = strlen(f->key);
        if (f->type != MI_FIELD_GROUP) {
            if (!strcmp(f->key, key)) return f;
        } else if (!strncmp(key, f->key, len) && key[len] == '.') {
            int count = 0;
            const mi_field *group = f->group ? f->group(&count) : NULL;
            size_t inner = 0;
            const mi_field *g = resolve(group, count, key + len + 1, &inner);
            if (g) return *offset += f->offset + inner, g;
        }
    }
    return NULL;
}

static int parse_real(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end) return -1;
    *out = v;
    return 0;
}

static bool in_range(const mi_field *f, double v)
{
    if (isnan(v)) return !(f->flags & (MI_FIELD_RANGED | MI_FIELD_FINITE));
    if ((f->flags & MI_FIELD_FINITE) && isinf(v)) return false;
    if (!(f->flags & MI_FIELD_RANGED)) return true;
    bool lo = f->flags & MI_FIELD_LO_OPEN ? v > f->lo : v >= f->lo;
    bool hi = f->flags & MI_FIELD_HI_OPEN ? v < f->hi : v <= f->hi;
    return lo && hi;
}

/* The range in words: ">= 1", "> 0", "<= 5" where one side is unbounded
 * (beyond ±1e9 counts as unbounded: a size's limit is not news), else
 * "in [lo, hi]" with ( ) for open ends. */
static void range_text(const mi_field *f, char *buf, size_t n)
{
    bool lo_open = f->flags & MI_FIELD_LO_OPEN, hi_open = f->flags & MI_FIELD_HI_OPEN;
    if (f->hi >= 1e9 && f->lo > -1e9)
        snprintf(buf, n, "%s %.10g", lo_open ? ">" : ">=", f->lo);
    else if (f->lo <= -1e9 && f->hi < 1e9)
        snprintf(buf, n, "%s %.10g", hi_open ? "<" : "<=", f->hi);
    else if (f->lo <= -1e9)
        snprintf(buf, n, "a number");
    else
        snprintf(buf, n, "in %c%.10g, %.10g%c", lo_open ? '(' : '[', f->lo, f->hi,
                 hi_open ? ')' : ']');
}

static int out_of_range(const mi_field *f, const char *what, const char *value)
{
    char r[80];
    range_text(f, r, sizeof r);
    return mi_error_set("%s%s%s must be %s, got %s", name(what), sep(what), f->key, r, value), -1;
}

/* A CHOICE name is "name" or "name|alias|…": the first is written, any is read. */
static size_t name_len(const char *entry) { return strcspn(entry, "|"); }

static bool choice_matches(const char *entry, const char *text)
{
    for (const char *p = entry;; p += name_len(p) + 1) {
        size_t n = name_len(p);
        if (strlen(text) == n && !strncmp(p, text, n)) return true;
        if (!p[n]) return false;
    }
}

/* "'a', 'b' or 'c'" into buf (the first name of each) */
static void choice_list(const char *const *names, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s'%.*s'",
                                i == 0 ? "" : names[i + 1] ? ", " : " or ",
                                (int)name_len(names[i]), names[i]);
}

/* A whole number, exactly: decimal digits (strtoll, strtoull), or a real
 * that is whole and below 2^53 in magnitude ("1e3"). */
static bool parse_whole(const char *text, bool is_unsigned, int64_t *i, uint64_t *u, double *v)
{
    char *end;
    errno = 0;
    if (is_unsigned && !strchr(text, '-')) {
        *u = strtoull(text, &end, 10);
        if (!errno && end != text && !*end) return *v = (double)*u, true;
    } else if (!is_unsigned) {
        *i = strtoll(text, &end, 10);
        if (!errno && end != text && !*end) return *v = (double)*i, true;
    }
    if (parse_real(text, v) != 0 || *v != floor(*v) || fabs(*v) >= 0x1p53 ||
        (is_unsigned && *v < 0))
        return false;
    *i = (int64_t)*v;
    *u = (uint64_t)(*v < 0 ? 0 : *v);
    return true;
}

int mi_field_parse(const mi_field *f, void *obj, const char *what, const char *text)
{
    if (!f || !obj || !text)
        return mi_error_set("%s%sNULL field, object or text", name(what), sep(what)), -1;
    void *p = member(obj, f);
    double v;
    int64_t whole = 0;
    uint64_t uwhole = 0;
    switch (f->type) {
    case MI_FIELD_INT:
    case MI_FIELD_I64:
    case MI_FIELD_U64:
        if (!parse_whole(text, f->type == MI_FIELD_U64, &whole, &uwhole, &v) ||
            (f->type == MI_FIELD_INT && !(v >= INT_MIN && v <= INT_MAX)))
            return mi_error_set("%s%s%s: '%s' is not a whole number", name(what), sep(what),
                                f->key, text), -1;
        if (!in_range(f, v)) return out_of_range(f, what, text);
        if (f->type == MI_FIELD_INT) *(int *)p = (int)whole;
        else if (f->type == MI_FIELD_I64) *(int64_t *)p = whole;
        else *(uint64_t *)p = uwhole;
        return 0;
    case MI_FIELD_REAL:
        if (parse_real(text, &v) != 0)
            return mi_error_set("%s%s%s: '%s' is not a number", name(what), sep(what), f->key,
                                text), -1;
        if (!in_range(f, v)) return out_of_range(f, what, text);
        *(double *)p = v;
        return 0;
    case MI_FIELD_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1")) return *(bool *)p = true, 0;
        if (!strcmp(text, "false") || !strcmp(text, "0")) return *(bool *)p = false, 0;
        return mi_error_set("%s%s%s: '%s' is not true or false", name(what), sep(what), f->key,
                            text), -1;
    case MI_FIELD_CHOICE:
        for (int i = 0; f->choices && f->choices[i]; i++)
            if (choice_matches(f->choices[i], text)) return *(int *)p = i, 0;
        {
            char list[256] = "";
            if (f->choices) choice_list(f->choices, list, sizeof list);
            return mi_error_set("%s%s%s must be %s, got '%s'", name(what), sep(what), f->key, list,
                                text), -1;
        }
    case MI_FIELD_NAME:
        for (int i = 0; f->name_at && f->name_at(i); i++)
            if (!strcmp(f->name_at(i), text)) return *(const char **)p = f->name_at(i), 0;
        return mi_error_set("%s%sunknown %s '%s'", name(what), sep(what), f->key, text), -1;
    case MI_FIELD_TEXT:
        if (strlen(text) >= f->size)
            return mi_error_set("%s%s%s: '%s' is longer than %zu characters", name(what), sep(what),
                                f->key, text, f->size - 1), -1;
        memcpy(p, text, strlen(text) + 1);
        return 0;
    case MI_FIELD_CUSTOM:
        if (!f->parse) return mi_error_set("%s has no parser", f->key), -1;
        if (f->parse(f, obj, text) != 0) {
            /* "WHAT: KEY: message", once even where the parser named the key itself */
            size_t len = strlen(f->key);
            bool named = !strncmp(mi_error(), f->key, len) && mi_error()[len] == ':';
            char who[MAX_KEY + 64];
            snprintf(who, sizeof who, "%s%s%s", name(what), named || !*name(what) ? "" : ": ",
                     named ? "" : f->key);
            if (*who) mi_error_prefix(who);
            return -1;
        }
        return 0;
    case MI_FIELD_GROUP:
        return mi_error_set("%s%s%s is a group of keys (%s.KEY=VALUE), not one value", name(what),
                            sep(what), f->key, f->key), -1;
    }
    return mi_error_set("%s: unknown field type %d", f->key, (int)f->type), -1;
}

int mi_fields_defaults(const mi_field *table, int n, void *obj)
{
    for (int i = 0; i < n; i++) {
        const mi_field *f = &table[i];
        if (f->type == MI_FIELD_GROUP) {
            int count = 0;
            const mi_field *group = f->group ? f->group(&count) : NULL;
            if (mi_fields_defaults(group, count, member(obj, f)) != 0) return -1;
        } else if (f->def) {
            if (mi_field_parse(f, obj, "default", f->def) != 0) return -1;
        } else {
            memset(member(obj, f), 0, f->size);
        }
    }
    return 0;
}

bool mi_fields_has_key(const mi_field *table, int n, const char *assignment)
{
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    if (!eq || eq - assignment >= MAX_KEY) return false;
    char key[MAX_KEY];
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = '\0';
    size_t offset = 0;
    return resolve(table, n, key, &offset) != NULL;
}

int mi_fields_set(const mi_field *table, int n, void *obj, const char *what,
                  const char *assignment)
{
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    if (!eq || eq == assignment || eq - assignment >= MAX_KEY)
        return mi_error_set("%s: expected KEY=VALUE, got '%s'", what,
                            assignment ? assignment : "(null)"), -1;
    char key[MAX_KEY];
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = '\0';
    size_t offset = 0;
    const mi_field *f = resolve(table, n, key, &offset);
    if (f) {
        mi_field named = *f;  /* messages name the whole key */
        named.key = key;
        return mi_field_parse(&named, (char *)obj + offset, what, eq + 1);
    }
    char keys[1024];
    size_t len = 0;
    keys[0] = '\0';
    for (int i = 0; i < n && len < sizeof keys; i++)
        len += (size_t)snprintf(keys + len, sizeof keys - len, "%s%s%s", i ? ", " : "",
                                table[i].key, table[i].type == MI_FIELD_GROUP ? ".KEY" : "");
    return mi_error_set("%s: unknown key '%s' (%s)", what, key, keys), -1;
}

int mi_field_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    const void *p = cmember(obj, f);
    int len = -1;
    switch (f->type) {
    case MI_FIELD_INT: len = snprintf(buf, n, "%d", *(const int *)p); break;
    case MI_FIELD_I64: len = snprintf(buf, n, "%" PRId64, *(const int64_t *)p); break;
    case MI_FIELD_U64: len = snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p); break;
    case MI_FIELD_REAL: len = snprintf(buf, n, "%.17g", *(const double *)p); break;
    case MI_FIELD_BOOL: len = snprintf(buf, n, "%s", *(const bool *)p ? "true" : "false"); break;
    case MI_FIELD_CHOICE: {
        int v = *(const int *)p, count = 0;
        while (f->choices && f->choices[count]) count++;
        if (v < 0 || v >= count)
            return mi_error_set("%s: value %d is not one of its %d names", f->key, v, count), -1;
        len = snprintf(buf, n, "%.*s", (int)name_len(f->choices[v]), f->choices[v]);
        break;
    }
    case MI_FIELD_NAME: {
        const char *s = *(const char *const *)p;
        len = snprintf(buf, n, "%s", s ? s : "");
        break;
    }
    case MI_FIELD_TEXT: len = snprintf(buf, n, "%.*s", (int)f->size, (const char *)p); break;
    case MI_FIELD_CUSTOM:
        if (!f->format) return mi_error_set("%s has no formatter", f->key), -1;
        return f->format(f, obj, buf, n);
    case MI_FIELD_GROUP: return mi_error_set("%s: a group has no one text", f->key), -1;
    }
    if (len < 0 || (size_t)len >= n)
        return mi_error_set("%s: its text does not fit in %zu bytes", f->key, n), -1;
    return 0;
}

int mi_field_printf(const mi_field *f, char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= n)
        return mi_error_set("%s: its text does not fit in %zu bytes", f->key, n), -1;
    return 0;
}

int mi_fields_check(const mi_field *table, int n, const void *obj, const char *what)
{
    for (int i = 0; i < n; i++) {
        const mi_field *f = &table[i];
        const void *p = cmember(obj, f);
        char text[64];
        double v;
        switch (f->type) {
        case MI_FIELD_INT: v = *(const int *)p; break;
        case MI_FIELD_I64: v = (double)*(const int64_t *)p; break;
        case MI_FIELD_U64: v = (double)*(const uint64_t *)p; break;
        case MI_FIELD_REAL: v = *(const double *)p; break;
        case MI_FIELD_CHOICE: {
            int count = 0, value = *(const int *)p;
            while (f->choices && f->choices[count]) count++;
            if (value >= 0 && value < count) continue;
            char list[256] = "";
            if (f->choices) choice_list(f->choices, list, sizeof list);
            return mi_error_set("%s%s%s must be %s, got %d", name(what), sep(what), f->key, list,
                                value), -1;
        }
        case MI_FIELD_GROUP: {
            char sub[MAX_KEY + 64];
            snprintf(sub, sizeof sub, "%s%s%s", name(what), sep(what), f->key);
            int count = 0;
            const mi_field *group = f->group ? f->group(&count) : NULL;
            if (mi_fields_check(group, count, p, sub) != 0) return -1;
            continue;
        }
        case MI_FIELD_NAME:
            if (!*(const char *const *)p)
                return mi_error_set("%s%s%s is not set", name(what), sep(what), f->key), -1;
            continue;
        default: continue;
        }
        if (!in_range(f, v)) {
            snprintf(text, sizeof text, "%.17g", v);
            return out_of_range(f, what, text);
        }
    }
    return 0;
}

static size_t describe(const mi_field *table, int n, const char *prefix, char *buf, size_t size,
                       size_t len)
{
    for (int i = 0; i < n; i++) {
        const mi_field *f = &table[i];
        if (f->type == MI_FIELD_GROUP) {
            char sub[MAX_KEY];
            snprintf(sub, sizeof sub, "%s%s.", prefix, f->key);
            int count = 0;
            const mi_field *group = f->group ? f->group(&count) : NULL;
            len = describe(group, count, sub, buf, size, len);
            continue;
        }
        char r[96] = "";
        if (f->flags & MI_FIELD_RANGED) {
            char t[80];
            range_text(f, t, sizeof t);
            snprintf(r, sizeof r, "  (%s)", t);
        }
        char values[512] = "";
        size_t used = 0;
        for (int j = 0; f->type == MI_FIELD_CHOICE && f->choices && f->choices[j]; j++)
            used += (size_t)snprintf(values + used, used < sizeof values ? sizeof values - used : 0,
                                     "%s%.*s", j ? ", " : ": ", (int)name_len(f->choices[j]),
                                     f->choices[j]);
        for (int j = 0; f->type == MI_FIELD_NAME && f->name_at && f->name_at(j); j++)
            used += (size_t)snprintf(values + used, used < sizeof values ? sizeof values - used : 0,
                                     "%s%s", j ? ", " : ": ", f->name_at(j));
        char line[1024];
        int k = snprintf(line, sizeof line, "  %s%s=%s%s  %s%s\n", prefix, f->key,
                         f->def ? f->def : "", r, f->doc ? f->doc : "", values);
        if (k < 0) continue;
        if (buf && len + 1 < size) snprintf(buf + len, size - len, "%s", line);
        len += strlen(line);
    }
    return len;
}

size_t mi_fields_describe(const mi_field *table, int n, char *buf, size_t size)
{
    if (buf && size) buf[0] = '\0';
    return describe(table, n, "", buf, size, 0);
}
