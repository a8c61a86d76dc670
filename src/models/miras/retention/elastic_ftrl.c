/* Elastic-net retention, the FTRL (accumulator) form (MIRAS "Alternative
 * Retention Gates", Variant 3 "forgetting via soft-thresholding"):
 *
 *   A_t = A_{t-1} − η ∇ℓ(W_{t-1}; k_t, v_t),   W_t = S_{η/α}(A_t)     (MIRAS, Variant 3)
 *
 * Derivation (Viewpoint 1, eq:Viewpoint1-OnlineRegression): follow the
 * regularised leader on the linearised losses ⟨W − W_{i-1}, g_i⟩,
 * g_i = ∇ℓ(W_{i-1}; k_i, v_i), with the elastic-net regulariser
 * R(W) = 1/(2η)‖W‖² + 1/α ‖W‖₁:
 *   W_t = argmin_W ⟨W, Σ_{i≤t} g_i⟩ + 1/(2η)‖W‖² + 1/α ‖W‖₁.
 * It separates per entry; its optimality condition 0 ∈ Σ g + W/η + ∂|W|/α
 * solves to W_t = S_{η/α}(−η Σ_{i≤t} g_i) = S_{η/α}(A_t). The threshold is
 * the step η times the ℓ1 weight 1/α = config l1_gamma.
 *
 * Here, with a gate per token, the state is Z_t = α_t Z_{t-1} − η_t g_t
 * (the gate α_t discounts the past losses, Z_t = −Σ_{i≤t} (Π_{i<j≤t} α_j)
 * η_i g_i; α ≡ 1 is the paper's rule) and W_t = S_{τ_t}(Z_t) with
 *   l1_threshold=scaled (default)  τ_t = l1_gamma · η_t: the paper's η/α with
 *                                  its one η read as the token's η_t
 *   l1_threshold=constant          τ = l1_gamma at every token
 * which is the paper's rule exactly when η_t = η. W is read from Z at every
 * token (read after write, with that token's η_t) and for the gradients at
 * each chunk's start (with the η of the token that wrote Z last); there is
 * no boundary projection: Z itself is linear.
 *
 * Initial state: the paper assumes W_0 = 0 (so Z_0 = 0). For any W_0 we take
 * the dual point whose read is W_0, Z_0 ∈ W_0 + τ_0 ∂‖W_0‖₁. In the scaled
 * form nothing has been written to Z_0, η_0 = 0 and τ_0 = 0: Z_0 = W_0. In
 * the constant form τ_0 = l1_gamma and Z_0 = W_0 + l1_gamma sign(W_0) (0
 * where W_0 = 0), so S_τ(Z_0) = W_0 exactly and ∂W(Z_0)/∂W_0 = 1. */
#include "components.h"

static mi_tensor *ftrl_init(const mi_miras_config *c, mi_tensor *w0)
{
    mi_l1_params p = mi_l1_params_of(c);
    if (p.threshold != MI_L1_CONSTANT) return w0;
    return mi_add(w0, mi_mul_scalar(mi_sign(w0), p.gamma));
}

static mi_tensor *ftrl_read(const mi_miras_config *c, mi_tensor *z, mi_tensor *eta)
{
    return mi_l1_prox(c, z, eta);
}

const mi_retention_kind mi_retention_elastic_ftrl = {
    .name = "elastic-ftrl",
    .formula = "Z_t = alpha_t Z_{t-1} - eta_t grad, W_t = S_tau(Z_t), tau = gamma eta_t",
    .init = ftrl_init, .read = ftrl_read, .uses_alpha = true,
    MI_PARAMS(mi_l1_params, mi_l1_fields),
};
