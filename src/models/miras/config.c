/* Configuration: defaults, text assignments ("p=3"), and validation. */
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "components.h"
#include "recurrence_delta.h"

static const char *memory_name_at(int i) { const mi_memory_kind *k = mi_memory_at(i); return k ? k->name : NULL; }
static const char *bias_name_at(int i) { const mi_bias_kind *k = mi_bias_at(i); return k ? k->name : NULL; }
static const char *retention_name_at(int i) { const mi_retention_kind *k = mi_retention_at(i); return k ? k->name : NULL; }

static const char *algorithm_name_at(int i) { const mi_algorithm_kind *k = mi_algorithm_at(i); return k ? k->name : NULL; }

/* Index = the enum's value (models.h). */
static const char *const forms[] = {"auto", "exact", "minibatch", NULL};
static const char *const delta_writes[] = {"beta", "unit", NULL};
static const char *const scans[] = {"auto", "composed", "mi_scan", NULL};

#define C mi_miras_config
#define HUGE_INT 1e9
#define POSITIVE (MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN)
/* The four components' parameters and the training form, in the order of
 * mi_miras_config; the component names come from their tables
 * (components.c). A bias's or a retention's own parameters are in its file
 * (MI_PARAMS). */
static const mi_field miras_fields[] = {
    MI_FIELD_NAME_AT(C, "memory", memory, "matrix", memory_name_at, "the memory"),
    MI_FIELD_INT_AT(C, "memory.depth", mlp_depth, "2", 1, 1024, "layers of the MLP memory"),
    MI_FIELD_INT_AT(C, "memory.expansion", mlp_expansion, "4", 1, 1024,
                    "the MLP memory's hidden width / dk"),
    MI_FIELD_INT_AT(C, "memory.slots", slots, "64", 1, HUGE_INT,
                    "lattice: m, the number of memory slots"),
    MI_FIELD_BOOL_AT(C, "memory.slot_norm", slot_norm, "true",
                     "lattice: every slot read normalised (false: the linear memory)"),
    MI_FIELD_NAME_AT(C, "bias", bias, "l2", bias_name_at, "the attentional bias"),
    MI_FIELD_NAME_AT(C, "retention", retention, "l2", retention_name_at, "the retention gate"),
    MI_FIELD_REAL_AT(C, "kl_scale", kl_scale, "1", 0, INFINITY, POSITIVE,
                     "kl, f-div: the simplex scale c"),
    MI_FIELD_BOOL_AT(C, "kl_scale_learn", kl_scale_learn, "false",
                     "kl: c learned per head, kl_scale exp(s)"),
    MI_FIELD_REAL_AT(C, "kl_init_sd", kl_init_sd, "0", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "kl: the initial logits' spread (0: the memory's own init)"),
    MI_FIELD_BOOL_AT(C, "decay_first", decay_first, "false",
                     "l2: the gradient at alpha W (gated DeltaNet, RWKV-7)"),
    MI_FIELD_BOOL_AT(C, "alpha_on_keys", alpha_on_keys, "false",
                     "matrix: a channel-wise alpha decays the key axis (HGRN2)"),
    MI_FIELD_BOOL_AT(C, "alpha_both_sides", alpha_both_sides, "false",
                     "matrix: a channel-wise alpha of dv + dk entries decays the value rows "
                     "and the key columns (DFW)"),
    MI_FIELD_CHOICE_AT(C, "delta_write", delta_write, "beta", delta_writes,
                       "delta rule: beta v k^T (beta) or v k^T (unit) as the write"),
    MI_FIELD_NAME_AT(C, "algorithm", algorithm, "gd", algorithm_name_at,
                     "the learning algorithm"),
    MI_FIELD_INT_AT(C, "steps", steps, "2", 1, 1024, "multistep: writes per read"),
    MI_FIELD_INT_AT(C, "chunk", chunk, "1", 1, HUGE_INT, "tokens per chunk (1: per token)"),
    MI_FIELD_BOOL_AT(C, "closed_form", closed_form, "true",
                     "a component's closed-form gradient where it has one"),
    MI_FIELD_BOOL_AT(C, "materialize", materialize, "false",
                     "one memory per token (tests: the composed reference path)"),
    MI_FIELD_CHOICE_AT(C, "form", form, "auto", forms,
                       "chunked: the exact chunkwise form, the mini-batch rule, or auto"),
    MI_FIELD_CHOICE_AT(C, "scan", scan, "auto", scans,
                       "without a fused kernel: mi_scan over the tokens (chunk 1) or the "
                       "chunks (auto: where a chunk makes a state per token, or from 16 MiB "
                       "of chunk states), or their ops recorded (composed); mi_scan: mi_scan "
                       "even where a fused kernel covers the combination, and for chunks of "
                       "any size"),
};
#undef C
#define N_FIELDS MI_FIELDS_COUNT(miras_fields)

const mi_field *mi_miras_config_fields(int *count)
{
    if (count) *count = N_FIELDS;
    return miras_fields;
}

/* The two axes whose components have parameters of their own: the chosen
 * component's field table, and its block in the config with the name of the
 * component whose parameters it holds. */
typedef struct params_axis {
    const char *what;
    const char *name;             /* the chosen component, or NULL */
    const mi_field *params;
    int n_params;
    mi_component_params *block;
    const char **block_for;
} params_axis;

static int axes_of(mi_miras_config *c, params_axis *ax)
{
    const mi_bias_kind *b = mi_bias_find(c->bias);
    const mi_retention_kind *r = mi_retention_find(c->retention);
    ax[0] = (params_axis){"bias", b ? b->name : NULL, b ? b->params : NULL, b ? b->n_params : 0,
                          &c->bias_params, &c->bias_params_for};
    ax[1] = (params_axis){"retention", r ? r->name : NULL, r ? r->params : NULL,
                          r ? r->n_params : 0, &c->retention_params, &c->retention_params_for};
    return 2;
}

/* The component of axis i (0 bias, 1 retention) at table index j: its name and
 * parameters, or false past the end. */
static bool component_at(int i, int j, const char **name, const mi_field **params, int *n)
{
    if (i == 0) {
        const mi_bias_kind *b = mi_bias_at(j);
        if (!b) return false;
        *name = b->name, *params = b->params, *n = b->n_params;
    } else {
        const mi_retention_kind *r = mi_retention_at(j);
        if (!r) return false;
        *name = r->name, *params = r->params, *n = r->n_params;
    }
    return true;
}

/* Each chosen component's parameters: its block if the block holds that
 * component's, else its defaults (a component assigned in C, or one just
 * chosen). */
static void own_blocks(mi_miras_config *c)
{
    params_axis ax[2];
    for (int i = 0, n = axes_of(c, ax); i < n; i++) {
        if (!ax[i].name || (*ax[i].block_for && !strcmp(*ax[i].block_for, ax[i].name))) continue;
        memset(ax[i].block, 0, sizeof *ax[i].block);
        if (ax[i].params) mi_fields_defaults(ax[i].params, ax[i].n_params, ax[i].block);
        *ax[i].block_for = ax[i].name;
    }
}

mi_miras_config mi_miras_config_default(void)
{
    mi_miras_config c;
    memset(&c, 0, sizeof c);
    mi_fields_defaults(miras_fields, N_FIELDS, &c);  /* the table's own defaults: cannot fail */
    own_blocks(&c);
    return c;
}

/* An unknown key's message (the config's keys) gets the chosen components'
 * own keys too: "...; bias lp: p, abs_eps". */
static void unknown_key_hint(mi_miras_config *c)
{
    char text[1024];
    size_t n = (size_t)snprintf(text, sizeof text, "%s", mi_error());
    params_axis ax[2];
    for (int i = 0, na = axes_of(c, ax); i < na && n < sizeof text; i++) {
        if (!ax[i].params) continue;
        n += (size_t)snprintf(text + n, sizeof text - n, "; %s %s:", ax[i].what, ax[i].name);
        for (int k = 0; k < ax[i].n_params && n < sizeof text; k++)
            n += (size_t)snprintf(text + n, sizeof text - n, "%s %s", k ? "," : "",
                                  ax[i].params[k].key);
    }
    mi_error_clear(); /* the first message stays until cleared: replace it */
    mi_error_set("%s", text);
}

int mi_miras_config_set(mi_miras_config *c, const char *assignment)
{
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    char key[64] = "";
    if (eq && (size_t)(eq - assignment) < sizeof key) {
        memcpy(key, assignment, (size_t)(eq - assignment));
        key[eq - assignment] = 0;
    }
    if (key[0] && !mi_fields_find(miras_fields, N_FIELDS, key)) {
        own_blocks(c);
        params_axis ax[2];
        int n = axes_of(c, ax);
        for (int i = 0; i < n; i++)
            if (ax[i].params && mi_fields_find(ax[i].params, ax[i].n_params, key))
                return mi_fields_set(ax[i].params, ax[i].n_params, ax[i].block, "config",
                                     assignment);
        /* another component's: say whose */
        for (int i = 0; i < n; i++) {
            const char *name;
            const mi_field *params;
            int np;
            for (int j = 0; component_at(i, j, &name, &params, &np); j++)
                if (params && mi_fields_find(params, np, key))
                    return mi_error_set("config: %s is a parameter of %s %s, not of the chosen "
                                        "%s '%s' (set %s=%s first)", key, ax[i].what, name,
                                        ax[i].what, ax[i].name ? ax[i].name : "(none)",
                                        ax[i].what, name), -1;
        }
    }
    if (mi_fields_set(miras_fields, N_FIELDS, c, "config", assignment) != 0) {
        if (key[0] && !mi_fields_find(miras_fields, N_FIELDS, key)) unknown_key_hint(c);
        return -1;
    }
    own_blocks(c);  /* a component just chosen: its defaults */
    return 0;
}

int mi_miras_config_get(const mi_miras_config *c, const char *key, char *buf, size_t n)
{
    const mi_field *f = mi_fields_find(miras_fields, N_FIELDS, key);
    if (f) return mi_field_format(f, c, buf, n);
    mi_miras_config own = *c;
    own_blocks(&own);
    params_axis ax[2];
    for (int i = 0, na = axes_of(&own, ax); i < na; i++)
        if (ax[i].params && (f = mi_fields_find(ax[i].params, ax[i].n_params, key)))
            return mi_field_format(f, ax[i].block, buf, n);
    return mi_error_set("config: no key '%s' in the config, its bias '%s' or its retention '%s'",
                        key ? key : "(null)", c->bias ? c->bias : "(none)",
                        c->retention ? c->retention : "(none)"), -1;
}

size_t mi_miras_config_describe(char *buf, size_t size)
{
    size_t len = mi_fields_describe(miras_fields, N_FIELDS, buf, size);
    static const char *const what[] = {"bias", "retention"};
    for (int i = 0; i < 2; i++) {
        const char *name;
        const mi_field *params;
        int np;
        for (int j = 0; component_at(i, j, &name, &params, &np); j++) {
            if (!params) continue;
            char *at = buf && len < size ? buf + len : NULL;
            int head = snprintf(at, at ? size - len : 0, "%s=%s:\n", what[i], name);
            len += head > 0 ? (size_t)head : 0;
            at = buf && len < size ? buf + len : NULL;
            len += mi_fields_describe(params, np, at, at ? size - len : 0);
        }
    }
    return len;
}

int mi_miras_writes(const mi_miras *m)
{
    return m->algorithm->multistep ? m->config.steps : 1;
}

int mi_miras_init(mi_miras *m, const mi_miras_config *c)
{
    memset(m, 0, sizeof *m);
    m->config = *c;
    own_blocks(&m->config);
    c = &m->config;
    m->memory = mi_memory_find(c->memory);
    m->bias = mi_bias_find(c->bias);
    m->retention = mi_retention_find(c->retention);
    m->algorithm = mi_algorithm_find(c->algorithm);
    if (!m->memory) return mi_error_set("miras: unknown memory '%s'", c->memory ? c->memory : "(null)"), -1;
    if (!m->bias) return mi_error_set("miras: unknown attentional bias '%s'", c->bias ? c->bias : "(null)"), -1;
    if (!m->retention) return mi_error_set("miras: unknown retention gate '%s'", c->retention ? c->retention : "(null)"), -1;
    if (!m->algorithm) return mi_error_set("miras: unknown learning algorithm '%s'", c->algorithm ? c->algorithm : "(null)"), -1;
    if (mi_fields_check(miras_fields, N_FIELDS, c, "miras") != 0) return -1;
    if (m->bias->params &&
        mi_fields_check(m->bias->params, m->bias->n_params, &c->bias_params, "miras") != 0)
        return -1;
    if (m->retention->params && mi_fields_check(m->retention->params, m->retention->n_params,
                                                &c->retention_params, "miras") != 0)
        return -1;
    if (m->bias->encoding && !m->memory->encode)
        return mi_error_set("miras: attentional bias '%s' is an encoding objective (it compares "
                            "the memory's encoding of v with k) and needs a memory that encodes "
                            "(lattice), not '%s'", m->bias->name, m->memory->name), -1;
    if (c->kl_scale_learn && m->retention->rule != MI_RETENTION_RULE_KL)
        return mi_error_set("miras: kl_scale_learn learns Memora's simplex scale c: it needs "
                            "retention=kl, got '%s'", m->retention->name), -1;
    if (c->kl_init_sd > 0 && m->retention->rule != MI_RETENTION_RULE_KL)
        return mi_error_set("miras: kl_init_sd spreads the initial logits of Memora's simplex "
                            "rows: it needs retention=kl, got '%s'", m->retention->name), -1;
    if (c->kl_scale_t && m->retention->rule != MI_RETENTION_RULE_KL)
        return mi_error_set("miras: a per-sequence simplex scale (kl_scale_t) needs "
                            "retention=kl, got '%s'", m->retention->name), -1;
    const char *why = m->algorithm->check ? m->algorithm->check(m) : NULL;
    if (why)
        return mi_error_set("miras: %s, got %s and %s", why, m->memory->name, m->bias->name), -1;
    if (c->form == MI_FORM_EXACT && c->chunk > 1 && delta_exact_missing(m))
        return mi_error_set("miras: form=exact: no exact chunkwise form for %s/%s/%s/%s: %s "
                            "(form=auto falls back to the mini-batch rule)", m->memory->name,
                            m->bias->name, m->retention->name, c->algorithm,
                            delta_exact_missing(m)), -1;
    if (c->delta_write == MI_DELTA_WRITE_UNIT && delta_exact_missing(m))
        return mi_error_set("miras: delta_write=unit is a form of the delta rule's write (memory "
                            "matrix, bias l2, retention none or l2, algorithm gd, implicit or "
                            "multistep): %s, got %s/%s/%s/%s", delta_exact_missing(m),
                            m->memory->name, m->bias->name, m->retention->name, c->algorithm),
               -1;
    if (c->decay_first && !m->retention->uses_alpha)
        return mi_error_set("miras: decay_first needs a retention gate with a decay, not '%s'",
                            m->retention->name), -1;
    if (c->alpha_on_keys && (m->memory->rule != MI_MEMORY_RULE_MATRIX || !m->retention->uses_alpha))
        return mi_error_set("miras: alpha_on_keys decays the key axis of a matrix memory: it "
                            "needs memory=matrix and a retention gate with a decay, got %s and "
                            "%s", m->memory->name, m->retention->name), -1;
    /* Diag(β) A Diag(α) commutes with no delta-rule factor (I − β k kᵀ): the
     * delta rule's chunk forms assume a decay on one side */
    if (c->alpha_both_sides &&
        (m->memory->rule != MI_MEMORY_RULE_MATRIX || !m->retention->uses_alpha ||
         c->alpha_on_keys || m->bias->rule == MI_BIAS_RULE_RESIDUAL))
        return mi_error_set("miras: alpha_both_sides decays both axes of a matrix memory: it "
                            "needs memory=matrix, a retention gate with a decay, no "
                            "alpha_on_keys and a bias other than the delta rule's l2, got "
                            "%s, %s, %s%s", m->memory->name, m->retention->name, m->bias->name,
                            c->alpha_on_keys ? " and alpha_on_keys" : ""), -1;
    return 0;
}
