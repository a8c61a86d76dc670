/* Attentional bias robust to value shifts (MIRAS "Alternative Attentional
 * Biases", Variant 3, eq:tempRobustRegression): the worst case of ½‖y − (v + δv)‖²
 * over ‖δv‖₂ ≤ Δ, solved in closed form:
 *
 *   ℓ(y; v) = ½‖e‖² + Δ‖e‖₂ + ½Δ²,   e = y − v
 *   ∂ℓ/∂y   = e + Δ e / ‖e‖₂
 *
 * so on a matrix memory W_t = W_{t-1} − η_t ((W k_t − v_t) k_tᵀ
 * + Δ (W k_t − v_t)/‖W k_t − v_t‖₂ k_tᵀ), the paper's update. ‖e‖₂ is taken
 * smooth, √(‖e‖² + ε) with ε = config abs_eps (the paper's |x| ≈ √(x² + ε)
 * applied to the norm), in the loss and the error alike, so the error stays
 * the exact derivative and e = 0 (e.g. a zero memory and a zero value) gives
 * 0, not 0/0. Δ = config robust_delta, a constant here; the paper's
 * "learnable Δ" is for the layer block to supply later (as a gate). */
#include <math.h>
#include <string.h>

#include "components.h"

typedef struct robust_params {
    double robust_delta, abs_eps;
} robust_params;

static const mi_field robust_fields[] = {
    MI_FIELD_REAL_AT(robust_params, "robust_delta", robust_delta, "0.1", 0, INFINITY,
                     MI_FIELD_HI_OPEN, "robust: the radius of the value shifts"),
    MI_FIELD_REAL_AT(robust_params, "abs_eps", abs_eps, "1e-6", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN, "robust: |e|_2 = sqrt(|e|^2 + eps)"),
};

static robust_params params(const mi_miras_config *c)
{
    robust_params r;
    memcpy(&r, &c->bias_params, sizeof r);
    return r;
}

static mi_tensor *smooth_norm(const mi_miras_config *c, mi_tensor *e, bool keepdim)
{
    return mi_sqrt(mi_add_scalar(mi_sum(mi_square(e), -1, keepdim), params(c).abs_eps));
}

static mi_tensor *robust_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    double big_delta = params(c).robust_delta;
    mi_tensor *e = mi_sub(y, v);
    mi_tensor *l2 = mi_mul_scalar(mi_sum(mi_square(e), -1, false), 0.5);
    mi_tensor *shift = mi_mul_scalar(smooth_norm(c, e, false), big_delta);
    return mi_add_scalar(mi_add(l2, shift), 0.5 * big_delta * big_delta);
}

static mi_tensor *robust_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v);
    return mi_add(e, mi_mul_scalar(mi_div(e, smooth_norm(c, e, true)), params(c).robust_delta));
}

const mi_bias_kind mi_bias_robust = {
    .name = "robust", .formula = "l = 1/2 ||e||^2 + Delta ||e||_2 + Delta^2 / 2, e = y - v",
    .loss = robust_loss, .error = robust_error, MI_PARAMS(robust_params, robust_fields),
};
