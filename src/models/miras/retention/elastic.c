/* Elastic-net retention, the Learning-Retaining form (MIRAS "Alternative
 * Retention Gates", Variant 2 "hard and soft forgetting"):
 *
 *   W_t = S_γ(λ W_{t-1} − ζ ∇ℓ(W_{t-1}; k_t, v_t)),  S_γ(z) = sign(z) max(0, |z| − γ)
 *   γ = ηβ / (α(η + β)),  λ = β / (β + η),  ζ = ηλ                 (MIRAS, eq:Elastic)
 *
 * from the retention G(W) = 1/(2β)‖W‖² + 1/α ‖W‖₁, so γ = ζ/α: the threshold
 * is the step ζ times the ℓ1 weight 1/α. Here λ = α_t (the retention gate
 * alpha, the ℓ2 "soft forgetting"), ζ = η_t (the gate eta) and 1/α = config
 * l1_gamma, so γ_t = l1_gamma · η_t (l1_threshold=scaled, the default: the ℓ1
 * "hard forgetting" scales with the step); l1_threshold=constant takes
 * γ = l1_gamma at every token. Entries within γ of zero become exactly zero.
 * (The paper's α, the ℓ1 weight's inverse, is not the gate alpha.) The state
 * is W itself; S_γ is the boundary projection, so it applies after every
 * token with b = 1 and at the end of each chunk otherwise, with the
 * threshold of the chunk's last token (the linear part λ W + step runs as a
 * scan inside the chunk). */
#include "components.h"

static mi_tensor *elastic_boundary(const mi_miras_config *c, mi_tensor *w, mi_tensor *eta)
{
    return mi_l1_prox(c, w, eta);
}

const mi_retention_kind mi_retention_elastic = {
    .name = "elastic", .formula = "W_t = S_tau(alpha_t W_{t-1} - eta_t grad), tau = gamma eta_t",
    .boundary = elastic_boundary, .uses_alpha = true, MI_PARAMS(mi_l1_params, mi_l1_fields),
};
