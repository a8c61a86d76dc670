/* Elastic-net retention, the FTRL (accumulator) form (MIRAS "Alternative
 * Retention Gates", Variant 3 "forgetting via soft-thresholding"):
 *
 *   Z_t = α_t Z_{t-1} − η_t ∇ℓ(W_{t-1}; k_t, v_t),   W_t = S_γ(Z_t)
 *
 * Derivation (Viewpoint 1, eq:Viewpoint1-OnlineRegression): follow the
 * regularised leader on the linearised losses ⟨W − W_{i-1}, g_i⟩,
 * g_i = ∇ℓ(W_{i-1}; k_i, v_i), with the elastic-net regulariser
 * R(W) = 1/(2η)‖W‖² + 1/α_paper ‖W‖₁:
 *   W_t = argmin_W ⟨W, Σ_{i≤t} g_i⟩ + 1/(2η)‖W‖² + 1/α_paper ‖W‖₁.
 * It separates per entry; its optimality condition 0 ∈ Σ g + W/η + ∂|W|/α_paper
 * solves to W_t = S_{η/α_paper}(−η Σ_{i≤t} g_i) = S_γ(Z_t), Z_t = Z_{t-1} − η g_t:
 * the paper's A_t and W_t with γ = η/α_paper (config l1_gamma). A per-token
 * η_t weights each linearised loss (Z_t = Z_{t-1} − η_t g_t), and the gate
 * α_t discounts the past ones (Z_t = −Σ_{i≤t} (Π_{i<j≤t} α_j) η_i g_i);
 * α ≡ 1 is the paper's rule. The state is the dual accumulator Z; W is read
 * from it (at every token, and for the gradients at each chunk's start),
 * and there is no boundary projection: Z itself is linear.
 *
 * Initial state: the paper assumes W_0 = 0 (so Z_0 = 0). For any W_0 the
 * FTRL view gives the dual point whose prox is W_0: Z_0 ∈ W_0 + γ ∂‖W_0‖₁;
 * we take Z_0 = W_0 + γ sign(W_0) (0 where W_0 = 0), so S_γ(Z_0) = W_0
 * exactly and ∂W(Z_0)/∂W_0 = 1. */
#include "models.h"

static mi_tensor *ftrl_init(const mi_miras_config *c, mi_tensor *w0)
{
    return mi_add(w0, mi_mul_scalar(mi_sign(w0), c->l1_gamma));
}

static mi_tensor *ftrl_read(const mi_miras_config *c, mi_tensor *z)
{
    return mi_soft_threshold(z, c->l1_gamma);
}

const mi_retention_kind mi_retention_elastic_ftrl = {
    .name = "elastic-ftrl", .formula = "Z_t = alpha_t Z_{t-1} - eta_t grad, W_t = S_gamma(Z_t)",
    .init = ftrl_init, .read = ftrl_read, .uses_alpha = true,
};
