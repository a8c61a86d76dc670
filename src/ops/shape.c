/* Shape ops: reshape (a view), permute, slice and its adjoint pad, concat,
 * broadcast_to, flip, and the wrappers built on them (transpose, stack,
 * unsqueeze, squeeze). All are linear, so every vjp is the adjoint op applied
 * to g. The indexing ops are in index.c.
 *
 * reshape and narrow are views; apply() decides view-or-copy from the
 * descriptor's flags, so mi_slice calls narrow when the slice is contiguous
 * (every axis before it has size 1) and the copying slice op otherwise. The data
 * movers are dtype-agnostic (they copy element bytes), so one function fills
 * both the f32 and the f64 kernel slot. */
#include "internal.h"

#define SHAPE_STR(buf, t) mi_shape_str(buf, sizeof buf, (t)->rank, (t)->shape)

/* Target shape in attrs.rank / attrs.shape: rank in range. */
static int check_attr_rank(const char *op, const mi_attrs *a)
{
    if (a->rank >= 0 && a->rank <= MI_MAX_RANK) return 0;
    mi_error_set("%s: target rank %d out of range 0..%d", op, a->rank, MI_MAX_RANK);
    return -1;
}

/* attrs.rank / attrs.shape from a wrapper's arguments (the rank is checked
 * by the shape rule, which registry callers reach directly). */
static int target_attrs(const char *op, mi_attrs *a, int rank, const int64_t *shape)
{
    *a = (mi_attrs){.rank = rank};
    if (rank <= 0 || rank > MI_MAX_RANK) return 0;
    if (!shape) {
        mi_error_set("%s: shape is NULL", op);
        return -1;
    }
    memcpy(a->shape, shape, sizeof(int64_t) * (size_t)rank);
    return 0;
}

/* Examples for the one-input ops: a shape and the attributes to call with. */
typedef struct ex_one_case {
    int xr;
    int64_t xs[4];
    mi_attrs a;
} ex_one_case;
static int ex_one(mi_rng *r, int v, mi_tensor **in, mi_attrs *a, const ex_one_case *c, int count)
{
    if (v >= count) return 0;
    in[0] = ex_normal(r, c[v].xr, c[v].xs);
    *a = c[v].a;
    return 1;
}

static void noop_kernel(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a) {}

/* ---------------------------------------------------------------- reshape
 * y = x viewed as attrs.shape (attrs.rank axes, one may be -1: inferred).
 * A view: y shares x's storage. dx = reshape(g, shape(x)). */
static int reshape_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                         int64_t *shape)
{
    const mi_tensor *x = in[0];
    char bx[96], bt[96];
    if (check_attr_rank("reshape", a) != 0) return -1;
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < a->rank; i++) {
        int64_t s = a->shape[i];
        if (s == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (s < 0) {
            mi_error_set("reshape: bad target shape %s (sizes ≥ 0, at most one -1)",
                         mi_shape_str(bt, sizeof bt, a->rank, a->shape));
            return -1;
        }
        if (__builtin_mul_overflow(known, s, &known)) {
            mi_error_set("reshape: target shape %s overflows",
                         mi_shape_str(bt, sizeof bt, a->rank, a->shape));
            return -1;
        }
        shape[i] = s;
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known != 0) goto mismatch;
        shape[infer] = x->numel / known;
    } else if (known != x->numel) {
        goto mismatch;
    }
    *rank = a->rank;
    *dt = x->dtype;
    return 0;
mismatch:
    mi_error_set("reshape: cannot view %s as %s", SHAPE_STR(bx, x),
                 mi_shape_str(bt, sizeof bt, a->rank, a->shape));
    return -1;
}
static mi_tensor *reshape_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    return mi_reshape(g, x->rank, x->shape);
}
static int ex_reshape(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {3, {2, 3, 4}, {.rank = 2, .shape = {4, -1}}},
        {1, {5}, {.rank = 3, .shape = {1, 5, 1}}},
        {0, {0}, {.rank = 2, .shape = {1, 1}}},
    };
    return ex_one(r, v, in, a, c, 3);
}
const mi_op mi_op_reshape = {.name = "reshape", .formula = "y = x viewed as shape", .arity = 1,
                             .flags = MI_OP_VIEW, .shape = reshape_shape, ANY_KERNEL(noop_kernel),
                             .vjp = reshape_vjp, .examples = ex_reshape};
mi_tensor *mi_reshape(mi_tensor *x, int rank, const int64_t *shape)
{
    mi_attrs a;
    return target_attrs("reshape", &a, rank, shape) ? NULL : RUN(&mi_op_reshape, &a, x);
}

/* unsqueeze / squeeze: reshape with a size-1 axis added or removed. */
mi_tensor *mi_unsqueeze(mi_tensor *x, int axis)
{
    if (!x) return mi_reshape(x, 0, NULL);
    if (x->rank >= MI_MAX_RANK) {
        mi_error_set("unsqueeze: rank %d is already the maximum", x->rank);
        return NULL;
    }
    int ax = axis_norm("unsqueeze", axis, x->rank + 1);
    if (ax < 0) return NULL;
    int64_t s[MI_MAX_RANK];
    for (int d = 0, k = 0; d <= x->rank; d++) s[d] = d == ax ? 1 : x->shape[k++];
    return mi_reshape(x, x->rank + 1, s);
}

mi_tensor *mi_squeeze(mi_tensor *x, int axis)
{
    if (!x) return mi_reshape(x, 0, NULL);
    int ax = axis_norm("squeeze", axis, x->rank);
    if (ax < 0) return NULL;
    if (x->shape[ax] != 1) {
        char b[96];
        mi_error_set("squeeze: axis %d has size %lld, not 1: %s", axis, (long long)x->shape[ax],
                     SHAPE_STR(b, x));
        return NULL;
    }
    int64_t s[MI_MAX_RANK];
    for (int d = 0, k = 0; d < x->rank; d++)
        if (d != ax) s[k++] = x->shape[d];
    return mi_reshape(x, x->rank - 1, s);
}

/* ---------------------------------------------------------------- broadcast_to
 * y[i] = x[i with broadcast axes at 0] (NumPy rules, x's axes aligned right).
 * dx = sum_to(g, shape(x)). */
static int broadcast_to_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                              int *rank, int64_t *shape)
{
    const mi_tensor *x = in[0];
    if (data_input("broadcast_to", in, dt) != 0 || check_attr_rank("broadcast_to", a) != 0)
        return -1;
    bool ok = a->rank >= x->rank;
    for (int d = 0; d < a->rank && ok; d++) {
        int dx = d - (a->rank - x->rank);
        ok = a->shape[d] >= 0 && (dx < 0 || x->shape[dx] == 1 || x->shape[dx] == a->shape[d]);
    }
    if (!ok) {
        char bx[96], bt[96];
        mi_error_set("broadcast_to: cannot broadcast %s to %s", SHAPE_STR(bx, x),
                     mi_shape_str(bt, sizeof bt, a->rank, a->shape));
        return -1;
    }
    *rank = a->rank;
    memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->rank);
    return 0;
}
/* Row by row along the last axis: one memcpy where x runs along it, one
 * element repeated where it is broadcast. */
static void broadcast_to_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    size_t es = mi_dtype_size(o->dtype);
    const char *X = in[0]->data;
    char *Y = o->data;
    bcast w;
    bcast_init(&w, o, in, 1);
    int last = w.rank - 1;
    int64_t L = w.rank > 0 ? w.shape[last] : 1, s = w.rank > 0 ? w.stride[0][last] : 0;
    for (int64_t i = 0; i < o->numel; i += L) {
        char *y = Y + (size_t)i * es;
        const char *x = X + (size_t)w.off[0] * es;
        if (s == 1)
            memcpy(y, x, (size_t)L * es);
        else
            for (int64_t j = 0; j < L; j++)
                copy_elem(y + (size_t)j * es, x + (size_t)(j * s) * es, es);
        if (w.rank == 0) break;
        /* the next row: the last axis wraps */
        w.idx[last] = L - 1;
        w.off[0] += s * (L - 1);
        bcast_next(&w);
    }
}
static mi_tensor *broadcast_to_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    return mi_sum_to(g, x->rank, x->shape);
}
static int ex_broadcast_to(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {2, {3, 1}, {.rank = 3, .shape = {2, 3, 4}}},
        {0, {0}, {.rank = 1, .shape = {5}}},
        {2, {1, 4}, {.rank = 2, .shape = {3, 4}}},
    };
    return ex_one(r, v, in, a, c, 3);
}
const mi_op mi_op_broadcast_to = {.name = "broadcast_to", .formula = "y = x broadcast to shape",
                                  .arity = 1, .shape = broadcast_to_shape,
                                  ANY_KERNEL(broadcast_to_k), .vjp = broadcast_to_vjp,
                                  .examples = ex_broadcast_to};
mi_tensor *mi_broadcast_to(mi_tensor *x, int rank, const int64_t *shape)
{
    mi_attrs a;
    return target_attrs("broadcast_to", &a, rank, shape) ? NULL
                                                         : RUN(&mi_op_broadcast_to, &a, x);
}

/* ---------------------------------------------------------------- permute
 * y[i_0, …, i_{r-1}] = x[j] with j[perm[d]] = i_d, i.e. y.shape[d] = x.shape[perm[d]]
 * (attrs.rank = rank of x, attrs.shape = perm). dx = permute(g, perm⁻¹). */
static int permute_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                         int64_t *shape)
{
    const mi_tensor *x = in[0];
    char bx[96], bp[96];
    if (data_input("permute", in, dt) != 0) return -1;
    if (a->rank != x->rank) {
        mi_error_set("permute: permutation has %d axes, input %s has %d", a->rank,
                     SHAPE_STR(bx, x), x->rank);
        return -1;
    }
    unsigned seen = 0;
    for (int d = 0; d < a->rank; d++) {
        int64_t p = a->shape[d];
        if (p < 0 || p >= x->rank || (seen >> p & 1u)) {
            mi_error_set("permute: %s is not a permutation of the axes of %s",
                         mi_shape_str(bp, sizeof bp, a->rank, a->shape), SHAPE_STR(bx, x));
            return -1;
        }
        seen |= 1u << p;
        shape[d] = x->shape[p];
    }
    *rank = x->rank;
    return 0;
}
/* The trailing axes that keep their place (perm[d] = d for d ≥ keep) are
 * contiguous in x and y alike, so y is written in runs of their size (the
 * head split [B, T, H, hd] → [B, H, T, hd] copies rows of hd), the outer
 * axes walked by an index odometer. */
static void permute_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0];
    size_t es = mi_dtype_size(o->dtype);
    const char *X = x->data;
    char *Y = o->data;
    int keep = o->rank;
    while (keep > 0 && a->shape[keep - 1] == keep - 1) keep--;
    int64_t run = 1;
    for (int d = keep; d < o->rank; d++) run *= o->shape[d];
    if (run == 0) return;
    size_t bytes = (size_t)run * es;
    int64_t xs[MI_MAX_RANK], st[MI_MAX_RANK], idx[MI_MAX_RANK] = {0}, off = 0;
    mi_strides(x->rank, x->shape, xs);
    for (int d = 0; d < keep; d++) st[d] = xs[a->shape[d]];
    for (int64_t i = 0, n = o->numel / run; i < n; i++) {
        if (run == 1) copy_elem(Y + (size_t)i * es, X + (size_t)off * es, es);
        else memcpy(Y + (size_t)i * bytes, X + (size_t)off * es, bytes);
        for (int d = keep - 1; d >= 0; d--) {
            off += st[d];
            if (++idx[d] < o->shape[d]) break;
            off -= st[d] * o->shape[d];
            idx[d] = 0;
        }
    }
}
static mi_tensor *permute_vjp(const mi_node *n, int i, mi_tensor *g)
{
    int inv[MI_MAX_RANK];
    for (int d = 0; d < n->attrs.rank; d++) inv[n->attrs.shape[d]] = d;
    return mi_permute(g, inv);
}
static int ex_permute(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {3, {2, 3, 4}, {.rank = 3, .shape = {2, 0, 1}}},
        {4, {2, 1, 3, 2}, {.rank = 4, .shape = {3, 1, 0, 2}}},
        {2, {3, 5}, {.rank = 2, .shape = {1, 0}}},
        {4, {2, 3, 2, 4}, {.rank = 4, .shape = {0, 2, 1, 3}}}, /* runs of 4 */
        {3, {2, 3, 4}, {.rank = 3, .shape = {0, 1, 2}}},       /* one run */
    };
    return ex_one(r, v, in, a, c, 5);
}
const mi_op mi_op_permute = {.name = "permute", .formula = "y.shape[d] = x.shape[perm[d]]",
                             .arity = 1, .shape = permute_shape, ANY_KERNEL(permute_k),
                             .vjp = permute_vjp, .examples = ex_permute};
mi_tensor *mi_permute(mi_tensor *x, const int *perm)
{
    mi_attrs a = {0};
    if (x) {
        if (!perm) {
            mi_error_set("permute: perm is NULL");
            return NULL;
        }
        a.rank = x->rank;
        for (int d = 0; d < x->rank; d++) a.shape[d] = perm[d];
    }
    return RUN(&mi_op_permute, &a, x);
}

mi_tensor *mi_transpose(mi_tensor *x, int axis0, int axis1)
{
    if (!x) return mi_permute(x, NULL);
    int a0 = axis_norm("transpose", axis0, x->rank), a1;
    if (a0 < 0 || (a1 = axis_norm("transpose", axis1, x->rank)) < 0) return NULL;
    int perm[MI_MAX_RANK];
    for (int d = 0; d < x->rank; d++) perm[d] = d;
    perm[a0] = a1;
    perm[a1] = a0;
    return mi_permute(x, perm);
}

/* ---------------------------------------------------------------- slice
 * y = x[..., start:stop, ...] along attrs.axis, 0 ≤ start ≤ stop ≤ dim.
 * dx = pad(g, axis, start, dim − stop). A copy; see narrow for the view. */
static int slice_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                       int64_t *shape)
{
    const mi_tensor *x = in[0];
    if (data_input("slice", in, dt) != 0) return -1;
    int ax = axis_norm("slice", a->axis, x->rank);
    if (ax < 0) return -1;
    if (a->start < 0 || a->start > a->stop || a->stop > x->shape[ax]) {
        char b[96];
        mi_error_set("slice: [%lld:%lld] out of range for axis %d of %s", (long long)a->start,
                     (long long)a->stop, a->axis, SHAPE_STR(b, x));
        return -1;
    }
    copy_shape(rank, shape, x);
    shape[ax] = a->stop - a->start;
    return 0;
}
static void slice_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0];
    int ax = ax_of(a, x->rank);
    int64_t outer, inner, dim = x->shape[ax], len = o->shape[ax];
    split_at(x, ax, &outer, &inner);
    size_t es = mi_dtype_size(o->dtype), block = (size_t)(len * inner) * es;
    for (int64_t k = 0; k < outer; k++)
        memcpy((char *)o->data + (size_t)k * block,
               (const char *)x->data + (size_t)((k * dim + a->start) * inner) * es, block);
}
static mi_tensor *slice_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    const mi_attrs *a = &n->attrs;
    int ax = ax_of(a, x->rank);
    return mi_pad(g, ax, a->start, x->shape[ax] - a->stop);
}
/* dx[..., start:stop, ...] += g, in place: a chunk's gradient costs the
 * chunk, not a padded copy of the whole input added to the whole gradient */
static int slice_vjp_into(const mi_node *n, int i, mi_tensor *g, mi_tensor *acc)
{
    (void)i;
    const mi_attrs *a = &n->attrs;
    int ax = ax_of(a, acc->rank);
    int64_t outer, inner, dim = acc->shape[ax], len = g->shape[ax];
    split_at(acc, ax, &outer, &inner);
    int64_t run = len * inner;
    for (int64_t k = 0; k < outer; k++) {
        int64_t at = (k * dim + a->start) * inner, from = k * run;
        if (acc->dtype == MI_F32) {
            float *d = (float *)acc->data + at;
            const float *s = (const float *)g->data + from;
            for (int64_t j = 0; j < run; j++) d[j] += s[j];
        } else {
            double *d = (double *)acc->data + at;
            const double *s = (const double *)g->data + from;
            for (int64_t j = 0; j < run; j++) d[j] += s[j];
        }
    }
    return 0;
}
static int ex_slice(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {2, {4, 5}, {.axis = 1, .start = 1, .stop = 4}},
        {3, {3, 1, 4}, {.axis = -1, .start = 0, .stop = 2}},
        {1, {6}, {.axis = 0, .start = 5, .stop = 6}},
    };
    return ex_one(r, v, in, a, c, 3);
}
const mi_op mi_op_slice = {.name = "slice", .formula = "y = x[..., start:stop, ...]", .arity = 1,
                           .shape = slice_shape, ANY_KERNEL(slice_k), .vjp = slice_vjp,
                           .vjp_into = slice_vjp_into, .examples = ex_slice};
/* ---------------------------------------------------------------- narrow
 * The same slice as a view: y = x[start:stop] along attrs.axis when every
 * axis before it has size 1, so the result is one contiguous run of x's
 * storage. dx = pad(g, axis, start, dim − stop). */
static int narrow_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                        int64_t *shape)
{
    if (slice_shape(in, n, a, dt, rank, shape) != 0) return -1;
    int ax = ax_of(a, in[0]->rank);
    for (int d = 0; d < ax; d++)
        if (in[0]->shape[d] != 1) {
            char b[96];
            mi_error_set("narrow: axis %d of %s is not a leading axis (axis %d has size %lld)",
                         a->axis, SHAPE_STR(b, in[0]), d, (long long)in[0]->shape[d]);
            return -1;
        }
    return 0;
}
static size_t narrow_offset(mi_tensor *const *in, const mi_attrs *a)
{
    int64_t outer, inner;
    split_at(in[0], ax_of(a, in[0]->rank), &outer, &inner);
    return (size_t)(a->start * inner) * mi_dtype_size(in[0]->dtype);
}
static int ex_narrow(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {2, {5, 3}, {.axis = 0, .start = 1, .stop = 4}},
        {3, {1, 6, 2}, {.axis = 1, .start = 2, .stop = 6}},
    };
    return ex_one(r, v, in, a, c, 2);
}
const mi_op mi_op_narrow = {.name = "narrow", .formula = "y = x[start:stop] (leading axis, a view)",
                            .arity = 1, .flags = MI_OP_VIEW, .shape = narrow_shape,
                            ANY_KERNEL(noop_kernel), .vjp = slice_vjp,
                            .vjp_into = slice_vjp_into, .view_offset = narrow_offset,
                            .examples = ex_narrow};

/* Negative start/stop count from the end of the axis, as in Python. A view
 * (narrow) when the slice is contiguous, a copy (slice) otherwise. */
mi_tensor *mi_slice(mi_tensor *x, int axis, int64_t start, int64_t stop)
{
    bool contiguous = false;
    if (x) {
        int ax = axis < 0 ? axis + x->rank : axis;
        if (ax >= 0 && ax < x->rank) {
            if (start < 0) start += x->shape[ax];
            if (stop < 0) stop += x->shape[ax];
            contiguous = true;
            for (int d = 0; d < ax; d++) contiguous &= x->shape[d] == 1;
        }
    }
    mi_attrs a = {.axis = axis, .start = start, .stop = stop};
    return RUN(contiguous ? &mi_op_narrow : &mi_op_slice, &a, x);
}

/* ---------------------------------------------------------------- pad
 * y = [0 × before, x, 0 × after] along attrs.axis (attrs.start = before,
 * attrs.stop = after). dx = slice(g, axis, before, before + dim). */
static int pad_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                     int64_t *shape)
{
    const mi_tensor *x = in[0];
    if (data_input("pad", in, dt) != 0) return -1;
    int ax = axis_norm("pad", a->axis, x->rank);
    if (ax < 0) return -1;
    if (a->start < 0 || a->stop < 0) {
        char b[96];
        mi_error_set("pad: widths must be ≥ 0, got before %lld, after %lld for %s",
                     (long long)a->start, (long long)a->stop, SHAPE_STR(b, x));
        return -1;
    }
    copy_shape(rank, shape, x);
    shape[ax] += a->start + a->stop;
    return 0;
}
static void pad_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0];
    int ax = ax_of(a, x->rank);
    int64_t outer, inner, dim = x->shape[ax], odim = o->shape[ax];
    split_at(x, ax, &outer, &inner);
    size_t es = mi_dtype_size(o->dtype), block = (size_t)(dim * inner) * es;
    memset(o->data, 0, (size_t)o->numel * es); /* all-zero bits are 0.0 */
    for (int64_t k = 0; k < outer; k++)
        memcpy((char *)o->data + (size_t)((k * odim + a->start) * inner) * es,
               (const char *)x->data + (size_t)k * block, block);
}
static mi_tensor *pad_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    const mi_attrs *a = &n->attrs;
    int ax = ax_of(a, x->rank);
    return mi_slice(g, ax, a->start, a->start + x->shape[ax]);
}
static int ex_pad(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {2, {3, 4}, {.axis = 1, .start = 2, .stop = 1}},
        {3, {2, 1, 3}, {.axis = 0, .start = 0, .stop = 2}},
        {1, {4}, {.axis = -1, .start = 3, .stop = 0}},
    };
    return ex_one(r, v, in, a, c, 3);
}
const mi_op mi_op_pad = {.name = "pad", .formula = "y = [0^before, x, 0^after] along axis",
                         .arity = 1, .shape = pad_shape, ANY_KERNEL(pad_k), .vjp = pad_vjp,
                         .examples = ex_pad};
mi_tensor *mi_pad(mi_tensor *x, int axis, int64_t before, int64_t after)
{
    mi_attrs a = {.axis = axis, .start = before, .stop = after};
    return RUN(&mi_op_pad, &a, x);
}

/* ---------------------------------------------------------------- flip
 * y[..., j, ...] = x[..., dim − 1 − j, ...] along attrs.axis. dx = flip(g). */
static int flip_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    if (data_input("flip", in, dt) != 0 || axis_norm("flip", a->axis, in[0]->rank) < 0)
        return -1;
    copy_shape(rank, shape, in[0]);
    return 0;
}
static void flip_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0];
    int ax = ax_of(a, x->rank);
    int64_t outer, inner, dim = x->shape[ax];
    split_at(x, ax, &outer, &inner);
    size_t es = mi_dtype_size(o->dtype), row = (size_t)inner * es;
    for (int64_t k = 0; k < outer; k++)
        for (int64_t j = 0; j < dim; j++)
            memcpy((char *)o->data + (size_t)(k * dim + j) * row,
                   (const char *)x->data + (size_t)(k * dim + dim - 1 - j) * row, row);
}
static mi_tensor *flip_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_flip(g, n->attrs.axis);
}
static int ex_flip(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_one_case c[] = {
        {2, {3, 4}, {.axis = 1}}, {3, {2, 3, 2}, {.axis = 0}}, {1, {5}, {.axis = -1}}};
    return ex_one(r, v, in, a, c, 3);
}
const mi_op mi_op_flip = {.name = "flip", .formula = "y[j] = x[dim - 1 - j] along axis",
                          .arity = 1, .shape = flip_shape, ANY_KERNEL(flip_k), .vjp = flip_vjp,
                          .examples = ex_flip};
mi_tensor *mi_flip(mi_tensor *x, int axis)
{
    mi_attrs a = {.axis = axis};
    return RUN(&mi_op_flip, &a, x);
}

/* ---------------------------------------------------------------- concat
 * y = [x_0, x_1, …] along attrs.axis; every other axis matches.
 * dx_i = slice(g, axis, o_i, o_i + dim_i), o_i = Σ_{j<i} dim_j. */
static int concat_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                        int64_t *shape)
{
    for (int i = 0; i < n; i++)
        if (require_float("concat", in, i) != 0) return -1;
    *dt = in[0]->dtype;
    int ax = axis_norm("concat", a->axis, in[0]->rank);
    if (ax < 0) return -1;
    copy_shape(rank, shape, in[0]);
    for (int i = 1; i < n; i++) {
        bool ok = in[i]->rank == in[0]->rank;
        for (int d = 0; d < in[0]->rank && ok; d++) ok = d == ax || in[i]->shape[d] == shape[d];
        if (!ok) {
            char b0[96], bi[96];
            mi_error_set("concat: input %d has shape %s, input 0 has %s (axis %d)", i,
                         SHAPE_STR(bi, in[i]), SHAPE_STR(b0, in[0]), a->axis);
            return -1;
        }
        shape[ax] += in[i]->shape[ax];
    }
    return 0;
}
static void concat_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int ax = ax_of(a, o->rank);
    int64_t outer, inner;
    split_at(o, ax, &outer, &inner);
    size_t es = mi_dtype_size(o->dtype);
    /* Kernels are not told the input count: take inputs until their sizes
     * along axis fill the output (the shape rule made them sum exactly;
     * trailing empty inputs would add nothing). */
    int n = 1;
    for (int64_t filled = in[0]->shape[ax]; filled < o->shape[ax]; n++)
        filled += in[n]->shape[ax];
    char *Y = o->data;
    for (int64_t k = 0; k < outer; k++)
        for (int i = 0; i < n; i++) {
            size_t block = (size_t)(in[i]->shape[ax] * inner) * es;
            memcpy(Y, (const char *)in[i]->data + (size_t)k * block, block);
            Y += block;
        }
}
static mi_tensor *concat_vjp(const mi_node *n, int i, mi_tensor *g)
{
    int ax = ax_of(&n->attrs, g->rank);
    int64_t off = 0;
    for (int j = 0; j < i; j++) off += n->inputs[j]->shape[ax];
    return mi_slice(g, ax, off, off + n->inputs[i]->shape[ax]);
}
static int ex_concat(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: /* three sizes along a middle axis */
        in[0] = ex_normal(r, MI_SHAPE(2, 1, 3));
        in[1] = ex_normal(r, MI_SHAPE(2, 3, 3));
        in[2] = ex_normal(r, MI_SHAPE(2, 2, 3));
        a->axis = 1;
        return 3;
    case 1:
        in[0] = ex_normal(r, MI_SHAPE(3));
        in[1] = ex_normal(r, MI_SHAPE(4));
        a->axis = 0;
        return 2;
    case 2:
        in[0] = ex_normal(r, MI_SHAPE(2, 2));
        in[1] = ex_normal(r, MI_SHAPE(2, 3));
        a->axis = -1;
        return 2;
    default: return 0;
    }
}
const mi_op mi_op_concat = {.name = "concat", .formula = "y = [x_0, x_1, ...] along axis",
                            .arity = MI_MAX_INPUTS, .flags = MI_OP_VARIADIC,
                            .shape = concat_shape, ANY_KERNEL(concat_k), .vjp = concat_vjp,
                            .examples = ex_concat};
/* More than MI_MAX_INPUTS tensors: concatenated in groups, then the groups. */
mi_tensor *mi_concat(mi_tensor *const *xs, int n, int axis)
{
    mi_attrs a = {.axis = axis};
    if (n <= MI_MAX_INPUTS) return op_run(&mi_op_concat, xs, n, &a);
    mi_tensor *part[MI_MAX_INPUTS];
    int group = (n + MI_MAX_INPUTS - 1) / MI_MAX_INPUTS, k = 0;
    for (int i = 0; i < n; i += group, k++)
        part[k] = mi_concat(xs + i, n - i < group ? n - i : group, axis);
    return op_run(&mi_op_concat, part, k, &a);
}

/* stack: unsqueeze each input at axis, then concat (in groups when many). */
mi_tensor *mi_stack(mi_tensor *const *xs, int n, int axis)
{
    if (n < 1 || !xs) {
        mi_error_set("stack: takes at least 1 input, got %d", xs ? n : 0);
        return NULL;
    }
    if (!xs[0]) return mi_unsqueeze(NULL, 0);
    int ax = axis_norm("stack", axis, xs[0]->rank + 1);
    if (ax < 0) return NULL;
    mi_tensor *part[MI_MAX_INPUTS];
    if (n <= MI_MAX_INPUTS) {
        for (int i = 0; i < n; i++) part[i] = mi_unsqueeze(xs[i], ax);
        return mi_concat(part, n, ax);
    }
    int group = (n + MI_MAX_INPUTS - 1) / MI_MAX_INPUTS, k = 0;
    for (int i = 0; i < n; i += group, k++)
        part[k] = mi_stack(xs + i, n - i < group ? n - i : group, ax);
    return mi_concat(part, k, ax);
}
