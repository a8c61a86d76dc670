/* Matrix memory (MIRAS Table 1: linear attention, DeltaNet, …):
 * M_W(x) = W x with W ∈ R^{dv×dk}. Closed-form gradient of ℓ(W k): the
 * error e = ∂ℓ/∂y times kᵀ, g = e kᵀ (e.g. (Wk − v)kᵀ for ℓ2). */
#include "components.h"

static int matrix_shapes(const mi_miras_config *c, int64_t dk, int64_t dv, int *n, int *ranks,
                         int64_t (*shapes)[MI_MAX_RANK])
{
    *n = 1;
    ranks[0] = 2;
    shapes[0][0] = dv;
    shapes[0][1] = dk;
    return 0;
}

static int matrix_init(const mi_miras_config *c, int64_t dk, int64_t dv, mi_rng *rng, mi_dtype dt,
                       mi_tensor **w)
{
    w[0] = mi_zeros(dt, MI_SHAPE(dv, dk));
    return w[0] ? 0 : -1;
}

/* y_t = W_t x_t: [N, n_w, dv, dk] · [N, n, dk, 1] → [N, n, dv] */
static mi_tensor *matrix_forward(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x)
{
    return mi_squeeze(mi_matmul(w[0], mi_unsqueeze(x, -1)), -1);
}

/* ∂ℓ_t/∂W = e_t x_tᵀ */
static int matrix_grad(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                       mi_tensor **g)
{
    g[0] = mi_outer(e, x);
    return g[0] ? 0 : -1;
}

/* The per-token gradient's factors: ∂ℓ_t/∂W = e_t x_tᵀ is already rank one.
 * With them a chunk of the Hebbian memories (whose error does not depend on
 * W, so the chunk rule is the per-token rule) is chunked linear attention,
 * with no per-token copy of W (the recurrence's rank-one chunks). */
static int matrix_grad_factors(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x,
                               mi_tensor *e, mi_tensor **dl, mi_tensor **u)
{
    dl[0] = e;
    u[0] = x;
    return e && x ? 0 : -1;
}

static mi_tensor *matrix_forward_linear(const mi_miras_config *c,
                                        mi_tensor *(*lin)(void *, int, mi_tensor *), void *ctx,
                                        mi_tensor *x)
{
    return lin(ctx, 0, x);
}

const mi_memory_kind mi_memory_matrix = {
    .name = "matrix", .formula = "M(x) = W x",
    .shapes = matrix_shapes, .init = matrix_init, .forward = matrix_forward,
    .grad = matrix_grad, .channel_gates = true,
    .grad_factors = matrix_grad_factors, .forward_linear = matrix_forward_linear,
    .rule = MI_MEMORY_RULE_MATRIX,
};
