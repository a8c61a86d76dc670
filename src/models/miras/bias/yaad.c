/* Yaad's attentional bias: the ℓ2/ℓ1 switch (MIRAS "Alternative Attentional
 * Biases", Variant 2, the third approach, eq:huber-loss; "MIRAS's Variants",
 * Yaad):
 *
 *   W_t = W_{t-1} − η_t ∇ℓ2(W_{t-1}; k_t, v_t)        if ‖M(k_t) − v_t‖ ≤ δ_t
 *         W_{t-1} − η_t δ_t ∇ℓ1(W_{t-1}; k_t, v_t)    otherwise
 *
 * with ∇ℓ1 through the paper's smooth sign, Sign(x) ≈ tanh(a·x) (a = config
 * sign_sharpness; remark of Variant 1 and "Parallelizable Training").
 *
 * Why a = 1 by default: the outer gradient passes through tanh'(a·e) = a·sech²(a·e),
 * spikes of height a wherever an error coordinate crosses 0, and a recurrence
 * compounds them. Measured on a byte LM (d 64, 2 layers, T 128, 60 steps): a = 100
 * stays at chance with pre-clip gradient norms ~1e12; a = 10 reaches 3.94 nats/byte
 * (norm ~700), a = 5 3.20, a = 2 3.02, a = 1 2.96 (norm 0.6, the ℓ2 bias's 2.96);
 * the exact sign 3.60: its zero derivative cuts the values' gradient through the
 * write wherever the ℓ1 branch is taken. The coordinates of e are O(1) here (the
 * memory's LayerNorm output has norm √d), so tanh(e) is already a sign beyond
 * |e| ≈ 2. The
 * loss whose exact derivative this is, per coordinate j, with the switch
 * m = I(‖e‖₂ ≤ δ) a comparison (no gradient):
 *
 *   ℓ(y; v) = Σ_j [ m ½e_j² + (1 − m) δ (λ(e_j) − ½δ) ],  e = y − v,
 *   λ(x)    = log cosh(a x) / a = (softplus(2ax) − ax − log 2) / a,  λ' = tanh(a x)
 *   ∂ℓ/∂y   = m e + (1 − m) δ tanh(a e)
 *
 * With a = ∞ (sign_sharpness=inf) the sign is exact: λ = |x|, λ' = sign(x),
 * whose derivative is 0, as torch.sign's: the switch and the sign then pass
 * no derivative to the outer loop, only δ and the ℓ2 branch's error do.
 *
 * (λ is the smooth |x| whose derivative is the smooth sign; the −½δ mirrors
 * Huber's H, δ(|x| − ½δ) beyond δ, and makes the two branches meet when
 * dv = 1 and a → ∞.) δ_t is one per head ([N, n]); a channel-wise δ
 * ([N, n, dv]) switches and scales each channel with its own threshold
 * against the same error norm. */
#include <math.h>
#include <string.h>

#include "components.h"

typedef struct yaad_params {
    double sign_sharpness;
} yaad_params;

static const mi_field yaad_fields[] = {
    MI_FIELD_REAL_AT(yaad_params, "sign_sharpness", sign_sharpness, "1", 0, INFINITY,
                     MI_FIELD_LO_OPEN, "yaad: Sign(x) = tanh(a x), a (inf: the exact sign)"),
};

static double sign_sharpness(const mi_miras_config *c)
{
    yaad_params y;
    memcpy(&y, &c->bias_params, sizeof y);
    return y.sign_sharpness;
}

static mi_tensor *per_channel(mi_tensor *delta, const mi_tensor *e)
{
    return delta && e && delta->rank == e->rank - 1 ? mi_unsqueeze(delta, -1) : delta;
}

/* m = I(‖e‖₂ ≤ δ), [N, n, 1] or [N, n, dv] */
static mi_tensor *switch_mask(mi_tensor *e, mi_tensor *d)
{
    return mi_le(mi_sqrt(mi_sum(mi_square(e), -1, true)), d);
}

static mi_tensor *yaad_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    double a = sign_sharpness(c);
    mi_tensor *e = mi_sub(y, v), *d = per_channel(delta, e);
    mi_tensor *smooth_l1;
    if (isinf(a)) {
        smooth_l1 = mi_abs(e);
    } else {
        mi_tensor *ae = mi_mul_scalar(e, a);
        smooth_l1 = mi_mul_scalar(
            mi_add_scalar(mi_sub(mi_softplus(mi_mul_scalar(ae, 2.0)), ae), -log(2.0)), 1.0 / a);
    }
    mi_tensor *quadratic = mi_mul_scalar(mi_square(e), 0.5);
    mi_tensor *linear = mi_mul(d, mi_sub(smooth_l1, mi_mul_scalar(d, 0.5)));
    return mi_sum(mi_where(switch_mask(e, d), quadratic, linear), -1, false);
}

static mi_tensor *yaad_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v), *d = per_channel(delta, e);
    double a = sign_sharpness(c);
    mi_tensor *sign = isinf(a) ? mi_sign(e) : mi_smooth_sign(e, a);
    return mi_where(switch_mask(e, d), e, mi_mul(d, sign));
}

const mi_bias_kind mi_bias_yaad = {
    .name = "yaad", .formula = "l = m/2 ||e||^2 + (1-m) delta (sum_j logcosh(a e_j)/a - delta/2), "
                               "m = [||e|| <= delta]",
    .loss = yaad_loss, .error = yaad_error, .needs_delta = true, .rule = MI_BIAS_RULE_YAAD,
    MI_PARAMS(yaad_params, yaad_fields),
};
