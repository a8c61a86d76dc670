/* Muon (Jordan et al. 2024): momentum, then Newton–Schulz orthogonalisation
 * of the update of every matrix parameter; other parameters take AdamW.
 *
 *   b ← β b + (1 − β) g                         (b starts at 0)
 *   u ← (1 − β) g + β b   (Nesterov)   or   u ← b
 *   O ← NewtonSchulz₅(u as [rows, cols])         (rows = shape[0])
 *   p ← p (1 − lr λ) − lr · √max(1, rows/cols) · O
 *
 * Nested Learning Eq. 24 reads this as a momentum memory m (a linear layer)
 * with a non-linear output σ = Newton–Schulz: W_{i+1} = W_i + σ(m_{i+1}(u_i)).
 * Defaults follow Keller Jordan's reference code: lr 0.02, β 0.95,
 * Nesterov, 5 steps, λ 0; the AdamW fallback (MuonWithAuxAdam) has lr
 * aux_lr = 3e-4, betas (0.9, 0.95), ε 1e-10 and the group's λ. */
#include "internal.h"

/* (‖X‖_F over the last two axes, the 1e-7 of the reference code) */
#define NS_NORM_EPS 1e-7

mi_tensor *mi_newton_schulz(mi_tensor *g, int steps)
{
    if (!g) {
        mi_error_set("newton_schulz: input is NULL");
        return NULL;
    }
    if (g->rank < 2 || !mi_dtype_is_float(g->dtype)) {
        char s[64];
        mi_error_set("newton_schulz: need a float tensor of rank ≥ 2, got %s %s",
                     mi_dtype_name(g->dtype), mi_shape_str(s, sizeof s, g->rank, g->shape));
        return NULL;
    }
    if (steps < 0 || steps > 100) {
        mi_error_set("newton_schulz: steps must be in [0, 100], got %d", steps);
        return NULL;
    }
    int r = g->rank;
    bool tall = g->shape[r - 2] > g->shape[r - 1];
    mi_tensor *x = tall ? mi_transpose(g, -2, -1) : g;
    uint32_t last2 = (1u << (r - 2)) | (1u << (r - 1));
    mi_tensor *norm = mi_sqrt(mi_sum_axes(mi_square(x), last2, true));
    x = mi_div(x, mi_add_scalar(norm, NS_NORM_EPS));
    for (int k = 0; k < steps; k++) {
        mi_tensor *A = mi_matmul_t(x, x, false, true);               /* X Xᵀ */
        mi_tensor *B = mi_add(mi_mul_scalar(A, MI_NS_B), mi_mul_scalar(mi_matmul(A, A), MI_NS_C));
        x = mi_add(mi_mul_scalar(x, MI_NS_A), mi_matmul(B, x));      /* a X + B X */
    }
    return tall ? mi_transpose(x, -2, -1) : x;
}

mi_tensor *opt_as_matrix(mi_tensor *x)
{
    if (!x) return NULL;
    return x->rank == 2 ? x : mi_reshape(x, MI_SHAPE(x->shape[0], -1));
}

static bool uses_ns(const mi_optim_hparams *hp, const mi_tensor *p)
{
    return p->rank >= 2 && !hp->adamw_only;
}

static int muon_check(const mi_optim_hparams *hp)
{
    if (opt_check_range("muon", "momentum", hp->momentum, 0, 1, true) ||
        opt_check_range("muon", "aux_lr", hp->aux_lr, 0, INFINITY, false) ||
        opt_check_adam("muon", hp))
        return -1;
    if (hp->ns_steps < 1 || hp->ns_steps > 100) {
        mi_error_set("muon: ns_steps must be in [1, 100], got %d", hp->ns_steps);
        return -1;
    }
    return 0;
}

static void muon_spec(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s)
{
    if (uses_ns(hp, p)) {
        spec_like(s, "momentum_buffer", p);
    } else {
        spec_like(s, "exp_avg", p);
        spec_like(s, "exp_avg_sq", p);
    }
}

/* The Newton–Schulz output of a matrix update u, scaled as Muon scales it. */
mi_tensor *opt_muon_direction(mi_tensor *u, const mi_tensor *p, int ns_steps)
{
    mi_tensor *m = opt_as_matrix(u);
    if (!m) return NULL;
    double rows = (double)m->shape[0], cols = (double)m->shape[1];
    mi_tensor *o = mi_newton_schulz(m, ns_steps);
    o = mi_mul_scalar(o, sqrt(rows > cols ? rows / cols : 1.0));
    return o ? mi_reshape(o, p->rank, p->shape) : NULL;
}

static int muon_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    if (!uses_ns(a->hp, a->p)) {
        hpv lr = a->lr.t ? a->lr : hp_of(a->hp->aux_lr * a->lr_scale);
        return opt_adam_update(a, lr, true, p_new, &st_new[0], &st_new[1]);
    }
    hpv beta = a->momentum;
    mi_tensor *g = a->g, *b = a->st[0];
    b = b ? mi_add(b, hp_scale(mi_sub(g, b), hp_one_minus(beta))) : hp_scale(g, hp_one_minus(beta));
    mi_tensor *u = a->hp->nesterov ? mi_add(g, hp_scale(mi_sub(b, g), beta)) : b;
    mi_tensor *o = opt_muon_direction(u, a->p, a->hp->ns_steps);
    *p_new = mi_sub(opt_decoupled_decay(a, a->p), hp_scale(o, a->lr));
    st_new[0] = b;
    return *p_new ? 0 : -1;
}

const opt_rule opt_rule_muon = {.name = "muon", .check = muon_check, .spec = muon_spec,
                                .step = muon_step};
