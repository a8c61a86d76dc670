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
 * ‖m ∇Lᵀ − P_i‖² (stated above Eq. 21), whose gradient step is Nested
 * Learning, Eq. 22:
 *   m_{i+1} = (α I − ∇Lᵀ∇L) m_i − η P_i ∇L,    W_{i+1} = W_i + m_{i+1}  (Eq. 21).
 * Two forms (hp.nl_form):
 *
 * MI_NL_FORM_PAPER (default: the equation with the raw gradient, the Gram
 * matrix moved to the right of m, below). The reading of the
 * shapes: ∇L = G is the raw gradient as a matrix [r, c] (a parameter of rank
 * ≥ 2 viewed as [shape[0], rest], as it is stored; a vector as the row
 * [1, n], as the paper writes ∇L; a scalar as [1, 1]), m has W's shape, and
 * ∇Lᵀ∇L = GᵀG is the c×c Gram matrix of the gradient. The objective's
 * gradient with respect to m is (m Gᵀ − P) G = m GᵀG − P G, so the Gram acts
 * on m from the right. The paper writes (αI − GᵀG) m, the Gram on the left;
 * it is taken here as the objective's gradient, m GᵀG, which is also the
 * only placement whose shapes agree for a non-square W:
 *   m_{i+1} = α m_i − β m_i GᵀG − P_i g.
 * For the framework's [out, in] matrices acting on columns GᵀG is in×in; for
 * the x W weights of the LM ([in, out]) it is out×out. For a vector it is the
 * outer product g gᵀ: m ← αm − β ⟨m, g⟩ g. Unlike the normalised form it
 * depends on the gradient's scale: along a singular direction σ of G the
 * factor is α − β σ², which diverges once β σ² > 1 + α (clip the gradient
 * norm, or take the normalised form).
 *
 * MI_NL_FORM_NORMALISED (the earlier form, kept as an option): ∇L is the
 * flattened gradient, ℓ2-normalised so the step is stable at any scale:
 *   m_{i+1} = α m_i − β ĝ ⟨ĝ, m_i⟩ − P_i g,   ĝ = g / (‖g‖₂ + ε).
 * With β = 1 it removes the whole momentum along g at every step.
 *
 * In both, β = hp.delta (default 1, the paper's unit weight; β = 0 gives back
 * Eq. 20 / Eq. 17), η = 1 inside and lr outside (see the top of the file),
 * and P_i = I unless precond is on (the Eq. 20 preconditioner); the Gram and
 * ĝ use the unpreconditioned g (after weight decay). */
static int delta_check(const mi_optim_hparams *hp)
{
    if (check_common("delta_momentum", hp) ||
        opt_check_range("delta_momentum", "delta", hp->delta, 0, INFINITY, false))
        return -1;
    if (hp->nl_form != MI_NL_FORM_PAPER && hp->nl_form != MI_NL_FORM_NORMALISED) {
        mi_error_set("delta_momentum: unknown nl_form %d (paper 0, normalised 1)",
                     (int)hp->nl_form);
        return -1;
    }
    return 0;
}

/* The gradient as the matrix of Eq. 22: [shape[0], rest], a vector as a row. */
static mi_tensor *as_gradient_matrix(mi_tensor *x)
{
    if (x->rank == 0) return mi_reshape(x, MI_SHAPE(1, 1));
    if (x->rank == 1) return mi_reshape(x, MI_SHAPE(1, x->shape[0]));
    return opt_as_matrix(x);
}

/* m GᵀG, multiplied in the cheaper order. */
static mi_tensor *times_gram(mi_tensor *m, mi_tensor *g)
{
    mi_tensor *M = as_gradient_matrix(m), *G = as_gradient_matrix(g);
    mi_tensor *out = G->shape[0] <= G->shape[1]
                         ? mi_matmul(mi_matmul_t(M, G, false, true), G)  /* (M Gᵀ) G, r×r inside */
                         : mi_matmul(M, mi_matmul_t(G, G, true, false)); /* M (GᵀG), c×c inside */
    return mi_reshape(out, m->rank, m->shape);
}

static int delta_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    mi_tensor *g = opt_l2_decay(a, a->g);
    mi_tensor *pg = precondition(a, g, a->st[1], &st_new[1]);
    mi_tensor *m = a->st[0];
    if (m && a->hp->nl_form == MI_NL_FORM_PAPER) {
        /* Nested Learning, Eq. 22: m ← α m − β m ∇Lᵀ∇L − P ∇L */
        mi_tensor *erase = times_gram(m, g);
        m = mi_sub(mi_sub(hp_scale(m, a->momentum), mi_mul_scalar(erase, a->hp->delta)), pg);
    } else if (m) {
        /* Eq. 22 on the normalised, flattened gradient: m ← α m − β ĝ⟨ĝ, m⟩ − P g */
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
