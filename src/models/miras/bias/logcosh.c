/* log-cosh attentional bias (not from the papers: the worked example of
 * docs/models.md "How to add a component", with a parameter of its own). A
 * smooth robust loss between ℓ2 and ℓ1: ½a e² for small errors,
 * |e| − log 2 / a for large ones, and its gradient is bounded by 1 per
 * coordinate:
 *
 *   ℓ(y; v) = Σ_j log cosh(a e_j) / a,  e = y − v,  a = logcosh_scale
 *           = Σ_j (softplus(2a e_j) − a e_j − log 2) / a   (stable for large |e|)
 *   ∂ℓ/∂y   = tanh(a e)
 *
 * so on a matrix memory one GD step is W_t = W_{t-1} − η_t tanh(a (W k_t − v_t)) k_tᵀ. */
#include <math.h>
#include <string.h>

#include "components.h"

typedef struct logcosh_params {
    double scale;
} logcosh_params;

static const mi_field logcosh_fields[] = {
    MI_FIELD_REAL_AT(logcosh_params, "logcosh_scale", scale, "1", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN,
                     "logcosh: a, the error scale (l2 for |e| << 1/a)"),
};

static double scale(const mi_miras_config *c)
{
    logcosh_params p;
    memcpy(&p, &c->bias_params, sizeof p);
    return p.scale;
}

static mi_tensor *logcosh_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                               mi_tensor *delta)
{
    double a = scale(c);
    mi_tensor *ae = mi_mul_scalar(mi_sub(y, v), a);
    mi_tensor *lc = mi_add_scalar(mi_sub(mi_softplus(mi_mul_scalar(ae, 2.0)), ae), -log(2.0));
    return mi_mul_scalar(mi_sum(lc, -1, false), 1 / a);
}

static mi_tensor *logcosh_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                                mi_tensor *delta)
{
    return mi_tanh(mi_mul_scalar(mi_sub(y, v), scale(c)));
}

const mi_bias_kind mi_bias_logcosh = {
    .name = "logcosh", .formula = "l = sum_j log cosh(a (y_j - v_j)) / a",
    .loss = logcosh_loss, .error = logcosh_error,
    MI_PARAMS(logcosh_params, logcosh_fields),
};
