/* Gradient descent with momentum (Titans; MIRAS Table 1, "GD + Momentum"):
 *   S_t = μ_t S_{t−1} − η_t ∇ℓ(W_{t−1}; k_t, v_t),   A_t = α_t A_{t−1} + S_t
 * the momentum state S carried per weight beside the memory. */
#include "components.h"

const mi_algorithm_kind mi_algorithm_momentum = {
    .name = "momentum", .formula = "S_t = mu_t S_{t-1} - eta_t grad; A_t = alpha_t A_{t-1} + S_t",
    .uses_mu = true, .factored = true,
};
