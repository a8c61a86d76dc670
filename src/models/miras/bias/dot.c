/* Dot-product attentional bias (MIRAS Table 1: linear attention, RetNet,
 * Mamba, GLA): ℓ(y; v) = −⟨y, v⟩, ∂ℓ/∂y = −v. One GD step with η = 1 on
 * a matrix memory writes the Hebbian term v kᵀ. */
#include "components.h"

static mi_tensor *dot_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    return mi_neg(mi_sum(mi_mul(y, v), -1, false));
}

static mi_tensor *dot_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    return y ? mi_neg(v) : NULL;
}

const mi_bias_kind mi_bias_dot = {
    .name = "dot", .formula = "l = -<y, v>", .loss = dot_loss, .error = dot_error,
    .rule = MI_BIAS_RULE_HEBBIAN,
};
