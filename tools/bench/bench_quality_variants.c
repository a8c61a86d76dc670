/* miras-bench quality: variants, the cases' models (see the section comment). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_quality_internal.h"
#include "extend.h"

/* ================================================================ variants
 * A variant is a mixer spec (what miras-train's --model takes: titans,
 * swa:32, samba:gated-deltanet) optionally followed by its own overrides,
 * each `+KEY=VALUE`: `moneta+p=2+q=4`, `titans+algorithm=gd`. No mixer spec
 * holds a '+', so the spec is the part before the first one; each override
 * becomes a --set KEY=VALUE of that case only. A '+' that is not followed by
 * KEY= (as in eta=1e+3) belongs to the value before it. */

/* The mixer spec of variant v (the part before the first '+') into buf. */
const char *variant_spec(const char *v, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s", (int)strcspn(v, "+"), v);
    return buf;
}

static bool is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.';
}

/* Whether p (just after a '+') starts an override: KEY= with KEY of [A-Za-z0-9_.]. */
static bool starts_override(const char *p)
{
    size_t k = 0;
    while (is_key_char(p[k])) k++;
    return k > 0 && p[k] == '=';
}

/* The next override of a variant: *at points into v (initially v itself);
 * copies "KEY=VALUE" into buf and advances; false when there is none left. */
bool next_override(const char **at, char *buf, size_t n)
{
    const char *p = *at;
    while (*p && !(*p == '+' && starts_override(p + 1))) p++;
    if (!*p) return *at = p, false;
    const char *q = ++p;
    while (*q && !(*q == '+' && starts_override(q + 1))) q++;
    snprintf(buf, n, "%.*s", (int)(q - p), p);
    *at = q;
    return true;
}

/* The value variant v's own overrides give KEY (the last one wins); NULL: none. */
static const char *variant_override(const char *v, const char *key, char *buf, size_t n)
{
    const char *at = v, *found = NULL;
    char kv[NAME_MAX_LEN];
    size_t len = strlen(key);
    while (next_override(&at, kv, sizeof kv))
        if (!strncmp(kv, key, len) && kv[len] == '=') {
            snprintf(buf, n, "%s", kv + len + 1);
            found = buf;
        }
    return found;
}

/* The MIRAS preset a variant runs (its spec, or samba's); NULL for the others. */
const mi_preset *variant_preset(const char *v)
{
    char spec[NAME_MAX_LEN];
    variant_spec(v, spec, sizeof spec);
    const mi_preset *p = mi_preset_find(spec);
    return p ? p : samba_preset(spec);
}

/* Whether variant v runs an MLP memory: its preset's, unless its own memory= says otherwise. */
static bool variant_mlp(const char *v)
{
    char mem[NAME_MAX_LEN];
    const mi_preset *p = variant_preset(v);
    if (!p) return false;
    const char *own = variant_override(v, "memory", mem, sizeof mem);
    mi_miras_config c;
    if (!own && mi_preset_config(p, &c) != 0) return false;
    const mi_memory_kind *kind = mi_memory_find(own ? own : c.memory);
    return kind && kind->rule == MI_MEMORY_RULE_MLP;
}

/* A rule's match: "*", "@miras", "@mlp" (the memory the variant really runs),
 * or a name: the whole variant or its mixer spec (titans matches titans+p=2). */
bool rule_matches(const char *match, const char *v)
{
    char spec[NAME_MAX_LEN];
    if (!strcmp(match, "*")) return true;
    if (!strcmp(match, "@miras")) return variant_preset(v) != NULL;
    if (!strcmp(match, "@mlp")) return variant_mlp(v);
    return !strcmp(match, v) || !strcmp(match, variant_spec(v, spec, sizeof spec));
}

bool variant_overrides_valid(const char *v, char *msg, size_t n)
{
    char kv[NAME_MAX_LEN];
    const char *plus = strchr(v, '+');
    if (plus && !starts_override(plus + 1)) {
        snprintf(msg, n, "variant '%s': after the mixer spec each override is +KEY=VALUE "
                 "(moneta+p=2+q=4)", v);
        return false;
    }
    for (const char *at = v; next_override(&at, kv, sizeof kv);)
        if (!kv[strcspn(kv, "=") + 1]) {
            snprintf(msg, n, "variant '%s': override '%s' has no value", v, kv);
            return false;
        }
    return true;
}

/* Whether variant v (SPEC[+KEY=VALUE]...) is well formed and its spec
 * known; else a message. The keys themselves are miras-train's to judge:
 * an unknown one fails that case (exit status 2, its message in the row). */
static bool variant_valid(const char *v, char *msg, size_t n)
{
    char spec[NAME_MAX_LEN];
    variant_spec(v, spec, sizeof spec);
    return mixer_spec_valid(spec, "presets (every MIRAS preset)", msg, n) &&
           variant_overrides_valid(v, msg, n);
}

static int add_variant(char (*names)[NAME_MAX_LEN], int count, const char *v, char *msg,
                       size_t n)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(names[i], v)) return count; /* once each */
    if (count == MAX_VARIANTS)
        return snprintf(msg, n, "more than %d variants", MAX_VARIANTS), -1;
    if (strlen(v) >= NAME_MAX_LEN) return snprintf(msg, n, "variant '%s' is too long", v), -1;
    if (!variant_valid(v, msg, n)) return -1;
    snprintf(names[count], NAME_MAX_LEN, "%s", v);
    return count + 1;
}

/* A comma list of variants ("presets": every preset) into names; the count,
 * or -1 with a message. */
int expand_variants(const char *list, char (*names)[NAME_MAX_LEN], char *msg, size_t n)
{
    char buf[2048];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return snprintf(msg, n, "the variant list is too long"), -1;
    int count = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && count >= 0;
         t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "presets"))
            for (int i = 0; mi_preset_at(i) && count >= 0; i++)
                count = add_variant(names, count, mi_preset_at(i)->name, msg, n);
        else count = add_variant(names, count, t, msg, n);
    }
    if (count == 0) return snprintf(msg, n, "no variant given"), -1;
    return count;
}

/* ================================================================ one case */
