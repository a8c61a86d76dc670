/* Huber attentional bias, per coordinate (MIRAS "Alternative Attentional
 * Biases", Variant 2, the first approach):
 *
 *   ℓ(y; v) = Σ_j H(e_j),  e = y − v,
 *   H(a) = ½a²              if |a| ≤ δ
 *          δ(|a| − ½δ)      otherwise
 *   ∂ℓ/∂y = e ⊙ I(|e| ≤ δ) + δ Sign(e) ⊙ I(|e| > δ)
 *
 * which on a matrix memory is the paper's update
 *   W_t = W_{t-1} − η_t [ ((W k_t − v_t) k_tᵀ) ⊙ (I(|W k_t − v_t| ≤ δ_t) 1ᵀ)
 *                        + (δ_t Sign(W k_t − v_t) k_tᵀ) ⊙ (I(|W k_t − v_t| > δ_t) 1ᵀ) ].
 * Huber is C¹, so the exact sign is the exact derivative (|e| > δ > 0 where it
 * is used). δ_t is one per head ([N, n]) or one per channel ([N, n, dv]). */
#include "components.h"

/* δ [N, n] → [N, n, 1] so it broadcasts over the channels; [N, n, dv] as is. */
static mi_tensor *per_channel(mi_tensor *delta, const mi_tensor *e)
{
    return delta && e && delta->rank == e->rank - 1 ? mi_unsqueeze(delta, -1) : delta;
}

static mi_tensor *huber_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v), *d = per_channel(delta, e), *abs_e = mi_abs(e);
    mi_tensor *quadratic = mi_mul_scalar(mi_square(e), 0.5);
    mi_tensor *linear = mi_mul(d, mi_sub(abs_e, mi_mul_scalar(d, 0.5)));
    return mi_sum(mi_where(mi_le(abs_e, d), quadratic, linear), -1, false);
}

static mi_tensor *huber_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v), *d = per_channel(delta, e);
    return mi_where(mi_le(mi_abs(e), d), e, mi_mul(d, mi_sign(e)));
}

const mi_bias_kind mi_bias_huber = {
    .name = "huber", .formula = "l = sum_j H_delta(y_j - v_j)",
    .loss = huber_loss, .error = huber_error, .needs_delta = true,
};
