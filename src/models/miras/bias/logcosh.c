/* log-cosh attentional bias (not from the papers: the worked example of
 * docs/models.md "How to add a component"). A smooth robust loss between ℓ2
 * and ℓ1: ½e² for small errors, |e| − log 2 for large ones, and its
 * gradient is bounded by 1 per coordinate:
 *
 *   ℓ(y; v) = Σ_j log cosh(e_j),  e = y − v
 *           = Σ_j softplus(2 e_j) − e_j − log 2   (stable for large |e|)
 *   ∂ℓ/∂y   = tanh(e)
 *
 * so on a matrix memory one GD step is W_t = W_{t-1} − η_t tanh(W k_t − v_t) k_tᵀ. */
#include <math.h>

#include "components.h"

static mi_tensor *logcosh_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                               mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v);
    mi_tensor *lc = mi_add_scalar(mi_sub(mi_softplus(mi_mul_scalar(e, 2.0)), e), -log(2.0));
    return mi_sum(lc, -1, false);
}

static mi_tensor *logcosh_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                                mi_tensor *delta)
{
    return mi_tanh(mi_sub(y, v));
}

const mi_bias_kind mi_bias_logcosh = {
    .name = "logcosh", .formula = "l = sum_j log cosh(y_j - v_j)",
    .loss = logcosh_loss, .error = logcosh_error,
};
