/* Sequence ops: causal depthwise conv1d (and its weight gradient), rotary
 * position embedding, scaled-dot-product attention and its mask. Every vjp
 * is written with the public ops, so it is differentiable again. */
#include <stdlib.h>

#include "dnnl_kernels.h"
#include "internal.h"
#include "own_sequence.h"

#define SHAPE(buf, t) mi_shape_str(buf, sizeof buf, (t)->rank, (t)->shape)

/* The REF kernels of conv1d_causal, its weight gradient, rope and the
 * attention mask, per dtype (sequence_impl.h; attention's further down, in
 * attention_impl.h). The math of each is stated there and at its op below. */
#define SEQ_T float
#define SEQ_NAME(x) x##_f32
#include "sequence_impl.h"
#undef SEQ_T
#undef SEQ_NAME
#define SEQ_T double
#define SEQ_NAME(x) x##_f64
#include "sequence_impl.h"
#undef SEQ_T
#undef SEQ_NAME

/* ================================================================ conv1d_causal
 * Depthwise causal convolution, x [B, T, C], w [C, K]:
 *   y[b,t,c] = Σ_j w[c,j]·x[b, t−K+1+j, c]   (x = 0 before t = 0)
 *   dx = flip_T(conv1d_causal(flip_T(g), w)),  dw = conv1d_causal_wgrad(g, x, K) */
static int conv1d_causal_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                               int *rank, int64_t *shape)
{
    mi_tensor *x = in[0], *w = in[1];
    char b1[96], b2[96];
    if (require_float("conv1d_causal", in, 0) != 0 || require_float("conv1d_causal", in, 1) != 0)
        return -1;
    if (x->rank != 3) {
        mi_error_set("conv1d_causal: x must be [B, T, C], got %s", SHAPE(b1, x));
        return -1;
    }
    if (w->rank != 2 || w->shape[0] != x->shape[2] || w->shape[1] < 1) {
        mi_error_set("conv1d_causal: w must be [C, K] with C = %lld and K >= 1, got w %s for x %s",
                     (long long)x->shape[2], SHAPE(b1, w), SHAPE(b2, x));
        return -1;
    }
    return shape_like_first(in, 2, a, dt, rank, shape);
}
static mi_tensor *conv1d_causal_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0], *w = n->inputs[1];
    if (i == 0) return mi_flip(mi_conv1d_causal(mi_flip(g, 1), w), 1);
    return mi_conv1d_causal_wgrad(g, x, w->shape[1]);
}
/* oneDNN's jit depthwise convolution (dnnl_kernels.c) from DNNL_MIN_CONV
 * outputs up; below, REF's loop. Measured (2-core machine, f32, µs per
 * call, median; REF / DNNL), [B, T, C], K = 4:
 *   [1,16,8] 0.21/0.50  [1,32,16] 0.70/0.52  [1,64,32] 3.11/0.62
 *   [4,256,128] 170/9.4  [16,256,128] 698/42.7 (1 thread)  [4,512,512] 1375/81.7 */
#define DNNL_MIN_CONV 512
static mi_backend select_conv(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                              unsigned available)
{
    (void)in, (void)n, (void)a;
    if ((available >> MI_BACKEND_DNNL & 1u) && out->numel >= DNNL_MIN_CONV) return MI_BACKEND_DNNL;
    return MI_BACKEND_REF;
}
static int ex_conv1d_causal(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(2, 5, 3)), in[1] = ex_normal(r, MI_SHAPE(3, 4)); return 2;
    case 1: in[0] = ex_normal(r, MI_SHAPE(1, 3, 1)), in[1] = ex_normal(r, MI_SHAPE(1, 4)); return 2;
    case 2: in[0] = ex_normal(r, MI_SHAPE(3, 4, 2)), in[1] = ex_normal(r, MI_SHAPE(2, 1)); return 2;
    default: return 0;
    }
}
const mi_op mi_op_conv1d_causal = {.name = "conv1d_causal",
                                   .formula = "y[b,t,c] = sum_j w[c,j] x[b,t-K+1+j,c]",
                                   .arity = 2, .shape = conv1d_causal_shape,
                                   KERNELS(conv1d_causal),
                                   .kernel[MI_BACKEND_DNNL][MI_F32] = conv1d_causal_dnnl_f32,
                                   .select = select_conv, .vjp = conv1d_causal_vjp,
                                   .examples = ex_conv1d_causal};
mi_tensor *mi_conv1d_causal(mi_tensor *x, mi_tensor *w)
{
    return RUN(&mi_op_conv1d_causal, NULL, x, w);
}

mi_tensor *mi_conv1d_causal_tail(mi_tensor *x, mi_tensor *w, mi_tensor **tail)
{
    if (!tail || !*tail || !x) return mi_conv1d_causal(x, w);
    mi_tensor *win = mi_concat((mi_tensor *[]){*tail, x}, 2, 1); /* [B, K − 1 + n, C] */
    if (!win) return NULL;
    int64_t m = win->shape[1], n = x->shape[1];
    *tail = mi_slice(win, 1, n, m);
    return mi_slice(mi_conv1d_causal(win, w), 1, m - n, m);
}

/* OWN (own_sequence.c) whenever it is allowed: it is faster at every size. */
static mi_backend select_own(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                             unsigned available)
{
    (void)in, (void)n, (void)a, (void)out;
    return available >> MI_BACKEND_OWN & 1u ? MI_BACKEND_OWN : MI_BACKEND_REF;
}

/* ================================================================ conv1d_causal_wgrad
 * g, x [B, T, C], attrs.index = K → [C, K]:
 *   dw[c,j] = Σ_{b,t} g[b,t,c]·x[b, t−K+1+j, c]
 * Bilinear; with upstream H [C, K]:
 *   d/dg = conv1d_causal(x, H),  d/dx = flip_T(conv1d_causal(flip_T(g), H)) */
static int conv1d_causal_wgrad_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                                     int *rank, int64_t *shape)
{
    mi_tensor *g = in[0], *x = in[1];
    char b1[96], b2[96];
    const char *op = "conv1d_causal_wgrad";
    if (require_float(op, in, 0) != 0 || require_float(op, in, 1) != 0) return -1;
    if (g->rank != 3 || !mi_same_shape(g, x)) {
        mi_error_set("%s: g and x must both be [B, T, C], got g %s and x %s", op, SHAPE(b1, g),
                     SHAPE(b2, x));
        return -1;
    }
    if (a->index < 1) {
        mi_error_set("%s: kernel size K must be >= 1, got %lld", op, (long long)a->index);
        return -1;
    }
    *dt = g->dtype;
    *rank = 2;
    shape[0] = g->shape[2];
    shape[1] = a->index;
    return 0;
}
static mi_tensor *conv1d_causal_wgrad_vjp(const mi_node *n, int i, mi_tensor *h)
{
    mi_tensor *g = n->inputs[0], *x = n->inputs[1];
    if (i == 0) return mi_conv1d_causal(x, h);
    return mi_flip(mi_conv1d_causal(mi_flip(g, 1), h), 1);
}
static int ex_conv1d_causal_wgrad(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const int64_t shapes[3][3] = {{1, 5, 3}, {2, 3, 2}, {3, 2, 1}}, k[3] = {4, 2, 5};
    if (v >= 3) return 0;
    a->index = k[v]; /* K > T in the last one */
    in[0] = ex_normal(r, 3, shapes[v]);
    in[1] = ex_normal(r, 3, shapes[v]);
    return 2;
}
const mi_op mi_op_conv1d_causal_wgrad = {
    .name = "conv1d_causal_wgrad", .formula = "dw[c,j] = sum_{b,t} g[b,t,c] x[b,t-K+1+j,c]",
    .arity = 2, .shape = conv1d_causal_wgrad_shape, KERNELS(conv1d_causal_wgrad),
    .kernel[MI_BACKEND_OWN][MI_F32] = own_conv1d_causal_wgrad_f32, .select = select_own,
    .vjp = conv1d_causal_wgrad_vjp, .examples = ex_conv1d_causal_wgrad};
mi_tensor *mi_conv1d_causal_wgrad(mi_tensor *g, mi_tensor *x, int64_t k)
{
    mi_attrs a = {.index = k};
    return RUN(&mi_op_conv1d_causal_wgrad, &a, g, x);
}

/* ================================================================ rope
 * x [..., T, D] (attrs.axis −2 or 0) or [..., T, H, D] (attrs.axis −3, each
 * head rotated alike), D even, h = D/2, attrs.p = base, attrs.reverse =
 * inverse.
 * For position t and pair (i, i + h), θ = ±t·base^(−2i/D):
 *   y_i     = x_i cos θ − x_{i+h} sin θ
 *   y_{i+h} = x_i sin θ + x_{i+h} cos θ
 * A rotation: dx = rope(g) with the inverse flag flipped. The angles are
 * computed in double for both dtypes (t·freq loses digits in float at long T). */
static int rope_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    mi_tensor *x = in[0];
    char b[96];
    if (require_float("rope", in, 0) != 0) return -1;
    if (a->axis != 0 && a->axis != -2 && a->axis != -3) {
        mi_error_set("rope: the sequence axis must be -2 ([..., T, D]) or -3 ([..., T, H, D]), "
                     "got %d", a->axis);
        return -1;
    }
    if (x->rank < (a->axis == -3 ? 3 : 2)) {
        mi_error_set("rope: x must be %s, got %s", a->axis == -3 ? "[..., T, H, D]" : "[..., T, D]",
                     SHAPE(b, x));
        return -1;
    }
    int64_t d = x->shape[x->rank - 1];
    if (d < 2 || d % 2 != 0) {
        mi_error_set("rope: last dim D must be even and >= 2, got %s", SHAPE(b, x));
        return -1;
    }
    if (!(a->p > 0) || isinf(a->p)) {
        mi_error_set("rope: base must be finite and > 0, got %g", a->p);
        return -1;
    }
    return shape_like_first(in, 1, a, dt, rank, shape);
}
static mi_tensor *rope_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return n->attrs.axis == -3 ? mi_rope_bthd(g, n->attrs.p, !n->attrs.reverse)
                               : mi_rope(g, n->attrs.p, !n->attrs.reverse);
}
static int ex_rope(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(2, 3, 4)), a->p = 10000; return 1;
    case 1: in[0] = ex_normal(r, MI_SHAPE(5, 6)), a->p = 10, a->reverse = true; return 1;
    case 2: in[0] = ex_normal(r, MI_SHAPE(1, 2, 5, 2)), a->p = 3; return 1;
    case 3: in[0] = ex_normal(r, MI_SHAPE(2, 70, 6)), a->p = 10000; return 1; /* T past 64 */
    case 4: /* [B, T, H, D] */
        in[0] = ex_normal(r, MI_SHAPE(2, 5, 3, 4)), a->p = 100, a->axis = -3;
        return 1;
    default: return 0;
    }
}
const mi_op mi_op_rope = {.name = "rope",
                          .formula = "rotate (x_i, x_{i+D/2}) by t * base^(-2i/D)",
                          .arity = 1, .shape = rope_shape, KERNELS(rope),
                          .kernel[MI_BACKEND_OWN][MI_F32] = own_rope_f32, .select = select_own,
                          .vjp = rope_vjp, .examples = ex_rope};
mi_tensor *mi_rope(mi_tensor *x, double base, bool inverse)
{
    mi_attrs a = {.p = base, .reverse = inverse};
    return RUN(&mi_op_rope, &a, x);
}
mi_tensor *mi_rope_bthd(mi_tensor *x, double base, bool inverse)
{
    mi_attrs a = {.p = base, .reverse = inverse, .axis = -3};
    return RUN(&mi_op_rope, &a, x);
}

/* ================================================================ attention_mask
 * One input, used only for its dtype and its [T, S] shape; attrs.causal,
 * attrs.window, attrs.start (the position of query row 0). With p = start + t:
 * out[t,s] = −inf when (causal and s > p) or (window > 0 and s ≤ p − window),
 * else 0. No gradient. */
static int attention_mask_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                                int *rank, int64_t *shape)
{
    char b[96];
    if (require_float("attention_mask", in, 0) != 0) return -1;
    if (in[0]->rank != 2) {
        mi_error_set("attention_mask: input must be [T, S], got %s", SHAPE(b, in[0]));
        return -1;
    }
    if (a->window < 0 || a->start < 0) {
        mi_error_set("attention_mask: %s must be >= 0, got %lld", a->window < 0 ? "window"
                     : "the first query's position", (long long)(a->window < 0 ? a->window
                                                                                : a->start));
        return -1;
    }
    return shape_like_first(in, 1, a, dt, rank, shape);
}
/* The f32-vs-f64 check compares values, and −inf − −inf is NaN there, so
 * these examples keep every entry 0 (S = 1; window ≥ T); the masking itself
 * is tested against a naive loop in tests/test_nn.c. */
static int ex_attention_mask(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = mi_zeros(MI_F64, MI_SHAPE(4, 1)), a->causal = true; return 1;
    case 1: in[0] = mi_zeros(MI_F64, MI_SHAPE(3, 5)), a->window = 3; return 1;
    default: return 0;
    }
}
const mi_op mi_op_attention_mask = {
    .name = "attention_mask", .formula = "-inf where (causal and s > t) or s <= t - window, else 0",
    .arity = 1, .flags = MI_OP_NONDIFF, .shape = attention_mask_shape, KERNELS(attention_mask),
    .examples = ex_attention_mask};
static mi_tensor *attention_mask_at(mi_dtype dt, int64_t t, int64_t s, bool causal,
                                    int64_t window, int64_t first)
{
    if (!mi_dtype_is_float(dt)) {
        mi_error_set("attention_mask: dtype must be f32 or f64, got %s", mi_dtype_name(dt));
        return NULL;
    }
    if (t < 0 || s < 0) {
        mi_error_set("attention_mask: negative size [%lld,%lld]", (long long)t, (long long)s);
        return NULL;
    }
    mi_attrs a = {.causal = causal, .window = window, .start = first};
    return RUN(&mi_op_attention_mask, &a, mi_zeros(dt, 2, (int64_t[]){t, s}));
}
mi_tensor *mi_attention_mask(mi_dtype dt, int64_t t, int64_t s, bool causal, int64_t window)
{
    return attention_mask_at(dt, t, s, causal, window, 0);
}

/* ================================================================ attention
 * q [..., T, D], k [..., S, D], v [..., S, Dv] → [..., T, Dv], sc = 1/√D:
 *   P = softmax(sc·q kᵀ + mask),  y = P v   (mask: attention_mask(causal, window),
 *   query row t at key position attrs.start + t) 
 *   dv = Pᵀ g,  dS = P ⊙ (g vᵀ − Σ_s (g vᵀ) ⊙ P),  dq = sc·dS k,  dk = sc·dSᵀ q
 * The forward kernel (attention_impl.h, per dtype) is one pass with an
 * online softmax (no T×S buffer); the vjp recomputes P with ops (f32 with
 * OWN, not recorded: P and the gradients by own kernels, whose products
 * skip the blocks the mask leaves empty). Every query row must keep at
 * least one key.
 * attrs.axis = −3 (mi_attention_bthd) takes the heads inside the sequence
 * axis instead, q [..., T, H, D], k [..., S, H, D], v [..., S, H, Dv] →
 * [..., T, H, Dv], the layout the projections write (no transposes around
 * the op): the same math per (batch, head), whose rows lie H rows apart. */

/* The sizes of one call: lead = batch entries (× heads), nh = heads between
 * a position's rows (1 unless attrs.axis = −3). */
typedef struct att_dims {
    int64_t nt, ns, d, dv, nh, lead;
} att_dims;

static att_dims att_dims_of(mi_tensor *const *in, const mi_attrs *a)
{
    int rk = in[0]->rank, sx = a->axis == -3 ? rk - 3 : rk - 2;
    att_dims g = {.nt = in[0]->shape[sx], .ns = in[1]->shape[sx], .d = in[0]->shape[rk - 1],
                  .dv = in[2]->shape[rk - 1], .nh = a->axis == -3 ? in[0]->shape[rk - 2] : 1};
    g.lead = g.nt && g.d ? in[0]->numel / (g.nt * g.d) : 0;
    return g;
}

/* Row t of entry l (head l mod nh of sequence l / nh) in a tensor of len rows
 * a sequence. */
static inline int64_t att_row(const att_dims *g, int64_t l, int64_t t, int64_t len)
{
    return ((l / g->nh) * len + t) * g->nh + l % g->nh;
}

#define ATT_T float
#define ATT_NAME(x) x##_f32
#include "attention_impl.h"
#undef ATT_T
#undef ATT_NAME
#define ATT_T double
#define ATT_NAME(x) x##_f64
#include "attention_impl.h"
#undef ATT_T
#undef ATT_NAME

static int attention_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                           int *rank, int64_t *shape)
{
    mi_tensor *q = in[0], *k = in[1], *v = in[2];
    char bq[96], bk[96], bv[96];
    for (int i = 0; i < 3; i++)
        if (require_float("attention", in, i) != 0) return -1;
    SHAPE(bq, q);
    SHAPE(bk, k);
    SHAPE(bv, v);
    int rk = q->rank;
    if (a->axis != 0 && a->axis != -2 && a->axis != -3) {
        mi_error_set("attention: the sequence axis must be -2 ([..., T, D]) or -3 "
                     "([..., T, H, D]), got %d", a->axis);
        return -1;
    }
    bool bthd = a->axis == -3;
    int sx = bthd ? rk - 3 : rk - 2;
    if (rk < (bthd ? 3 : 2) || k->rank != rk || v->rank != rk) {
        if (bthd)
            mi_error_set("attention: q, k, v must be [..., T, H, D], [..., S, H, D], "
                         "[..., S, H, Dv] of one rank >= 3, got q %s k %s v %s", bq, bk, bv);
        else
            mi_error_set("attention: q, k, v must be [..., T, D], [..., S, D], [..., S, Dv] of "
                         "one rank >= 2, got q %s k %s v %s", bq, bk, bv);
        return -1;
    }
    for (int d = 0; d < rk - 1; d++)
        if (d != sx && (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d])) {
            mi_error_set("attention: batch%s dims differ: q %s k %s v %s",
                         bthd ? " or head" : "", bq, bk, bv);
            return -1;
        }
    if (q->shape[rk - 1] != k->shape[rk - 1] || q->shape[rk - 1] < 1) {
        mi_error_set("attention: q and k head dims differ (or are 0): q %s k %s", bq, bk);
        return -1;
    }
    if (k->shape[sx] != v->shape[sx]) {
        mi_error_set("attention: k and v lengths differ: k %s v %s", bk, bv);
        return -1;
    }
    int64_t nt = q->shape[sx], ns = k->shape[sx];
    if (ns < 1) {
        mi_error_set("attention: no keys: k %s", bk);
        return -1;
    }
    if (a->window < 0) {
        mi_error_set("attention: window must be >= 0, got %lld", (long long)a->window);
        return -1;
    }
    if (a->start < 0) {
        mi_error_set("attention: the first query's position must be >= 0, got %lld",
                     (long long)a->start);
        return -1;
    }
    /* the last row reads keys p − window + 1 … min(p, S − 1), p = start + T − 1 */
    if (a->window > 0 && a->start + nt - ns >= a->window) {
        mi_error_set("attention: window %lld leaves query rows with no key: q %s k %s, first "
                     "position %lld (needs first + T <= S + window - 1)", (long long)a->window,
                     bq, bk, (long long)a->start);
        return -1;
    }
    *dt = q->dtype;
    copy_shape(rank, shape, q);
    shape[rk - 1] = v->shape[rk - 1];
    return 0;
}
static int attention_vjp_all(const mi_node *n, mi_tensor *g, const bool *need, mi_tensor **grads);

/* [..., T, H, D] ↔ [..., H, T, D] (swaps axes −3 and −2). */
static mi_tensor *swap_heads(mi_tensor *x)
{
    int perm[MI_MAX_RANK], rk = x ? x->rank : 0;
    for (int d = 0; d < rk; d++) perm[d] = d;
    if (rk >= 3) perm[rk - 3] = rk - 2, perm[rk - 2] = rk - 3;
    return x ? mi_permute(x, perm) : NULL;
}

/* The vjp of the [..., T, H, D] layout with ops (recorded, f64, or OWN not
 * allowed): the [..., H, T, D] one on transposed inputs, its gradients
 * transposed back. */
static int attention_vjp_heads_first(const mi_node *n, mi_tensor *g, const bool *need,
                                     mi_tensor **grads)
{
    mi_node m = *n;
    for (int i = 0; i < 3; i++) m.inputs[i] = swap_heads(n->inputs[i]);
    m.attrs.axis = -2;
    mi_tensor *gt = swap_heads(g), *d[3] = {0};
    if (!gt || !m.inputs[0] || !m.inputs[1] || !m.inputs[2] ||
        attention_vjp_all(&m, gt, need, d) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (need[i] && !(grads[i] = swap_heads(d[i]))) return -1;
    return 0;
}

/* P is recomputed once for the three gradients (vjp_all), from sc·q (a
 * T×D scaling, not a T×S one). */
static int attention_vjp_all(const mi_node *n, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    mi_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    const mi_attrs *a = &n->attrs;
    int rk = q->rank;
    bool own = own_unrecorded_f32(q);
    if (a->axis == -3 && !own && !mi_grad_enabled()) { /* REF's loops, in place */
        mi_tensor *d[3] = {mi_tensor_new(q->dtype, rk, q->shape), mi_tensor_new(q->dtype, rk, k->shape),
                           mi_tensor_new(q->dtype, rk, v->shape)};
        if (!d[0] || !d[1] || !d[2]) return -1;
        int rc = q->dtype == MI_F64 ? attention_grads_f64(n->inputs, g, a, d[0], d[1], d[2])
                                    : attention_grads_f32(n->inputs, g, a, d[0], d[1], d[2]);
        if (rc != 0)
            return mi_error_set("attention: out of memory for the vjp's scratch (2 x %lld)",
                                (long long)k->shape[rk - 3]),
                   -1;
        for (int i = 0; i < 3; i++) grads[i] = need[i] ? d[i] : NULL;
        return 0;
    }
    if (a->axis == -3 && !own) return attention_vjp_heads_first(n, g, need, grads);
    double sc = 1.0 / sqrt((double)q->shape[rk - 1]);
    mi_tensor *qs = NULL, *p;
    if (own) {
        /* not recorded: P a block of rows at a time over the keys they read
         * (the causal half), never T×S (OWN) */
        mi_tensor *d[3] = {mi_tensor_new(MI_F32, rk, q->shape), mi_tensor_new(MI_F32, rk, k->shape),
                           mi_tensor_new(MI_F32, rk, v->shape)};
        if (!d[0] || !d[1] || !d[2] ||
            own_attention_grads_f32(q, k, v, g, a, d[0], d[1], d[2]) != 0)
            return -1;
        for (int i = 0; i < 3; i++) grads[i] = need[i] ? d[i] : NULL;
        return 0;
    } else {
        mi_tensor *s = mi_matmul_t(qs = mi_mul_scalar(q, sc), k, false, true);
        if (a->causal || a->window > 0)
            s = mi_add(s, attention_mask_at(q->dtype, q->shape[rk - 2], k->shape[rk - 2],
                                            a->causal, a->window, a->start));
        p = mi_softmax(s, -1);
    }
    if (need[2] && !(grads[2] = mi_matmul_t(p, g, true, false))) return -1;
    if (!need[0] && !need[1]) return 0;
    mi_tensor *ds = mi_softmax_backward(p, mi_matmul_t(g, v, false, true), -1);
    if (need[0] && !(grads[0] = mi_mul_scalar(mi_matmul(ds, k), sc))) return -1;
    if (need[1] && !(grads[1] = mi_matmul_t(ds, qs, true, false))) return -1;
    return 0;
}
static mi_tensor *attention_vjp(const mi_node *n, int i, mi_tensor *g)
{
    bool need[3] = {i == 0, i == 1, i == 2};
    mi_tensor *grads[3] = {0};
    return attention_vjp_all(n, g, need, grads) == 0 ? grads[i] : NULL;
}
static int ex_attention(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: /* causal, batch of 2 */
        in[0] = ex_normal(r, MI_SHAPE(2, 3, 4));
        in[1] = ex_normal(r, MI_SHAPE(2, 3, 4));
        in[2] = ex_normal(r, MI_SHAPE(2, 3, 2));
        a->causal = true;
        return 3;
    case 1: /* T ≠ S, window only */
        in[0] = ex_normal(r, MI_SHAPE(4, 3));
        in[1] = ex_normal(r, MI_SHAPE(5, 3));
        in[2] = ex_normal(r, MI_SHAPE(5, 1));
        a->window = 2;
        return 3;
    case 2: /* rank 4, causal with window */
        in[0] = ex_normal(r, MI_SHAPE(1, 2, 3, 2));
        in[1] = ex_normal(r, MI_SHAPE(1, 2, 3, 2));
        in[2] = ex_normal(r, MI_SHAPE(1, 2, 3, 3));
        a->causal = true;
        a->window = 2;
        return 3;
    case 3: /* plain */
        in[0] = ex_normal(r, MI_SHAPE(2, 5));
        in[1] = ex_normal(r, MI_SHAPE(3, 5));
        in[2] = ex_normal(r, MI_SHAPE(3, 2));
        return 3;
    case 4: /* two queries at positions 2 and 3 of 5 keys (a cache's last rows unread) */
        in[0] = ex_normal(r, MI_SHAPE(2, 2, 3));
        in[1] = ex_normal(r, MI_SHAPE(2, 5, 3));
        in[2] = ex_normal(r, MI_SHAPE(2, 5, 2));
        a->causal = true;
        a->start = 2;
        return 3;
    case 5: /* first position and window */
        in[0] = ex_normal(r, MI_SHAPE(1, 2, 2, 2));
        in[1] = ex_normal(r, MI_SHAPE(1, 2, 4, 2));
        in[2] = ex_normal(r, MI_SHAPE(1, 2, 4, 3));
        a->causal = true;
        a->window = 2;
        a->start = 2;
        return 3;
    case 6: /* [B, T, H, D]: 2 sequences, 3 heads, causal */
        in[0] = ex_normal(r, MI_SHAPE(2, 4, 3, 2));
        in[1] = ex_normal(r, MI_SHAPE(2, 4, 3, 2));
        in[2] = ex_normal(r, MI_SHAPE(2, 4, 3, 3));
        a->causal = true;
        a->axis = -3;
        return 3;
    case 7: /* [T, H, D] with T ≠ S, a window */
        in[0] = ex_normal(r, MI_SHAPE(3, 2, 2));
        in[1] = ex_normal(r, MI_SHAPE(5, 2, 2));
        in[2] = ex_normal(r, MI_SHAPE(5, 2, 1));
        a->window = 3;
        a->axis = -3;
        return 3;
    default: return 0;
    }
}
/* q kᵀ and P v over the keys each query row reads (the mask's lo … hi, as
 * the forward kernel): 2·(D + Dv) per row and key. */
static uint64_t attention_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                const mi_tensor *out)
{
    (void)n, (void)out;
    att_dims g = att_dims_of(in, a);
    int64_t nt = g.nt, ns = g.ns, w = a->window;
    uint64_t keys = 0;
    for (int64_t t = 0; t < nt; t++) {
        int64_t p = a->start + t;
        int64_t lo = w > 0 && p - w + 1 > 0 ? p - w + 1 : 0;
        int64_t hi = a->causal && p < ns - 1 ? p : ns - 1;
        keys += hi >= lo ? (uint64_t)(hi - lo + 1) : 0;
    }
    return (uint64_t)g.lead * keys * 2u * (uint64_t)(g.d + g.dv);
}

const mi_op mi_op_attention = {.name = "attention",
                               .formula = "softmax(q k^T / sqrt(D) + mask) v", .arity = 3,
                               .shape = attention_shape, KERNELS(attention),
                               .kernel[MI_BACKEND_OWN][MI_F32] = own_attention_f32,
                               .select = select_own, .vjp = attention_vjp,
                               .vjp_all = attention_vjp_all, .examples = ex_attention,
                               .flops = attention_flops};
mi_tensor *mi_attention(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal, int64_t window)
{
    return mi_attention_at(q, k, v, causal, window, 0);
}
mi_tensor *mi_attention_at(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal, int64_t window,
                           int64_t first)
{
    mi_attrs a = {.causal = causal, .window = window, .start = first};
    return RUN(&mi_op_attention, &a, q, k, v);
}
mi_tensor *mi_attention_bthd(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal,
                             int64_t window)
{
    mi_attrs a = {.causal = causal, .window = window, .axis = -3};
    return RUN(&mi_op_attention, &a, q, k, v);
}
