/* KL retention over a scaled simplex (Memora; MIRAS "Alternative Retention
 * Gates", Variant 1, eq:xmodel; "MIRAS's Variants", Memora):
 *
 *   W_t = c · Softmax((1 − λ_t) log W_{t-1} − η'_t ∇ℓ(W_{t-1}; k_t, v_t))
 *
 * with (1 − λ_t) = α_t (the retention gate alpha) and η'_t = η_t (the gate
 * eta). The state is log-domain, L, and the weights are read row-wise over
 * the last axis of each weight: W = c · softmax(L) (so each row of a matrix,
 * or the whole of a vector memory, lies on the simplex scaled by c, the
 * "normalized per slice" case the paper allows; its ‖W‖₁ = c over the whole
 * matrix is the same up to the scale of each row).
 *
 *   init      L_0 = log c + log_softmax(W_0): W_0 is read as logits, so any
 *             real W_0 (e.g. a zero matrix: uniform rows c/dk) is a valid
 *             start and W(L_0) = c · softmax(W_0);
 *   step      L_t = α_t L_{t-1} − η_t ∇ℓ   (the linear part, a scan in a chunk)
 *   boundary  L ← log c + log_softmax(L) = log W(L), at the end of each chunk.
 *
 * After a boundary L = log W, so with b = 1 the step is eq:xmodel exactly
 * (softmax ignores the constant log c and the row's normaliser). While α is
 * constant along a row the boundary changes no output (it shifts each row of
 * L by a constant, which softmax ignores); it keeps L equal to log W, which
 * eq:xmodel needs when α varies along a row (a channel-wise α on the vector
 * memory), and keeps L from drifting. In chunked training the first token
 * of each chunk runs alone (the lag token of "Parallelizable Training"): it
 * applies eq:xmodel to the previous chunk's state, and the rest of the chunk
 * takes its gradients at the weights it leaves, accumulating linearly in the
 * log domain.
 *
 * The scale c is the constant kl_scale (the paper's c, a constant of the
 * constraint set), or (kl_scale_learn, an option of this project) learned.
 * The recurrence then gets one c per sequence, config kl_scale_t [N] (the
 * layer block's c_h = kl_scale · exp(s_h), one per head, s_h an outer
 * parameter starting at 0: c stays positive and starts at kl_scale), and
 * every log c and c above is that sequence's. The outer gradient reaches c
 * through the reads, W = c · softmax(L), both where the inner gradient is
 * taken and where y is read. */
#include <math.h>

#include "components.h"

/* c shaped to scale x [N, n, ...]: [N, 1, ..., 1]; NULL when c is the constant kl_scale. */
static mi_tensor *scale_like(const mi_miras_config *c, const mi_tensor *x)
{
    if (!c->kl_scale_t || !x) return NULL;
    int64_t shape[MI_MAX_RANK];
    for (int d = 0; d < x->rank; d++) shape[d] = d == 0 ? x->shape[0] : 1;
    return mi_reshape(c->kl_scale_t, x->rank, shape);
}

/* x + log c */
static mi_tensor *add_log_scale(const mi_miras_config *c, mi_tensor *x)
{
    return c->kl_scale_t ? mi_add(x, mi_log(scale_like(c, x))) : mi_add_scalar(x, log(c->kl_scale));
}

static mi_tensor *kl_init(const mi_miras_config *c, mi_tensor *w0)
{
    return add_log_scale(c, mi_log_softmax(w0, -1));
}

static mi_tensor *kl_read(const mi_miras_config *c, mi_tensor *l, mi_tensor *eta)
{
    mi_tensor *w = mi_softmax(l, -1);
    return c->kl_scale_t ? mi_mul(w, scale_like(c, l)) : mi_mul_scalar(w, c->kl_scale);
}

static mi_tensor *kl_boundary(const mi_miras_config *c, mi_tensor *l, mi_tensor *eta)
{
    return add_log_scale(c, mi_log_softmax(l, -1));
}

const mi_retention_kind mi_retention_kl = {
    .name = "kl", .formula = "W_t = c softmax(alpha_t log W_{t-1} - eta_t grad)",
    .init = kl_init, .read = kl_read, .boundary = kl_boundary,
    .uses_alpha = true, .lag_token = true, .rule = MI_RETENTION_RULE_KL,
};
