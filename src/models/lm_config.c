/* The language model's configuration: defaults (BENCH's train configuration:
 * bytes, d_model 128, 4 layers, 4 heads, SwiGLU hidden 384), text
 * assignments, range checks, and the flat string map that goes into a
 * checkpoint's safetensors __metadata__:
 *
 *   lm.format           "1"
 *   lm.vocab lm.d_model lm.layers lm.heads lm.mlp_hidden lm.window   whole numbers
 *   lm.tie_embeddings   "true" | "false"
 *   lm.norm_eps lm.rope_base                                         "%.17g" (exact round trip)
 *   lm.mixer            the mixer spec
 *   lm.mixer_overrides  the overrides joined by ',' ("" when none) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"

#define FORMAT "1"

mi_lm_config mi_lm_config_default(void)
{
    mi_lm_config c = {.vocab = 256, .d_model = 128, .layers = 4, .heads = 4, .mlp_hidden = 0,
                      .tie_embeddings = true, .norm_eps = 1e-6, .rope_base = 10000,
                      .window = 64, .n_overrides = 0};
    strcpy(c.mixer, "gated-deltanet");
    return c;
}

/* ---------------------------------------------------------------- parsing */

static int parse_i64(const char *key, const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end)
        return mi_error_set("lm config: %s: '%s' is not a whole number", key, text), -1;
    *out = v;
    return 0;
}

static int parse_f64(const char *key, const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v))
        return mi_error_set("lm config: %s: '%s' is not a finite number", key, text), -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *key, const char *text, bool *out)
{
    if (!strcmp(text, "true") || !strcmp(text, "1")) return *out = true, 0;
    if (!strcmp(text, "false") || !strcmp(text, "0")) return *out = false, 0;
    return mi_error_set("lm config: %s: '%s' is not true or false", key, text), -1;
}

static int copy_text(const char *key, const char *text, char dst[MI_LM_TEXT])
{
    if (strlen(text) >= MI_LM_TEXT)
        return mi_error_set("lm config: %s: '%s' is longer than %d characters", key, text,
                            MI_LM_TEXT - 1), -1;
    strcpy(dst, text);
    return 0;
}

/* Adds "k=v", replacing an override with the same key. */
static int add_override(mi_lm_config *c, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return mi_error_set("lm config: mixer override '%s' is not KEY=VALUE", kv), -1;
    if (strchr(kv, ','))
        return mi_error_set("lm config: mixer override '%s' holds a ','", kv), -1;
    size_t klen = (size_t)(eq - kv) + 1;  /* the key and its '=' */
    int slot = c->n_overrides;
    for (int i = 0; i < c->n_overrides; i++)
        if (!strncmp(c->overrides[i], kv, klen)) slot = i;
    if (slot == MI_LM_MAX_OVERRIDES)
        return mi_error_set("lm config: more than %d mixer overrides", MI_LM_MAX_OVERRIDES), -1;
    if (copy_text("mixer override", kv, c->overrides[slot]) != 0) return -1;
    if (slot == c->n_overrides) c->n_overrides++;
    return 0;
}

/* key (without "lm.") = text */
static int set_field(mi_lm_config *c, const char *key, const char *text)
{
    int64_t v;
    if (!strcmp(key, "vocab")) return parse_i64(key, text, &c->vocab);
    if (!strcmp(key, "d_model")) return parse_i64(key, text, &c->d_model);
    if (!strcmp(key, "heads")) return parse_i64(key, text, &c->heads);
    if (!strcmp(key, "mlp_hidden")) return parse_i64(key, text, &c->mlp_hidden);
    if (!strcmp(key, "window")) return parse_i64(key, text, &c->window);
    if (!strcmp(key, "layers")) {
        if (parse_i64(key, text, &v) != 0) return -1;
        if (v < 0 || v > 1 << 20) return mi_error_set("lm config: layers: %lld is out of range",
                                                      (long long)v), -1;
        c->layers = (int)v;
        return 0;
    }
    if (!strcmp(key, "tie_embeddings")) return parse_bool(key, text, &c->tie_embeddings);
    if (!strcmp(key, "norm_eps")) return parse_f64(key, text, &c->norm_eps);
    if (!strcmp(key, "rope_base")) return parse_f64(key, text, &c->rope_base);
    if (!strcmp(key, "mixer")) return copy_text(key, text, c->mixer);
    return mi_error_set("lm config: unknown key '%s' (vocab, d_model, layers, heads, mlp_hidden, "
                        "tie_embeddings, norm_eps, rope_base, window, mixer, mixer.KEY)", key), -1;
}

int mi_lm_config_set(mi_lm_config *c, const char *assignment)
{
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    char key[MI_LM_TEXT];
    if (!c || !eq || eq == assignment || (size_t)(eq - assignment) >= sizeof key)
        return mi_error_set("lm config: expected KEY=VALUE, got '%s'",
                            assignment ? assignment : "(null)"), -1;
    if (!strncmp(assignment, "mixer.", 6)) return add_override(c, assignment + 6);
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = '\0';
    return set_field(c, key, eq + 1);
}

int mi_lm_config_check(const mi_lm_config *c)
{
    if (!c) return mi_error_set("lm config: NULL"), -1;
    if (c->vocab < 1 || c->d_model < 1 || c->layers < 1 || c->heads < 1)
        return mi_error_set("lm config: vocab, d_model, layers and heads must be >= 1, got %lld, "
                            "%lld, %d, %lld", (long long)c->vocab, (long long)c->d_model,
                            c->layers, (long long)c->heads), -1;
    if (c->d_model % c->heads)
        return mi_error_set("lm config: heads (%lld) must divide d_model (%lld)",
                            (long long)c->heads, (long long)c->d_model), -1;
    if (c->mlp_hidden < 0)
        return mi_error_set("lm config: mlp_hidden must be >= 0 (0: 3·d_model), got %lld",
                            (long long)c->mlp_hidden), -1;
    if (c->window < 1)
        return mi_error_set("lm config: window must be >= 1, got %lld", (long long)c->window), -1;
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps) || !(c->rope_base > 0) ||
        !isfinite(c->rope_base))
        return mi_error_set("lm config: norm_eps and rope_base must be finite and > 0, got %g "
                            "and %g", c->norm_eps, c->rope_base), -1;
    if (!memchr(c->mixer, '\0', MI_LM_TEXT) || !c->mixer[0])
        return mi_error_set("lm config: mixer is empty or not terminated"), -1;
    if (c->n_overrides < 0 || c->n_overrides > MI_LM_MAX_OVERRIDES)
        return mi_error_set("lm config: n_overrides %d is out of [0, %d]", c->n_overrides,
                            MI_LM_MAX_OVERRIDES), -1;
    for (int i = 0; i < c->n_overrides; i++)
        if (!memchr(c->overrides[i], '\0', MI_LM_TEXT) || !strchr(c->overrides[i], '=') ||
            strchr(c->overrides[i], ','))
            return mi_error_set("lm config: override %d is not KEY=VALUE without ','", i), -1;
    return 0;
}

/* ---------------------------------------------------------------- metadata */

enum { N_KEYS = 12 };
static const char *const keys[N_KEYS] = {
    "lm.format", "lm.vocab", "lm.d_model", "lm.layers", "lm.heads", "lm.mlp_hidden",
    "lm.tie_embeddings", "lm.norm_eps", "lm.rope_base", "lm.window", "lm.mixer",
    "lm.mixer_overrides"};

static char *scope_text(mi_scope *s, const char *text)
{
    char *t = mi_scope_alloc(s, strlen(text) + 1);
    if (t) strcpy(t, text);
    return t;
}

int mi_lm_config_to_metadata(const mi_lm_config *c, mi_metadata *out)
{
    if (!out) return mi_error_set("lm config: NULL metadata"), -1;
    if (mi_lm_config_check(c) != 0) return -1;
    mi_scope *s = mi_scope_current();
    const char **k = mi_scope_alloc(s, sizeof(char *) * N_KEYS);
    const char **v = mi_scope_alloc(s, sizeof(char *) * N_KEYS);
    if (!k || !v) return mi_error_set("lm config: out of memory"), -1;
    char buf[N_KEYS][MI_LM_MAX_OVERRIDES * MI_LM_TEXT];
    snprintf(buf[0], sizeof buf[0], "%s", FORMAT);
    snprintf(buf[1], sizeof buf[1], "%lld", (long long)c->vocab);
    snprintf(buf[2], sizeof buf[2], "%lld", (long long)c->d_model);
    snprintf(buf[3], sizeof buf[3], "%d", c->layers);
    snprintf(buf[4], sizeof buf[4], "%lld", (long long)c->heads);
    snprintf(buf[5], sizeof buf[5], "%lld", (long long)c->mlp_hidden);
    snprintf(buf[6], sizeof buf[6], "%s", c->tie_embeddings ? "true" : "false");
    snprintf(buf[7], sizeof buf[7], "%.17g", c->norm_eps);
    snprintf(buf[8], sizeof buf[8], "%.17g", c->rope_base);
    snprintf(buf[9], sizeof buf[9], "%lld", (long long)c->window);
    snprintf(buf[10], sizeof buf[10], "%s", c->mixer);
    size_t used = 0;
    buf[11][0] = '\0';
    for (int i = 0; i < c->n_overrides; i++)
        used += (size_t)snprintf(buf[11] + used, sizeof buf[11] - used, "%s%s", i ? "," : "",
                                 c->overrides[i]);
    for (int i = 0; i < N_KEYS; i++) {
        k[i] = keys[i];
        if (!(v[i] = scope_text(s, buf[i]))) return mi_error_set("lm config: out of memory"), -1;
    }
    *out = (mi_metadata){.count = N_KEYS, .keys = k, .values = v};
    return 0;
}

int mi_lm_config_from_metadata(mi_lm_config *out, const mi_metadata *m)
{
    if (!out || !m || (m->count > 0 && (!m->keys || !m->values)))
        return mi_error_set("lm config: NULL config or metadata"), -1;
    mi_lm_config c = mi_lm_config_default();
    c.n_overrides = 0;
    const char *seen[N_KEYS] = {NULL};
    for (int i = 0; i < m->count; i++) {
        const char *key = m->keys[i], *val = m->values[i];
        if (!key || !val) return mi_error_set("lm config: metadata entry %d is NULL", i), -1;
        if (strncmp(key, "lm.", 3)) continue;
        int j = 0;
        while (j < N_KEYS && strcmp(key, keys[j])) j++;
        if (j == N_KEYS) return mi_error_set("lm config: unknown metadata key '%s'", key), -1;
        if (seen[j]) return mi_error_set("lm config: metadata key '%s' appears twice", key), -1;
        seen[j] = val;
    }
    for (int j = 0; j < N_KEYS; j++)
        if (!seen[j]) return mi_error_set("lm config: metadata lacks '%s'", keys[j]), -1;
    if (strcmp(seen[0], FORMAT))
        return mi_error_set("lm config: lm.format is '%s'; this build reads format %s", seen[0],
                            FORMAT), -1;
    for (int j = 1; j < N_KEYS - 1; j++)
        if (set_field(&c, keys[j] + 3, seen[j]) != 0) return -1;
    /* the overrides, split at ',' */
    for (const char *p = seen[N_KEYS - 1]; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char one[MI_LM_TEXT];
        if (n >= sizeof one)
            return mi_error_set("lm config: lm.mixer_overrides: an entry is longer than %d "
                                "characters", MI_LM_TEXT - 1), -1;
        memcpy(one, p, n);
        one[n] = '\0';
        if (add_override(&c, one) != 0) return -1;
        p += n + (end ? 1 : 0);
        if (end && !*p)
            return mi_error_set("lm config: lm.mixer_overrides ends with ','"), -1;
    }
    if (mi_lm_config_check(&c) != 0) return -1;
    *out = c;
    return 0;
}
