/* MIRAS helpers: the nonlinearities of the retention gates and attentional
 * biases that are worth a fused forward loop. Each vjp is the closed-form
 * derivative written with registered ops, so it is itself differentiable.
 *
 * Equations are cited by the LaTeX labels of the MIRAS paper's source (e.g.
 * eq:Elastic, eq:q-norm), which its text version keeps, and by number for
 * Lattice. */
#include "internal.h"
#include "own_kernels.h"

/* ---------------------------------------------------------------- soft_threshold
 * S_λ(x) = sign(x)·max(|x| − λ, 0), λ = attrs.p ≥ 0: the proximal step of the
 * ℓ1 term of the elastic-net retention (MIRAS eq:Elastic, Variant 2 "hard
 * and soft forgetting"; Variant 3; Lattice Eq. 17's ℓ1 prox).
 * vjp: g ⊙ [|x| > λ] (the kinks at ±λ get 0; examples stay away from them). */
UNARY_KERNELS(soft_threshold, x > (scalar_t)a->p    ? x - (scalar_t)a->p
                              : x < -(scalar_t)a->p ? x + (scalar_t)a->p
                                                    : (scalar_t)0)
static int soft_threshold_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                                int *rank, int64_t *shape)
{
    if (require_float("soft_threshold", in, 0) != 0) return -1;
    if (!(a->p >= 0) || isinf(a->p)) {
        mi_error_set("soft_threshold: lambda must be finite and >= 0, got %g", a->p);
        return -1;
    }
    return shape_like_first(in, n, a, dt, rank, shape);
}
static mi_tensor *soft_threshold_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    mi_tensor *x = n->inputs[0];
    return mi_mul(g, mi_gt(mi_abs(x), mi_scalar(x->dtype, n->attrs.p)));
}
/* |x| drawn from [0.05, 0.4] (zeroed) or [0.6, 2] (shrunk) around λ = 0.5,
 * with random signs: never within 0.1 of a kink at ±λ. */
static mi_tensor *ex_around_lambda(mi_rng *r, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_tensor_new(MI_F64, rank, shape);
    if (!t) return NULL;
    for (int64_t k = 0; k < t->numel; k++) {
        double m = mi_rng_below(r, 2) ? 0.05 + 0.35 * mi_rng_uniform(r)
                                      : 0.6 + 1.4 * mi_rng_uniform(r);
        mi_set(t, k, mi_rng_below(r, 2) ? -m : m);
    }
    return mi_requires_grad(t, true);
}
static int ex_soft_threshold(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const int64_t shapes[3][3] = {{3, 5}, {2, 1, 7}, {11}};
    static const int ranks[3] = {2, 3, 1};
    if (v >= 3) return 0;
    in[0] = ex_around_lambda(r, ranks[v], shapes[v]);
    a->p = 0.5;
    return 1;
}
const mi_op mi_op_soft_threshold = {.name = "soft_threshold",
                                    .formula = "sign(x) * max(|x| - lambda, 0)", .arity = 1,
                                    .shape = soft_threshold_shape, KERNELS(soft_threshold),
                                    OWN_F32(soft_threshold, own_select_eltwise),
                                    .vjp = soft_threshold_vjp, .examples = ex_soft_threshold};
/* attrs: p = λ. */
mi_tensor *mi_soft_threshold(mi_tensor *x, double lambda)
{
    mi_attrs a = {.p = lambda};
    return RUN(&mi_op_soft_threshold, &a, x);
}

/* ---------------------------------------------------------------- smooth_sign
 * y = tanh(a·x), a = attrs.p: the smooth Sign(x) ≈ tanh(αx) of Moneta's ℓp
 * attentional bias (MIRAS §"Parallelizable Training", after
 * eq:weight-decay-matmul; the ℓp gradient itself is eq:lp-attentional-bias).
 * vjp: g ⊙ a(1 − y²). */
UNARY_KERNELS(smooth_sign, F(tanh)((scalar_t)a->p * x))
static int smooth_sign_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                             int *rank, int64_t *shape)
{
    if (require_float("smooth_sign", in, 0) != 0) return -1;
    if (!isfinite(a->p)) {
        mi_error_set("smooth_sign: a must be finite, got %g", a->p);
        return -1;
    }
    return shape_like_first(in, n, a, dt, rank, shape);
}
static mi_tensor *smooth_sign_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    mi_tensor *one_minus_y2 = mi_add_scalar(mi_neg(mi_square(n->output)), 1.0);
    return mi_mul_scalar(mi_mul(g, one_minus_y2), n->attrs.p);
}
static int ex_smooth_sign(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 4)); a->p = 2.0; break;
    case 1: in[0] = ex_normal(r, MI_SHAPE(2, 1, 5)); a->p = 0.7; break;
    case 2: in[0] = ex_normal(r, 0, (const int64_t[]){1}); a->p = -1.5; break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_smooth_sign = {.name = "smooth_sign", .formula = "tanh(a * x)", .arity = 1,
                                 .shape = smooth_sign_shape, KERNELS(smooth_sign),
                                 OWN_F32(smooth_sign, own_select_eltwise),
                                 .vjp = smooth_sign_vjp, .examples = ex_smooth_sign};
/* attrs: p = a. */
mi_tensor *mi_smooth_sign(mi_tensor *x, double a)
{
    mi_attrs at = {.p = a};
    return RUN(&mi_op_smooth_sign, &at, x);
}

/* ---------------------------------------------------------------- smooth_abs
 * y = √(x² + ε), ε = attrs.eps > 0: the smooth |x| of the same passage
 * (MIRAS uses ε = 1e-6). vjp: g ⊙ x / y. */
UNARY_KERNELS(smooth_abs, F(sqrt)(x * x + (scalar_t)a->eps))
static int smooth_abs_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                            int *rank, int64_t *shape)
{
    if (require_float("smooth_abs", in, 0) != 0) return -1;
    if (!(a->eps > 0) || isinf(a->eps)) {
        mi_error_set("smooth_abs: eps must be finite and > 0, got %g", a->eps);
        return -1;
    }
    return shape_like_first(in, n, a, dt, rank, shape);
}
static mi_tensor *smooth_abs_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    return mi_div(mi_mul(g, n->inputs[0]), n->output);
}
static int ex_smooth_abs(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 5)); a->eps = 0.1; break;
    case 1: in[0] = ex_away_from_zero(r, MI_SHAPE(2, 1, 4), 0.2, 2.0); a->eps = 1e-3; break;
    case 2: in[0] = ex_normal(r, 0, (const int64_t[]){1}); a->eps = 0.5; break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_smooth_abs = {.name = "smooth_abs", .formula = "sqrt(x^2 + eps)", .arity = 1,
                                .shape = smooth_abs_shape, KERNELS(smooth_abs),
                                OWN_F32(smooth_abs, own_select_eltwise),
                                .vjp = smooth_abs_vjp, .examples = ex_smooth_abs};
/* attrs: eps. */
mi_tensor *mi_smooth_abs(mi_tensor *x, double eps)
{
    mi_attrs a = {.eps = eps};
    return RUN(&mi_op_smooth_abs, &a, x);
}

/* ---------------------------------------------------------------- lq_normalize
 * Moneta's ℓq retention step (MIRAS eq:q-norm, W_t = A_t / ‖A_t‖_q^(q−2),
 * from the ℓq stability gate of Variant 4), per matrix over the last two
 * axes, q = attrs.p > 1, form = attrs.index:
 *   MI_LQ_FROBENIUS  W = A / ‖A‖_F^((q−2)/q)   (the Frobenius norm, default)
 *   MI_LQ_PAPER      W = A / ‖A‖_q^(q−2)       (the paper, entrywise q-norm)
 * Both are W = A·N^(−r) with N = (Σ|A|^p)^(1/p):
 *   FROBENIUS  p = 2, r = (q−2)/q;   PAPER  p = q, r = q − 2.
 * With S = Σ|A|^p + ε = N^p + ε (ε = attrs.eps ≥ 0), W = A·S^(−r/p), and
 *   vjp: ∂L/∂A = S^(−r/p) ⊙ g − r·⟨g, A⟩·S^(−r/p−1) ⊙ |A|^(p−1) ⊙ sign(A)
 * (|A|^(p−1)·sign(A) = A for p = 2). ε, like a LayerNorm's, bounds the
 * derivative where A → 0 (by ε^(−r/p)): with ε = 0 a zero matrix maps to zero
 * and its gradient is undefined. */
#define LQ_KERNEL_T(fname, T)                                                 \
    static void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at) \
    {                                                                         \
        typedef T scalar_t;                                                   \
        const T *A = in[0]->data;                                             \
        T *W = o->data;                                                       \
        bool fro = at->index == MI_LQ_FROBENIUS;                              \
        T q = (T)at->p, p = fro ? (T)2 : q, r = fro ? (q - 2) / q : q - 2;    \
        int64_t mn = o->shape[o->rank - 2] * o->shape[o->rank - 1];           \
        for (int64_t b = 0; b < o->numel / mn; b++) {                         \
            const T *a = A + b * mn;                                          \
            T *w = W + b * mn;                                                \
            T s = (T)at->eps;                                                 \
            for (int64_t k = 0; k < mn; k++)                                  \
                s += fro ? a[k] * a[k] : F(pow)(F(fabs)(a[k]), p);            \
            T scale = s > 0 ? F(pow)(s, -r / p) : (T)0;                       \
            for (int64_t k = 0; k < mn; k++) w[k] = a[k] * scale;             \
        }                                                                     \
    }
LQ_KERNEL_T(lq_normalize_f32, float)
LQ_KERNEL_T(lq_normalize_f64, double)
static int lq_normalize_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                              int *rank, int64_t *shape)
{
    char s[96];
    if (require_float("lq_normalize", in, 0) != 0) return -1;
    if (in[0]->rank < 2) {
        mi_error_set("lq_normalize: needs rank >= 2 (a matrix per leading index), got %s",
                     mi_shape_str(s, sizeof s, in[0]->rank, in[0]->shape));
        return -1;
    }
    if (!(a->p > 1) || isinf(a->p)) {
        mi_error_set("lq_normalize: q must be > 1, got %g", a->p);
        return -1;
    }
    if (!(a->eps >= 0) || isinf(a->eps)) {
        mi_error_set("lq_normalize: eps must be >= 0 and finite, got %g", a->eps);
        return -1;
    }
    if (a->index != MI_LQ_FROBENIUS && a->index != MI_LQ_PAPER) {
        mi_error_set("lq_normalize: form must be MI_LQ_FROBENIUS (0) or MI_LQ_PAPER (1), "
                     "got %lld", (long long)a->index);
        return -1;
    }
    return shape_like_first(in, n, a, dt, rank, shape);
}
static mi_tensor *lq_normalize_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    mi_tensor *A = n->inputs[0];
    bool fro = n->attrs.index == MI_LQ_FROBENIUS;
    double q = n->attrs.p, p = fro ? 2.0 : q, r = fro ? (q - 2) / q : q - 2;
    uint32_t mat = (1u << (A->rank - 1)) | (1u << (A->rank - 2)); /* the last two axes */
    mi_tensor *S, *dir; /* S = N^p and dir = ∂S/∂A / p */
    if (fro) {
        S = mi_sum_axes(mi_square(A), mat, true);
        dir = A;
    } else {
        mi_tensor *absA = mi_abs(A);
        S = mi_sum_axes(mi_pow_scalar(absA, p), mat, true);
        dir = mi_mul(mi_pow_scalar(absA, p - 1), mi_sign(A));
    }
    if (n->attrs.eps > 0) S = mi_add_scalar(S, n->attrs.eps);
    mi_tensor *gA = mi_sum_axes(mi_mul(g, A), mat, true);                     /* ⟨g, A⟩ */
    mi_tensor *first = mi_mul(g, mi_pow_scalar(S, -r / p));
    mi_tensor *coef = mi_mul_scalar(mi_mul(gA, mi_pow_scalar(S, -r / p - 1)), r);
    return mi_sub(first, mi_mul(coef, dir));
}
static int ex_lq_normalize(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = ex_away_from_zero(r, MI_SHAPE(3, 4), 0.3, 1.5);
        a->p = 4;
        a->index = MI_LQ_FROBENIUS;
        break;
    case 1:
        in[0] = ex_away_from_zero(r, MI_SHAPE(2, 3, 2), 0.3, 1.5);
        a->p = 3;
        a->index = MI_LQ_PAPER;
        break;
    case 2:
        in[0] = ex_away_from_zero(r, MI_SHAPE(2, 1, 2, 5), 0.3, 1.5);
        a->p = 1.5;
        a->index = MI_LQ_PAPER;
        break;
    case 3: /* a small matrix, where ε matters (Σ|A|² ≈ ε) */
        in[0] = ex_away_from_zero(r, MI_SHAPE(2, 3), 0.01, 0.05);
        a->p = 4;
        a->index = MI_LQ_FROBENIUS;
        a->eps = 1e-3;
        break;
    case 4:
        in[0] = ex_away_from_zero(r, MI_SHAPE(3, 2), 0.01, 0.05);
        a->p = 3;
        a->index = MI_LQ_PAPER;
        a->eps = 1e-5;
        break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_lq_normalize = {.name = "lq_normalize",
                                  .formula = "A / ||A||_F^((q-2)/q) or A / ||A||_q^(q-2)",
                                  .arity = 1, .shape = lq_normalize_shape,
                                  KERNELS(lq_normalize), .vjp = lq_normalize_vjp,
                                  OWN_F32(lq_normalize, own_select_reduce),
                                  .examples = ex_lq_normalize};
/* attrs: p = q, index = form, eps. */
mi_tensor *mi_lq_normalize(mi_tensor *A, double q, int form, double eps)
{
    mi_attrs a = {.p = q, .index = form, .eps = eps};
    return RUN(&mi_op_lq_normalize, &a, A);
}

/* ---------------------------------------------------------------- sphere_retract
 * y = (s + d) / ‖s + d‖₂ along the last axis: Lattice's normalised projection
 * onto the unit sphere, s_t = P_C(s_{t−1} + Δs_t) (Lattice Eq. 11), a
 * retraction step of Riemannian gradient descent (its Proposition 2.1).
 * With u = s + d: vjp (both inputs) ∂L/∂u = (g − y⟨g, y⟩) / ‖u‖.
 * A row with u = 0 maps to 0 (no direction); its gradient is undefined. */
#define RETRACT_KERNEL_T(fname, T)                                            \
    static void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at) \
    {                                                                         \
        (void)at;                                                             \
        typedef T scalar_t;                                                   \
        const T *S = in[0]->data, *D = in[1]->data;                           \
        T *Y = o->data;                                                       \
        int64_t n = o->shape[o->rank - 1];                                    \
        for (int64_t b = 0; b < o->numel / n; b++) {                          \
            const T *s = S + b * n, *d = D + b * n;                           \
            T *y = Y + b * n;                                                 \
            T ss = 0;                                                         \
            for (int64_t k = 0; k < n; k++) {                                 \
                y[k] = s[k] + d[k];                                           \
                ss += y[k] * y[k];                                            \
            }                                                                 \
            T inv = ss > 0 ? 1 / F(sqrt)(ss) : (T)0;                          \
            for (int64_t k = 0; k < n; k++) y[k] *= inv;                      \
        }                                                                     \
    }
RETRACT_KERNEL_T(sphere_retract_f32, float)
RETRACT_KERNEL_T(sphere_retract_f64, double)
static int sphere_retract_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                                int *rank, int64_t *shape)
{
    char s0[96], s1[96];
    if (require_float("sphere_retract", in, 0) != 0 || require_float("sphere_retract", in, 1) != 0)
        return -1;
    if (!mi_same_shape(in[0], in[1])) {
        mi_error_set("sphere_retract: s and d shapes differ: %s vs %s",
                     mi_shape_str(s0, sizeof s0, in[0]->rank, in[0]->shape),
                     mi_shape_str(s1, sizeof s1, in[1]->rank, in[1]->shape));
        return -1;
    }
    if (in[0]->rank < 1) {
        mi_error_set("sphere_retract: needs rank >= 1 (rows along the last axis), got %s",
                     mi_shape_str(s0, sizeof s0, in[0]->rank, in[0]->shape));
        return -1;
    }
    return shape_like_first(in, n, a, dt, rank, shape);
}
static mi_tensor *sphere_retract_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    mi_tensor *y = n->output, *u = mi_add(n->inputs[0], n->inputs[1]);
    mi_tensor *inv_norm = mi_rsqrt(mi_sum(mi_square(u), -1, true));
    mi_tensor *gy = mi_sum(mi_mul(g, y), -1, true); /* ⟨g, y⟩ per row */
    return mi_mul(mi_sub(g, mi_mul(y, gy)), inv_norm);
}
/* |s| ≥ 0.5 per entry and |d| ≤ 0.3: ‖s + d‖ ≥ 0.2·√n, far from 0. */
static int ex_sphere_retract(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    (void)a;
    static const int64_t shapes[3][3] = {{3, 4}, {5}, {2, 1, 3}};
    static const int ranks[3] = {2, 1, 3};
    if (v >= 3) return 0;
    in[0] = ex_away_from_zero(r, ranks[v], shapes[v], 0.5, 1.5);
    in[1] = ex_uniform(r, ranks[v], shapes[v], -0.3, 0.3);
    return 2;
}
const mi_op mi_op_sphere_retract = {.name = "sphere_retract",
                                    .formula = "(s + d) / ||s + d||_2 along the last axis",
                                    .arity = 2, .shape = sphere_retract_shape,
                                    KERNELS(sphere_retract), .vjp = sphere_retract_vjp,
                                    OWN_F32(sphere_retract, own_select_rows),
                                    .examples = ex_sphere_retract};
mi_tensor *mi_sphere_retract(mi_tensor *s, mi_tensor *d)
{
    return RUN(&mi_op_sphere_retract, NULL, s, d);
}
