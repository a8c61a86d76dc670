/* The common optimizer interface: kinds and defaults, parameter groups and
 * their checks, weight-decay masks, the in-place step (recording off, state
 * in the optimizer's scope) and the functional step (recorded, for
 * hypergradients). The update rules live one per file (sgd.c, adam.c, …). */
#include <stdlib.h>

#include "internal.h"

static const opt_rule *const rules[MI_OPT_KIND_COUNT] = {
    [MI_OPT_SGD] = &opt_rule_sgd,
    [MI_OPT_ADAM] = &opt_rule_adam,
    [MI_OPT_ADAMW] = &opt_rule_adamw,
    [MI_OPT_MUON] = &opt_rule_muon,
    [MI_OPT_PRECOND_MOMENTUM] = &opt_rule_precond_momentum,
    [MI_OPT_DELTA_MOMENTUM] = &opt_rule_delta_momentum,
    [MI_OPT_DEEP_MOMENTUM] = &opt_rule_deep_momentum,
    [MI_OPT_L2_GD] = &opt_rule_l2_gd,
};

const char *mi_optim_kind_name(mi_optim_kind kind)
{
    return (unsigned)kind < MI_OPT_KIND_COUNT ? rules[kind]->name : "?";
}

int mi_optim_kind_from_name(const char *name)
{
    for (int k = 0; name && k < MI_OPT_KIND_COUNT; k++)
        if (!strcmp(name, rules[k]->name)) return k;
    mi_error_set("optim: unknown optimizer '%s' (sgd, adam, adamw, muon, precond_momentum, "
                 "delta_momentum, deep_momentum, l2_gd)", name ? name : "(null)");
    return -1;
}

mi_optim_hparams mi_optim_defaults(mi_optim_kind kind)
{
    mi_optim_hparams h = {
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .ns_steps = 5,
        .aux_lr = 3e-4, .delta = 1.0, .mem_hidden = 16, .mem_lr = 2.0,
        .nl_form = MI_NL_FORM_PAPER, /* Eq. 22, 23 on the raw gradient */
    };
    switch (kind) {
    case MI_OPT_SGD: break;                                /* torch.optim.SGD */
    case MI_OPT_ADAM: break;                               /* torch.optim.Adam */
    case MI_OPT_ADAMW: h.weight_decay = 1e-2; break;       /* torch.optim.AdamW */
    case MI_OPT_MUON: /* Keller Jordan's Muon, with MuonWithAuxAdam's fallback */
        h.lr = 0.02;
        h.momentum = 0.95;
        h.nesterov = true;
        h.beta2 = 0.95;
        h.eps = 1e-10;
        break;
    case MI_OPT_PRECOND_MOMENTUM: /* ≡ torch.optim.RMSprop(momentum=0.9) */
        h.lr = 1e-2;
        h.momentum = 0.9;
        h.beta2 = 0.99;
        h.precond = true;
        break;
    case MI_OPT_DELTA_MOMENTUM:
    case MI_OPT_DEEP_MOMENTUM:
        h.lr = 1e-2;
        h.momentum = 0.9;
        break;
    case MI_OPT_L2_GD: h.lr = 1e-2; break;
    default: break;
    }
    return h;
}

int opt_check_range(const char *who, const char *field, double v, double lo, double hi,
                    bool hi_open)
{
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return 0;
    if (hi == INFINITY) mi_error_set("%s: %s must be ≥ %g, got %g", who, field, lo, v);
    else mi_error_set("%s: %s must be in [%g, %g%s, got %g", who, field, lo, hi,
                      hi_open ? ")" : "]", v);
    return -1;
}

/* ---------------------------------------------------------------- shared pieces */
mi_tensor *opt_l2_decay(const opt_param *a, mi_tensor *g)
{
    return hp_is(a->wd, 0) ? g : mi_add(g, hp_scale(a->p, a->wd));
}

mi_tensor *opt_decoupled_decay(const opt_param *a, mi_tensor *p)
{
    return hp_is(a->wd, 0) ? p : hp_scale(p, hp_one_minus(hp_mul(a->lr, a->wd)));
}

/* ---------------------------------------------------------------- the optimizer */
static int check_group(mi_optim_kind kind, const mi_optim_hparams *hp, int group)
{
    const char *who = rules[kind]->name;
    int rc = 0;
    if (!isfinite(hp->lr) || hp->lr < 0) {
        mi_error_set("%s: lr must be ≥ 0, got %g", who, hp->lr);
        rc = -1;
    } else if (!isfinite(hp->weight_decay) || hp->weight_decay < 0) {
        mi_error_set("%s: weight_decay must be ≥ 0, got %g", who, hp->weight_decay);
        rc = -1;
    } else if (rules[kind]->check(hp) != 0) {
        rc = -1;
    }
    if (rc != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", mi_error());
        mi_error_clear();
        mi_error_set("%s (group %d)", msg, group);
    }
    return rc;
}

mi_optim *mi_optim_new(mi_optim_kind kind, const mi_param_group *groups, int n_groups)
{
    if ((unsigned)kind >= MI_OPT_KIND_COUNT) {
        mi_error_set("optim: unknown kind %d", (int)kind);
        return NULL;
    }
    const char *who = rules[kind]->name;
    if (!groups || n_groups < 1) {
        mi_error_set("%s: no parameter groups (groups %p, n_groups %d)", who, (const void *)groups,
                     n_groups);
        return NULL;
    }
    int total = 0;
    for (int g = 0; g < n_groups; g++) {
        if (groups[g].n < 0 || (groups[g].n > 0 && !groups[g].params)) {
            mi_error_set("%s: group %d has a NULL parameter list (n %d)", who, g, groups[g].n);
            return NULL;
        }
        for (int i = 0; i < groups[g].n; i++) {
            mi_tensor *p = groups[g].params[i];
            if (!p) {
                mi_error_set("%s: group %d parameter %d is NULL", who, g, i);
                return NULL;
            }
            if (!mi_dtype_is_float(p->dtype)) {
                mi_error_set("%s: group %d parameter %d is %s; parameters must be f32 or f64",
                             who, g, i, mi_dtype_name(p->dtype));
                return NULL;
            }
        }
        if (check_group(kind, &groups[g].hp, g) != 0) return NULL;
        total += groups[g].n;
    }
    if (total == 0) {
        mi_error_set("%s: got an empty parameter list", who);
        return NULL;
    }

    mi_scope *scope = mi_scope_new("optim"), *scratch = mi_scope_new("optim-scratch");
    mi_optim *o = scope ? mi_scope_alloc(scope, sizeof *o) : NULL;
    if (!o || !scratch) {
        mi_scope_free(scope);
        mi_scope_free(scratch);
        mi_error_set("%s: out of memory", who);
        return NULL;
    }
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->rule = rules[kind];
    o->scope = scope;
    o->scratch = scratch;
    o->n_groups = n_groups;
    o->n = total;
    o->lr_scale = 1.0;
    o->hp = mi_scope_alloc(scope, sizeof *o->hp * (size_t)n_groups);
    o->params = mi_scope_alloc(scope, sizeof *o->params * (size_t)total);
    o->group = mi_scope_alloc(scope, sizeof *o->group * (size_t)total);
    o->decay = mi_scope_alloc(scope, sizeof *o->decay * (size_t)total);
    o->steps = mi_scope_alloc(scope, sizeof *o->steps * (size_t)total);
    o->store = mi_scope_alloc(scope, sizeof *o->store * (size_t)total);
    o->live = mi_scope_alloc(scope, sizeof *o->live * (size_t)total);
    o->inputs = mi_scope_alloc(scope, sizeof *o->inputs * (size_t)total);
    if (!o->hp || !o->params || !o->group || !o->decay || !o->steps || !o->store || !o->live ||
        !o->inputs) {
        mi_optim_free(o);
        mi_error_set("%s: out of memory", who);
        return NULL;
    }
    memset(o->steps, 0, sizeof *o->steps * (size_t)total);
    memset(o->store, 0, sizeof *o->store * (size_t)total);
    memset(o->live, 0, sizeof *o->live * (size_t)total);
    memset(o->inputs, 0, sizeof *o->inputs * (size_t)total);
    int k = 0;
    for (int g = 0; g < n_groups; g++) {
        o->hp[g] = groups[g].hp;
        for (int i = 0; i < groups[g].n; i++, k++) {
            mi_tensor *p = groups[g].params[i];
            for (int j = 0; j < k; j++)
                if (o->params[j] == p) {
                    mi_error_set("%s: a parameter appears twice (parameters %d and %d); give "
                                 "each parameter to one group", who, j, k);
                    mi_optim_free(o);
                    return NULL;
                }
            o->params[k] = p;
            o->group[k] = g;
            o->decay[k] = groups[g].decay ? groups[g].decay[i] : true;
        }
    }
    return o;
}

mi_optim *mi_optim_new_simple(mi_optim_kind kind, mi_tensor *const *params, int n,
                              const mi_optim_hparams *hp)
{
    if ((unsigned)kind >= MI_OPT_KIND_COUNT) {
        mi_error_set("optim: unknown kind %d", (int)kind);
        return NULL;
    }
    if (!params) {
        mi_error_set("%s: params is NULL", rules[kind]->name);
        return NULL;
    }
    mi_param_group g = {.params = params, .n = n, .hp = hp ? *hp : mi_optim_defaults(kind)};
    return mi_optim_new(kind, &g, 1);
}

void mi_optim_free(mi_optim *o)
{
    if (!o) return;
    mi_scope *scratch = o->scratch;
    mi_scope_free(o->scope); /* o itself lives there */
    mi_scope_free(scratch);
}

void mi_decay_mask_matrices(mi_tensor *const *params, int n, bool *decay)
{
    for (int i = 0; i < n; i++) decay[i] = params[i] && params[i]->rank >= 2;
}

int mi_optim_kind_of(const mi_optim *o) { return o ? (int)o->kind : -1; }
int mi_optim_group_count(const mi_optim *o) { return o ? o->n_groups : 0; }
int mi_optim_param_count(const mi_optim *o) { return o ? o->n : 0; }
mi_tensor *mi_optim_param(const mi_optim *o, int i)
{
    return o && i >= 0 && i < o->n ? o->params[i] : NULL;
}

mi_optim_hparams *mi_optim_group_hparams(mi_optim *o, int group)
{
    if (!o || group < 0 || group >= o->n_groups) {
        mi_error_set("optim: no group %d", group);
        return NULL;
    }
    return &o->hp[group];
}

int mi_optim_set_lr_scale(mi_optim *o, double scale)
{
    if (!o) {
        mi_error_set("optim: set_lr_scale on a NULL optimizer");
        return -1;
    }
    if (!isfinite(scale) || scale < 0) {
        mi_error_set("%s: lr scale must be ≥ 0, got %g", o->rule->name, scale);
        return -1;
    }
    o->lr_scale = scale;
    return 0;
}

double mi_optim_lr_scale(const mi_optim *o) { return o ? o->lr_scale : 0; }

int64_t mi_optim_steps(const mi_optim *o)
{
    int64_t s = 0;
    for (int i = 0; o && i < o->n; i++)
        if (o->steps[i] > s) s = o->steps[i];
    return s;
}

int64_t mi_optim_param_steps(const mi_optim *o, int i)
{
    return o && i >= 0 && i < o->n ? o->steps[i] : -1;
}

void opt_spec_of(const mi_optim *o, int i, opt_state_spec *s)
{
    memset(s, 0, sizeof *s);
    o->rule->spec(&o->hp[o->group[i]], o->params[i], s);
}

mi_tensor *mi_optim_state(const mi_optim *o, int i, const char *name)
{
    if (!o || i < 0 || i >= o->n || !name) return NULL;
    opt_state_spec s;
    opt_spec_of(o, i, &s);
    for (int k = 0; k < s.count; k++)
        if (!strcmp(s.names[k], name)) return o->live[i][k] ? o->store[i][k] : NULL;
    return NULL;
}

int mi_optim_set_inputs(mi_optim *o, int i, mi_tensor *x)
{
    if (!o || i < 0 || i >= o->n) {
        mi_error_set("optim: set_inputs: no parameter %d", i);
        return -1;
    }
    mi_tensor *p = o->params[i];
    if (x && (p->rank != 2 || (x->rank != 1 && x->rank != 2) ||
              x->shape[x->rank - 1] != p->shape[1] || x->dtype != p->dtype)) {
        char ps[64], xs[64];
        mi_error_set("%s: set_inputs: parameter %d is %s %s, inputs %s %s; need W [out, in] "
                     "and x [in] or [B, in] of W's dtype", o->rule->name, i,
                     mi_dtype_name(p->dtype), mi_shape_str(ps, sizeof ps, p->rank, p->shape),
                     mi_dtype_name(x->dtype), mi_shape_str(xs, sizeof xs, x->rank, x->shape));
        return -1;
    }
    o->inputs[i] = x;
    return 0;
}

void mi_optim_zero_grad(mi_optim *o)
{
    if (o) mi_zero_grad(o->params, o->n);
}

/* ---------------------------------------------------------------- stepping */
static hpv hp_pick(mi_tensor *t, double v) { return t ? (hpv){.v = 0, .t = t} : hp_of(v); }

static void fill_args(const mi_optim *o, int i, const mi_hp_tensors *hpt, opt_param *a)
{
    const mi_optim_hparams *hp = &o->hp[o->group[i]];
    static const mi_hp_tensors none;
    if (!hpt) hpt = &none;
    memset(a, 0, sizeof *a);
    a->hp = hp;
    a->lr = hp_pick(hpt->lr, hp->lr * o->lr_scale);
    a->momentum = hp_pick(hpt->momentum, hp->momentum);
    a->beta1 = hp_pick(hpt->beta1, hp->beta1);
    a->beta2 = hp_pick(hpt->beta2, hp->beta2);
    a->wd = o->decay[i] ? hp_pick(hpt->weight_decay, hp->weight_decay) : hp_of(0);
    a->lr_scale = o->lr_scale;
    a->index = i;
    a->inputs = o->inputs[i];
}

static int fail(const mi_optim *o, int i)
{
    char msg[300];
    snprintf(msg, sizeof msg, "%s", mi_error_pending() ? mi_error() : "step failed");
    mi_error_clear();
    mi_error_set("%s: parameter %d: %s", o->rule->name, i, msg);
    return -1;
}

/* Parameter i's state storage k in the kind's layout (s), allocated on first use. */
static int store_for(mi_optim *o, int i, int k, const opt_state_spec *s)
{
    int64_t numel = mi_shape_numel(s->rank[k], s->shape[k]);
    if (o->store[i][k] && o->store[i][k]->numel == numel) return 0;
    mi_scope_enter(o->scope);
    o->store[i][k] = mi_tensor_new(o->params[i]->dtype, s->rank[k], s->shape[k]);
    mi_scope_leave();
    o->live[i][k] = false;
    return o->store[i][k] ? 0 : -1;
}

/* Copies a rule's outputs into the parameter and the long-lived state. */
static int commit(mi_optim *o, int i, mi_tensor *p_new, mi_tensor *const *st_new)
{
    opt_state_spec s;
    opt_spec_of(o, i, &s);
    for (int k = 0; k < OPT_MAX_STATE; k++) {
        if (!st_new[k]) continue;
        if (k >= s.count || st_new[k]->numel != mi_shape_numel(s.rank[k], s.shape[k])) {
            mi_error_set("state %d does not fit the kind's layout (were hyperparameters "
                         "changed?)", k);
            return -1;
        }
        if (store_for(o, i, k, &s) != 0) return -1;
    }
    if (mi_tensor_copy_into(o->params[i], p_new) != 0) return -1;
    for (int k = 0; k < OPT_MAX_STATE; k++) {
        if (!st_new[k]) continue;
        if (mi_tensor_copy_into(o->store[i][k], st_new[k]) != 0) return -1;
        o->live[i][k] = true;
    }
    return 0;
}

/* The rule's in-place step where it has one and it applies (contiguous f32
 * or f64 state in the kind's layout): 1 done, 0 not taken, -1 failed. */
static int in_place(mi_optim *o, int i, const opt_param *a)
{
    if (!o->rule->step_in_place || !mi_dtype_is_float(a->p->dtype)) return 0;
    opt_state_spec s;
    opt_spec_of(o, i, &s);
    mi_tensor *st[OPT_MAX_STATE] = {0}, *held[OPT_MAX_STATE] = {0};
    for (int k = 0; k < s.count; k++) {
        if (store_for(o, i, k, &s) != 0) return -1;
        if (o->store[i][k]->numel != a->p->numel) return 0;
        st[k] = o->store[i][k];
        held[k] = o->live[i][k] ? st[k] : NULL;
    }
    opt_param b = *a;
    b.st = held;
    int rc = o->rule->step_in_place(&b, st);
    if (rc != 0) return rc > 0 ? 0 : -1;
    for (int k = 0; k < s.count; k++) o->live[i][k] = true;
    return 1;
}

int mi_optim_step(mi_optim *o)
{
    if (!o) {
        mi_error_set("optim: step on a NULL optimizer");
        return -1;
    }
    for (int g = 0; g < o->n_groups; g++)
        if (check_group(o->kind, &o->hp[g], g) != 0) return -1;
    bool was = mi_set_grad_enabled(false);
    int rc = 0;
    for (int i = 0; i < o->n && rc == 0; i++) {
        mi_tensor *p = o->params[i];
        if (!p->grad) continue;
        if (!mi_same_shape(p->grad, p) || p->grad->dtype != p->dtype) {
            char ps[64], gs[64];
            mi_error_set("gradient %s %s does not match the parameter %s %s",
                         mi_dtype_name(p->grad->dtype),
                         mi_shape_str(gs, sizeof gs, p->grad->rank, p->grad->shape),
                         mi_dtype_name(p->dtype), mi_shape_str(ps, sizeof ps, p->rank, p->shape));
            rc = fail(o, i);
            break;
        }
        opt_param a;
        fill_args(o, i, NULL, &a);
        mi_tensor *st_in[OPT_MAX_STATE];
        for (int k = 0; k < OPT_MAX_STATE; k++) st_in[k] = o->live[i][k] ? o->store[i][k] : NULL;
        a.st = st_in;
        a.p = p;
        a.g = p->grad;
        a.step = o->steps[i] + 1;
        int done = in_place(o, i, &a);
        if (done < 0) {
            rc = fail(o, i);
            break;
        }
        if (done) {
            o->steps[i]++;
            o->inputs[i] = NULL;
            continue;
        }
        mi_tensor *p_new = NULL, *st_new[OPT_MAX_STATE] = {0};
        mi_scope_enter(o->scratch);
        rc = o->rule->step(&a, &p_new, st_new);
        if (rc == 0 && !p_new) rc = -1;
        if (rc == 0) rc = commit(o, i, p_new, st_new);
        mi_scope_leave();
        mi_scope_reset(o->scratch);
        if (rc != 0) {
            rc = fail(o, i);
            break;
        }
        o->steps[i]++;
        o->inputs[i] = NULL;
    }
    mi_set_grad_enabled(was);
    return rc;
}

/* ---------------------------------------------------------------- functional steps */
struct mi_optim_fstate {
    int n;
    int64_t *steps;
    mi_tensor *(*state)[OPT_MAX_STATE];
};

mi_optim_fstate *mi_optim_fstate_new(const mi_optim *o)
{
    if (!o) {
        mi_error_set("optim: fstate_new on a NULL optimizer");
        return NULL;
    }
    mi_scope *s = mi_scope_current();
    if (!s) {
        mi_error_set("%s: fstate_new: no current scope", o->rule->name);
        return NULL;
    }
    mi_optim_fstate *fs = mi_scope_alloc(s, sizeof *fs);
    if (!fs) return NULL;
    fs->n = o->n;
    fs->steps = mi_scope_alloc(s, sizeof *fs->steps * (size_t)o->n);
    fs->state = mi_scope_alloc(s, sizeof *fs->state * (size_t)o->n);
    if (!fs->steps || !fs->state) return NULL;
    for (int i = 0; i < o->n; i++) {
        fs->steps[i] = o->steps[i];
        for (int k = 0; k < OPT_MAX_STATE; k++) {
            fs->state[i][k] = o->live[i][k] ? mi_detach(o->store[i][k]) : NULL;
            if (o->live[i][k] && !fs->state[i][k]) return NULL;
        }
    }
    return fs;
}

static int check_hp_tensor(const mi_optim *o, const char *field, const mi_tensor *t)
{
    if (!t || t->numel == 1) return 0;
    mi_error_set("%s: hyperparameter tensor %s must have one element, got %lld", o->rule->name,
                 field, (long long)t->numel);
    return -1;
}

int mi_optim_step_functional(mi_optim *o, mi_optim_fstate *fs, mi_tensor *const *params,
                             mi_tensor *const *grads, const mi_hp_tensors *hpt,
                             mi_tensor **new_params)
{
    if (!o || !fs || !params || !grads || !new_params) {
        mi_error_set("optim: step_functional: NULL argument (optimizer %p, state %p, params %p, "
                     "grads %p, out %p)", (void *)o, (void *)fs, (const void *)params,
                     (const void *)grads, (void *)new_params);
        return -1;
    }
    if (fs->n != o->n) {
        mi_error_set("%s: step_functional: the state is for %d parameters, the optimizer has %d",
                     o->rule->name, fs->n, o->n);
        return -1;
    }
    if (hpt && (check_hp_tensor(o, "lr", hpt->lr) || check_hp_tensor(o, "momentum", hpt->momentum) ||
                check_hp_tensor(o, "beta1", hpt->beta1) || check_hp_tensor(o, "beta2", hpt->beta2) ||
                check_hp_tensor(o, "weight_decay", hpt->weight_decay)))
        return -1;
    for (int g = 0; g < o->n_groups; g++)
        if (check_group(o->kind, &o->hp[g], g) != 0) return -1;
    for (int i = 0; i < o->n; i++) {
        new_params[i] = params[i];
        if (!grads[i]) continue;
        if (!params[i] || !mi_same_shape(params[i], o->params[i]) ||
            !mi_same_shape(grads[i], o->params[i])) {
            char ps[64], gs[64], ws[64];
            mi_error_set("shapes differ: parameter %s, gradient %s, expected %s",
                         params[i] ? mi_shape_str(ps, sizeof ps, params[i]->rank, params[i]->shape)
                                   : "NULL",
                         mi_shape_str(gs, sizeof gs, grads[i]->rank, grads[i]->shape),
                         mi_shape_str(ws, sizeof ws, o->params[i]->rank, o->params[i]->shape));
            return fail(o, i);
        }
        opt_param a;
        fill_args(o, i, hpt, &a);
        a.st = fs->state[i];
        a.p = params[i];
        a.g = grads[i];
        a.step = fs->steps[i] + 1;
        mi_tensor *p_new = NULL, *st_new[OPT_MAX_STATE] = {0};
        if (o->rule->step(&a, &p_new, st_new) != 0 || !p_new) return fail(o, i);
        new_params[i] = p_new;
        for (int k = 0; k < OPT_MAX_STATE; k++)
            if (st_new[k]) fs->state[i][k] = st_new[k];
        fs->steps[i]++;
        o->inputs[i] = NULL;
    }
    return 0;
}

int mi_sgd_step_functional(mi_tensor *const *params, mi_tensor *const *grads,
                           mi_tensor *const *bufs, int n, mi_tensor *lr, mi_tensor *momentum,
                           double dampening, double weight_decay, bool nesterov,
                           mi_tensor **new_params, mi_tensor **new_bufs)
{
    if (!params || !grads || !new_params || n < 1 || !lr || (momentum && !new_bufs)) {
        mi_error_set("sgd_step_functional: NULL argument or n < 1 (params %p, grads %p, n %d, "
                     "lr %p, out %p; momentum needs new_bufs)", (const void *)params,
                     (const void *)grads, n, (void *)lr, (void *)new_params);
        return -1;
    }
    mi_optim_hparams hp = mi_optim_defaults(MI_OPT_SGD);
    hp.dampening = dampening;
    hp.weight_decay = weight_decay;
    hp.nesterov = nesterov;
    hp.momentum = momentum ? 1 : 0; /* only the check reads it */
    if (opt_rule_sgd.check(&hp) != 0 ||
        opt_check_range("sgd_step_functional", "weight_decay", weight_decay, 0, INFINITY, false))
        return -1;
    for (int i = 0; i < n; i++) {
        if (!params[i] || !grads[i]) {
            mi_error_set("sgd_step_functional: parameter or gradient %d is NULL", i);
            return -1;
        }
        mi_tensor *st_in[OPT_MAX_STATE] = {bufs ? bufs[i] : NULL};
        mi_tensor *st_new[OPT_MAX_STATE] = {0};
        opt_param a = {
            .hp = &hp, .lr = {.t = lr}, .momentum = momentum ? (hpv){.t = momentum} : hp_of(0),
            .wd = hp_of(weight_decay), .lr_scale = 1, .step = 1, .index = i, .p = params[i],
            .g = grads[i], .st = st_in,
        };
        if (opt_rule_sgd.step(&a, &new_params[i], st_new) != 0 || !new_params[i]) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s", mi_error());
            mi_error_clear();
            mi_error_set("sgd_step_functional: parameter %d: %s", i, msg);
            return -1;
        }
        if (momentum) new_bufs[i] = st_new[0];
    }
    return 0;
}
