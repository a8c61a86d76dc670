/* Shared by the optimizer files; not installed. An optimizer kind is a rule:
 * a pure function from (parameter, gradient, state, hyperparameters) to
 * (new parameter, new state), written with the framework's ops. optim.c runs
 * it in place (recording off) or functionally (recorded). */
#ifndef MIRAS_OPTIM_INTERNAL_H
#define MIRAS_OPTIM_INTERNAL_H

#include <math.h>
#include <string.h>

#include "optim.h"

#define OPT_MAX_STATE 4

/* ---------------------------------------------------------------- hyperparameter values
 * A hyperparameter is a double, or a rank-0 tensor when the caller wants to
 * differentiate with respect to it. The helpers below compute with either,
 * so one rule serves the in-place and the differentiable step. */
typedef struct hpv {
    double v;
    mi_tensor *t; /* non-NULL: use this (recorded) tensor instead of v */
} hpv;

static inline hpv hp_of(double v) { return (hpv){.v = v, .t = NULL}; }
static inline bool hp_is(hpv h, double v) { return !h.t && h.v == v; }

/* x · h */
static inline mi_tensor *hp_scale(mi_tensor *x, hpv h)
{
    return h.t ? mi_mul(x, h.t) : mi_mul_scalar(x, h.v);
}
/* 1 − h */
static inline hpv hp_one_minus(hpv h)
{
    return h.t ? (hpv){.v = 0, .t = mi_add_scalar(mi_neg(h.t), 1.0)} : hp_of(1.0 - h.v);
}
/* a · b */
static inline hpv hp_mul(hpv a, hpv b)
{
    if (!a.t && !b.t) return hp_of(a.v * b.v);
    if (!a.t) return (hpv){.t = mi_mul_scalar(b.t, a.v)};
    if (!b.t) return (hpv){.t = mi_mul_scalar(a.t, b.v)};
    return (hpv){.t = mi_mul(a.t, b.t)};
}
/* a / b */
static inline hpv hp_div(hpv a, hpv b)
{
    if (!a.t && !b.t) return hp_of(a.v / b.v);
    if (!b.t) return (hpv){.t = mi_mul_scalar(a.t, 1.0 / b.v)};
    if (!a.t) return (hpv){.t = mi_mul_scalar(mi_reciprocal(b.t), a.v)};
    return (hpv){.t = mi_div(a.t, b.t)};
}
/* h^k for an integer k ≥ 1 (pow as libm computes it for doubles). */
static inline hpv hp_powi(hpv h, int64_t k)
{
    return h.t ? (hpv){.t = mi_pow_scalar(h.t, (double)k)} : hp_of(pow(h.v, (double)k));
}
static inline hpv hp_sqrt(hpv h) { return h.t ? (hpv){.t = mi_sqrt(h.t)} : hp_of(sqrt(h.v)); }

/* ---------------------------------------------------------------- one parameter's step */
typedef struct opt_param {
    const mi_optim_hparams *hp; /* the group's doubles */
    hpv lr, momentum, beta1, beta2, wd; /* lr already scaled; wd 0 when masked out */
    double lr_scale;            /* the schedule's factor (Muon scales aux_lr by it) */
    int64_t step;               /* the number of this step for this parameter, from 1 */
    int index;                  /* the parameter's index in the optimizer */
    mi_tensor *p, *g;           /* value and gradient (same shape) */
    mi_tensor *const *st;       /* state in; NULL entries: not created yet */
    mi_tensor *inputs;          /* Eq. 28–29: the layer inputs x_t, or NULL */
} opt_param;

/* The state tensors one parameter keeps under a kind's rule. */
typedef struct opt_state_spec {
    int count;
    const char *names[OPT_MAX_STATE];
    int rank[OPT_MAX_STATE];
    int64_t shape[OPT_MAX_STATE][MI_MAX_RANK];
} opt_state_spec;

typedef struct opt_rule {
    const char *name;
    /* Checks the group's hyperparameters; -1 with a message naming the field. */
    int (*check)(const mi_optim_hparams *hp);
    void (*spec)(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s);
    /* Writes *p_new and st_new[k] (NULL: state k unchanged). 0 or -1. */
    int (*step)(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new);
    /* Optional: step's arithmetic, element by element in the parameter's
     * dtype, written into a->p and st[k] in place (the state allocated,
     * a->st[k] NULL where it holds no value yet), for mi_optim_step, which
     * records nothing. 1 where it does not apply (a hyperparameter given
     * as a tensor), else 0. */
    int (*step_in_place)(const opt_param *a, mi_tensor *const *st);
} opt_rule;

extern const opt_rule opt_rule_sgd, opt_rule_adam, opt_rule_adamw, opt_rule_muon,
    opt_rule_precond_momentum, opt_rule_delta_momentum, opt_rule_deep_momentum, opt_rule_l2_gd;

/* A spec entry with the parameter's own shape. */
static inline void spec_like(opt_state_spec *s, const char *name, const mi_tensor *p)
{
    int k = s->count++;
    s->names[k] = name;
    s->rank[k] = p->rank;
    memcpy(s->shape[k], p->shape, sizeof(int64_t) * (size_t)p->rank);
}
static inline void spec_matrix(opt_state_spec *s, const char *name, int64_t r, int64_t c)
{
    int k = s->count++;
    s->names[k] = name;
    s->rank[k] = 2;
    s->shape[k][0] = r;
    s->shape[k][1] = c;
}

/* ---------------------------------------------------------------- the optimizer object */
struct mi_optim {
    mi_optim_kind kind;
    const opt_rule *rule;
    mi_scope *scope;    /* the optimizer, its lists and its state */
    mi_scope *scratch;  /* a step's temporaries, reset after each parameter */
    int n_groups;
    mi_optim_hparams *hp; /* per group */
    int n;                /* parameters over all groups */
    mi_tensor **params;
    int *group;
    bool *decay;
    int64_t *steps;
    mi_tensor *(*store)[OPT_MAX_STATE]; /* state storage, allocated on first use */
    bool (*live)[OPT_MAX_STATE];        /* whether store holds a value */
    mi_tensor **inputs;                 /* Eq. 28–29 inputs for the next step */
    double lr_scale;
};

/* The state layout of parameter i under its group's hyperparameters. */
void opt_spec_of(const mi_optim *o, int i, opt_state_spec *s);

/* ---------------------------------------------------------------- shared pieces */
/* g + wd·p (L2 weight decay added to the gradient), skipped when wd is 0. */
mi_tensor *opt_l2_decay(const opt_param *a, mi_tensor *g);
/* p · (1 − lr·wd) (decoupled weight decay), skipped when wd is 0. */
mi_tensor *opt_decoupled_decay(const opt_param *a, mi_tensor *p);
/* One AdamW step (Muon's fallback): p, g, exp_avg, exp_avg_sq → outputs. */
int opt_adam_update(const opt_param *a, hpv lr, bool decoupled, mi_tensor **p_new,
                    mi_tensor **m_new, mi_tensor **v_new);
/* Adam's β/ε checks, shared with Muon's fallback. */
int opt_check_adam(const char *who, const mi_optim_hparams *hp);
/* The parameter viewed as a matrix [shape[0], numel/shape[0]] (rank ≥ 2). */
mi_tensor *opt_as_matrix(mi_tensor *x);
/* Muon's direction: √max(1, rows/cols) · NewtonSchulz(u as a matrix), in p's shape. */
mi_tensor *opt_muon_direction(mi_tensor *u, const mi_tensor *p, int ns_steps);
/* Range checks with the optimizer's name in the message. */
int opt_check_range(const char *who, const char *field, double v, double lo, double hi,
                    bool hi_open);

#endif
