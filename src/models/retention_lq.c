/* ℓq memory stability (Moneta; MIRAS "Alternative Retention Gates",
 * Variant 4, and "MIRAS's Variants", eq:q-norm; spec §4.2, Cell 9):
 *
 *   A_t = α_t A_{t-1} − η_t ∇ℓ(W_{t-1}; k_t, v_t),   W_t = normalise_q(A_t)
 *
 * normalise_q is mi_lq_normalize over the whole of each weight, in the form
 * config lq_form picks:
 *   MI_LQ_SPEC  (default)  W = A / ‖A‖_F^((q−2)/q)   the implementation spec §4.2
 *   MI_LQ_PAPER            W = A / ‖A‖_q^(q−2)       eq:q-norm, entrywise q-norm
 * The state is the accumulator A; the weights are read from it at every
 * token (read after write) and the gradient of a chunk is taken at the
 * weights read from the previous chunk's state, so the normalisation acts
 * between chunks ("Parallelizable Training": the q ≠ 2 non-linearity is not
 * applied inside a chunk). A_0 = W_0: the initial weights are the initial
 * accumulator, as in the spec's Cell 9, so W(A_0) = normalise_q(W_0). A zero
 * accumulator reads as zero weights; the normalisation has no derivative
 * there, so a learnable W_0 must not be exactly zero. */
#include "models.h"

/* [N, n, w…] → [N, n, 1, Π w] so that the ℓq step sees one matrix per weight. */
static mi_tensor *lq_read(const mi_miras_config *c, mi_tensor *a)
{
    if (!a) return NULL;
    mi_tensor *flat = mi_reshape(a, 4, (const int64_t[]){a->shape[0], a->shape[1], 1, -1});
    return mi_reshape(mi_lq_normalize(flat, c->q, c->lq_form), a->rank, a->shape);
}

/* The spec's form scales the whole weight: W = A·(‖A‖_F²)^(−(q−2)/(2q)). The
 * tiny offset maps a zero accumulator to zero weights, as mi_lq_normalize
 * does (it moves ‖A‖_F² by 1e-30, far below float rounding at any norm a
 * memory reaches). */
static bool lq_read_is_scale(const mi_miras_config *c)
{
    return c->lq_form == MI_LQ_SPEC;
}

static mi_tensor *lq_read_scale(const mi_miras_config *c, mi_tensor *sq_norm)
{
    return mi_pow_scalar(mi_add_scalar(sq_norm, 1e-30), -(c->q - 2) / (2 * c->q));
}

const mi_retention_kind mi_retention_lq = {
    .name = "lq", .formula = "A_t = alpha_t A_{t-1} - eta_t grad, W_t = A_t / ||A_t||^r",
    .read = lq_read, .read_is_scale = lq_read_is_scale, .read_scale = lq_read_scale,
    .uses_alpha = true,
};
