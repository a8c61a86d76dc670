/* Deep momentum gradient descent, DMGD (Nested Learning, §2.3,
 * Eq. 23) and its non-linear output form (Eq. 24):
 *
 *   W_{i+1} = W_i + lr · σ(m_{i+1}(u_i)),   m_{i+1} = α m_i − η ∇L⁽²⁾(m_i; u_i, I),
 *   u_i = ∇L(W_i; x_i),  σ = identity (Eq. 23) or Newton–Schulz (Eq. 24).
 *
 * The gradient is viewed as rows U [r, c] (c = the last axis; vectors and
 * scalars are one row). Two forms (hp.nl_form); both take η = 1 inside and
 * lr outside for a linear memory (mem_hidden = 0), where both are exactly SGD
 * with momentum α (torch.optim.SGD, dampening 0), the tests' anchor.
 *
 * MI_NL_FORM_PAPER (default: Eq. 23 as written). The momentum is the MLP
 * memory m_φ alone, and every parameter φ of it follows φ ← α φ − η ∇_φ L⁽²⁾.
 * The objective is Eq. 18's dot-product similarity with the value I, with
 * the linear product m ∇Lᵀ replaced by the memory applied to the keys,
 * m(u_iᵀ): the keys are the gradient's rows u_j, and
 *   L⁽²⁾(φ; U, I) = ⟨m_φ(Uᵀ), I⟩ = Σ_j [m_φ(u_j)]_j,   m_φ(x) = W2 tanh(W1 x),
 * W1 [h, c], W2 [r, h] (the memory answers key j in coordinate j, as
 * m ∇Lᵀ does). With H = tanh(U W1ᵀ) [r, h]:
 *   ∂L⁽²⁾/∂W2 = H,   ∂L⁽²⁾/∂W1 = (W2 ⊙ (1 − H²))ᵀ U.
 * The read-out m_{i+1}(u_i), a step of W's shape, is the updated memory's
 * response to the gradient, ∂L⁽²⁾(φ_{i+1}; U)/∂U = (W2 ⊙ (1 − H²)) W1 (with
 * the new W1, W2 and H): for a linear memory m(x) = A x this is A and A ←
 * αA − ηU, i.e. Eq. 17, which Eq. 23 extends. η = hp.mem_lr; W1 starts as
 * N(0, 1/c) (seeded by hp.seed and the parameter index), W2 at 0. No other
 * choice is made: the keys are the raw gradient and W1 decays like W2.
 *
 * MI_NL_FORM_NORMALISED (the earlier form, kept as an option): a linear
 * momentum M (the parameter's shape) plus an MLP over normalised keys,
 *   m(U) = M + ρ · tanh(Û W1ᵀ) W2ᵀ,   W1 [h, c], W2 [c, h],
 *   ρ = rms(U),  Û = U / (ρ + ε),
 * with the inner objective ⟨m(U), U⟩ (Eq. 18 read as the first-order change
 * of the outer loss): M ← α M − U, and the MLP's, on normalised keys,
 *   L̂ = (1/r) ⟨tanh(Û W1ᵀ) W2ᵀ, Û⟩,
 *   ∂L̂/∂W2 = (1/r) Ûᵀ H,  ∂L̂/∂W1 = (1/r) ((Û W2) ⊙ (1 − H²))ᵀ Û,  H = tanh(Û W1ᵀ),
 * W2 ← α W2 − η_φ ∂L̂/∂W2, W1 ← W1 − η_φ ∂L̂/∂W1 (W1 does not decay: its
 * gradient is 0 while W2 = 0). mi_deep_memory_* expose this memory (tests
 * check its closed form against mi_grad).
 *
 * The read-out is the updated memory at the current key, m_{i+1}(u_i). With
 * σ = Newton–Schulz (Eq. 24) matrices (rank ≥ 2, viewed as [shape[0], rest])
 * are orthogonalised and scaled as Muon does; other parameters take σ =
 * identity. With h = 0 this is Muon without Nesterov (the NS output does not
 * depend on M's scale, so M ← αM − U and Muon's b ← βb + (1 − β)g agree). */
#include "internal.h"

/* g as rows [r, c]. */
static mi_tensor *as_rows(mi_tensor *g)
{
    if (g->rank == 0) return mi_reshape(g, MI_SHAPE(1, 1));
    if (g->rank == 1) return mi_reshape(g, MI_SHAPE(1, g->shape[0]));
    return g->rank == 2 ? g : mi_reshape(g, MI_SHAPE(-1, g->shape[g->rank - 1]));
}

static int64_t row_width(const mi_tensor *p) { return p->rank == 0 ? 1 : p->shape[p->rank - 1]; }

/* ρ = rms(U) and Û = U / (ρ + ε). */
static mi_tensor *keys_of(mi_tensor *U, double eps, mi_tensor **rho)
{
    *rho = mi_sqrt(mi_mean(mi_square(U), MI_ALL, false));
    return mi_div(U, mi_add_scalar(*rho, eps));
}

static int check_memory(const char *who, mi_tensor *w1, mi_tensor *w2, mi_tensor *g)
{
    if (!w1 || !w2 || !g) {
        mi_error_set("%s: NULL input (w1 %p, w2 %p, g %p)", who, (void *)w1, (void *)w2, (void *)g);
        return -1;
    }
    int64_t c = row_width(g), h = w1->shape[0];
    if (w1->rank != 2 || w2->rank != 2 || w1->shape[1] != c || w2->shape[0] != c ||
        w2->shape[1] != h) {
        char s1[64], s2[64], s3[64];
        mi_error_set("%s: need w1 [h, c], w2 [c, h] with c the gradient's last dim: w1 %s, "
                     "w2 %s, g %s", who, mi_shape_str(s1, sizeof s1, w1->rank, w1->shape),
                     mi_shape_str(s2, sizeof s2, w2->rank, w2->shape),
                     mi_shape_str(s3, sizeof s3, g->rank, g->shape));
        return -1;
    }
    return 0;
}

mi_tensor *mi_deep_memory_objective(mi_tensor *w1, mi_tensor *w2, mi_tensor *g, double eps)
{
    if (check_memory("deep_memory_objective", w1, w2, g) != 0) return NULL;
    mi_tensor *U = as_rows(g), *rho;
    mi_tensor *K = keys_of(U, eps, &rho);
    mi_tensor *H = mi_tanh(mi_matmul_t(K, w1, false, true));
    mi_tensor *f = mi_matmul_t(H, w2, false, true);
    return mi_mul_scalar(mi_sum(mi_mul(f, K), MI_ALL, false), 1.0 / (double)U->shape[0]);
}

/* The closed form of ∂L̂/∂W1, ∂L̂/∂W2 given the keys K = Û. */
static void memory_grad(mi_tensor *w1, mi_tensor *w2, mi_tensor *K, mi_tensor **dw1,
                        mi_tensor **dw2)
{
    double inv_r = 1.0 / (double)K->shape[0];
    mi_tensor *H = mi_tanh(mi_matmul_t(K, w1, false, true));                   /* [r, h] */
    *dw2 = mi_mul_scalar(mi_matmul_t(K, H, true, false), inv_r);                /* Ûᵀ H */
    mi_tensor *dA = mi_mul(mi_matmul(K, w2), mi_add_scalar(mi_neg(mi_square(H)), 1.0));
    *dw1 = mi_mul_scalar(mi_matmul_t(dA, K, true, false), inv_r);               /* dAᵀ Û */
}

int mi_deep_memory_grad(mi_tensor *w1, mi_tensor *w2, mi_tensor *g, double eps, mi_tensor **dw1,
                        mi_tensor **dw2)
{
    if (!dw1 || !dw2 || check_memory("deep_memory_grad", w1, w2, g) != 0) return -1;
    mi_tensor *rho, *K = keys_of(as_rows(g), eps, &rho);
    memory_grad(w1, w2, K, dw1, dw2);
    return *dw1 && *dw2 ? 0 : -1;
}

/* One memory update (M, W1, W2 may be NULL: M = 0, and then W1, W2 must be
 * given by the caller) and its read-out Δ = m_{i+1}(u_i) in g's shape. */
static int memory_update(mi_tensor *M, mi_tensor *w1, mi_tensor *w2, mi_tensor *g, hpv alpha,
                         double mem_lr, double eps, mi_tensor **M_new, mi_tensor **w1_new,
                         mi_tensor **w2_new, mi_tensor **delta)
{
    *M_new = M ? mi_sub(hp_scale(M, alpha), g) : mi_neg(g);
    *w1_new = *w2_new = NULL;
    if (!w1) {
        *delta = *M_new;
        return *delta ? 0 : -1;
    }
    mi_tensor *rho, *K = keys_of(as_rows(g), eps, &rho), *dw1, *dw2;
    memory_grad(w1, w2, K, &dw1, &dw2);
    *w2_new = mi_sub(hp_scale(w2, alpha), mi_mul_scalar(dw2, mem_lr));
    *w1_new = mi_sub(w1, mi_mul_scalar(dw1, mem_lr));
    mi_tensor *f = mi_matmul_t(mi_tanh(mi_matmul_t(K, *w1_new, false, true)), *w2_new, false, true);
    f = mi_mul(mi_reshape(f, g->rank, g->shape), rho);
    *delta = mi_add(*M_new, f);
    return *delta ? 0 : -1;
}

int mi_deep_memory_update(const mi_deep_memory *mem, mi_tensor *g, double alpha, double mem_lr,
                          double eps, mi_deep_memory *out, mi_tensor **delta)
{
    if (!mem || !out || !delta || !g) {
        mi_error_set("deep_memory_update: NULL argument");
        return -1;
    }
    if ((mem->w1 || mem->w2) && check_memory("deep_memory_update", mem->w1, mem->w2, g) != 0)
        return -1;
    if (mem->m && !mi_same_shape(mem->m, g)) {
        char s1[64], s2[64];
        mi_error_set("deep_memory_update: momentum %s and gradient %s differ",
                     mi_shape_str(s1, sizeof s1, mem->m->rank, mem->m->shape),
                     mi_shape_str(s2, sizeof s2, g->rank, g->shape));
        return -1;
    }
    return memory_update(mem->m, mem->w1, mem->w2, g, hp_of(alpha), mem_lr, eps, &out->m,
                         &out->w1, &out->w2, delta);
}

static int deep_check(const mi_optim_hparams *hp)
{
    const char *who = "deep_momentum";
    if (opt_check_range(who, "momentum (alpha)", hp->momentum, 0, INFINITY, false) ||
        opt_check_range(who, "mem_lr", hp->mem_lr, 0, INFINITY, false) ||
        opt_check_range(who, "eps", hp->eps, 0, INFINITY, false))
        return -1;
    if (hp->mem_hidden < 0 || hp->mem_hidden > 4096) {
        mi_error_set("%s: mem_hidden must be in [0, 4096], got %d", who, hp->mem_hidden);
        return -1;
    }
    if (hp->output != MI_NL_OUT_IDENTITY && hp->output != MI_NL_OUT_NEWTON_SCHULZ) {
        mi_error_set("%s: unknown output %d (identity 0, newton_schulz 1)", who, (int)hp->output);
        return -1;
    }
    if (hp->nl_form != MI_NL_FORM_PAPER && hp->nl_form != MI_NL_FORM_NORMALISED) {
        mi_error_set("%s: unknown nl_form %d (paper 0, normalised 1)", who, (int)hp->nl_form);
        return -1;
    }
    if (hp->output == MI_NL_OUT_NEWTON_SCHULZ && (hp->ns_steps < 1 || hp->ns_steps > 100)) {
        mi_error_set("%s: ns_steps must be in [1, 100], got %d", who, hp->ns_steps);
        return -1;
    }
    return 0;
}

/* The paper's form keeps only the MLP; the normalised form, and a linear
 * memory in either, keep the momentum M. */
static bool paper_mlp(const mi_optim_hparams *hp)
{
    return hp->nl_form == MI_NL_FORM_PAPER && hp->mem_hidden > 0;
}

static void deep_spec(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s)
{
    int64_t c = row_width(p), h = hp->mem_hidden;
    if (paper_mlp(hp)) {
        spec_matrix(s, "mem_w1", h, c);
        spec_matrix(s, "mem_w2", mi_shape_numel(p->rank, p->shape) / c, h);
        return;
    }
    spec_like(s, "momentum", p);
    if (h > 0) {
        spec_matrix(s, "mem_w1", h, c);
        spec_matrix(s, "mem_w2", c, h);
    }
}

/* Nested Learning, Eq. 23 as written, for an MLP memory m_φ(x) = W2 tanh(W1 x):
 *   L⁽²⁾ = ⟨m_φ(Uᵀ), I⟩ = Σ_j [W2 tanh(W1 u_j)]_j,
 *   W1 ← α W1 − η (W2 ⊙ (1 − H²))ᵀ U,   W2 ← α W2 − η H,   H = tanh(U W1ᵀ),
 *   Δ = m_{i+1}(u_i) = ∂L⁽²⁾(φ_{i+1}; U)/∂U = (W2 ⊙ (1 − H²)) W1  (new W1, W2, H). */
static int paper_update(mi_tensor *w1, mi_tensor *w2, mi_tensor *g, hpv alpha, double eta,
                        mi_tensor **w1_new, mi_tensor **w2_new, mi_tensor **delta)
{
    mi_tensor *U = as_rows(g);
    mi_tensor *H = mi_tanh(mi_matmul_t(U, w1, false, true));                     /* [r, h] */
    mi_tensor *D = mi_mul(w2, mi_add_scalar(mi_neg(mi_square(H)), 1.0));        /* W2 ⊙ (1 − H²) */
    *w1_new = mi_sub(hp_scale(w1, alpha), mi_mul_scalar(mi_matmul_t(D, U, true, false), eta));
    *w2_new = mi_sub(hp_scale(w2, alpha), mi_mul_scalar(H, eta));
    mi_tensor *H1 = mi_tanh(mi_matmul_t(U, *w1_new, false, true));
    mi_tensor *D1 = mi_mul(*w2_new, mi_add_scalar(mi_neg(mi_square(H1)), 1.0));
    *delta = mi_reshape(mi_matmul(D1, *w1_new), g->rank, g->shape);
    return *delta ? 0 : -1;
}

/* W1's initial value: N(0, 1/c), seeded by hp.seed and the parameter index. */
static mi_tensor *initial_w1(const opt_param *a, int64_t h, int64_t c)
{
    mi_rng r;
    mi_rng_seed(&r, a->hp->seed * 0x9E3779B97F4A7C15ull + (uint64_t)a->index + 1);
    return mi_randn(&r, a->p->dtype, MI_SHAPE(h, c), 0, 1.0 / sqrt((double)c));
}

static int deep_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    const mi_optim_hparams *hp = a->hp;
    mi_tensor *g = opt_l2_decay(a, a->g), *w1 = NULL, *w2 = NULL, *delta;
    int64_t c = row_width(a->p), h = hp->mem_hidden;
    if (paper_mlp(hp)) {
        w1 = a->st[0] ? a->st[0] : initial_w1(a, h, c);
        w2 = a->st[1] ? a->st[1] : mi_zeros(a->p->dtype, MI_SHAPE(a->p->numel / c, h));
        if (paper_update(w1, w2, g, a->momentum, hp->mem_lr, &st_new[0], &st_new[1], &delta))
            return -1;
    } else {
        if (h > 0) {
            w1 = a->st[1] ? a->st[1] : initial_w1(a, h, c);
            w2 = a->st[2] ? a->st[2] : mi_zeros(a->p->dtype, MI_SHAPE(c, h));
        }
        if (memory_update(a->st[0], w1, w2, g, a->momentum, hp->mem_lr, hp->eps, &st_new[0],
                          &st_new[1], &st_new[2], &delta) != 0)
            return -1;
    }
    if (hp->output == MI_NL_OUT_NEWTON_SCHULZ && a->p->rank >= 2)
        delta = opt_muon_direction(delta, a->p, hp->ns_steps);
    *p_new = mi_add(a->p, hp_scale(delta, a->lr));
    return *p_new ? 0 : -1;
}

const opt_rule opt_rule_deep_momentum = {.name = "deep_momentum", .check = deep_check,
                                         .spec = deep_spec, .step = deep_step};
