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

/* Index = the enum's value (ops.h, models.h). "spec", the Frobenius form's
 * earlier name, still reads (older checkpoints' overrides). */
static const char *const lq_forms[] = {"frobenius|spec", "paper", NULL};
static const char *const f_divs[] = {"exp", "inverse", "inverse-square", NULL};
static const char *const l1_thresholds[] = {"scaled", "constant", NULL};
static const char *const forms[] = {"auto", "exact", "minibatch", NULL};

#define C mi_miras_config
#define HUGE_INT 1e9
#define POSITIVE (MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN)
/* The four components' parameters and the training form, in the order of
 * mi_miras_config; the component names come from their tables
 * (components.c). A bias's own parameters are in its file (MI_PARAMS). */
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
    MI_FIELD_REAL_AT(C, "q", q, "4", 1, INFINITY, POSITIVE, "lq: the exponent"),
    MI_FIELD_CHOICE_AT(C, "lq_form", lq_form, "frobenius", lq_forms,
                       "lq: A/(|A|_F^2 + eps)^((q-2)/(2q)) or MIRAS eq:q-norm, A/|A|_q^(q-2)"),
    MI_FIELD_REAL_AT(C, "lq_eps", lq_eps, "1e-6", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "lq: added to the norm's power sum (0: the exact norm)"),
    MI_FIELD_REAL_AT(C, "kl_scale", kl_scale, "1", 0, INFINITY, POSITIVE,
                     "kl, f-div: the simplex scale c"),
    MI_FIELD_BOOL_AT(C, "kl_scale_learn", kl_scale_learn, "false",
                     "kl: c learned per head, kl_scale exp(s)"),
    MI_FIELD_REAL_AT(C, "kl_init_sd", kl_init_sd, "0", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "kl: the initial logits' spread (0: the memory's own init)"),
    MI_FIELD_CHOICE_AT(C, "f_div", f_div, "exp", f_divs,
                       "f-div: g, the inverse of f' (exp: KL)"),
    MI_FIELD_REAL_AT(C, "l1_gamma", l1_gamma, "1e-3", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "l1, elastic: the l1 weight"),
    MI_FIELD_CHOICE_AT(C, "l1_threshold", l1_threshold, "scaled", l1_thresholds,
                       "l1, elastic: the threshold l1_gamma eta_t or l1_gamma"),
    MI_FIELD_BOOL_AT(C, "decay_first", decay_first, "false",
                     "l2: the gradient at alpha W (gated DeltaNet, RWKV-7)"),
    MI_FIELD_BOOL_AT(C, "alpha_on_keys", alpha_on_keys, "false",
                     "matrix: a channel-wise alpha decays the key axis (HGRN2)"),
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
};
#undef C
#define N_FIELDS MI_FIELDS_COUNT(miras_fields)

const mi_field *mi_miras_config_fields(int *count)
{
    if (count) *count = N_FIELDS;
    return miras_fields;
}

/* The chosen bias's parameters: the block if it holds that bias's, else its
 * defaults (a bias assigned in C, or one just chosen). */
static void bias_block(mi_miras_config *c)
{
    const mi_bias_kind *b = mi_bias_find(c->bias);
    if (!b || (c->bias_params_for && !strcmp(c->bias_params_for, b->name))) return;
    memset(&c->bias_params, 0, sizeof c->bias_params);
    if (b->params) mi_fields_defaults(b->params, b->n_params, &c->bias_params);
    c->bias_params_for = b->name;
}

mi_miras_config mi_miras_config_default(void)
{
    mi_miras_config c;
    memset(&c, 0, sizeof c);
    mi_fields_defaults(miras_fields, N_FIELDS, &c);  /* the table's own defaults: cannot fail */
    bias_block(&c);
    return c;
}

/* The bias (other than the chosen one) that has KEY, or NULL. */
static const mi_bias_kind *bias_with_key(const char *key, const char *chosen)
{
    for (int i = 0; mi_bias_at(i); i++) {
        const mi_bias_kind *b = mi_bias_at(i);
        if (b->params && strcmp(b->name, chosen ? chosen : "") &&
            mi_fields_find(b->params, b->n_params, key))
            return b;
    }
    return NULL;
}

int mi_miras_config_set(mi_miras_config *c, const char *assignment)
{
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    char key[64];
    if (eq && (size_t)(eq - assignment) < sizeof key) {
        memcpy(key, assignment, (size_t)(eq - assignment));
        key[eq - assignment] = 0;
        const mi_bias_kind *b = mi_bias_find(c->bias);
        if (!mi_fields_find(miras_fields, N_FIELDS, key)) {
            if (b && b->params && mi_fields_find(b->params, b->n_params, key)) {
                bias_block(c);
                return mi_fields_set(b->params, b->n_params, &c->bias_params, "config",
                                     assignment);
            }
            const mi_bias_kind *owner = bias_with_key(key, c->bias);
            if (owner)
                return mi_error_set("config: %s is a parameter of bias %s, not of the chosen "
                                    "bias '%s' (set bias=%s first)", key, owner->name,
                                    c->bias ? c->bias : "(none)", owner->name), -1;
        }
    }
    if (mi_fields_set(miras_fields, N_FIELDS, c, "config", assignment) != 0) return -1;
    bias_block(c);  /* a bias just chosen: its defaults */
    return 0;
}

int mi_miras_config_get(const mi_miras_config *c, const char *key, char *buf, size_t n)
{
    const mi_field *f = mi_fields_find(miras_fields, N_FIELDS, key);
    if (f) return mi_field_format(f, c, buf, n);
    const mi_bias_kind *b = mi_bias_find(c->bias);
    mi_miras_config own = *c;
    bias_block(&own);
    if (b && b->params && (f = mi_fields_find(b->params, b->n_params, key)))
        return mi_field_format(f, &own.bias_params, buf, n);
    return mi_error_set("config: no key '%s' in the config or its bias '%s'", key ? key : "(null)",
                        c->bias ? c->bias : "(none)"), -1;
}

size_t mi_miras_config_describe(char *buf, size_t size)
{
    size_t len = mi_fields_describe(miras_fields, N_FIELDS, buf, size);
    for (int i = 0; mi_bias_at(i); i++) {
        const mi_bias_kind *b = mi_bias_at(i);
        if (!b->params) continue;
        char *at = buf && len < size ? buf + len : NULL;
        size_t room = at ? size - len : 0;
        int head = snprintf(at, room, "bias=%s:\n", b->name);
        len += head > 0 ? (size_t)head : 0;
        at = buf && len < size ? buf + len : NULL;
        room = at ? size - len : 0;
        len += mi_fields_describe(b->params, b->n_params, at, room);
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
    bias_block(&m->config);
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
        mi_fields_check(m->bias->params, m->bias->n_params, &c->bias_params, "miras") != 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", mi_error());
        return mi_error_set("%s (bias %s)", why, m->bias->name), -1;
    }
    if (m->bias->encoding && !m->memory->encode)
        return mi_error_set("miras: attentional bias '%s' is an encoding objective (it compares "
                            "the memory's encoding of v with k) and needs a memory that encodes "
                            "(lattice), not '%s'", m->bias->name, m->memory->name), -1;
    if (c->kl_scale_learn && strcmp(m->retention->name, "kl"))
        return mi_error_set("miras: kl_scale_learn learns Memora's simplex scale c: it needs "
                            "retention=kl, got '%s'", m->retention->name), -1;
    if (c->kl_init_sd > 0 && strcmp(m->retention->name, "kl"))
        return mi_error_set("miras: kl_init_sd spreads the initial logits of Memora's simplex "
                            "rows: it needs retention=kl, got '%s'", m->retention->name), -1;
    if (c->kl_scale_t && strcmp(m->retention->name, "kl"))
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
    if (c->decay_first && !m->retention->uses_alpha)
        return mi_error_set("miras: decay_first needs a retention gate with a decay, not '%s'",
                            m->retention->name), -1;
    if (c->alpha_on_keys && (strcmp(m->memory->name, "matrix") || !m->retention->uses_alpha))
        return mi_error_set("miras: alpha_on_keys decays the key axis of a matrix memory: it "
                            "needs memory=matrix and a retention gate with a decay, got %s and "
                            "%s", m->memory->name, m->retention->name), -1;
    return 0;
}
