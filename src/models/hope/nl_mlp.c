/* The 2-layer MLP memory of Nested Learning ("Notations": "simple
 * MLPs with L_M ≥ 1 layers and residual connection"; arXiv §8.1 Eq. 89:
 * M(·) = (·) + W1 σ(W2 (·))), σ = GELU (exact erf form, as the MIRAS MLP
 * memory; the paper names no σ), and its inner step on the ℓ2 objective
 *
 *   ℓ_t = ½‖M(x_t) − v_t‖²,  e_t = M(x_t) − v_t,  a_t = W2 x_t,  s_t = σ(a_t)
 *   ∂ℓ_t/∂W1 = e_t s_tᵀ,     ∂ℓ_t/∂W2 = δ_t x_tᵀ,  δ_t = σ'(a_t) ⊙ W1ᵀ e_t
 *
 * Each layer's step is normalised by its input, as normalised LMS: the term of
 * a layer with input u_t (s_t for W1, x_t for W2) is divided by ‖u_t‖² + eps,
 * so a step of rate η moves that layer's output by η times its error whatever
 * the scale of u_t (plain GD on ½‖W u − y‖² needs η‖u‖² < 2, and ‖s‖² is
 * ≈ 0.4·h for unit-variance pre-activations and grows with the weights the
 * context writes; the CMS's RMS-normalised inputs have ‖u‖² ≈ d: without
 * the normalisation the stable range of η would shrink with the width).
 * The inputs x are unit-norm or RMS-normalised, so eps only guards rounding;
 * the hidden activations are not: a retention α_t ≈ 0 wipes the memory
 * (W2 ≈ 0, so s_t ≈ 0), and with a vanishing regulariser the normalised step
 * c e sᵀ/‖s‖² then has size c‖e‖/‖s‖, unbounded. That is how HOPE went to NaN
 * on MQAR (vocabulary 64, d 32, chunk 8): HOPE's α memory learned to give
 * α ≈ 0.004 on some tokens, ‖s‖² fell to 1e-6, one step took max|W1| from 0.34
 * to 11.6 and W2 from 3 to 91, and the outer gradient overflowed. W1's term is
 * therefore divided by ‖s_t‖² + hidden_eps with hidden_eps = 1 (hope.h):
 * ‖s‖/(‖s‖² + 1) ≤ ½ bounds the step by c‖e + W1 s‖/2.
 * lms = false leaves the plain gradient (Eq. 31's GD and Eq. 28's ∇L as
 * printed).
 *
 * Summed over a chunk with weights c_t (the CMS, Eq. 31):
 *   D1 = Σ_t c_t/(‖s_t‖² + hidden_eps) e_t s_tᵀ,   D2 = Σ_t c_t/(‖x_t‖² + eps) δ_t x_tᵀ
 * (without lms, no divisions), applied as W − D: one GEMM per layer, (c ⊙ E)ᵀ S
 * accumulated into a copy of W,
 * never a per-token weight copy. σ' enters through gelu_backward, whose vjp
 * is itself recorded ops, so the outer loop differentiates the step. */
#include <math.h>

#include "models.h"
#include "ops/fused.h"

mi_tensor *mi_nl_mlp_read_hidden(mi_tensor *w1, mi_tensor *s, bool residual, mi_tensor *x)
{
    mi_tensor *y = mi_matmul_t(s, w1, false, true);
    return residual ? mi_add(x, y) : y;
}

mi_tensor *mi_nl_mlp_read(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x)
{
    return mi_nl_mlp_read_hidden(w1, mi_gelu(mi_matmul_t(x, w2, false, true)), residual, x);
}

int mi_nl_mlp_step(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x, mi_tensor *v,
                   mi_tensor *c, bool lms, double eps, double hidden_eps, mi_tensor **w1_new,
                   mi_tensor **w2_new)
{
    mi_tensor *a = mi_matmul_t(x, w2, false, true);                 /* [N, n, h] */
    mi_tensor *s = mi_gelu(a);
    mi_tensor *m = mi_matmul_t(s, w1, false, true);                 /* W1 s [N, n, out] */
    mi_tensor *e = mi_sub(residual ? mi_add(x, m) : m, v);
    /* δ = σ'(a) ⊙ (W1ᵀ e), σ'(a) = Φ(a) + a φ(a), as one gelu_backward op */
    mi_tensor *delta = mi_gelu_backward(a, mi_matmul(e, w1));        /* [N, n, h] */
    mi_tensor *cc = mi_unsqueeze(c, -1);                             /* [N, n, 1] */
    /* c_t / (‖u_t‖² + eps) per layer (lms), hidden_eps for the hidden activations */
    mi_tensor *c1 = lms ? mi_div(cc, mi_add_scalar(mi_sum(mi_square(s), -1, true), hidden_eps))
                        : cc;
    mi_tensor *c2 = lms ? mi_div(cc, mi_add_scalar(mi_sum(mi_square(x), -1, true), eps)) : cc;
    /* W − (c ⊙ E)ᵀ S as one GEMM into a copy of W: no D of its own */
    *w1_new = mi_matmul_acc(w1, mi_mul(c1, e), s, true, false, -1);
    *w2_new = mi_matmul_acc(w2, mi_mul(c2, delta), x, true, false, -1);
    return *w1_new && *w2_new ? 0 : -1;
}

/* For the ℓ2-regression GD (Nested Learning, Eq. 28–29: W_{t+1} =
 * W_t (I − x_t x_tᵀ) − η ∇_W L, a unit-rate ℓ2 regression step for a unit
 * input x), taken on every weight matrix with its own input as an optimizer
 * would (src/optim/nl_l2gd.c likewise): the layer's gradient e sᵀ (W1) or
 * δ xᵀ (W2) as g_t û_tᵀ with û = u/√(‖u‖² + eps), so that I − û ûᵀ is
 * Eq. 28's contraction whatever the scale of u, and g = e·√(‖u‖² + eps)
 * (plain GD) or e/√(‖u‖² + eps) (lms: the gradient over ‖u‖² + eps). */
mi_nl_mlp_factor mi_nl_mlp_layer_factor(mi_tensor *g, mi_tensor *u, mi_tensor *wu, bool lms,
                                        double eps)
{
    /* r = 1/√(‖u‖² + eps); products with r, whose vjps are products, not quotients */
    mi_tensor *r = mi_rsqrt(mi_add_scalar(mi_sum(mi_square(u), -1, true), eps));
    return (mi_nl_mlp_factor){lms ? mi_mul(g, r) : mi_div(g, r), mi_mul(u, r),
                              wu ? mi_mul(wu, r) : NULL};
}

int mi_nl_mlp_factors(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x, mi_tensor *v,
                      bool lms, double eps, double hidden_eps, mi_nl_mlp_factor f[2])
{
    mi_tensor *a = mi_matmul_t(x, w2, false, true);                 /* [N, n, h] */
    mi_tensor *s = mi_gelu(a);
    mi_tensor *m = mi_matmul_t(s, w1, false, true);                 /* W1 s */
    mi_tensor *e = mi_sub(residual ? mi_add(x, m) : m, v);
    return mi_nl_mlp_factors_at(w1, a, s, m, e, x, lms, eps, hidden_eps, f);
}

int mi_nl_mlp_factors_at(mi_tensor *w1, mi_tensor *a, mi_tensor *s, mi_tensor *m, mi_tensor *e,
                         mi_tensor *x, bool lms, double eps, double hidden_eps,
                         mi_nl_mlp_factor f[2])
{
    if (!a || !s || !e) return -1;
    mi_tensor *delta = mi_gelu_backward(a, mi_matmul(e, w1));      /* σ'(a) ⊙ W1ᵀ e */
    f[0] = mi_nl_mlp_layer_factor(e, s, m, lms, hidden_eps);
    f[1] = mi_nl_mlp_layer_factor(delta, x, a, lms, eps);
    return f[0].g && f[0].u && (!m || f[0].wu) && f[1].g && f[1].u && f[1].wu ? 0 : -1;
}
