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
 * With the ℓ2-regression GD (Eq. 28–29, W_{t+1} =
 * W_t (I − x_t x_tᵀ) − η ∇_W L; with a retention gate, Nested Learning arXiv
 * Eq. 88: W(α I − η x xᵀ) − η ∇L) each layer also gets its projection term
 * (W u_t) u_tᵀ, which under the same normalisation is W û_t û_tᵀ with
 * û = u/√(‖u‖² + eps) (hidden_eps for s; ‖û‖ < 1 either way): I − η ûûᵀ is
 * the contraction Eq. 28 means for a unit
 * input, on every weight matrix with that matrix's own input (an optimizer
 * acts on every matrix; src/optim/nl_l2gd.c likewise normalises its inputs).
 * For unit-norm keys the W2 term is Eq. 88 as printed (up to eps).
 *
 * Summed over a chunk with weights c_t (η_t times the decay still to come):
 *   D1 = Σ_t c_t/(‖s_t‖² + hidden_eps) [e_t + (W1 s_t)] s_tᵀ
 *   D2 = Σ_t c_t/(‖x_t‖² + eps) [δ_t + a_t] x_tᵀ       ((W2 x_t) is a_t)
 * (the W1 s_t and a_t terms with l2gd only): one matmul per layer, (c ⊙ E)ᵀ S,
 * never a per-token weight copy. σ' is written out, so the outer loop
 * differentiates the step. */
#include <math.h>

#include "models.h"

#define INV_SQRT_2PI 0.39894228040143267794

mi_tensor *mi_nl_mlp_read(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x)
{
    mi_tensor *y = mi_matmul_t(mi_gelu(mi_matmul_t(x, w2, false, true)), w1, false, true);
    return residual ? mi_add(x, y) : y;
}

/* σ'(a) = Φ(a) + a φ(a) */
static mi_tensor *gelu_prime(mi_tensor *a)
{
    mi_tensor *Phi = mi_add_scalar(mi_mul_scalar(mi_erf(mi_mul_scalar(a, M_SQRT1_2)), 0.5), 0.5);
    mi_tensor *phi = mi_mul_scalar(mi_exp(mi_mul_scalar(mi_square(a), -0.5)), INV_SQRT_2PI);
    return mi_add(Phi, mi_mul(a, phi));
}

int mi_nl_mlp_step(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x, mi_tensor *v,
                   mi_tensor *c, bool l2gd, double eps, double hidden_eps, mi_tensor **d1,
                   mi_tensor **d2)
{
    mi_tensor *a = mi_matmul_t(x, w2, false, true);                 /* [N, n, h] */
    mi_tensor *s = mi_gelu(a);
    mi_tensor *m = mi_matmul_t(s, w1, false, true);                 /* W1 s [N, n, out] */
    mi_tensor *e = mi_sub(residual ? mi_add(x, m) : m, v);
    mi_tensor *delta = mi_mul(gelu_prime(a), mi_matmul(e, w1));      /* [N, n, h] */
    mi_tensor *cc = mi_unsqueeze(c, -1);                             /* [N, n, 1] */
    /* c_t / (‖u_t‖² + eps) per layer, hidden_eps for the hidden activations */
    mi_tensor *c1 = mi_div(cc, mi_add_scalar(mi_sum(mi_square(s), -1, true), hidden_eps));
    mi_tensor *c2 = mi_div(cc, mi_add_scalar(mi_sum(mi_square(x), -1, true), eps));
    *d1 = mi_matmul_t(mi_mul(c1, l2gd ? mi_add(e, m) : e), s, true, false);
    *d2 = mi_matmul_t(mi_mul(c2, l2gd ? mi_add(delta, a) : delta), x, true, false);
    return *d1 && *d2 ? 0 : -1;
}
