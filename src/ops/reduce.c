/* Reductions along axes: sum, mean, max, logsumexp, p-norm, and sum_to (the
 * adjoint of broadcast_to, which the engine uses to un-broadcast gradients).
 *
 * Attributes: attrs.axes is a bit mask of the (non-negative) axes to reduce,
 * 0 meaning every axis; attrs.keepdim keeps reduced axes with size 1. norm
 * reads attrs.p; sum_to reads attrs.rank and attrs.shape. The public wrappers
 * take an `int axis` (negative counts from the end, MI_ALL = every axis).
 *
 * Kernels accumulate in double for both dtypes. The vjps view g at the
 * keepdim shape, so it broadcasts against x. */
#include "internal.h"
#include "own_kernels.h"

/* ---------------------------------------------------------------- the reduction walk
 * x's axes are split into kept and reduced ones; size-1 axes are dropped and
 * neighbours of the same kind merged, so e.g. [B, T, C] reduced over {0, 1}
 * becomes one reduced run of B·T (stride C) and one kept run of C (stride 1).
 * Outputs are visited in row-major order of the kept axes. */
typedef struct red_plan {
    int nk, nr;                                  /* kept / reduced runs */
    int64_t ks[MI_MAX_RANK], kst[MI_MAX_RANK];   /* kept sizes, strides in x */
    int64_t rs[MI_MAX_RANK], rst[MI_MAX_RANK];   /* reduced sizes, strides */
    bool inner_reduced;                          /* the stride-1 run is reduced */
    int64_t count;                               /* elements reduced into each output */
} red_plan;

static uint32_t full_mask(int rank) { return rank ? (uint32_t)((1u << rank) - 1u) : 0u; }
static uint32_t eff_mask(int rank, uint32_t axes) { return axes ? axes : full_mask(rank); }

static void plan_build(red_plan *pl, const mi_tensor *x, uint32_t mask)
{
    int64_t st[MI_MAX_RANK];
    mi_strides(x->rank, x->shape, st);
    memset(pl, 0, sizeof *pl);
    pl->count = 1;
    int last = -1; /* kind of the previous run: 0 kept, 1 reduced */
    for (int d = 0; d < x->rank; d++) {
        int red = (mask >> d) & 1u;
        if (red) pl->count *= x->shape[d];
        if (x->shape[d] == 1) continue;
        int64_t *s = red ? pl->rs : pl->ks, *t = red ? pl->rst : pl->kst;
        int *n = red ? &pl->nr : &pl->nk;
        if (red == last) {
            s[*n - 1] *= x->shape[d];
        } else {
            s[*n] = x->shape[d];
            (*n)++;
        }
        t[*n - 1] = st[d];
        last = red;
    }
    if (last < 0) { /* one element: a kept run of 1 */
        pl->nk = 1;
        pl->ks[0] = 1;
        pl->kst[0] = 1;
    }
    pl->inner_reduced = last == 1;
}

/* Advances a row-major multi-index over n axes, tracking the offset. */
static inline void odo_next(int64_t *idx, int64_t *off, const int64_t *size,
                            const int64_t *stride, int n)
{
    for (int d = n - 1; d >= 0; d--) {
        *off += stride[d];
        if (++idx[d] < size[d]) return;
        *off -= stride[d] * size[d];
        idx[d] = 0;
    }
}

static int64_t prod(const int64_t *s, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    return p;
}

/* ---------------------------------------------------------------- the passes
 * A pass (reduce_impl.h, per dtype) computes
 *   y[o] = finish(A, C, s)  over  A = init; for each x reduced into o: A = step(A, x, C, s)
 * in double, C being y[o]'s value on entry for a second pass (cen) and s a
 * parameter:
 *   sum      A = Σ x                                 (init 0)
 *   mean     A = Σ x, then A / s (s = the count)     (init 0)
 *   max      A = max x, keeping a NaN once seen      (init −∞)
 *   maxabs   A = max |x|, keeping a NaN once seen    (init 0)
 *   sumexp   A = Σ exp(x − C), then C + log A        (C = max x; C itself when ±∞)
 *   norm1    A = Σ |x|
 *   norm2    A = Σ x², then √A
 *   normp    A = Σ (|x| / C)^s, then C · A^(1/s)     (C = max|x| against overflow;
 *                                                     C itself when 0 or ∞)
 * The step and finish functions are always inlined (the passes pass them
 * as constants). */
#define RED_BLOCK 256 /* kept stride-1 outputs accumulated at once */
typedef double (*red_step_fn)(double A, double x, double C, double s);
typedef double (*red_finish_fn)(double A, double C, double s);
static inline double red_add(double A, double x, double C, double s) { return A + x; }
static inline double red_max(double A, double x, double C, double s)
{
    return x > A || x != x ? x : A;
}
static inline double red_maxabs(double A, double x, double C, double s)
{
    return fabs(x) > A || x != x ? fabs(x) : A;
}
static inline double red_add_abs(double A, double x, double C, double s) { return A + fabs(x); }
static inline double red_add_sq(double A, double x, double C, double s) { return A + x * x; }
static inline double red_add_powabs(double A, double x, double C, double s)
{
    return A + pow(fabs(x) / C, s);
}
static inline double red_same(double A, double C, double s) { return A; }
static inline double red_div_s(double A, double C, double s) { return A / s; }
static inline double red_sqrt(double A, double C, double s) { return sqrt(A); }
static inline double red_lse(double A, double C, double s) { return isinf(C) ? C : C + log(A); }
static inline double red_normp(double A, double C, double s)
{
    return (C == 0 || isinf(C)) ? C : C * pow(A, 1.0 / s);
}
#define RED_T float
#define RED_NAME(x) x##_f32
#include "reduce_impl.h"
#undef RED_T
#undef RED_NAME
#define RED_T double
#define RED_NAME(x) x##_f64
#include "reduce_impl.h"
#undef RED_T
#undef RED_NAME

/* ---------------------------------------------------------------- shape rules */
static void keepdim_shape(const mi_tensor *x, uint32_t axes, int64_t *shape)
{
    uint32_t m = eff_mask(x->rank, axes);
    for (int d = 0; d < x->rank; d++) shape[d] = (m >> d) & 1u ? 1 : x->shape[d];
}

static int reduce_shape(const char *op, mi_tensor *const *in, const mi_attrs *a, mi_dtype *dt,
                        int *rank, int64_t *shape)
{
    const mi_tensor *x = in[0];
    if (require_float(op, in, 0) != 0) return -1;
    if (a->axes & ~full_mask(x->rank)) {
        char b[96];
        mi_error_set("%s: axes mask 0x%x names axes beyond rank %d of %s", op,
                     (unsigned)a->axes, x->rank, mi_shape_str(b, sizeof b, x->rank, x->shape));
        return -1;
    }
    uint32_t m = eff_mask(x->rank, a->axes);
    *dt = x->dtype;
    *rank = 0;
    for (int d = 0; d < x->rank; d++) {
        if (!((m >> d) & 1u)) shape[(*rank)++] = x->shape[d];
        else if (a->keepdim) shape[(*rank)++] = 1;
    }
    return 0;
}

static int64_t reduce_count(const mi_tensor *x, uint32_t axes)
{
    uint32_t m = eff_mask(x->rank, axes);
    int64_t c = 1;
    for (int d = 0; d < x->rank; d++)
        if ((m >> d) & 1u) c *= x->shape[d];
    return c;
}

/* g (or the output) viewed at the keepdim shape of x. */
static mi_tensor *keep_view(const mi_node *n, mi_tensor *t)
{
    const mi_tensor *x = n->inputs[0];
    if (!t) return NULL;
    int64_t s[MI_MAX_RANK];
    keepdim_shape(x, n->attrs.axes, s);
    if (t->rank == x->rank && memcmp(t->shape, s, sizeof(int64_t) * (size_t)x->rank) == 0)
        return t;
    return mi_reshape(t, x->rank, s);
}

/* The wrappers: an int axis (negative from the end, MI_ALL) to a mask. */
static mi_tensor *reduce_call(const mi_op *op, mi_tensor *x, int axis, bool keepdim, double p)
{
    mi_attrs a = {.keepdim = keepdim, .p = p};
    if (x && axis != MI_ALL) {
        int ax = axis_norm(op->name, axis, x->rank);
        if (ax < 0) return NULL;
        a.axes = 1u << ax;
    }
    return RUN(op, &a, x);
}

/* Kernels: a plan from x and the mask, then one or two passes. */
#define RED_KERNEL(name, BODY)                                                      \
    static void name##_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)   \
    {                                                                               \
        typedef float T;                                                            \
        red_plan pl;                                                                \
        plan_build(&pl, in[0], eff_mask(in[0]->rank, a->axes));                     \
        const T *X = in[0]->data;                                                   \
        T *Y = o->data;                                                             \
        BODY(f32)                                                                   \
    }                                                                               \
    static void name##_f64(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)   \
    {                                                                               \
        typedef double T;                                                           \
        red_plan pl;                                                                \
        plan_build(&pl, in[0], eff_mask(in[0]->rank, a->axes));                     \
        const T *X = in[0]->data;                                                   \
        T *Y = o->data;                                                             \
        BODY(f64)                                                                   \
    }

/* ---------------------------------------------------------------- sum
 * y = Σ_axes x;   dx = broadcast(g) */
#define SUM_BODY(sfx) pass_sum_##sfx(&pl, X, Y, 0);
RED_KERNEL(sum, SUM_BODY)
static int sum_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                     int64_t *shape)
{
    return reduce_shape("sum", in, a, dt, rank, shape);
}
static mi_tensor *sum_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    return mi_broadcast_to(keep_view(n, g), x->rank, x->shape);
}

/* Examples shared by sum and mean: a row reduction, two axes of a rank-4
 * tensor with size-1 axes (keepdim), everything (rank-0 result), a rank-0 x. */
static int ex_reduce(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 5)); a->axes = 1u << 1; break;
    case 1:
        in[0] = ex_normal(r, MI_SHAPE(2, 1, 3, 2));
        a->axes = (1u << 0) | (1u << 2);
        a->keepdim = true;
        break;
    case 2: in[0] = ex_normal(r, MI_SHAPE(4, 3)); break;
    case 3: in[0] = ex_normal(r, 0, NULL); break;
    default: return 0;
    }
    return 1;
}

const mi_op mi_op_sum = {.name = "sum", .formula = "y = sum_axes x", .arity = 1,
                         .shape = sum_shape, KERNELS(sum), .vjp = sum_vjp,
                         OWN_F32(sum, own_select_reduce),
                         .examples = ex_reduce};
mi_tensor *mi_sum(mi_tensor *x, int axis, bool keepdim)
{
    return reduce_call(&mi_op_sum, x, axis, keepdim, 0);
}
mi_tensor *mi_sum_axes(mi_tensor *x, uint32_t axes_mask, bool keepdim)
{
    mi_attrs a = {.axes = axes_mask, .keepdim = keepdim};
    return RUN(&mi_op_sum, &a, x);
}

/* ---------------------------------------------------------------- sum_to
 * y = x summed over its leading axes and over the axes where shape has 1:
 * the adjoint of broadcast_to;   dx = broadcast_to(g, x.shape) */
static uint32_t sum_to_mask(const mi_tensor *x, int rank, const int64_t *shape)
{
    uint32_t m = 0;
    int lead = x->rank - rank;
    for (int d = 0; d < x->rank; d++)
        if (d < lead || (shape[d - lead] == 1 && x->shape[d] != 1)) m |= 1u << d;
    return m;
}
static void sum_to_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    red_plan pl;
    plan_build(&pl, in[0], sum_to_mask(in[0], a->rank, a->shape));
    pass_sum_f32(&pl, in[0]->data, o->data, 0);
}
static void sum_to_f64(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    red_plan pl;
    plan_build(&pl, in[0], sum_to_mask(in[0], a->rank, a->shape));
    pass_sum_f64(&pl, in[0]->data, o->data, 0);
}
static int sum_to_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                        int64_t *shape)
{
    const mi_tensor *x = in[0];
    if (require_float("sum_to", in, 0) != 0) return -1;
    if (a->rank < 0 || a->rank > MI_MAX_RANK) {
        mi_error_set("sum_to: target rank %d outside 0..%d", a->rank, MI_MAX_RANK);
        return -1;
    }
    bool ok = a->rank <= x->rank;
    for (int d = 0; ok && d < a->rank; d++) {
        int64_t t = a->shape[d], s = x->shape[x->rank - a->rank + d];
        ok = t == s || t == 1;
    }
    if (!ok) {
        char b1[96], b2[96];
        mi_error_set("sum_to: %s cannot be summed to %s",
                     mi_shape_str(b1, sizeof b1, x->rank, x->shape),
                     mi_shape_str(b2, sizeof b2, a->rank, a->shape));
        return -1;
    }
    *dt = x->dtype;
    *rank = a->rank;
    memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->rank);
    return 0;
}
static mi_tensor *sum_to_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    return mi_broadcast_to(g, x->rank, x->shape);
}
static int ex_sum_to(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const int64_t xs[4][3] = {{2, 3, 4}, {2, 4, 3}, {5}, {3, 4}};
    static const int64_t ts[4][3] = {{3, 1}, {1, 4, 1}, {0}, {3, 4}};
    static const int xr[4] = {3, 3, 1, 2}, tr[4] = {2, 3, 0, 2};
    if (v >= 4) return 0;
    in[0] = ex_normal(r, xr[v], xs[v]);
    a->rank = tr[v];
    memcpy(a->shape, ts[v], sizeof(int64_t) * (size_t)tr[v]);
    return 1;
}
const mi_op mi_op_sum_to = {.name = "sum_to",
                            .formula = "y = x summed to shape (adjoint of broadcast_to)",
                            .arity = 1, .shape = sum_to_shape, KERNELS(sum_to),
                            OWN_F32(sum_to, own_select_reduce),
                            .vjp = sum_to_vjp, .examples = ex_sum_to};
mi_tensor *mi_sum_to(mi_tensor *x, int rank, const int64_t *shape)
{
    if (rank < 0 || rank > MI_MAX_RANK) {
        mi_error_set("sum_to: target rank %d outside 0..%d", rank, MI_MAX_RANK);
        return NULL;
    }
    if (rank > 0 && !shape) {
        mi_error_set("sum_to: target shape is NULL (rank %d)", rank);
        return NULL;
    }
    mi_attrs a = {.rank = rank};
    if (rank > 0) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)rank);
    return RUN(&mi_op_sum_to, &a, x);
}

/* ---------------------------------------------------------------- mean
 * y = Σ_axes x / N;   dx = broadcast(g) / N */
#define MEAN_BODY(sfx) pass_mean_##sfx(&pl, X, Y, (double)pl.count);
RED_KERNEL(mean, MEAN_BODY)
static int mean_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    return reduce_shape("mean", in, a, dt, rank, shape);
}
static mi_tensor *mean_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    if (!g) return NULL;
    double inv = 1.0 / (double)reduce_count(x, n->attrs.axes);
    mi_tensor *gs = mi_mul(keep_view(n, g), mi_scalar(g->dtype, inv));
    return mi_broadcast_to(gs, x->rank, x->shape);
}
const mi_op mi_op_mean = {.name = "mean", .formula = "y = sum_axes x / N", .arity = 1,
                          .shape = mean_shape, KERNELS(mean), .vjp = mean_vjp,
                          OWN_F32(mean, own_select_reduce),
                          .examples = ex_reduce};
mi_tensor *mi_mean(mi_tensor *x, int axis, bool keepdim)
{
    return reduce_call(&mi_op_mean, x, axis, keepdim, 0);
}

/* ---------------------------------------------------------------- max
 * y = max_axes x;   dx = g · [x == y] (ties send g to every maximum) */
#define MAX_BODY(sfx) pass_max_##sfx(&pl, X, Y, 0);
RED_KERNEL(max, MAX_BODY)
static int max_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                     int64_t *shape)
{
    if (reduce_shape("max", in, a, dt, rank, shape) != 0) return -1;
    if (reduce_count(in[0], a->axes) == 0) {
        char b[96];
        mi_error_set("max: cannot reduce an empty axis of %s",
                     mi_shape_str(b, sizeof b, in[0]->rank, in[0]->shape));
        return -1;
    }
    return 0;
}
static mi_tensor *max_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0];
    return mi_mul(keep_view(n, g), mi_eq(x, keep_view(n, n->output)));
}
/* Distinct values at least 0.25 apart, in random order: no ties, and
 * finite differences never change the argmax. */
static mi_tensor *ex_distinct(mi_rng *r, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_tensor_new(MI_F64, rank, shape);
    if (!t) return NULL;
    int64_t n = t->numel;
    for (int64_t i = 0; i < n; i++) mi_set(t, i, (double)i);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)mi_rng_below(r, (uint64_t)i + 1);
        double tmp = mi_get(t, i);
        mi_set(t, i, mi_get(t, j));
        mi_set(t, j, tmp);
    }
    for (int64_t i = 0; i < n; i++)
        mi_set(t, i, 0.35 * (mi_get(t, i) - 0.5 * (double)n) + 0.1 * mi_rng_uniform(r));
    return mi_requires_grad(t, true);
}
static int ex_max(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_distinct(r, MI_SHAPE(3, 5)); a->axes = 1u << 1; break;
    case 1:
        in[0] = ex_distinct(r, MI_SHAPE(2, 3, 1, 4));
        a->axes = (1u << 0) | (1u << 3);
        a->keepdim = true;
        break;
    case 2: in[0] = ex_distinct(r, MI_SHAPE(7)); break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_max = {.name = "max", .formula = "y = max_axes x", .arity = 1,
                         .shape = max_shape, KERNELS(max), .vjp = max_vjp, .examples = ex_max,
                         OWN_F32(max, own_select_reduce)};
mi_tensor *mi_max(mi_tensor *x, int axis, bool keepdim)
{
    return reduce_call(&mi_op_max, x, axis, keepdim, 0);
}

/* ---------------------------------------------------------------- logsumexp
 * y = m + log Σ_axes exp(x − m), m = max_axes x;   dx = g · exp(x − y) */
#define LSE_BODY(sfx)                      \
    pass_max_##sfx(&pl, X, Y, 0);          \
    pass_sumexp_##sfx(&pl, X, Y, 0);
RED_KERNEL(logsumexp, LSE_BODY)
static int logsumexp_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                           int *rank, int64_t *shape)
{
    return reduce_shape("logsumexp", in, a, dt, rank, shape);
}
static mi_tensor *logsumexp_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0];
    return mi_mul(keep_view(n, g), mi_exp(mi_sub(x, keep_view(n, n->output))));
}
static int ex_logsumexp(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 5)); a->axes = 1u << 1; break;
    case 1:
        in[0] = ex_normal(r, MI_SHAPE(2, 1, 3, 2));
        a->axes = (1u << 0) | (1u << 3);
        a->keepdim = true;
        break;
    case 2: in[0] = ex_normal(r, MI_SHAPE(4, 3)); break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_logsumexp = {.name = "logsumexp", .formula = "y = log sum_axes exp(x)",
                               .arity = 1, .shape = logsumexp_shape, KERNELS(logsumexp),
                               OWN_F32(logsumexp, own_select_reduce),
                               .vjp = logsumexp_vjp, .examples = ex_logsumexp};
mi_tensor *mi_logsumexp(mi_tensor *x, int axis, bool keepdim)
{
    return reduce_call(&mi_op_logsumexp, x, axis, keepdim, 0);
}

/* ---------------------------------------------------------------- norm
 * y = (Σ_axes |x|^p)^(1/p), p ≥ 1;
 * dx = g · sign(x) |x|^(p−1) / y^(p−1)   (p = 1: g · sign(x); p = 2: g · x / y) */
#define NORM_BODY(sfx)                                   \
    if (a->p == 1) {                                     \
        pass_norm1_##sfx(&pl, X, Y, 0);                  \
    } else if (a->p == 2) {                              \
        pass_norm2_##sfx(&pl, X, Y, 0);                  \
    } else {                                             \
        pass_maxabs_##sfx(&pl, X, Y, 0);                 \
        pass_normp_##sfx(&pl, X, Y, a->p);               \
    }
RED_KERNEL(norm, NORM_BODY)
static int norm_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    if (!(a->p >= 1)) {
        mi_error_set("norm: p must be >= 1, got %g", a->p);
        return -1;
    }
    if (isinf(a->p)) {
        mi_error_set("norm: p must be finite, got %g (use max of abs)", a->p);
        return -1;
    }
    return reduce_shape("norm", in, a, dt, rank, shape);
}
static mi_tensor *norm_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0], *y = keep_view(n, n->output);
    double p = n->attrs.p;
    mi_tensor *d;
    if (p == 1) d = mi_sign(x);
    else if (p == 2) d = mi_div(x, y);
    else
        d = mi_div(mi_mul(mi_sign(x), mi_pow_scalar(mi_abs(x), p - 1)),
                   mi_pow_scalar(y, p - 1));
    return mi_mul(keep_view(n, g), d);
}
/* Entries away from 0 (|x|^p and sign have kinks there). */
static int ex_norm(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = ex_away_from_zero(r, MI_SHAPE(3, 5), 0.3, 2.0);
        a->axes = 1u << 1;
        a->p = 2;
        break;
    case 1:
        in[0] = ex_away_from_zero(r, MI_SHAPE(2, 3, 4), 0.3, 2.0);
        a->axes = (1u << 0) | (1u << 2);
        a->keepdim = true;
        a->p = 3;
        break;
    case 2: in[0] = ex_away_from_zero(r, MI_SHAPE(6), 0.3, 2.0); a->p = 1; break;
    case 3:
        in[0] = ex_away_from_zero(r, MI_SHAPE(2, 1, 5), 0.3, 2.0);
        a->axes = 1u << 2;
        a->p = 1.5;
        break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_norm = {.name = "norm", .formula = "y = (sum_axes |x|^p)^(1/p)", .arity = 1,
                          .shape = norm_shape, KERNELS(norm), .vjp = norm_vjp,
                          OWN_F32(norm, own_select_reduce),
                          .examples = ex_norm};
mi_tensor *mi_norm(mi_tensor *x, double p, int axis, bool keepdim)
{
    return reduce_call(&mi_op_norm, x, axis, keepdim, p);
}
