/* ℓ2 retention (MIRAS §"RNNs with Hebbian Rule" and §"RNNs with Delta Rule",
 * the local retention; Titans' forget gate): Ret = ‖W − α W_{t-1}‖²
 * (local) + global ℓ2, which as a GD step is the decay W_t = α_t W_{t-1} +
 * step, α_t the kept fraction (scalar, channel-wise or data-dependent, as
 * the gate given). "none" is the same with α ≡ 1: nothing is forgotten. */
#include "components.h"

const mi_retention_kind mi_retention_l2 = {
    .name = "l2", .formula = "W_t = alpha_t * W_{t-1} + step_t", .uses_alpha = true,
    .rule = MI_RETENTION_RULE_DECAY,
};

const mi_retention_kind mi_retention_none = {
    .name = "none", .formula = "W_t = W_{t-1} + step_t", .uses_alpha = false,
    .rule = MI_RETENTION_RULE_DECAY,
};
