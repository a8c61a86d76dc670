/* Vector memory (MIRAS Table 1, RetNet/Mamba-style diagonal state):
 * M_w(x) = w ⊙ x with w ∈ R^d (dk = dv = d). Closed-form gradient
 * ∂ℓ/∂w = e ⊙ x. */
#include "components.h"

static int vector_shapes(const mi_miras_config *c, int64_t dk, int64_t dv, int *n, int *ranks,
                         int64_t (*shapes)[MI_MAX_RANK])
{
    if (dk != dv) {
        mi_error_set("miras: vector memory needs dk == dv, got %lld and %lld", (long long)dk,
                     (long long)dv);
        return -1;
    }
    *n = 1;
    ranks[0] = 1;
    shapes[0][0] = dv;
    return 0;
}

static int vector_init(const mi_miras_config *c, int64_t dk, int64_t dv, mi_rng *rng, mi_dtype dt,
                       mi_tensor **w)
{
    w[0] = mi_zeros(dt, MI_SHAPE(dv));
    return w[0] ? 0 : -1;
}

static mi_tensor *vector_forward(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x)
{
    return mi_mul(w[0], x);
}

static int vector_grad(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                       mi_tensor **g)
{
    g[0] = mi_mul(e, x);
    return g[0] ? 0 : -1;
}

const mi_memory_kind mi_memory_vector = {
    .name = "vector", .formula = "M(x) = w ⊙ x",
    .shapes = vector_shapes, .init = vector_init, .forward = vector_forward,
    .grad = vector_grad, .channel_gates = true,
};
