/* Configuration: defaults, text assignments ("p=3"), and validation. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "recurrence_delta.h"

mi_miras_config mi_miras_config_default(void)
{
    return (mi_miras_config){
        .memory = "matrix", .mlp_depth = 2, .mlp_expansion = 4, .slots = 64, .slot_norm = true,
        .bias = "l2", .p = 3, .sign_sharpness = 1, .abs_eps = 1e-6, .robust_delta = 0.1,
        .retention = "l2", .q = 4, .lq_form = MI_LQ_FROBENIUS, .lq_eps = 1e-6, .kl_scale = 1,
        .f_div = MI_F_DIV_EXP, .l1_gamma = 1e-3, .l1_threshold = MI_L1_SCALED,
        .algorithm = "gd", .steps = 2, .chunk = 1, .closed_form = true,
    };
}

static int parse_double(const char *key, const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end) {
        mi_error_set("config: %s: '%s' is not a number", key, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *key, const char *text, int *out)
{
    double v;
    if (parse_double(key, text, &v) != 0) return -1;
    /* the range first: converting a double outside int's range is undefined */
    if (!(v >= INT_MIN && v <= INT_MAX) || v != (int)v) {
        mi_error_set("config: %s: '%s' is not a whole number in int's range", key, text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Names are kept as pointers to static strings of the component tables,
 * so an assignment's text need not outlive the call. */
static int set_name(const char *key, const char *text, const char **field,
                    const char *(*known)(const char *))
{
    const char *name = known(text);
    if (!name) {
        mi_error_set("config: unknown %s '%s'", key, text);
        return -1;
    }
    *field = name;
    return 0;
}
static const char *memory_name(const char *s) { const mi_memory_kind *k = mi_memory_find(s); return k ? k->name : NULL; }
static const char *bias_name(const char *s) { const mi_bias_kind *k = mi_bias_find(s); return k ? k->name : NULL; }
static const char *retention_name(const char *s) { const mi_retention_kind *k = mi_retention_find(s); return k ? k->name : NULL; }
/* The names of f_div's values, indexed by MI_F_DIV_*. */
static const char *const f_div_names[] = {
    [MI_F_DIV_EXP] = "exp", [MI_F_DIV_INVERSE] = "inverse",
    [MI_F_DIV_INVERSE_SQUARE] = "inverse-square",
};
#define F_DIV_COUNT ((int)(sizeof f_div_names / sizeof f_div_names[0]))

static const char *algorithm_name(const char *s)
{
    static const char *const names[] = {"gd", "momentum", "implicit", "multistep"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) return names[i];
    return NULL;
}

int mi_miras_config_set(mi_miras_config *c, const char *assignment)
{
    char key[64];
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    if (!eq || eq == assignment || (size_t)(eq - assignment) >= sizeof key) {
        mi_error_set("config: expected KEY=VALUE, got '%s'", assignment ? assignment : "(null)");
        return -1;
    }
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = '\0';
    const char *val = eq + 1;
    if (!strcmp(key, "memory")) return set_name(key, val, &c->memory, memory_name);
    if (!strcmp(key, "bias")) return set_name(key, val, &c->bias, bias_name);
    if (!strcmp(key, "retention")) return set_name(key, val, &c->retention, retention_name);
    if (!strcmp(key, "algorithm")) return set_name(key, val, &c->algorithm, algorithm_name);
    if (!strcmp(key, "memory.depth")) return parse_int(key, val, &c->mlp_depth);
    if (!strcmp(key, "memory.expansion")) return parse_int(key, val, &c->mlp_expansion);
    if (!strcmp(key, "memory.slots")) return parse_int(key, val, &c->slots);
    if (!strcmp(key, "p")) return parse_double(key, val, &c->p);
    if (!strcmp(key, "sign_sharpness")) return parse_double(key, val, &c->sign_sharpness);
    if (!strcmp(key, "abs_eps")) return parse_double(key, val, &c->abs_eps);
    if (!strcmp(key, "robust_delta")) return parse_double(key, val, &c->robust_delta);
    if (!strcmp(key, "q")) return parse_double(key, val, &c->q);
    if (!strcmp(key, "lq_eps")) return parse_double(key, val, &c->lq_eps);
    if (!strcmp(key, "kl_scale")) return parse_double(key, val, &c->kl_scale);
    if (!strcmp(key, "kl_init_sd")) return parse_double(key, val, &c->kl_init_sd);
    if (!strcmp(key, "l1_gamma")) return parse_double(key, val, &c->l1_gamma);
    if (!strcmp(key, "steps")) return parse_int(key, val, &c->steps);
    if (!strcmp(key, "chunk")) return parse_int(key, val, &c->chunk);
    if (!strcmp(key, "form")) {
        if (!strcmp(val, "auto")) c->form = MI_FORM_AUTO;
        else if (!strcmp(val, "exact")) c->form = MI_FORM_EXACT;
        else if (!strcmp(val, "minibatch")) c->form = MI_FORM_MINIBATCH;
        else {
            mi_error_set("config: form must be 'auto' (exact where the model has an exact "
                         "chunkwise form), 'exact' or 'minibatch', got '%s'", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "lq_form")) {
        /* "spec", the form's earlier name, still reads (older checkpoints' overrides) */
        if (!strcmp(val, "frobenius") || !strcmp(val, "spec")) c->lq_form = MI_LQ_FROBENIUS;
        else if (!strcmp(val, "paper")) c->lq_form = MI_LQ_PAPER;
        else {
            mi_error_set("config: lq_form must be 'frobenius' or 'paper', got '%s'", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "l1_threshold")) {
        if (!strcmp(val, "scaled")) c->l1_threshold = MI_L1_SCALED;
        else if (!strcmp(val, "constant")) c->l1_threshold = MI_L1_CONSTANT;
        else {
            mi_error_set("config: l1_threshold must be 'scaled' (l1_gamma * eta_t) or 'constant' "
                         "(l1_gamma), got '%s'", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "f_div")) {
        for (int i = 0; i < F_DIV_COUNT; i++)
            if (!strcmp(val, f_div_names[i])) return c->f_div = i, 0;
        mi_error_set("config: f_div must be 'exp', 'inverse' or 'inverse-square' (g, the inverse "
                     "of f', for KL, reverse KL, squared Hellinger), got '%s'", val);
        return -1;
    }
    if (!strcmp(key, "decay_first") || !strcmp(key, "closed_form") ||
        !strcmp(key, "memory.slot_norm") || !strcmp(key, "materialize") ||
        !strcmp(key, "alpha_on_keys") || !strcmp(key, "kl_scale_learn")) {
        bool v = !strcmp(val, "1") || !strcmp(val, "true");
        if (!v && strcmp(val, "0") && strcmp(val, "false")) {
            mi_error_set("config: %s must be true or false, got '%s'", key, val);
            return -1;
        }
        *(key[0] == 'k'   ? &c->kl_scale_learn
          : key[0] == 'd' ? &c->decay_first
          : key[0] == 'c' ? &c->closed_form
          : key[0] == 'a' ? &c->alpha_on_keys
          : key[1] == 'a' ? &c->materialize
                          : &c->slot_norm) = v;
        return 0;
    }
    mi_error_set("config: unknown key '%s' (memory, memory.depth, memory.expansion, "
                 "memory.slots, memory.slot_norm, bias, p, "
                 "sign_sharpness, abs_eps, robust_delta, retention, q, lq_form, lq_eps, kl_scale, "
                 "f_div, l1_gamma, l1_threshold, decay_first, alpha_on_keys, algorithm, steps, "
                 "chunk, form, closed_form, materialize, kl_scale_learn, kl_init_sd)", key);
    return -1;
}

int mi_miras_init(mi_miras *m, const mi_miras_config *c)
{
    memset(m, 0, sizeof *m);
    m->config = *c;
    m->memory = mi_memory_find(c->memory);
    m->bias = mi_bias_find(c->bias);
    m->retention = mi_retention_find(c->retention);
    const char *algo = c->algorithm ? algorithm_name(c->algorithm) : NULL;
    if (!m->memory) return mi_error_set("miras: unknown memory '%s'", c->memory ? c->memory : "(null)"), -1;
    if (!m->bias) return mi_error_set("miras: unknown attentional bias '%s'", c->bias ? c->bias : "(null)"), -1;
    if (!m->retention) return mi_error_set("miras: unknown retention gate '%s'", c->retention ? c->retention : "(null)"), -1;
    if (!algo) return mi_error_set("miras: unknown learning algorithm '%s'", c->algorithm ? c->algorithm : "(null)"), -1;
    m->algorithm = !strcmp(algo, "gd") ? MI_ALGO_GD : !strcmp(algo, "momentum") ? MI_ALGO_MOMENTUM
                 : !strcmp(algo, "implicit") ? MI_ALGO_IMPLICIT : MI_ALGO_MULTISTEP;
    if (c->chunk < 1) return mi_error_set("miras: chunk must be >= 1, got %d", c->chunk), -1;
    if (!(c->p >= 1)) return mi_error_set("miras: p must be >= 1, got %g", c->p), -1;
    if (!(c->q > 1)) return mi_error_set("miras: q must be > 1, got %g", c->q), -1;
    if (c->mlp_depth < 1 || c->mlp_expansion < 1)
        return mi_error_set("miras: MLP depth and expansion must be >= 1, got %d and %d",
                            c->mlp_depth, c->mlp_expansion), -1;
    if (c->slots < 1)
        return mi_error_set("miras: slots must be >= 1 (the lattice memory's number of memory "
                            "slots m), got %d", c->slots), -1;
    if (m->bias->encoding && !m->memory->encode)
        return mi_error_set("miras: attentional bias '%s' is an encoding objective (it compares "
                            "the memory's encoding of v with k) and needs a memory that encodes "
                            "(lattice), not '%s'", m->bias->name, m->memory->name), -1;
    if (c->algorithm && m->algorithm == MI_ALGO_MULTISTEP && c->steps < 1)
        return mi_error_set("miras: multistep needs steps >= 1, got %d", c->steps), -1;
    if (!(c->kl_scale > 0)) return mi_error_set("miras: kl_scale must be > 0, got %g", c->kl_scale), -1;
    if (c->kl_scale_learn && strcmp(m->retention->name, "kl"))
        return mi_error_set("miras: kl_scale_learn learns Memora's simplex scale c: it needs "
                            "retention=kl, got '%s'", m->retention->name), -1;
    if (!(c->kl_init_sd >= 0) || isinf(c->kl_init_sd))
        return mi_error_set("miras: kl_init_sd must be >= 0 and finite, got %g",
                            c->kl_init_sd), -1;
    if (c->kl_init_sd > 0 && strcmp(m->retention->name, "kl"))
        return mi_error_set("miras: kl_init_sd spreads the initial logits of Memora's simplex "
                            "rows: it needs retention=kl, got '%s'", m->retention->name), -1;
    if (c->kl_scale_t && strcmp(m->retention->name, "kl"))
        return mi_error_set("miras: a per-sequence simplex scale (kl_scale_t) needs "
                            "retention=kl, got '%s'", m->retention->name), -1;
    if (!(c->l1_gamma >= 0)) return mi_error_set("miras: l1_gamma must be >= 0, got %g", c->l1_gamma), -1;
    if (c->l1_threshold != MI_L1_SCALED && c->l1_threshold != MI_L1_CONSTANT)
        return mi_error_set("miras: l1_threshold must be MI_L1_SCALED or MI_L1_CONSTANT, got %d",
                            c->l1_threshold), -1;
    if (!(c->robust_delta >= 0))
        return mi_error_set("miras: robust_delta must be >= 0 (the radius of the value shifts), "
                            "got %g", c->robust_delta), -1;
    if (c->f_div < 0 || c->f_div >= F_DIV_COUNT)
        return mi_error_set("miras: f_div must be MI_F_DIV_EXP, MI_F_DIV_INVERSE or "
                            "MI_F_DIV_INVERSE_SQUARE, got %d", c->f_div), -1;
    if (c->lq_form != MI_LQ_FROBENIUS && c->lq_form != MI_LQ_PAPER)
        return mi_error_set("miras: lq_form must be MI_LQ_FROBENIUS or MI_LQ_PAPER, got %d",
                            c->lq_form), -1;
    if (!(c->lq_eps >= 0) || isinf(c->lq_eps))
        return mi_error_set("miras: lq_eps must be >= 0 and finite, got %g", c->lq_eps), -1;
    if (!(c->sign_sharpness > 0) || !(c->abs_eps > 0))
        return mi_error_set("miras: sign_sharpness and abs_eps must be > 0"), -1;
    /* Longhorn's implicit step has a closed form only for ½‖Wk − v‖² on a matrix. */
    if (m->algorithm == MI_ALGO_IMPLICIT &&
        (strcmp(m->memory->name, "matrix") || strcmp(m->bias->name, "l2")))
        return mi_error_set("miras: implicit GD needs memory=matrix and bias=l2, got %s and %s",
                            m->memory->name, m->bias->name), -1;
    if (c->form != MI_FORM_AUTO && c->form != MI_FORM_EXACT && c->form != MI_FORM_MINIBATCH)
        return mi_error_set("miras: form must be MI_FORM_AUTO, MI_FORM_EXACT or "
                            "MI_FORM_MINIBATCH, got %d", c->form), -1;
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
