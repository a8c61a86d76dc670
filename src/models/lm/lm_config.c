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

/* The parameters, declared once: defaults, parsing, ranges, metadata. The
 * sizes' limits are miras-train's options' (it parses them with this table)
 * and what a checkpoint's lm.* values are held to before any model is made:
 * far above any model trained here, yet a hostile file cannot ask mi_lm_init
 * for petabytes (mi_checkpoint_load then compares the sizes with the tensors
 * it holds). */
#define MAX_VOCAB (1 << 24)
#define MAX_WIDTH (1 << 16)  /* d_model */
#define MAX_HIDDEN (1 << 20) /* mlp_hidden: 16 · MAX_WIDTH */
#define MAX_WINDOW (1 << 24) /* miras-train's longest --seq-len */
static const mi_field lm_fields[] = {
    MI_FIELD_I64_AT(mi_lm_config, "vocab", vocab, "256", 1, MAX_VOCAB, "tokens (256: bytes)"),
    MI_FIELD_I64_AT(mi_lm_config, "d_model", d_model, "128", 1, MAX_WIDTH, "the model width"),
    MI_FIELD_INT_AT(mi_lm_config, "layers", layers, "4", 1, 1024, "blocks"),
    MI_FIELD_I64_AT(mi_lm_config, "heads", heads, "4", 1, 4096, "heads (divide d_model)"),
    MI_FIELD_I64_AT(mi_lm_config, "mlp_hidden", mlp_hidden, "0", 0, MAX_HIDDEN,
                    "SwiGLU hidden width (0: 3 d_model)"),
    MI_FIELD_BOOL_AT(mi_lm_config, "tie_embeddings", tie_embeddings, "true",
                     "the LM head is the embedding's transpose"),
    MI_FIELD_REAL_AT(mi_lm_config, "norm_eps", norm_eps, "1e-6", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN, "every RMSNorm's epsilon"),
    MI_FIELD_REAL_AT(mi_lm_config, "rope_base", rope_base, "10000", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN, "RoPE's base (attention, SWA)"),
    MI_FIELD_I64_AT(mi_lm_config, "window", window, "64", 1, MAX_WINDOW,
                    "SWA's window when the mixer spec names none"),
    MI_FIELD_TEXT_AT(mi_lm_config, "mixer", mixer, "gated-deltanet", "the mixer spec"),
};
#define N_FIELDS MI_FIELDS_COUNT(lm_fields)

mi_lm_config mi_lm_config_default(void)
{
    mi_lm_config c;
    memset(&c, 0, sizeof c);
    mi_fields_defaults(lm_fields, N_FIELDS, &c);  /* the table's own defaults: cannot fail */
    return c;
}

const mi_field *mi_lm_config_fields(int *count)
{
    if (count) *count = N_FIELDS;
    return lm_fields;
}

/* ---------------------------------------------------------------- parsing */

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
    if (strlen(kv) >= MI_LM_TEXT)
        return mi_error_set("lm config: mixer override '%s' is longer than %d characters", kv,
                            MI_LM_TEXT - 1), -1;
    strcpy(c->overrides[slot], kv);
    if (slot == c->n_overrides) c->n_overrides++;
    return 0;
}

int mi_lm_config_set(mi_lm_config *c, const char *assignment)
{
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    char key[MI_LM_TEXT];
    if (!c || !eq || eq == assignment || (size_t)(eq - assignment) >= sizeof key)
        return mi_error_set("lm config: expected KEY=VALUE, got '%s'",
                            assignment ? assignment : "(null)"), -1;
    if (!strncmp(assignment, "mixer.", 6)) return add_override(c, assignment + 6);
    if (!mi_fields_has_key(lm_fields, N_FIELDS, assignment)) {
        memcpy(key, assignment, (size_t)(eq - assignment));
        key[eq - assignment] = '\0';
        return mi_error_set("lm config: unknown key '%s' (vocab, d_model, layers, heads, "
                            "mlp_hidden, tie_embeddings, norm_eps, rope_base, window, mixer, "
                            "mixer.KEY)", key), -1;
    }
    return mi_fields_set(lm_fields, N_FIELDS, c, "lm config", assignment);
}

int mi_lm_config_check(const mi_lm_config *c)
{
    if (!c) return mi_error_set("lm config: NULL"), -1;
    if (mi_fields_check(lm_fields, N_FIELDS, c, "lm config") != 0) return -1;
    if (c->d_model % c->heads)
        return mi_error_set("lm config: heads (%lld) must divide d_model (%lld)",
                            (long long)c->heads, (long long)c->d_model), -1;
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

/* ---------------------------------------------------------------- metadata
 * "lm." + each field's key, lm.format first and lm.mixer_overrides last. */

enum { N_KEYS = N_FIELDS + 2 };

static char *scope_text(mi_scope *s, const char *text)
{
    char *t = mi_scope_alloc(s, strlen(text) + 1);
    if (t) strcpy(t, text);
    return t;
}

/* "lm." + key, in the current scope */
static const char *meta_key(mi_scope *s, const char *key)
{
    char *t = mi_scope_alloc(s, strlen(key) + 4);
    if (t) sprintf(t, "lm.%s", key);
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
    char buf[MI_LM_MAX_OVERRIDES * MI_LM_TEXT];
    k[0] = "lm.format", v[0] = FORMAT;
    for (int i = 0; i < N_FIELDS; i++) {
        if (mi_field_format(&lm_fields[i], c, buf, sizeof buf) != 0) return -1;
        k[i + 1] = meta_key(s, lm_fields[i].key);
        v[i + 1] = scope_text(s, buf);
        if (!k[i + 1] || !v[i + 1]) return mi_error_set("lm config: out of memory"), -1;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n_overrides; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? "," : "",
                                 c->overrides[i]);
    k[N_KEYS - 1] = "lm.mixer_overrides";
    if (!(v[N_KEYS - 1] = scope_text(s, buf))) return mi_error_set("lm config: out of memory"), -1;
    *out = (mi_metadata){.count = N_KEYS, .keys = k, .values = v};
    return 0;
}

/* The index of "lm.KEY" in the metadata's order (0 format, 1.. fields, last
 * the overrides), or -1. */
static int meta_index(const char *key)
{
    if (!strcmp(key, "lm.format")) return 0;
    if (!strcmp(key, "lm.mixer_overrides")) return N_KEYS - 1;
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(key + 3, lm_fields[i].key)) return i + 1;
    return -1;
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
        int j = meta_index(key);
        if (j < 0) return mi_error_set("lm config: unknown metadata key '%s'", key), -1;
        if (seen[j]) return mi_error_set("lm config: metadata key '%s' appears twice", key), -1;
        seen[j] = val;
    }
    for (int j = 0; j < N_KEYS; j++)
        if (!seen[j])
            return mi_error_set("lm config: metadata lacks 'lm.%s'",
                                j == 0 ? "format" : j == N_KEYS - 1 ? "mixer_overrides"
                                                                    : lm_fields[j - 1].key), -1;
    if (strcmp(seen[0], FORMAT))
        return mi_error_set("lm config: lm.format is '%s'; this build reads format %s", seen[0],
                            FORMAT), -1;
    for (int j = 0; j < N_FIELDS; j++)
        if (mi_field_parse(&lm_fields[j], &c, "lm config", seen[j + 1]) != 0) return -1;
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
