/* Nested Learning's linear momentum memories (Nested Learning, §2.3).
 *
 * Both read momentum as a memory m that compresses gradients; the slow
 * weights move by it: W_{i+1} = W_i + lr · m_{i+1}. (The paper writes η_t
 * inside the memory, m_{i+1} = α m_i − η_t P_i ∇L; with lr outside, as
 * torch's SGD does, the two agree for a constant lr, and a schedule scales the
 * step rather than what the memory stores.) Weight decay λ is the L2 form,
 * g ← g + λ p, before anything else.
 *
 * The preconditioner (choice): P_i = diag(1 / (√v_i + ε)) with
 * v_i = β₂ v_{i−1} + (1 − β₂) g_i², no bias correction, v_0 = 0 — a function of
 * the gradients carrying diagonal curvature information, as §2.3 suggests.
 * With it, Eq. 20 is exactly torch.optim.RMSprop(alpha = β₂, momentum = α),
 * which the tests use as an independent reference. precond = false: P_i = I. */
#include "internal.h"

/* P_i g and the new v (NULL when precond is off). */
static mi_tensor *precondition(const opt_param *a, mi_tensor *g, mi_tensor *v_old,
                               mi_tensor **v_new)
{
    if (!a->hp->precond) {
        *v_new = NULL;
        return g;
    }
    mi_tensor *v = hp_scale(mi_square(g), hp_one_minus(a->beta2));
    if (v_old) v = mi_add(hp_scale(v_old, a->beta2), v);
    *v_new = v;
    return mi_div(g, mi_add_scalar(mi_sqrt(v), a->hp->eps));
}

static int check_common(const char *who, const mi_optim_hparams *hp)
{
    if (opt_check_range(who, "momentum (alpha)", hp->momentum, 0, INFINITY, false) ||
        opt_check_range(who, "eps", hp->eps, 0, INFINITY, false))
        return -1;
    if (hp->precond && opt_check_range(who, "beta2", hp->beta2, 0, 1, true)) return -1;
    return 0;
}

/* ---------------------------------------------------------------- Eq. 20
 * Preconditioned momentum (Eq. 19–20): the memory maps gradients to the
 * values P_i, objective ⟨m ∇Lᵀ, P_i⟩:
 *   m_{i+1} = α m_i − P_i ∇L(W_i; x_i),   W_{i+1} = W_i + lr m_{i+1}. */
static int precond_check(const mi_optim_hparams *hp) { return check_common("precond_momentum", hp); }

static void precond_spec(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s)
{
    spec_like(s, "momentum", p);
    if (hp->precond) spec_like(s, "sq_avg", p);
}

static int precond_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    mi_tensor *g = opt_l2_decay(a, a->g);
    mi_tensor *pg = precondition(a, g, a->st[1], &st_new[1]);
    mi_tensor *m = a->st[0] ? mi_sub(hp_scale(a->st[0], a->momentum), pg) : mi_neg(pg);
    st_new[0] = m;
    *p_new = mi_add(a->p, hp_scale(m, a->lr));
    return *p_new ? 0 : -1;
}

const opt_rule opt_rule_precond_momentum = {.name = "precond_momentum", .check = precond_check,
                                            .spec = precond_spec, .step = precond_step};

/* ---------------------------------------------------------------- Eq. 21–22
 * Delta-rule momentum: the memory's objective is the ℓ2 regression
 * ‖m ∇Lᵀ − P_i‖², whose gradient step gives (Eq. 22)
 *   m_{i+1} = (α I − ∇Lᵀ∇L) m_i − P_i ∇L,    W_{i+1} = W_i + lr m_{i+1}  (Eq. 21).
 * Choices: ∇L is the flattened gradient g (a row vector, as the paper writes
 * it), so ∇Lᵀ∇L is the outer product g gᵀ and never formed:
 *   (α I − β ĝ ĝᵀ) m = α m − β ĝ ⟨ĝ, m⟩,     ĝ = g / (‖g‖₂ + ε).
 * The key is ℓ2-normalised so the step is stable whatever the gradient's
 * scale (with the raw g the factor α − ‖g‖² along g diverges once
 * ‖g‖² > 1 + α); β (hp.delta, default 1 = the paper's unit weight) scales
 * the correction, and β = 0 gives back Eq. 20 / Eq. 17. P_i = I by default
 * (precond = true: the Eq. 20 preconditioner). */
static int delta_check(const mi_optim_hparams *hp)
{
    if (check_common("delta_momentum", hp) ||
        opt_check_range("delta_momentum", "delta", hp->delta, 0, INFINITY, false))
        return -1;
    return 0;
}

static int delta_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    mi_tensor *g = opt_l2_decay(a, a->g);
    mi_tensor *pg = precondition(a, g, a->st[1], &st_new[1]);
    mi_tensor *m = a->st[0];
    if (m) {
        mi_tensor *gh = mi_div(g, mi_add_scalar(mi_norm(g, 2, MI_ALL, false), a->hp->eps));
        mi_tensor *along = mi_mul(gh, mi_sum(mi_mul(gh, m), MI_ALL, false)); /* ĝ ⟨ĝ, m⟩ */
        m = mi_sub(mi_sub(hp_scale(m, a->momentum), mi_mul_scalar(along, a->hp->delta)), pg);
    } else {
        m = mi_neg(pg);
    }
    st_new[0] = m;
    *p_new = mi_add(a->p, hp_scale(m, a->lr));
    return *p_new ? 0 : -1;
}

const opt_rule opt_rule_delta_momentum = {.name = "delta_momentum", .check = delta_check,
                                          .spec = precond_spec, .step = delta_step};
