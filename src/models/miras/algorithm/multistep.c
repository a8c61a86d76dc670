/* Several writes per token (DeltaProduct): each token brings `steps`
 * key-value pairs and the memory takes one gradient step on each in turn,
 *   A_{t,j} = α_{t,j} A_{t,j−1} − η_{t,j} ∇ℓ(W_{t,j−1}; k_{t,j}, v_{t,j}),  j = 1..steps,
 * the token reading the state after its last step. */
#include "components.h"

const mi_algorithm_kind mi_algorithm_multistep = {
    .name = "multistep", .formula = "steps writes A_{t,j} = alpha A_{t,j-1} - eta grad per token",
    .multistep = true, .delta_rule = true,
};
