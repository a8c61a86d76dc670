/* Huber attentional bias on the error norm (MIRAS "Alternative Attentional
 * Biases", Variant 2, the second approach, eq:temp42):
 *
 *   ℓ(y; v) = H(‖e‖₂),  e = y − v,  H as in huber.c
 *   ∂ℓ/∂y   = e                 if ‖e‖₂ ≤ δ
 *             δ e / ‖e‖₂        otherwise
 *
 * which on a matrix memory is eq:temp42:
 *   W_t = W_{t-1} − η_t (W k_t − v_t) k_tᵀ                        if ‖W k_t − v_t‖ ≤ δ_t
 *         W_{t-1} − η_t δ_t (W k_t − v_t)/‖W k_t − v_t‖ k_tᵀ      otherwise.
 * The norm used by the linear branch is √max(‖e‖², δ²): equal to ‖e‖ where
 * that branch is taken, and never 0 there, so the branch not taken adds no
 * 0·∞ to the gradient when e = 0. δ_t is one per head ([N, n]): a norm
 * over the channels has one threshold. */
#include "components.h"

static int check_delta(const mi_tensor *delta, const mi_tensor *e)
{
    if (delta && e && delta->rank != e->rank - 1) {
        char s[96];
        mi_error_set("huber-norm: delta must be one per head ([N, T]), got %s; the threshold "
                     "applies to the norm of the whole error",
                     mi_shape_str(s, sizeof s, delta->rank, delta->shape));
        return -1;
    }
    return 0;
}

/* Writes ‖e‖² [N, n] and the safe norm √max(‖e‖², δ²) [N, n]. */
static void norms(mi_tensor *e, mi_tensor *delta, mi_tensor **r2, mi_tensor **r)
{
    *r2 = mi_sum(mi_square(e), -1, false);
    *r = mi_sqrt(mi_maximum(*r2, mi_square(delta)));
}

static mi_tensor *huber_norm_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                                  mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v), *r2, *r;
    if (check_delta(delta, e) != 0) return NULL;
    norms(e, delta, &r2, &r);
    mi_tensor *quadratic = mi_mul_scalar(r2, 0.5);
    mi_tensor *linear = mi_mul(delta, mi_sub(r, mi_mul_scalar(delta, 0.5)));
    return mi_where(mi_le(mi_sqrt(r2), delta), quadratic, linear);
}

static mi_tensor *huber_norm_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                                   mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v), *r2, *r;
    if (check_delta(delta, e) != 0) return NULL;
    norms(e, delta, &r2, &r);
    mi_tensor *inside = mi_unsqueeze(mi_le(mi_sqrt(r2), delta), -1);
    return mi_where(inside, e, mi_mul(mi_unsqueeze(mi_div(delta, r), -1), e));
}

const mi_bias_kind mi_bias_huber_norm = {
    .name = "huber-norm", .formula = "l = H_delta(||y - v||_2)",
    .loss = huber_norm_loss, .error = huber_norm_error, .needs_delta = true,
};
