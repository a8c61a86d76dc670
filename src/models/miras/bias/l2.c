/* ℓ2 attentional bias (MIRAS §"RNNs with Delta Rule", the MSE objective;
 * DeltaNet/TTT/Titans):
 * ℓ(y; v) = ½‖y − v‖², ∂ℓ/∂y = y − v. */
#include "components.h"

static mi_tensor *l2_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    return mi_mul_scalar(mi_sum(mi_square(mi_sub(y, v)), -1, false), 0.5);
}

static mi_tensor *l2_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    return mi_sub(y, v);
}

const mi_bias_kind mi_bias_l2 = {
    .name = "l2", .formula = "l = 1/2 ||y - v||^2", .loss = l2_loss, .error = l2_error,
    .rule = MI_BIAS_RULE_RESIDUAL,
};
