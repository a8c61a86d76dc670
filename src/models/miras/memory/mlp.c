/* MLP memory (MIRAS §"MIRAS's Variants": Moneta, Yaad, Memora, M(x) =
 * x + LN(W_1 σ(W_2 x)); Titans' deep memory), post-norm:
 *
 *   depth 2:  M(x) = x + LN(W_1 σ(W_2 x))
 *   depth L:  M(x) = x + LN(W_1 σ(W_2 σ(… σ(W_L x))))      depth 1: x + LN(W_1 x)
 *
 * σ is GELU in its exact erf form, the hidden width is h = mlp_expansion · dk,
 * and LN normalises the last axis with no affine parameters and eps 1e-5
 * (the papers' LN has a gain and bias; here they would be outer parameters
 * the inner loop does not write, so the memory leaves them out). The
 * residual needs dk == dv.
 *
 * Weights, in the order of the list (the papers' numbering, output first):
 *   w[0] = W_1 [dv, h]   the output layer (depth 1: [dv, dk])
 *   w[l] = W_{l+1} [h, h] the middle layers, 0 < l < L−1
 *   w[L−1] = W_L [h, dk] the input layer
 * each an [out, in] matrix acting on column vectors. Depth ≤ 8
 * (MI_MEMORY_MAX_WEIGHTS).
 *
 * init: W ~ N(0, 1/fan_in) (LeCun normal), not a fixed N(0, 0.02): with 0.02,
 * unit-norm keys and expansion 4 the pre-LN variance is about 3e-7, 2e-6,
 * 1e-5 for dk = 4, 16, 64, i.e. at or below eps, where LN's Jacobian reaches
 * 1/√eps ≈ 316 and the inner step size depends on eps; 1/fan_in keeps the
 * pre-LN variance O(1) at any width. A caller who wants N(0, 0.02) passes
 * its own W_0.
 *
 * Channel-wise gates (MIRAS "Channel-wise Parameters" makes η_t, α_t
 * channel-wise): one η, α, μ per output unit (row) of each layer,
 * [N, T, dv + (L − 1)·h] in the order of the weights (W_1's dv rows, then
 * W_2's h, …), so a step and a decay scale row j of W_l, Diag(η_{l,t})
 * ∇_{W_l}ℓ and Diag(α_{l,t}) W_l, as the matrix memory's value rows.
 * recurrence.c cuts each weight's part; the chunked rank-one path (no copy
 * of W per token) takes per-head gates only, so a chunk with channel-wise
 * gates keeps one W per token (the same rule, more memory).
 *
 * The closed-form gradient (the fast path) is the backward pass by hand, for
 * any depth, with a_l = W_l u_l (u_L = x, u_l = σ(a_{l+1})) and e = ∂ℓ/∂y:
 *   δ_1 = (1/s)(e − mean(e) − ẑ·mean(e ⊙ ẑ)),  ẑ = LN(a_1), s = √(var(a_1) + eps)
 *   ∂ℓ/∂W_l = δ_l u_lᵀ
 *   δ_{l+1} = σ'(a_{l+1}) ⊙ W_lᵀ δ_l,  σ'(a) = Φ(a) + a φ(a)
 * written with ops, so the outer loop differentiates through it. */
#include <math.h>

#include "components.h"
#include "ops/fused.h"

#define MLP_LN_EPS 1e-5

static int mlp_shapes(const mi_miras_config *c, int64_t dk, int64_t dv, int *n, int *ranks,
                      int64_t (*shapes)[MI_MAX_RANK])
{
    int depth = c->mlp_depth;
    if (dk != dv) {
        mi_error_set("miras: mlp memory needs dk == dv for its residual x + LN(...), got %lld "
                     "and %lld", (long long)dk, (long long)dv);
        return -1;
    }
    if (depth < 1 || depth > MI_MEMORY_MAX_WEIGHTS || c->mlp_expansion < 1) {
        mi_error_set("miras: mlp memory needs 1 <= depth <= %d and expansion >= 1, got depth %d "
                     "and expansion %d", MI_MEMORY_MAX_WEIGHTS, depth, c->mlp_expansion);
        return -1;
    }
    int64_t h = (int64_t)c->mlp_expansion * dk;
    *n = depth;
    for (int l = 0; l < depth; l++) {
        ranks[l] = 2;
        shapes[l][0] = l == 0 ? dv : h;          /* out */
        shapes[l][1] = l == depth - 1 ? dk : h;  /* in */
    }
    return 0;
}

static int mlp_init(const mi_miras_config *c, int64_t dk, int64_t dv, mi_rng *rng, mi_dtype dt,
                    mi_tensor **w)
{
    int n, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (mlp_shapes(c, dk, dv, &n, ranks, shapes) != 0) return -1;
    for (int l = 0; l < n; l++) {
        w[l] = mi_randn(rng, dt, 2, shapes[l], 0, 1 / sqrt((double)shapes[l][1]));
        if (!w[l]) return -1;
    }
    return 0;
}

/* a = W u with W [N, n_w, out, in] and u [N, n, in] → [N, n, out]. A W shared
 * by the chunk (n_w = 1) multiplies the n inputs as one matrix, u Wᵀ, so
 * that the gradient of W comes back as [N, out, in], not one per token. */
static mi_tensor *apply(mi_tensor *w, mi_tensor *u)
{
    if (w->shape[1] == 1 && u->shape[1] > 1)
        return mi_matmul_t(u, mi_squeeze(w, 1), false, true);
    return mi_squeeze(mi_matmul(w, mi_unsqueeze(u, -1)), -1);
}

/* Wᵀ δ with W [N, n_w, out, in] and δ [N, n, out] → [N, n, in], likewise. */
static mi_tensor *apply_t(mi_tensor *w, mi_tensor *d)
{
    if (w->shape[1] == 1 && d->shape[1] > 1) return mi_matmul(d, mi_squeeze(w, 1));
    return mi_squeeze(mi_matmul_t(w, mi_unsqueeze(d, -1), true, false), -1);
}

/* y = x + LN(W_1 σ(… σ(W_L x))) */
static mi_tensor *mlp_forward(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x)
{
    mi_tensor *u = x;
    for (int l = c->mlp_depth - 1; l > 0; l--) u = mi_gelu(apply(w[l], u));
    return mi_add(x, mi_layer_norm(apply(w[0], u), MLP_LN_EPS));
}

/* The factors of the per-token gradients: ∂ℓ_t/∂W_{l+1} = δ_{l+1} u_{l+1}ᵀ with
 * delta[l] [N, n, out] and u[l] [N, n, in] (the layer's output-side error and input),
 * for the error e, or (e NULL) err(ctx, y) of the forward's y = x + LN(a_1). */
static int factors(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                   mi_tensor *(*err)(void *ctx, mi_tensor *y), void *ctx, mi_tensor **dl,
                   mi_tensor **u)
{
    int depth = c->mlp_depth;
    if (depth < 1 || depth > MI_MEMORY_MAX_WEIGHTS) {
        mi_error_set("miras: mlp memory depth %d outside [1, %d]", depth, MI_MEMORY_MAX_WEIGHTS);
        return -1;
    }
    /* forward, keeping each layer's input u[l] and pre-activation a[l] (of w[l]) */
    mi_tensor *a[MI_MEMORY_MAX_WEIGHTS];
    u[depth - 1] = x;
    for (int l = depth - 1; l >= 0; l--) {
        a[l] = apply(w[l], u[l]);
        if (l > 0) u[l - 1] = mi_gelu(a[l]);
    }
    if (!e) e = err(ctx, mi_add(x, mi_layer_norm(a[0], MLP_LN_EPS)));
    /* LN backward: δ_1 = r (e − mean(e) − ẑ mean(e ⊙ ẑ)), r = 1/√(var(a_1) + eps),
     * as the fused layer_norm_backward op (differentiable, so the outer loop
     * trains through it; one saved tensor where the composed form kept ten) */
    mi_tensor *delta = mi_layer_norm_backward(a[0], e, MLP_LN_EPS);
    for (int l = 0; l < depth; l++) {
        if (!(dl[l] = delta) || !u[l]) return -1;
        if (l + 1 < depth) {
            /* δ_{l+2} = σ'(a_{l+2}) ⊙ W_{l+1}ᵀ δ_{l+1}, σ'(a) = Φ(a) + a φ(a): the
             * fused gelu_backward op */
            delta = mi_gelu_backward(a[l + 1], apply_t(w[l], delta));
        }
    }
    return 0;
}

static int mlp_grad_factors(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x,
                            mi_tensor *e, mi_tensor **dl, mi_tensor **u)
{
    return e ? factors(c, w, x, e, NULL, NULL, dl, u) : -1;
}

static int mlp_grad_factors_of(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x,
                               mi_tensor *(*err)(void *ctx, mi_tensor *y), void *ctx,
                               mi_tensor **dl, mi_tensor **u)
{
    return factors(c, w, x, NULL, err, ctx, dl, u);
}

/* g[l] = ∂ℓ_t/∂W_{l+1} = δ_{l+1} u_{l+1}ᵀ per token, [N, n, out, in] */
static int mlp_grad(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                    mi_tensor **g)
{
    mi_tensor *dl[MI_MEMORY_MAX_WEIGHTS], *u[MI_MEMORY_MAX_WEIGHTS];
    if (mlp_grad_factors(c, w, x, e, dl, u) != 0) return -1;
    for (int l = 0; l < c->mlp_depth; l++)
        if (!(g[l] = mi_outer(dl[l], u[l]))) return -1;
    return 0;
}

/* The forward with each layer's linear map given: a_l = lin(ctx, l, u_l). */
static mi_tensor *mlp_forward_linear(const mi_miras_config *c,
                                     mi_tensor *(*lin)(void *, int, mi_tensor *), void *ctx,
                                     mi_tensor *x)
{
    mi_tensor *u = x;
    for (int l = c->mlp_depth - 1; l > 0; l--) u = mi_gelu(lin(ctx, l, u));
    return mi_add(x, mi_layer_norm(lin(ctx, 0, u), MLP_LN_EPS));
}

const mi_memory_kind mi_memory_mlp = {
    .name = "mlp", .formula = "M(x) = x + LN(W1 gelu(W2 ... gelu(WL x)))",
    .shapes = mlp_shapes, .init = mlp_init, .forward = mlp_forward,
    .grad = mlp_grad, .channel_gates = true,
    .grad_factors = mlp_grad_factors, .grad_factors_of = mlp_grad_factors_of,
    .forward_linear = mlp_forward_linear,
    .rule = MI_MEMORY_RULE_MLP,
};
