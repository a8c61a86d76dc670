/* ℓp attentional bias (MIRAS "Alternative Attentional Biases", Variant 1,
 * eq:lp-attentional-bias, with the remark's smooth |x| ≈ √(x² + ε)):
 *
 *   ℓ(y; v) = Σ_j s(e_j)^p,   s(x) = √(x² + ε),   e = y − v
 *   ∂ℓ/∂y   = p · s(e)^(p−2) ⊙ e
 *
 * On a matrix memory one GD step is W_t = W_{t-1} − η_t p (s(e)^(p−2) ⊙ e) k_tᵀ,
 * the paper's p (Sign(e) ⊙ |e|^(p−1)) k_tᵀ with Sign(e)·|e|^(p−1) written as
 * (e / s(e)) · s(e)^(p−1). The smooth sign here is e/√(e² + ε), the exact
 * derivative of the smooth abs, so the closed form is exactly ∂ℓ/∂y and
 * the autodiff and closed-form paths agree to rounding. The remark's other
 * approximation, Sign(x) ≈ tanh(a·x) (config sign_sharpness), is not used by
 * ℓp: p·tanh(a e)·s(e)^(p−1) is the derivative of no simple loss. Both
 * tend to the paper's exact gradient as ε → 0 (ε = config abs_eps). */
#include <math.h>
#include <string.h>

#include "components.h"

typedef struct lp_params {
    double p, abs_eps;
} lp_params;

static const mi_field lp_fields[] = {
    MI_FIELD_REAL_AT(lp_params, "p", p, "3", 1, INFINITY, MI_FIELD_HI_OPEN, "lp: the exponent"),
    MI_FIELD_REAL_AT(lp_params, "abs_eps", abs_eps, "1e-6", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN, "lp: |x| = sqrt(x^2 + eps)"),
};

static lp_params params(const mi_miras_config *c)
{
    lp_params lp;
    memcpy(&lp, &c->bias_params, sizeof lp);
    return lp;
}

static mi_tensor *lp_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    lp_params lp = params(c);
    mi_tensor *s = mi_smooth_abs(mi_sub(y, v), lp.abs_eps);
    return mi_sum(mi_pow_scalar(s, lp.p), -1, false);
}

static mi_tensor *lp_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    lp_params lp = params(c);
    mi_tensor *e = mi_sub(y, v);
    mi_tensor *s = mi_smooth_abs(e, lp.abs_eps);
    return mi_mul_scalar(mi_mul(mi_pow_scalar(s, lp.p - 2), e), lp.p);
}

const mi_bias_kind mi_bias_lp = {
    .name = "lp", .formula = "l = sum_j sqrt(e_j^2 + eps)^p, e = y - v",
    .loss = lp_loss, .error = lp_error, .rule = MI_BIAS_RULE_LP,
    MI_PARAMS(lp_params, lp_fields),
};
