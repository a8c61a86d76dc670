/* Elastic-net retention, the Learning-Retaining form (MIRAS "Alternative
 * Retention Gates", Variant 2 "hard and soft forgetting", eq:Elastic; spec §4.3):
 *
 *   W_t = S_γ(λ W_{t-1} − ζ ∇ℓ(W_{t-1}; k_t, v_t)),  S_γ(z) = sign(z) max(0, |z| − γ)
 *
 * with λ = α_t (the retention gate alpha, the ℓ2 "soft forgetting"), ζ = η_t
 * (the gate eta, the paper's ζ = ηλ folded in) and γ = config l1_gamma (the
 * ℓ1 "hard forgetting": entries within γ of zero become exactly zero). The
 * state is W itself; S_γ is the boundary projection, so it applies after
 * every token with b = 1 and at the end of each chunk otherwise (the linear
 * part λ W + step runs as a scan inside the chunk). The paper's α (the ℓ1
 * weight) is not the gate alpha: here γ is given directly. */
#include "models.h"

static mi_tensor *elastic_boundary(const mi_miras_config *c, mi_tensor *w)
{
    return mi_soft_threshold(w, c->l1_gamma);
}

const mi_retention_kind mi_retention_elastic = {
    .name = "elastic", .formula = "W_t = S_gamma(alpha_t W_{t-1} - eta_t grad)",
    .boundary = elastic_boundary, .uses_alpha = true,
};
