/* Neural-network ops: softmax, log-softmax, cross entropy, one-hot, the three
 * last-axis normalisations, causal depthwise conv1d (and its weight
 * gradient), rotary embedding, scaled-dot-product attention and its mask.
 * Every vjp is written with the public ops, so it is differentiable again. */
#include "internal.h"

/* Kernel templates: NN_KERNELS(name, BODY) defines name_f32 and name_f64
 * running BODY, which reads `o`, `in` and `a`, and uses the element type T
 * and F(fn) (expf or exp). */
#define NN_KERNEL_T(fname, TYPE, ...)                                         \
    static void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)  \
    {                                                                         \
        typedef TYPE T;                                                       \
        typedef TYPE scalar_t;                                                \
        (void)(scalar_t)0;                                                    \
        (void)a;                                                              \
        __VA_ARGS__                                                           \
    }
#define NN_KERNELS(name, ...)                          \
    NN_KERNEL_T(name##_f32, float, __VA_ARGS__)        \
    NN_KERNEL_T(name##_f64, double, __VA_ARGS__)

/* x viewed as [outer, n, inner] around `axis`. */
static void axis_split(const mi_tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= x->shape[d];
    *n = x->shape[axis];
    for (int d = axis + 1; d < x->rank; d++) *inner *= x->shape[d];
}

#define SHAPE(buf, t) mi_shape_str(buf, sizeof buf, (t)->rank, (t)->shape)

/* Targets must be ignore_index or in [0, classes). */
static int check_targets(const char *op, const mi_tensor *t, int64_t classes, int64_t ignore)
{
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t c = index_at(t, i);
        if (c != ignore && (c < 0 || c >= classes)) {
            mi_error_set("%s: target %lld at position %lld out of range for %lld classes "
                         "(ignore_index %lld)",
                         op, (long long)c, (long long)i, (long long)classes, (long long)ignore);
            return -1;
        }
    }
    return 0;
}

/* ================================================================ softmax
 * y = softmax(x) along attrs.axis: y_i = e^(x_i − m) / Σ_j e^(x_j − m), m = max x.
 * dx = y ⊙ (g − Σ g ⊙ y) */
#define SOFTMAX_BODY(LOG)                                                          \
    int64_t outer, n, inner;                                                       \
    axis_split(in[0], a->axis < 0 ? a->axis + in[0]->rank : a->axis, &outer, &n,   \
               &inner);                                                            \
    const T *X = in[0]->data;                                                      \
    T *Y = o->data;                                                                \
    for (int64_t p = 0; p < outer; p++)                                            \
        for (int64_t q = 0; q < inner; q++) {                                      \
            const T *x = X + p * n * inner + q;                                    \
            T *y = Y + p * n * inner + q;                                          \
            T m = x[0], s = 0;                                                     \
            for (int64_t i = 1; i < n; i++)                                        \
                if (x[i * inner] > m) m = x[i * inner];                            \
            for (int64_t i = 0; i < n; i++) s += F(exp)(x[i * inner] - m);         \
            T ls = F(log)(s), rs = 1 / s;                                          \
            for (int64_t i = 0; i < n; i++)                                        \
                y[i * inner] = LOG ? x[i * inner] - m - ls                         \
                                   : F(exp)(x[i * inner] - m) * rs;                \
        }
NN_KERNELS(softmax, SOFTMAX_BODY(0))
NN_KERNELS(log_softmax, SOFTMAX_BODY(1))

static int softmax_like_shape(const char *op, mi_tensor *const *in, const mi_attrs *a,
                              mi_dtype *dt, int *rank, int64_t *shape)
{
    if (require_float(op, in, 0) != 0 || axis_norm(op, a->axis, in[0]->rank) < 0) return -1;
    return shape_like_first(in, 1, a, dt, rank, shape);
}
static int softmax_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                         int64_t *shape)
{
    return softmax_like_shape("softmax", in, a, dt, rank, shape);
}
static mi_tensor *softmax_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *y = n->output;
    return mi_mul(y, mi_sub(g, mi_sum(mi_mul(g, y), n->attrs.axis, true)));
}
/* Shapes shared by softmax and log_softmax: a row, a middle axis, a size-1 axis. */
static int ex_softmax(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 5)), a->axis = -1; return 1;
    case 1: in[0] = ex_normal(r, MI_SHAPE(2, 3, 4)), a->axis = 1; return 1;
    case 2: in[0] = ex_normal(r, MI_SHAPE(1, 7, 1)), a->axis = -2; return 1;
    default: return 0;
    }
}
const mi_op mi_op_softmax = {.name = "softmax", .formula = "exp(x_i) / sum_j exp(x_j)",
                             .arity = 1, .shape = softmax_shape, KERNELS(softmax),
                             .vjp = softmax_vjp, .examples = ex_softmax};
mi_tensor *mi_softmax(mi_tensor *x, int axis)
{
    mi_attrs a = {.axis = axis};
    return RUN(&mi_op_softmax, &a, x);
}

/* ================================================================ log_softmax
 * y = x − logsumexp(x) along attrs.axis;  dx = g − softmax(x) · Σ g */
static int log_softmax_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                             int *rank, int64_t *shape)
{
    return softmax_like_shape("log_softmax", in, a, dt, rank, shape);
}
static mi_tensor *log_softmax_vjp(const mi_node *n, int i, mi_tensor *g)
{
    int axis = n->attrs.axis;
    return mi_sub(g, mi_mul(mi_softmax(n->inputs[0], axis), mi_sum(g, axis, true)));
}
const mi_op mi_op_log_softmax = {.name = "log_softmax", .formula = "x_i - log sum_j exp(x_j)",
                                 .arity = 1, .shape = log_softmax_shape, KERNELS(log_softmax),
                                 .vjp = log_softmax_vjp, .examples = ex_softmax};
mi_tensor *mi_log_softmax(mi_tensor *x, int axis)
{
    mi_attrs a = {.axis = axis};
    return RUN(&mi_op_log_softmax, &a, x);
}

/* ================================================================ cross_entropy
 * logits [N, C], targets [N] (i32/i64), attrs.index = ignore_index:
 *   L = (1/n) Σ_{r: t_r ≠ ignore} (logsumexp(x_r) − x_{r,t_r}),  n = #counted rows
 * (L = 0 when every row is ignored).
 *   dx = (softmax(x) ⊙ mask − one_hot(t)) · g / max(n, 1),  mask_r = [t_r ≠ ignore] */
#define CROSS_ENTROPY_BODY                                                         \
    const mi_tensor *t = in[1];                                                    \
    int64_t nr = in[0]->shape[0], nc = in[0]->shape[1], count = 0;                 \
    const T *X = in[0]->data;                                                      \
    T total = 0;                                                                   \
    for (int64_t r = 0; r < nr; r++) {                                             \
        int64_t c = index_at(t, r);                                                \
        if (c == a->index) continue;                                               \
        const T *x = X + r * nc;                                                   \
        T m = x[0], s = 0;                                                         \
        for (int64_t j = 1; j < nc; j++)                                           \
            if (x[j] > m) m = x[j];                                                \
        for (int64_t j = 0; j < nc; j++) s += F(exp)(x[j] - m);                    \
        total += m + F(log)(s) - x[c];                                             \
        count++;                                                                   \
    }                                                                              \
    ((T *)o->data)[0] = count ? total / (T)count : 0;
NN_KERNELS(cross_entropy, CROSS_ENTROPY_BODY)

static int cross_entropy_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                               int *rank, int64_t *shape)
{
    mi_tensor *x = in[0], *t = in[1];
    char b1[96], b2[96];
    if (require_float("cross_entropy", in, 0) != 0) return -1;
    if (x->rank != 2 || x->shape[1] < 1) {
        mi_error_set("cross_entropy: logits must be [N, C] with C >= 1, got %s", SHAPE(b1, x));
        return -1;
    }
    if (!is_index_dtype(t->dtype)) {
        mi_error_set("cross_entropy: targets must be i32 or i64, got %s",
                     mi_dtype_name(t->dtype));
        return -1;
    }
    if (t->rank != 1 || t->shape[0] != x->shape[0]) {
        mi_error_set("cross_entropy: targets %s do not match logits %s (want [N])",
                     SHAPE(b1, t), SHAPE(b2, x));
        return -1;
    }
    if (check_targets("cross_entropy", t, x->shape[1], a->index) != 0) return -1;
    *dt = x->dtype;
    *rank = 0;
    return 0;
}
static mi_tensor *cross_entropy_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0], *t = n->inputs[1];
    int64_t ignore = n->attrs.index, count = 0;
    for (int64_t r = 0; r < t->numel; r++) count += index_at(t, r) != ignore;
    mi_tensor *oh = mi_one_hot(t, x->shape[1], ignore, x->dtype);
    mi_tensor *mask = mi_sum(oh, 1, true); /* [N, 1]: 1 on counted rows */
    mi_tensor *d = mi_sub(mi_mul(mi_softmax(x, 1), mask), oh);
    return mi_mul(d, mi_mul_scalar(g, 1.0 / (double)(count ? count : 1)));
}
static int ex_cross_entropy(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: /* i64 targets, one row ignored */
        in[0] = ex_normal(r, MI_SHAPE(4, 5));
        in[1] = mi_from_buffer(MI_I64, MI_SHAPE(4), (int64_t[]){3, -100, 0, 4});
        a->index = -100;
        return 2;
    case 1: /* i32 targets, ignore_index is a real class */
        in[0] = ex_normal(r, MI_SHAPE(5, 3));
        in[1] = mi_from_buffer(MI_I32, MI_SHAPE(5), (int32_t[]){1, 2, 0, 1, 2});
        a->index = 1;
        return 2;
    case 2: /* one class, one row */
        in[0] = ex_normal(r, MI_SHAPE(1, 1));
        in[1] = mi_from_buffer(MI_I64, MI_SHAPE(1), (int64_t[]){0});
        a->index = -1;
        return 2;
    case 3: /* every row ignored: L = 0, gradient 0 */
        in[0] = ex_normal(r, MI_SHAPE(2, 3));
        in[1] = mi_from_buffer(MI_I64, MI_SHAPE(2), (int64_t[]){-1, -1});
        a->index = -1;
        return 2;
    default: return 0;
    }
}
const mi_op mi_op_cross_entropy = {
    .name = "cross_entropy",
    .formula = "mean_{t != ignore} (logsumexp(x_r) - x_{r,t_r})",
    .arity = 2, .shape = cross_entropy_shape, KERNELS(cross_entropy),
    .vjp = cross_entropy_vjp, .diff_inputs = 0x1, .examples = ex_cross_entropy};
mi_tensor *mi_cross_entropy(mi_tensor *logits, mi_tensor *targets, int64_t ignore_index)
{
    mi_attrs a = {.index = ignore_index};
    return RUN(&mi_op_cross_entropy, &a, logits, targets);
}

/* ================================================================ one_hot
 * targets [...] (i32/i64) → [..., C]: y[..., c] = [t = c], rows with
 * t = ignore_index all 0. Attributes: attrs.index = C (classes),
 * attrs.stop = ignore_index, attrs.rank = the output dtype (an mi_dtype,
 * MI_F32 or MI_F64). No gradient. */
#define ONE_HOT_BODY                                                               \
    int64_t nc = a->index;                                                         \
    T *Y = o->data;                                                                \
    memset(Y, 0, sizeof(T) * (size_t)o->numel);                                    \
    for (int64_t r = 0; r < in[0]->numel; r++) {                                   \
        int64_t c = index_at(in[0], r);                                            \
        if (c != a->stop) Y[r * nc + c] = 1;                                       \
    }
NN_KERNELS(one_hot, ONE_HOT_BODY)

static int one_hot_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                         int64_t *shape)
{
    mi_tensor *t = in[0];
    char b[96];
    if (!is_index_dtype(t->dtype)) {
        mi_error_set("one_hot: targets must be i32 or i64, got %s", mi_dtype_name(t->dtype));
        return -1;
    }
    if (a->index < 1) {
        mi_error_set("one_hot: classes must be >= 1, got %lld", (long long)a->index);
        return -1;
    }
    if (!mi_dtype_is_float((mi_dtype)a->rank)) {
        mi_error_set("one_hot: output dtype must be f32 or f64, got %s",
                     mi_dtype_name((mi_dtype)a->rank));
        return -1;
    }
    if (t->rank >= MI_MAX_RANK) {
        mi_error_set("one_hot: targets %s leave no room for the class axis", SHAPE(b, t));
        return -1;
    }
    if (check_targets("one_hot", t, a->index, a->stop) != 0) return -1;
    *dt = (mi_dtype)a->rank;
    copy_shape(rank, shape, t);
    shape[(*rank)++] = a->index;
    return 0;
}
static int ex_one_hot(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = mi_from_buffer(MI_I64, MI_SHAPE(5), (int64_t[]){2, -1, 0, 3, 3});
        *a = (mi_attrs){.index = 4, .stop = -1, .rank = MI_F64};
        return 1;
    case 1:
        in[0] = ex_indices(r, MI_I32, MI_SHAPE(2, 3), 5);
        *a = (mi_attrs){.index = 5, .stop = 2, .rank = MI_F32};
        return 1;
    default: return 0;
    }
}
const mi_op mi_op_one_hot = {.name = "one_hot", .formula = "y[..., c] = [t = c and t != ignore]",
                             .arity = 1, .flags = MI_OP_NONDIFF, .shape = one_hot_shape,
                             KERNELS(one_hot), .examples = ex_one_hot};
mi_tensor *mi_one_hot(mi_tensor *targets, int64_t classes, int64_t ignore_index, mi_dtype dt)
{
    mi_attrs a = {.index = classes, .stop = ignore_index, .rank = (int)dt};
    return RUN(&mi_op_one_hot, &a, targets);
}

/* ================================================================ normalisations
 * Over the last axis (D entries), eps = attrs.eps, no affine parameters:
 *   layer_norm    y = (x − μ)·r,  r = 1/√(mean((x − μ)²) + eps)
 *                 dx = r·(g − mean(g) − y·mean(g ⊙ y))
 *   rms_norm      y = x·r,        r = 1/√(mean(x²) + eps)
 *                 dx = r·(g − y·mean(g ⊙ y))
 *   l2_normalize  y = x·r,        r = 1/√(Σx² + eps)
 *                 dx = r·(g − y·Σ(g ⊙ y))
 * The vjps recompute r from x with ops; y is the recorded output. */
enum { NORM_LAYER, NORM_RMS, NORM_L2 };
#define NORM_BODY(KIND)                                                            \
    int64_t d = in[0]->shape[in[0]->rank - 1], rows = d ? o->numel / d : 0;        \
    const T *X = in[0]->data;                                                      \
    T *Y = o->data;                                                                \
    for (int64_t r = 0; r < rows; r++) {                                           \
        const T *x = X + r * d;                                                    \
        T *y = Y + r * d;                                                          \
        T mu = 0, ss = 0;                                                          \
        if (KIND == NORM_LAYER) {                                                  \
            for (int64_t j = 0; j < d; j++) mu += x[j];                            \
            mu /= (T)d;                                                            \
        }                                                                          \
        for (int64_t j = 0; j < d; j++) ss += (x[j] - mu) * (x[j] - mu);           \
        if (KIND != NORM_L2) ss /= (T)d;                                           \
        T rs = 1 / F(sqrt)(ss + (T)a->eps);                                        \
        for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mu) * rs;                   \
    }
NN_KERNELS(layer_norm, NORM_BODY(NORM_LAYER))
NN_KERNELS(rms_norm, NORM_BODY(NORM_RMS))
NN_KERNELS(l2_normalize, NORM_BODY(NORM_L2))

static int norm_shape(const char *op, mi_tensor *const *in, const mi_attrs *a, mi_dtype *dt,
                      int *rank, int64_t *shape)
{
    char b[96];
    if (require_float(op, in, 0) != 0) return -1;
    if (in[0]->rank < 1) {
        mi_error_set("%s: needs at least one axis, got shape %s", op, SHAPE(b, in[0]));
        return -1;
    }
    if (!(a->eps >= 0) || isinf(a->eps)) {
        mi_error_set("%s: eps must be finite and >= 0, got %g", op, a->eps);
        return -1;
    }
    return shape_like_first(in, 1, a, dt, rank, shape);
}
static int layer_norm_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                            int *rank, int64_t *shape)
{
    return norm_shape("layer_norm", in, a, dt, rank, shape);
}
static int rms_norm_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                          int64_t *shape)
{
    return norm_shape("rms_norm", in, a, dt, rank, shape);
}
static int l2_normalize_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                              int *rank, int64_t *shape)
{
    return norm_shape("l2_normalize", in, a, dt, rank, shape);
}

static mi_tensor *layer_norm_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0], *y = n->output;
    mi_tensor *xc = mi_sub(x, mi_mean(x, -1, true));
    mi_tensor *r = mi_rsqrt(mi_add_scalar(mi_mean(mi_square(xc), -1, true), n->attrs.eps));
    mi_tensor *gc = mi_sub(g, mi_mean(g, -1, true));
    return mi_mul(r, mi_sub(gc, mi_mul(y, mi_mean(mi_mul(g, y), -1, true))));
}
static mi_tensor *rms_norm_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0], *y = n->output;
    mi_tensor *r = mi_rsqrt(mi_add_scalar(mi_mean(mi_square(x), -1, true), n->attrs.eps));
    return mi_mul(r, mi_sub(g, mi_mul(y, mi_mean(mi_mul(g, y), -1, true))));
}
static mi_tensor *l2_normalize_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0], *y = n->output;
    mi_tensor *r = mi_rsqrt(mi_add_scalar(mi_sum(mi_square(x), -1, true), n->attrs.eps));
    return mi_mul(r, mi_sub(g, mi_mul(y, mi_sum(mi_mul(g, y), -1, true))));
}
static int ex_norm(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 5)), a->eps = 1e-5; return 1;
    case 1: in[0] = ex_normal(r, MI_SHAPE(2, 1, 4)), a->eps = 0.1; return 1;
    case 2: in[0] = ex_normal(r, MI_SHAPE(7)), a->eps = 0; return 1;
    default: return 0;
    }
}
const mi_op mi_op_layer_norm = {.name = "layer_norm",
                                .formula = "(x - mean(x)) / sqrt(var(x) + eps), last axis",
                                .arity = 1, .shape = layer_norm_shape, KERNELS(layer_norm),
                                .vjp = layer_norm_vjp, .examples = ex_norm};
const mi_op mi_op_rms_norm = {.name = "rms_norm", .formula = "x / sqrt(mean(x^2) + eps), last axis",
                              .arity = 1, .shape = rms_norm_shape, KERNELS(rms_norm),
                              .vjp = rms_norm_vjp, .examples = ex_norm};
const mi_op mi_op_l2_normalize = {.name = "l2_normalize",
                                  .formula = "x / sqrt(sum(x^2) + eps), last axis", .arity = 1,
                                  .shape = l2_normalize_shape, KERNELS(l2_normalize),
                                  .vjp = l2_normalize_vjp, .examples = ex_norm};
mi_tensor *mi_layer_norm(mi_tensor *x, double eps)
{
    mi_attrs a = {.eps = eps};
    return RUN(&mi_op_layer_norm, &a, x);
}
mi_tensor *mi_rms_norm(mi_tensor *x, double eps)
{
    mi_attrs a = {.eps = eps};
    return RUN(&mi_op_rms_norm, &a, x);
}
mi_tensor *mi_l2_normalize(mi_tensor *x, double eps)
{
    mi_attrs a = {.eps = eps};
    return RUN(&mi_op_l2_normalize, &a, x);
}

/* ================================================================ embedding
 * table [V, D], idx [...] → [..., D]: index_select of rows, reshaped. */
mi_tensor *mi_embedding(mi_tensor *table, mi_tensor *idx)
{
    char b[96];
    if (!table || !idx) {
        mi_error_set("embedding: %s is NULL", table ? "idx" : "table");
        return NULL;
    }
    if (table->rank != 2) {
        mi_error_set("embedding: table must be [V, D], got %s", SHAPE(b, table));
        return NULL;
    }
    if (!is_index_dtype(idx->dtype)) {
        mi_error_set("embedding: indices must be i32 or i64, got %s", mi_dtype_name(idx->dtype));
        return NULL;
    }
    if (idx->rank >= MI_MAX_RANK) {
        mi_error_set("embedding: indices %s leave no room for the feature axis", SHAPE(b, idx));
        return NULL;
    }
    mi_tensor *rows = mi_index_select(table, 0, mi_reshape(idx, 1, (int64_t[]){idx->numel}));
    int64_t shape[MI_MAX_RANK];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->rank);
    shape[idx->rank] = table->shape[1];
    return mi_reshape(rows, idx->rank + 1, shape);
}

/* ================================================================ conv1d_causal
 * Depthwise causal convolution, x [B, T, C], w [C, K]:
 *   y[b,t,c] = Σ_j w[c,j]·x[b, t−K+1+j, c]   (x = 0 before t = 0)
 *   dx = flip_T(conv1d_causal(flip_T(g), w)),  dw = conv1d_causal_wgrad(g, x, K) */
#define CONV_BODY                                                                  \
    int64_t nb = in[0]->shape[0], nt = in[0]->shape[1], nc = in[0]->shape[2];      \
    int64_t k = in[1]->shape[1];                                                   \
    const T *X = in[0]->data, *W = in[1]->data;                                    \
    T *Y = o->data;                                                                \
    for (int64_t b = 0; b < nb; b++)                                               \
        for (int64_t t = 0; t < nt; t++)                                           \
            for (int64_t c = 0; c < nc; c++) {                                     \
                T s = 0;                                                           \
                for (int64_t j = 0; j < k; j++) {                                  \
                    int64_t u = t - k + 1 + j;                                     \
                    if (u >= 0) s += W[c * k + j] * X[(b * nt + u) * nc + c];      \
                }                                                                  \
                Y[(b * nt + t) * nc + c] = s;                                      \
            }
NN_KERNELS(conv1d_causal, CONV_BODY)

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
                                   KERNELS(conv1d_causal), .vjp = conv1d_causal_vjp,
                                   .examples = ex_conv1d_causal};
mi_tensor *mi_conv1d_causal(mi_tensor *x, mi_tensor *w)
{
    return RUN(&mi_op_conv1d_causal, NULL, x, w);
}

/* ================================================================ conv1d_causal_wgrad
 * g, x [B, T, C], attrs.index = K → [C, K]:
 *   dw[c,j] = Σ_{b,t} g[b,t,c]·x[b, t−K+1+j, c]
 * Bilinear; with upstream H [C, K]:
 *   d/dg = conv1d_causal(x, H),  d/dx = flip_T(conv1d_causal(flip_T(g), H)) */
#define WGRAD_BODY                                                                 \
    int64_t nb = in[0]->shape[0], nt = in[0]->shape[1], nc = in[0]->shape[2];      \
    int64_t k = a->index;                                                          \
    const T *G = in[0]->data, *X = in[1]->data;                                    \
    T *D = o->data;                                                                \
    for (int64_t c = 0; c < nc; c++)                                               \
        for (int64_t j = 0; j < k; j++) {                                          \
            T s = 0;                                                               \
            for (int64_t b = 0; b < nb; b++)                                       \
                for (int64_t t = k - 1 - j > 0 ? k - 1 - j : 0; t < nt; t++)       \
                    s += G[(b * nt + t) * nc + c] * X[(b * nt + t - k + 1 + j) * nc + c]; \
            D[c * k + j] = s;                                                      \
        }
NN_KERNELS(conv1d_causal_wgrad, WGRAD_BODY)

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
    .vjp = conv1d_causal_wgrad_vjp, .examples = ex_conv1d_causal_wgrad};
mi_tensor *mi_conv1d_causal_wgrad(mi_tensor *g, mi_tensor *x, int64_t k)
{
    mi_attrs a = {.index = k};
    return RUN(&mi_op_conv1d_causal_wgrad, &a, g, x);
}

/* ================================================================ rope
 * x [..., T, D], D even, h = D/2, attrs.p = base, attrs.reverse = inverse.
 * For position t and pair (i, i + h), θ = ±t·base^(−2i/D):
 *   y_i     = x_i cos θ − x_{i+h} sin θ
 *   y_{i+h} = x_i sin θ + x_{i+h} cos θ
 * A rotation: dx = rope(g) with the inverse flag flipped. The angles are
 * computed in double for both dtypes (t·freq loses digits in float at long T). */
#define ROPE_BODY                                                                  \
    int rk = in[0]->rank;                                                          \
    int64_t nt = in[0]->shape[rk - 2], d = in[0]->shape[rk - 1], h = d / 2;        \
    int64_t lead = o->numel / (nt * d);                                            \
    const T *X = in[0]->data;                                                      \
    T *Y = o->data;                                                                \
    for (int64_t t = 0; t < nt; t++)                                               \
        for (int64_t i = 0; i < h; i++) {                                          \
            double th = (double)t * pow(a->p, -2.0 * (double)i / (double)d);       \
            T cs = (T)cos(th), sn = (T)(a->reverse ? -sin(th) : sin(th));          \
            for (int64_t l = 0; l < lead; l++) {                                   \
                const T *x = X + (l * nt + t) * d;                                 \
                T *y = Y + (l * nt + t) * d;                                       \
                T x0 = x[i], x1 = x[i + h];                                        \
                y[i] = x0 * cs - x1 * sn;                                          \
                y[i + h] = x0 * sn + x1 * cs;                                      \
            }                                                                      \
        }
NN_KERNELS(rope, ROPE_BODY)

static int rope_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    mi_tensor *x = in[0];
    char b[96];
    if (require_float("rope", in, 0) != 0) return -1;
    if (x->rank < 2) {
        mi_error_set("rope: x must be [..., T, D], got %s", SHAPE(b, x));
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
    return mi_rope(g, n->attrs.p, !n->attrs.reverse);
}
static int ex_rope(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(2, 3, 4)), a->p = 10000; return 1;
    case 1: in[0] = ex_normal(r, MI_SHAPE(5, 6)), a->p = 10, a->reverse = true; return 1;
    case 2: in[0] = ex_normal(r, MI_SHAPE(1, 2, 5, 2)), a->p = 3; return 1;
    default: return 0;
    }
}
const mi_op mi_op_rope = {.name = "rope",
                          .formula = "rotate (x_i, x_{i+D/2}) by t * base^(-2i/D)",
                          .arity = 1, .shape = rope_shape, KERNELS(rope), .vjp = rope_vjp,
                          .examples = ex_rope};
mi_tensor *mi_rope(mi_tensor *x, double base, bool inverse)
{
    mi_attrs a = {.p = base, .reverse = inverse};
    return RUN(&mi_op_rope, &a, x);
}

/* ================================================================ attention_mask
 * One input, used only for its dtype and its [T, S] shape; attrs.causal,
 * attrs.window. out[t,s] = −inf when (causal and s > t) or (window > 0 and
 * s ≤ t − window), else 0. No gradient. */
#define MASK_BODY                                                                  \
    int64_t nt = o->shape[0], ns = o->shape[1];                                    \
    T *Y = o->data;                                                                \
    for (int64_t t = 0; t < nt; t++)                                               \
        for (int64_t s = 0; s < ns; s++) {                                         \
            bool masked = (a->causal && s > t) || (a->window > 0 && s <= t - a->window); \
            Y[t * ns + s] = masked ? (T)-INFINITY : 0;                             \
        }
NN_KERNELS(attention_mask, MASK_BODY)

static int attention_mask_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                                int *rank, int64_t *shape)
{
    char b[96];
    if (require_float("attention_mask", in, 0) != 0) return -1;
    if (in[0]->rank != 2) {
        mi_error_set("attention_mask: input must be [T, S], got %s", SHAPE(b, in[0]));
        return -1;
    }
    if (a->window < 0) {
        mi_error_set("attention_mask: window must be >= 0, got %lld", (long long)a->window);
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
mi_tensor *mi_attention_mask(mi_dtype dt, int64_t t, int64_t s, bool causal, int64_t window)
{
    if (!mi_dtype_is_float(dt)) {
        mi_error_set("attention_mask: dtype must be f32 or f64, got %s", mi_dtype_name(dt));
        return NULL;
    }
    if (t < 0 || s < 0) {
        mi_error_set("attention_mask: negative size [%lld,%lld]", (long long)t, (long long)s);
        return NULL;
    }
    mi_attrs a = {.causal = causal, .window = window};
    return RUN(&mi_op_attention_mask, &a, mi_zeros(dt, 2, (int64_t[]){t, s}));
}

/* ================================================================ attention
 * q [..., T, D], k [..., S, D], v [..., S, Dv] → [..., T, Dv], sc = 1/√D:
 *   P = softmax(sc·q kᵀ + mask),  y = P v   (mask: attention_mask(causal, window))
 *   dv = Pᵀ g,  dS = P ⊙ (g vᵀ − Σ_s (g vᵀ) ⊙ P),  dq = sc·dS k,  dk = sc·dSᵀ q
 * The forward kernel is one pass with an online softmax (no T×S buffer); the
 * vjp recomputes P with ops. Every query row must keep at least one key. */
#define ATTENTION_BODY                                                             \
    int rk = in[0]->rank;                                                          \
    int64_t nt = in[0]->shape[rk - 2], d = in[0]->shape[rk - 1];                   \
    int64_t ns = in[1]->shape[rk - 2], dv = in[2]->shape[rk - 1];                  \
    int64_t lead = nt ? in[0]->numel / (nt * d) : 0, w = a->window;                \
    T sc = (T)(1.0 / sqrt((double)d));                                             \
    for (int64_t l = 0; l < lead; l++) {                                           \
        const T *Q = (const T *)in[0]->data + l * nt * d;                          \
        const T *K = (const T *)in[1]->data + l * ns * d;                          \
        const T *V = (const T *)in[2]->data + l * ns * dv;                         \
        for (int64_t t = 0; t < nt; t++) {                                         \
            T *y = (T *)o->data + (l * nt + t) * dv;                               \
            T m = (T)-INFINITY, z = 0; /* running max and normaliser */            \
            int64_t lo = w > 0 && t - w + 1 > 0 ? t - w + 1 : 0;                   \
            int64_t hi = a->causal && t < ns - 1 ? t : ns - 1;                     \
            for (int64_t e = 0; e < dv; e++) y[e] = 0;                             \
            for (int64_t s = lo; s <= hi; s++) {                                   \
                T dot = 0;                                                         \
                for (int64_t e = 0; e < d; e++) dot += Q[t * d + e] * K[s * d + e]; \
                dot *= sc;                                                         \
                if (dot > m) { /* rescale what is summed so far to the new max */  \
                    T c = F(exp)(m - dot);                                         \
                    z *= c;                                                        \
                    for (int64_t e = 0; e < dv; e++) y[e] *= c;                    \
                    m = dot;                                                       \
                }                                                                  \
                T p = F(exp)(dot - m);                                             \
                z += p;                                                            \
                for (int64_t e = 0; e < dv; e++) y[e] += p * V[s * dv + e];        \
            }                                                                      \
            for (int64_t e = 0; e < dv; e++) y[e] /= z;                            \
        }                                                                          \
    }
NN_KERNELS(attention, ATTENTION_BODY)

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
    if (rk < 2 || k->rank != rk || v->rank != rk) {
        mi_error_set("attention: q, k, v must be [..., T, D], [..., S, D], [..., S, Dv] of one "
                     "rank >= 2, got q %s k %s v %s", bq, bk, bv);
        return -1;
    }
    for (int d = 0; d < rk - 2; d++)
        if (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d]) {
            mi_error_set("attention: batch dims differ: q %s k %s v %s", bq, bk, bv);
            return -1;
        }
    if (q->shape[rk - 1] != k->shape[rk - 1] || q->shape[rk - 1] < 1) {
        mi_error_set("attention: q and k head dims differ (or are 0): q %s k %s", bq, bk);
        return -1;
    }
    if (k->shape[rk - 2] != v->shape[rk - 2]) {
        mi_error_set("attention: k and v lengths differ: k %s v %s", bk, bv);
        return -1;
    }
    int64_t nt = q->shape[rk - 2], ns = k->shape[rk - 2];
    if (ns < 1) {
        mi_error_set("attention: no keys: k %s", bk);
        return -1;
    }
    if (a->window < 0) {
        mi_error_set("attention: window must be >= 0, got %lld", (long long)a->window);
        return -1;
    }
    if (a->window > 0 && nt - ns >= a->window) {
        mi_error_set("attention: window %lld leaves query rows with no key: q %s k %s "
                     "(needs T <= S + window - 1)", (long long)a->window, bq, bk);
        return -1;
    }
    *dt = q->dtype;
    copy_shape(rank, shape, q);
    shape[rk - 1] = v->shape[rk - 1];
    return 0;
}
static mi_tensor *attention_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    const mi_attrs *a = &n->attrs;
    int rk = q->rank;
    double sc = 1.0 / sqrt((double)q->shape[rk - 1]);
    mi_tensor *s = mi_mul_scalar(mi_matmul_t(q, k, false, true), sc);
    if (a->causal || a->window > 0)
        s = mi_add(s, mi_attention_mask(q->dtype, q->shape[rk - 2], k->shape[rk - 2], a->causal,
                                        a->window));
    mi_tensor *p = mi_softmax(s, -1);
    if (i == 2) return mi_matmul_t(p, g, true, false);
    mi_tensor *dp = mi_matmul_t(g, v, false, true);
    mi_tensor *ds = mi_mul(p, mi_sub(dp, mi_sum(mi_mul(dp, p), -1, true)));
    if (i == 0) return mi_mul_scalar(mi_matmul(ds, k), sc);
    return mi_mul_scalar(mi_matmul_t(ds, q, true, false), sc);
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
    default: return 0;
    }
}
const mi_op mi_op_attention = {.name = "attention",
                               .formula = "softmax(q k^T / sqrt(D) + mask) v", .arity = 3,
                               .shape = attention_shape, KERNELS(attention),
                               .vjp = attention_vjp, .examples = ex_attention};
mi_tensor *mi_attention(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal, int64_t window)
{
    mi_attrs a = {.causal = causal, .window = window};
    return RUN(&mi_op_attention, &a, q, k, v);
}
