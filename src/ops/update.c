/* The inner loop's state updates, fused: one pass over a weight-sized state
 * where the composed ops take one per product and sum.
 *
 * outer_update: Y = a ⊙ X + b ⊙ (d xᵀ), X [..., out, in], d [..., out],
 * x [..., in], the gates a (broadcast to X; mi_outer_update's NULL: 1) and
 * b (broadcast to [..., out, 1]): the momentum step of the MIRAS paper's
 * online gradient descent with a rank-one gradient, S_t = μ_t ⊙ S_{t−1} − η_t ⊙ δ_t x_tᵀ
 * (Titans' surprise, eq:OGDupdate with momentum), or, without momentum,
 * A_t = α_t ⊙ A_{t−1} − η_t ⊙ δ_t x_tᵀ, without the outer product ever
 * being a tensor of its own.
 * vjp, with w_r = Σ_c G_rc x_c per row r of X:
 *   gX = a ⊙ G,  ga = Σ G ⊙ X (over a's broadcast axes),
 *   gb = Σ d ⊙ w,  gd = b ⊙ w,  gx = Σ_r b_r d_r G_r
 *
 * scale_add: Y = a ⊙ X + Z (Z X's shape): the retention's step
 * A_t = α_t ⊙ A_{t−1} + S_t.  vjp: gX = a ⊙ G, ga = Σ G ⊙ X, gZ = G.
 *
 * Each vjp is written twice: with registered ops when the pass records
 * (create_graph: it is itself differentiable), and, when it does not, as one
 * loop over G and X (update_impl.h) that writes every gradient at once. */
#include "own_kernels.h"
#include "update_geom.h"

#define UP_KERNEL static
#define UP_T float
#define UP_NAME(x) x##_f32
#include "update_impl.h"
#undef UP_T
#undef UP_NAME
#define UP_T double
#define UP_NAME(x) x##_f64
#include "update_impl.h"
#undef UP_T
#undef UP_NAME
#undef UP_KERNEL

/* Strides of gate t (right-aligned to X) along X's leading axes. */
static void gate_strides(const mi_tensor *t, const mi_tensor *X, int64_t *st)
{
    int R = X->rank, off = R - t->rank;
    int64_t s = 1;
    for (int d = R - 1; d >= 0; d--) {
        int td = d - off;
        if (d < R - 1) st[d] = td < 0 || t->shape[td] == 1 ? 0 : s;
        if (td >= 0) s *= t->shape[td];
    }
}

static void geom_of(up_geom *g, const mi_tensor *X, const mi_tensor *a, const mi_tensor *b)
{
    /* a rank-1 X (scale_add's) is one row */
    *g = (up_geom){.cols = X->shape[X->rank - 1],
                   .out = X->rank > 1 ? X->shape[X->rank - 2] : 1, .nd = X->rank - 1};
    g->rows = g->cols ? X->numel / g->cols : 0;
    memcpy(g->shape, X->shape, sizeof(int64_t) * (size_t)g->nd);
    if (a) {
        gate_strides(a, X, g->a_st);
        g->a_col = a->rank > 0 && a->shape[a->rank - 1] != 1;
    }
    if (b) gate_strides(b, X, g->b_st);
}

/* t broadcasts to X's shape; with `row_gate`, its last axis is 1. */
static bool gate_fits(const mi_tensor *t, const mi_tensor *X, bool row_gate)
{
    if (t->rank > X->rank) return false;
    for (int d = 0; d < t->rank; d++) {
        int64_t n = t->shape[t->rank - 1 - d], m = X->shape[X->rank - 1 - d];
        if (n != 1 && n != m) return false;
    }
    return !(row_gate && t->rank > 0 && t->shape[t->rank - 1] != 1);
}

/* mi_apply has checked that the inputs share a dtype; it must be a float */
static int floats(const char *op, mi_tensor *const *in, int n)
{
    for (int i = 0; i < n; i++)
        if (require_float(op, in, i) != 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- outer_update
 * Inputs X, a, b, d, x (a rank-0 1 when the caller gives none). */
static int outer_update_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                              int *rank, int64_t *shape)
{
    (void)at;
    if (floats("outer_update", in, n) != 0) return -1;
    const mi_tensor *X = in[0], *a = in[1], *b = in[2], *d = in[3], *x = in[4];
    char s[3][96];
    bool ok = X->rank >= 2 && d->rank == X->rank - 1 && x->rank == X->rank - 1;
    for (int i = 0; ok && i < X->rank - 1; i++) ok = d->shape[i] == X->shape[i];
    for (int i = 0; ok && i < X->rank - 2; i++) ok = x->shape[i] == X->shape[i];
    if (!ok || x->shape[x->rank - 1] != X->shape[X->rank - 1]) {
        mi_error_set("outer_update: X %s needs d [..., out] %s and x [..., in] %s with its "
                     "leading axes", mi_shape_str(s[0], 96, X->rank, X->shape),
                     mi_shape_str(s[1], 96, d->rank, d->shape),
                     mi_shape_str(s[2], 96, x->rank, x->shape));
        return -1;
    }
    if (!gate_fits(a, X, false) || !gate_fits(b, X, true)) {
        mi_error_set("outer_update: gates a %s and b %s must broadcast to X %s (b with a last "
                     "axis of 1)", mi_shape_str(s[0], 96, a->rank, a->shape),
                     mi_shape_str(s[1], 96, b->rank, b->shape),
                     mi_shape_str(s[2], 96, X->rank, X->shape));
        return -1;
    }
    *dt = X->dtype;
    copy_shape(rank, shape, X);
    return 0;
}

/* REF: every row, one thread; OWN: own_update.c's split over the threads */
#define ALL_ROWS(loop) loop##_all
#define OUTER_UPDATE_ALL(loop)                                                               \
    static void loop##_all(const up_geom *g, void *Y, const void *X, const void *A,          \
                           const void *B, const void *D, const void *V)                      \
    {                                                                                        \
        loop(g, 0, g->rows, Y, X, A, B, D, V);                                               \
    }
OUTER_UPDATE_ALL(outer_update_rows_f32)
OUTER_UPDATE_ALL(outer_update_rows_f64)
#define OUTER_UPDATE_KERNEL(sfx, loop)                                                        \
    static void outer_update##sfx(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)   \
    {                                                                                       \
        (void)at;                                                                           \
        up_geom g;                                                                          \
        geom_of(&g, in[0], in[1], in[2]);                                                   \
        loop(&g, o->data, in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data); \
    }
OUTER_UPDATE_KERNEL(_f32, ALL_ROWS(outer_update_rows_f32))
OUTER_UPDATE_KERNEL(_f64, ALL_ROWS(outer_update_rows_f64))
OUTER_UPDATE_KERNEL(_own_f32, own_outer_update_rows_f32)

#define DATA(t) ((t) ? (t)->data : NULL)
/* The backward's loops are the forward's backend: OWN's where it ran OWN. */
static bool own_kernel(const mi_node *n, mi_kernel_fn own)
{
    return mi_kernel_choose(n->op, n->inputs, n->n_inputs, &n->attrs, n->output) == own;
}

static int outer_update_vjp_all(const mi_node *n, mi_tensor *g, const bool *need,
                                mi_tensor **grads)
{
    mi_tensor *X = n->inputs[0], *a = n->inputs[1], *b = n->inputs[2], *d = n->inputs[3];
    mi_tensor *x = n->inputs[4];
    if (mi_grad_enabled()) {
        mi_tensor *dc = mi_unsqueeze(d, -1);
        mi_tensor *w = need[2] || need[3] ? mi_matmul(g, mi_unsqueeze(x, -1)) : NULL;
        if (need[0]) grads[0] = mi_mul(g, a);
        if (need[1]) grads[1] = mi_mul(g, X);
        if (need[2]) grads[2] = mi_mul(w, dc);
        if (need[3]) grads[3] = mi_squeeze(mi_mul(w, b), -1);
        if (need[4]) grads[4] = mi_squeeze(mi_matmul_t(g, mi_mul(dc, b), true, false), -1);
        for (int i = 0; i < 5; i++)
            if (need[i] && !grads[i]) return -1;
        return 0;
    }
    mi_tensor *out[5] = {0};
    for (int i = 0; i < 5; i++) {
        mi_tensor *t = n->inputs[i];
        /* the sums start at zero; gX and gd are written whole */
        if (need[i] && !(out[i] = i == 0 || i == 3 ? mi_tensor_new(t->dtype, t->rank, t->shape)
                                                   : mi_zeros_like(t)))
            return -1;
    }
    up_geom geo;
    geom_of(&geo, X, a, b);
    if (X->dtype == MI_F32 && own_kernel(n, outer_update_own_f32))
        own_outer_update_grads_f32(&geo, g->data, X->data, a->data, b->data, d->data, x->data,
                                   DATA(out[0]), DATA(out[1]), DATA(out[2]), DATA(out[3]),
                                   DATA(out[4]));
    else if (X->dtype == MI_F32)
        outer_update_grads_f32(&geo, 0, geo.rows, g->data, X->data, a->data, b->data, d->data,
                               x->data, DATA(out[0]), DATA(out[1]), DATA(out[2]), DATA(out[3]),
                               DATA(out[4]));
    else
        outer_update_grads_f64(&geo, 0, geo.rows, g->data, X->data, a->data, b->data, d->data,
                               x->data, DATA(out[0]), DATA(out[1]), DATA(out[2]), DATA(out[3]),
                               DATA(out[4]));
    for (int i = 0; i < 5; i++)
        if (need[i]) grads[i] = out[i];
    return 0;
}

/* X [2, 3, 4] with per-matrix gates; [2, 1, 3, 4] with per-row gates; a on
 * the last axis; a rank-0 a. */
static int ex_outer_update(mi_rng *r, int v, mi_tensor **in, mi_attrs *at)
{
    (void)at;
    static const int64_t X[4][4] = {{2, 3, 4}, {2, 1, 3, 4}, {2, 1, 3, 4}, {3, 2, 5}};
    static const int64_t A[4][4] = {{2, 1, 1}, {2, 1, 3, 1}, {2, 1, 1, 4}, {0}};
    static const int64_t B[4][4] = {{2, 1, 1}, {2, 1, 3, 1}, {1, 1}, {2, 1}};
    static const int rx[4] = {3, 4, 4, 3}, ra[4] = {3, 4, 4, 0}, rb[4] = {3, 4, 2, 2};
    if (v >= 4) return 0;
    int R = rx[v];
    int64_t xs[4];
    memcpy(xs, X[v], sizeof xs);
    in[0] = ex_normal(r, R, xs);
    in[1] = ex_normal(r, ra[v], A[v]);
    in[2] = ex_normal(r, rb[v], B[v]);
    in[3] = ex_normal(r, R - 1, xs);
    xs[R - 2] = xs[R - 1];
    in[4] = ex_normal(r, R - 1, xs);
    return 5;
}

const mi_op mi_op_outer_update = {
    .name = "outer_update", .formula = "a * X + b * (d x^T)", .arity = 5,
    .shape = outer_update_shape,
    .kernel = {[MI_BACKEND_REF] = {outer_update_f32, outer_update_f64},
               [MI_BACKEND_OWN] = {outer_update_own_f32, NULL}},
    .select = own_select_eltwise, .vjp_all = outer_update_vjp_all,
    .examples = ex_outer_update};

mi_tensor *mi_outer_update(mi_tensor *X, mi_tensor *a, mi_tensor *b, mi_tensor *d, mi_tensor *x)
{
    if (!a && X && !(a = mi_scalar(X->dtype, 1.0))) return NULL;
    return RUN(&mi_op_outer_update, NULL, X, a, b, d, x);
}

/* ---------------------------------------------------------------- scale_add
 * Inputs X, a, Z. */
static int scale_add_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                           int *rank, int64_t *shape)
{
    (void)at;
    if (floats("scale_add", in, n) != 0) return -1;
    const mi_tensor *X = in[0], *a = in[1], *Z = in[2];
    if (X->rank < 1 || !mi_same_shape(X, Z) || !gate_fits(a, X, false)) {
        char s[3][96];
        mi_error_set("scale_add: a %s must broadcast to X %s, and Z %s be X's shape",
                     mi_shape_str(s[0], 96, a->rank, a->shape),
                     mi_shape_str(s[1], 96, X->rank, X->shape),
                     mi_shape_str(s[2], 96, Z->rank, Z->shape));
        return -1;
    }
    *dt = X->dtype;
    copy_shape(rank, shape, X);
    return 0;
}



#define SCALE_ADD_KERNEL(sfx, loop)                                                          \
    static void scale_add##sfx(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)     \
    {                                                                                      \
        (void)at;                                                                          \
        up_geom g;                                                                         \
        geom_of(&g, in[0], in[1], NULL);                                                      \
        loop(&g, o->data, in[0]->data, in[1]->data, in[2]->data);                          \
    }
#define SCALE_ADD_ALL(loop)                                                                  \
    static void loop##_all(const up_geom *g, void *Y, const void *X, const void *A,          \
                           const void *Z)                                                    \
    {                                                                                        \
        loop(g, 0, g->rows, Y, X, A, Z);                                                     \
    }
SCALE_ADD_ALL(scale_add_rows_f32)
SCALE_ADD_ALL(scale_add_rows_f64)
SCALE_ADD_KERNEL(_f32, ALL_ROWS(scale_add_rows_f32))
SCALE_ADD_KERNEL(_f64, ALL_ROWS(scale_add_rows_f64))
SCALE_ADD_KERNEL(_own_f32, own_scale_add_rows_f32)

int scale_grads(mi_tensor *X, mi_tensor *a, mi_tensor *G, bool own, mi_tensor **gX,
                mi_tensor **ga)
{
    mi_tensor *x = gX ? mi_tensor_new(X->dtype, X->rank, X->shape) : NULL;
    mi_tensor *y = ga ? mi_zeros_like(a) : NULL;
    if ((gX && !x) || (ga && !y)) return -1;
    up_geom geo;
    geom_of(&geo, X, a, NULL);
    if (X->dtype == MI_F32 && own)
        own_scale_add_grads_f32(&geo, G->data, X->data, a->data, DATA(x), DATA(y));
    else if (X->dtype == MI_F32)
        scale_add_grads_f32(&geo, 0, geo.rows, G->data, X->data, a->data, DATA(x), DATA(y));
    else
        scale_add_grads_f64(&geo, 0, geo.rows, G->data, X->data, a->data, DATA(x), DATA(y));
    if (gX) *gX = x;
    if (ga) *ga = y;
    return 0;
}

static int scale_add_vjp_all(const mi_node *n, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    mi_tensor *X = n->inputs[0], *a = n->inputs[1];
    if (need[2]) grads[2] = g;
    if (mi_grad_enabled()) {
        if (need[0] && !(grads[0] = mi_mul(g, a))) return -1;
        if (need[1] && !(grads[1] = mi_mul(g, X))) return -1;
        return 0;
    }
    return scale_grads(X, a, g, own_kernel(n, scale_add_own_f32), need[0] ? &grads[0] : NULL,
                       need[1] ? &grads[1] : NULL);
}

static int ex_scale_add(mi_rng *r, int v, mi_tensor **in, mi_attrs *at)
{
    (void)at;
    static const int64_t X[3][3] = {{2, 3, 4}, {2, 3, 4}, {5}};
    static const int64_t A[3][3] = {{2, 1, 1}, {3, 1}, {1}};
    static const int rx[3] = {3, 3, 1}, ra[3] = {3, 2, 1};
    if (v >= 3) return 0;
    in[0] = ex_normal(r, rx[v], X[v]);
    in[1] = ex_normal(r, ra[v], A[v]);
    in[2] = ex_normal(r, rx[v], X[v]);
    return 3;
}

const mi_op mi_op_scale_add = {
    .name = "scale_add", .formula = "a * X + Z", .arity = 3, .shape = scale_add_shape,
    .kernel = {[MI_BACKEND_REF] = {scale_add_f32, scale_add_f64},
               [MI_BACKEND_OWN] = {scale_add_own_f32, NULL}},
    .select = own_select_eltwise, .vjp_all = scale_add_vjp_all, .examples = ex_scale_add};

mi_tensor *mi_scale_add(mi_tensor *X, mi_tensor *a, mi_tensor *Z)
{
    return RUN(&mi_op_scale_add, NULL, X, a, Z);
}
