/* Gradient descent (MIRAS §"MIRAS", the choice "Memory Algorithm"; Table 1's GD rows):
 *   A_t = α_t A_{t−1} − η_t ∇ℓ(W_{t−1}; k_t, v_t)
 * On a matrix memory with the ℓ2 bias this is the delta rule (DeltaNet). */
#include "components.h"

const mi_algorithm_kind mi_algorithm_gd = {
    .name = "gd", .formula = "A_t = alpha_t A_{t-1} - eta_t grad",
    .delta_rule = true, .factored = true,
};
