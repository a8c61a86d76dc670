/* Bregman-divergence retention with the sigmoid link (MIRAS "Alternative
 * Retention Gates", Variant 5): with F(W) = Σ f(W_jl), f'(τ) = ln(τ/(1 − τ)),
 * mirror descent gives
 *
 *   W_t = σ(ln(W_{t-1} / (1 − W_{t-1})) − η_t ∇ℓ(W_{t-1}; k_t, v_t))
 *
 * so every entry stays in (0, 1). The state is the logit Z = ln(W/(1 − W)):
 *   Z_t = Z_{t-1} − η_t ∇ℓ(σ(Z_{t-1}); k_t, v_t),   W_t = σ(Z_t) (the read).
 * Z_0 = W_0: the initial weights are given as logits (any real W_0; a zero
 * matrix reads as 0.5 everywhere). The paper's rule has no decay, so the
 * gate alpha is not used (uses_alpha false); the link is the only
 * non-linearity and it is in the read, so chunks need no boundary. */
#include "components.h"

static mi_tensor *bregman_read(const mi_miras_config *c, mi_tensor *z, mi_tensor *eta)
{
    return mi_sigmoid(z);
}

const mi_retention_kind mi_retention_bregman = {
    .name = "bregman", .formula = "W_t = sigmoid(logit(W_{t-1}) - eta_t grad)",
    .read = bregman_read, .uses_alpha = false,
};
