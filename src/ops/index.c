/* Indexing ops: index_select / index_add and gather / scatter_add, each pair
 * the other's adjoint. All are linear in the data input, so every vjp is the
 * adjoint op applied to g. index_select and gather copy element bytes (one
 * function fills both kernel slots); index_add and scatter_add add, and have
 * a kernel per dtype. Index tensors are i32/i64, carry no gradient, and are
 * range-checked in the shape rules (which see the data). */
#include "internal.h"

#define SHAPE_STR(buf, t) mi_shape_str(buf, sizeof buf, (t)->rank, (t)->shape)

/* Index tensor checks: dtype, and every value in [0, size). */
static int check_index(const char *op, const mi_tensor *idx, int64_t size, const char *what)
{
    if (size < 0) {
        mi_error_set("%s: output size %lld must be ≥ 0", op, (long long)size);
        return -1;
    }
    if (!is_index_dtype(idx->dtype)) {
        mi_error_set("%s: index must be i32 or i64, got %s", op, mi_dtype_name(idx->dtype));
        return -1;
    }
    for (int64_t i = 0; i < idx->numel; i++) {
        int64_t v = index_at(idx, i);
        if (v < 0 || v >= size) {
            mi_error_set("%s: index %lld at position %lld out of range [0, %lld) for %s", op,
                         (long long)v, (long long)i, (long long)size, what);
            return -1;
        }
    }
    return 0;
}

/* One example of an indexed op: data shape, index dtype, shape and range,
 * axis and (index_add, scatter_add) output size. */
typedef struct ex_case {
    int xr;
    int64_t xs[3];
    mi_dtype it;
    int ir;
    int64_t is[3], n;
    int axis;
    int64_t size;
} ex_case;
static int ex_indexed(mi_rng *r, int v, mi_tensor **in, mi_attrs *a, const ex_case *c, int count)
{
    if (v >= count) return 0;
    in[0] = ex_normal(r, c[v].xr, c[v].xs);
    in[1] = ex_indices(r, c[v].it, c[v].ir, c[v].is, c[v].n);
    a->axis = c[v].axis;
    a->index = c[v].size;
    return 2;
}

/* ---------------------------------------------------------------- index_select
 * y[..., j, ...] = x[..., idx[j], ...] along attrs.axis; idx 1-D.
 * dx = index_add(g, axis, idx, dim) (repeated indices accumulate). */
static int index_select_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                              int *rank, int64_t *shape)
{
    const mi_tensor *x = in[0], *idx = in[1];
    char b[96], bi[96];
    if (data_input("index_select", in, dt) != 0) return -1;
    int ax = axis_norm("index_select", a->axis, x->rank);
    if (ax < 0) return -1;
    if (idx->rank != 1) {
        mi_error_set("index_select: index must be 1-D, got %s", SHAPE_STR(bi, idx));
        return -1;
    }
    char what[160];
    snprintf(what, sizeof what, "axis %d of %s", a->axis, SHAPE_STR(b, x));
    if (check_index("index_select", idx, x->shape[ax], what) != 0) return -1;
    copy_shape(rank, shape, x);
    shape[ax] = idx->numel;
    return 0;
}
static void index_select_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0], *idx = in[1];
    int ax = ax_of(a, x->rank);
    int64_t outer, inner, dim = x->shape[ax], m = idx->numel;
    split_at(x, ax, &outer, &inner);
    size_t es = mi_dtype_size(o->dtype), row = (size_t)inner * es;
    for (int64_t k = 0; k < outer; k++)
        for (int64_t j = 0; j < m; j++)
            memcpy((char *)o->data + (size_t)(k * m + j) * row,
                   (const char *)x->data + (size_t)(k * dim + index_at(idx, j)) * row, row);
}
static mi_tensor *index_select_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    int ax = ax_of(&n->attrs, x->rank);
    return mi_index_add(g, ax, n->inputs[1], x->shape[ax]);
}
static int ex_index_select(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_case c[] = {
        {2, {4, 3}, MI_I64, 1, {6}, 4, 0, 0}, /* more picks than rows: repeats */
        {3, {2, 5, 2}, MI_I32, 1, {3}, 5, -2, 0},
        {1, {6}, MI_I64, 1, {6}, 6, 0, 0},
    };
    return ex_indexed(r, v, in, a, c, 3);
}
const mi_op mi_op_index_select = {.name = "index_select", .formula = "y[j] = x[idx[j]] along axis",
                                  .arity = 2, .shape = index_select_shape,
                                  ANY_KERNEL(index_select_k), .vjp = index_select_vjp,
                                  .diff_inputs = 0x1, .examples = ex_index_select};
mi_tensor *mi_index_select(mi_tensor *x, int axis, mi_tensor *idx)
{
    mi_attrs a = {.axis = axis};
    return RUN(&mi_op_index_select, &a, x, idx);
}

/* index_add and scatter_add: src's shape with attrs.index entries along the
 * axis, once every index is known to fit in it. */
static int accumulated_shape(const char *op, const mi_tensor *src, const mi_tensor *idx, int ax,
                             const mi_attrs *a, int *rank, int64_t *shape)
{
    char what[64];
    snprintf(what, sizeof what, "output size along axis %d", a->axis);
    if (check_index(op, idx, a->index, what) != 0) return -1;
    copy_shape(rank, shape, src);
    shape[ax] = a->index;
    return 0;
}

/* ---------------------------------------------------------------- index_add
 * y = 0 of size attrs.index along attrs.axis; y[..., idx[j], ...] += src[..., j, ...].
 * dsrc = index_select(g, axis, idx). */
static int index_add_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                           int *rank, int64_t *shape)
{
    const mi_tensor *src = in[0], *idx = in[1];
    char b[96], bi[96];
    if (data_input("index_add", in, dt) != 0) return -1;
    int ax = axis_norm("index_add", a->axis, src->rank);
    if (ax < 0) return -1;
    if (idx->rank != 1 || idx->numel != src->shape[ax]) {
        mi_error_set("index_add: index must be 1-D with %lld entries (axis %d of %s), got %s",
                     (long long)src->shape[ax], a->axis, SHAPE_STR(b, src), SHAPE_STR(bi, idx));
        return -1;
    }
    return accumulated_shape("index_add", src, idx, ax, a, rank, shape);
}
#define INDEX_ADD_KERNEL(fname, T)                                                     \
    static void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)           \
    {                                                                                  \
        const mi_tensor *src = in[0], *idx = in[1];                                    \
        int ax = ax_of(a, src->rank);                                                  \
        int64_t outer, inner, m = src->shape[ax], size = o->shape[ax];                 \
        split_at(src, ax, &outer, &inner);                                             \
        const T *S = src->data;                                                        \
        T *Y = o->data;                                                                \
        memset(Y, 0, sizeof(T) * (size_t)o->numel);                                    \
        for (int64_t k = 0; k < outer; k++)                                            \
            for (int64_t j = 0; j < m; j++) {                                          \
                T *y = Y + (k * size + index_at(idx, j)) * inner;                      \
                const T *s = S + (k * m + j) * inner;                                  \
                for (int64_t t = 0; t < inner; t++) y[t] += s[t];                      \
            }                                                                          \
    }
INDEX_ADD_KERNEL(index_add_f32, float)
INDEX_ADD_KERNEL(index_add_f64, double)
static mi_tensor *index_add_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_index_select(g, n->attrs.axis, n->inputs[1]);
}
static int ex_index_add(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_case c[] = {
        {2, {5, 3}, MI_I64, 1, {5}, 4, 0, 4},
        {3, {2, 3, 2}, MI_I32, 1, {3}, 5, -2, 5},
    };
    return ex_indexed(r, v, in, a, c, 2);
}
const mi_op mi_op_index_add = {.name = "index_add",
                               .formula = "y = 0; y[idx[j]] += src[j] along axis", .arity = 2,
                               .shape = index_add_shape, KERNELS(index_add),
                               .vjp = index_add_vjp, .diff_inputs = 0x1,
                               .examples = ex_index_add};
mi_tensor *mi_index_add(mi_tensor *src, int axis, mi_tensor *idx, int64_t size)
{
    mi_attrs a = {.axis = axis, .index = size};
    return RUN(&mi_op_index_add, &a, src, idx);
}

/* ---------------------------------------------------------------- gather
 * y[..., j, ...] = x[..., idx[..., j, ...], ...] along attrs.axis (torch.gather);
 * idx has y's shape and matches x on every other axis.
 * dx = scatter_add(g, axis, idx, dim). */
static int gather_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                        int64_t *shape)
{
    const mi_tensor *x = in[0], *idx = in[1];
    char b[96], bi[96];
    if (data_input("gather", in, dt) != 0) return -1;
    int ax = axis_norm("gather", a->axis, x->rank);
    if (ax < 0) return -1;
    bool ok = idx->rank == x->rank;
    for (int d = 0; d < x->rank && ok; d++) ok = d == ax || idx->shape[d] == x->shape[d];
    if (!ok) {
        mi_error_set("gather: index shape %s must match input %s except along axis %d",
                     SHAPE_STR(bi, idx), SHAPE_STR(b, x), a->axis);
        return -1;
    }
    char what[160];
    snprintf(what, sizeof what, "axis %d of %s", a->axis, SHAPE_STR(b, x));
    if (check_index("gather", idx, x->shape[ax], what) != 0) return -1;
    copy_shape(rank, shape, idx);
    return 0;
}
static void gather_k(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0], *idx = in[1];
    int ax = ax_of(a, x->rank);
    int64_t outer, inner, dim = x->shape[ax], m = o->shape[ax];
    split_at(o, ax, &outer, &inner);
    size_t es = mi_dtype_size(o->dtype);
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t k = i / (m * inner), t = i % inner;
        copy_elem((char *)o->data + (size_t)i * es,
                  (const char *)x->data + (size_t)((k * dim + index_at(idx, i)) * inner + t) * es,
                  es);
    }
}
static mi_tensor *gather_vjp(const mi_node *n, int i, mi_tensor *g)
{
    const mi_tensor *x = n->inputs[0];
    int ax = ax_of(&n->attrs, x->rank);
    return mi_scatter_add(g, ax, n->inputs[1], x->shape[ax]);
}
static int ex_gather(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_case c[] = {
        {2, {3, 4}, MI_I64, 2, {3, 5}, 4, 1, 0},
        {3, {2, 3, 2}, MI_I32, 3, {4, 3, 2}, 2, 0, 0},
        {1, {5}, MI_I64, 1, {7}, 5, -1, 0},
    };
    return ex_indexed(r, v, in, a, c, 3);
}
const mi_op mi_op_gather = {.name = "gather", .formula = "y[j] = x[idx[j]] along axis, elementwise",
                            .arity = 2, .shape = gather_shape, ANY_KERNEL(gather_k),
                            .vjp = gather_vjp, .diff_inputs = 0x1, .examples = ex_gather};
mi_tensor *mi_gather(mi_tensor *x, int axis, mi_tensor *idx)
{
    mi_attrs a = {.axis = axis};
    return RUN(&mi_op_gather, &a, x, idx);
}

/* ---------------------------------------------------------------- scatter_add
 * y = 0 of size attrs.index along attrs.axis; y[..., idx[..j..], ...] += src[..j..];
 * idx has src's shape. dsrc = gather(g, axis, idx). */
static int scatter_add_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                             int *rank, int64_t *shape)
{
    const mi_tensor *src = in[0], *idx = in[1];
    char b[96], bi[96];
    if (data_input("scatter_add", in, dt) != 0) return -1;
    int ax = axis_norm("scatter_add", a->axis, src->rank);
    if (ax < 0) return -1;
    if (!mi_same_shape(src, idx)) {
        mi_error_set("scatter_add: index shape %s must equal source shape %s", SHAPE_STR(bi, idx),
                     SHAPE_STR(b, src));
        return -1;
    }
    return accumulated_shape("scatter_add", src, idx, ax, a, rank, shape);
}
#define SCATTER_ADD_KERNEL(fname, T)                                                   \
    static void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)           \
    {                                                                                  \
        const mi_tensor *src = in[0], *idx = in[1];                                    \
        int ax = ax_of(a, src->rank);                                                  \
        int64_t outer, inner, m = src->shape[ax], size = o->shape[ax];                 \
        split_at(src, ax, &outer, &inner);                                             \
        const T *S = src->data;                                                        \
        T *Y = o->data;                                                                \
        memset(Y, 0, sizeof(T) * (size_t)o->numel);                                    \
        for (int64_t i = 0; i < src->numel; i++) {                                     \
            int64_t k = i / (m * inner), t = i % inner;                                \
            Y[(k * size + index_at(idx, i)) * inner + t] += S[i];                      \
        }                                                                              \
    }
SCATTER_ADD_KERNEL(scatter_add_f32, float)
SCATTER_ADD_KERNEL(scatter_add_f64, double)
static mi_tensor *scatter_add_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_gather(g, n->attrs.axis, n->inputs[1]);
}
static int ex_scatter_add(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const ex_case c[] = {
        {2, {3, 5}, MI_I64, 2, {3, 5}, 4, 1, 4},
        {3, {4, 3, 2}, MI_I32, 3, {4, 3, 2}, 2, 0, 2},
    };
    return ex_indexed(r, v, in, a, c, 2);
}
const mi_op mi_op_scatter_add = {.name = "scatter_add",
                                 .formula = "y = 0; y[idx[j]] += src[j] along axis, elementwise",
                                 .arity = 2, .shape = scatter_add_shape, KERNELS(scatter_add),
                                 .vjp = scatter_add_vjp, .diff_inputs = 0x1,
                                 .examples = ex_scatter_add};
mi_tensor *mi_scatter_add(mi_tensor *src, int axis, mi_tensor *idx, int64_t size)
{
    mi_attrs a = {.axis = axis, .index = size};
    return RUN(&mi_op_scatter_add, &a, src, idx);
}
