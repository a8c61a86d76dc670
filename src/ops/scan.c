/* Scans along one axis: cumulative sum, cumulative product, and the linear
 * recurrence h_t = a_t ⊙ h_{t−1} + x_t that carries the decays and momenta
 * of the MIRAS inner loops (MIRAS §"Parallelizable Training": inside a chunk
 * the recurrence M_t = α_t M_{t−1} − η_t ∇ℓ is linear, so it runs as a scan).
 *
 * Every scan reads attrs.axis (negative counts from the end) and
 * attrs.reverse (t runs from the last index to the first). A tensor is seen
 * as [outer, len, inner] around the axis; the kernels walk len in order and
 * the contiguous inner block in the innermost loop. Each vjp is again a scan
 * (or a scan and elementwise ops), so gradients of gradients work. */
#include "internal.h"
#include "own_kernels.h"

/* x seen as [outer, len, inner] around axis ax. */
static void split_axis(const mi_tensor *x, int ax, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < ax; d++) *outer *= x->shape[d];
    for (int d = ax + 1; d < x->rank; d++) *inner *= x->shape[d];
    *len = x->shape[ax];
}

/* The axis an attrs names, already validated by the shape rule. */
static int attr_axis(const mi_attrs *a, int rank) { return a->axis < 0 ? a->axis + rank : a->axis; }

/* Shape rule of the single-input scans: float x, a valid axis. */
static int scan1_shape(const char *op, mi_tensor *const *in, const mi_attrs *a, mi_dtype *dt,
                       int *rank, int64_t *shape)
{
    if (require_float(op, in, 0) != 0) return -1;
    if (axis_norm(op, a->axis, in[0]->rank) < 0) return -1;
    *dt = in[0]->dtype;
    copy_shape(rank, shape, in[0]);
    return 0;
}

/* a's strides in x's frame: 0 along the axes a broadcasts over. */
static void bcast_strides(const mi_tensor *a, const mi_tensor *x, int64_t *st)
{
    int64_t own[MI_MAX_RANK];
    mi_strides(a->rank, a->shape, own);
    for (int d = 0; d < x->rank; d++) {
        int da = d - (x->rank - a->rank);
        st[d] = (da < 0 || a->shape[da] == 1) ? 0 : own[da];
    }
}

/* The kernels of cumsum, cumprod, linear_scan and linear_scan_from, per
 * dtype (scan_impl.h). */
#define SCAN_T float
#define SCAN_NAME(x) x##_f32
#include "scan_impl.h"
#undef SCAN_T
#undef SCAN_NAME
#define SCAN_T double
#define SCAN_NAME(x) x##_f64
#include "scan_impl.h"
#undef SCAN_T
#undef SCAN_NAME

/* ---------------------------------------------------------------- cumsum
 * y_t = Σ_{s ≤ t} x_s (reverse: Σ_{s ≥ t} x_s).
 * vjp: ∂L/∂x_s = Σ_{t ≥ s} g_t, the cumsum of g in the opposite direction. */
static int cumsum_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                        int64_t *shape)
{
    (void)n;
    return scan1_shape("cumsum", in, a, dt, rank, shape);
}
static mi_tensor *cumsum_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    return mi_cumsum(g, n->attrs.axis, !n->attrs.reverse);
}
static int ex_cumsum(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_normal(r, MI_SHAPE(3, 5)); a->axis = 1; break;
    case 1: in[0] = ex_normal(r, MI_SHAPE(2, 3, 4)); a->axis = -2; a->reverse = true; break;
    case 2: in[0] = ex_normal(r, MI_SHAPE(5, 1, 3)); a->axis = 0; break;
    case 3: in[0] = ex_normal(r, MI_SHAPE(7)); a->axis = 0; a->reverse = true; break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_cumsum = {.name = "cumsum", .formula = "y_t = sum_{s<=t} x_s along axis",
                            .arity = 1, .shape = cumsum_shape, KERNELS(cumsum),
                            OWN_F32(cumsum, own_select_scan),
                            .vjp = cumsum_vjp, .examples = ex_cumsum};
/* attrs: axis, reverse. */
mi_tensor *mi_cumsum(mi_tensor *x, int axis, bool reverse)
{
    mi_attrs a = {.axis = axis, .reverse = reverse};
    return RUN(&mi_op_cumsum, &a, x);
}

/* ---------------------------------------------------------------- cumprod
 * y_t = Π_{s ≤ t} x_s (reverse: Π_{s ≥ t} x_s).
 * vjp: ∂y_t/∂x_s = y_t / x_s for t ≥ s, so ∂L/∂x = revcumsum(g ⊙ y) / x.
 * This closed form needs x ≠ 0 everywhere (a zero makes it 0/0); the
 * examples keep |x| in [0.5, 1.5]. */
static int cumprod_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                         int64_t *shape)
{
    (void)n;
    return scan1_shape("cumprod", in, a, dt, rank, shape);
}
static mi_tensor *cumprod_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)i;
    mi_tensor *gy = mi_mul(g, n->output);
    return mi_div(mi_cumsum(gy, n->attrs.axis, !n->attrs.reverse), n->inputs[0]);
}
static int ex_cumprod(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: in[0] = ex_away_from_zero(r, MI_SHAPE(3, 5), 0.5, 1.5); a->axis = 1; break;
    case 1:
        in[0] = ex_away_from_zero(r, MI_SHAPE(2, 3, 2), 0.5, 1.5);
        a->axis = 0;
        a->reverse = true;
        break;
    case 2: in[0] = ex_away_from_zero(r, MI_SHAPE(1, 4, 3), 0.5, 1.5); a->axis = -2; break;
    default: return 0;
    }
    return 1;
}
const mi_op mi_op_cumprod = {.name = "cumprod", .formula = "y_t = prod_{s<=t} x_s along axis",
                             .arity = 1, .shape = cumprod_shape, KERNELS(cumprod),
                             OWN_F32(cumprod, own_select_scan),
                             .vjp = cumprod_vjp, .examples = ex_cumprod};
/* attrs: axis, reverse. */
mi_tensor *mi_cumprod(mi_tensor *x, int axis, bool reverse)
{
    mi_attrs a = {.axis = axis, .reverse = reverse};
    return RUN(&mi_op_cumprod, &a, x);
}

/* ---------------------------------------------------------------- linear_scan
 * h_t = a_t ⊙ h_{t−1} + x_t along axis, h_{−1} = 0 (reverse: h_t = a_t ⊙
 * h_{t+1} + x_t, h_len = 0). a broadcasts to x's shape (NumPy rules, a's
 * rank ≤ x's); the output has x's shape. With a = α_t and x = −η_t ∇ℓ_t this
 * is Moneta's A_t = α_t A_{t−1} − η_t ∇ℓ (MIRAS eq:q-norm) and the Titans
 * momentum S_t = η_t S_{t−1} − θ_t ∇ℓ.
 *
 * vjp (forward direction; reverse swaps t+1 and t−1): the adjoint runs the
 * same recurrence backwards with a shifted one step against the direction,
 *   λ_t = g_t + a_{t+1} λ_{t+1},  λ_len = 0
 *       = linear_scan(a_next, g, reverse = !reverse),  a_next_t = a_{t+1}
 *   ∂L/∂x_t = λ_t
 *   ∂L/∂a_t = λ_t ⊙ h_{t−1}   (h_{−1} = 0; the engine sums it to a's shape)
 * a_next at the scan's first step multiplies the zero start state, so the
 * zero that pad puts there never matters. */

/* Shape rule of linear_scan (n = 2) and linear_scan_from (n = 3): float
 * inputs, a broadcasting to x, a valid axis, and h0 broadcasting to x's
 * shape with the scan axis of size 1. */
static int scan_rec_shape(const char *op, mi_tensor *const *in, int n, const mi_attrs *at,
                          mi_dtype *dt, int *rank, int64_t *shape)
{
    const mi_tensor *a = in[0], *x = in[1];
    for (int i = 0; i < n; i++)
        if (require_float(op, in, i) != 0) return -1;
    bool fits = a->rank <= x->rank;
    for (int d = 0; fits && d < a->rank; d++) {
        int64_t da = a->shape[d], dx = x->shape[d + x->rank - a->rank];
        fits = da == 1 || da == dx;
    }
    if (!fits) {
        char sa[96], sx[96];
        mi_error_set("%s: a %s does not broadcast to x %s", op,
                     mi_shape_str(sa, sizeof sa, a->rank, a->shape),
                     mi_shape_str(sx, sizeof sx, x->rank, x->shape));
        return -1;
    }
    int ax = axis_norm(op, at->axis, x->rank);
    if (ax < 0) return -1;
    if (n == 3) {
        const mi_tensor *h0 = in[2];
        int64_t want[MI_MAX_RANK];
        memcpy(want, x->shape, sizeof(int64_t) * (size_t)x->rank);
        want[ax] = 1;
        fits = h0->rank <= x->rank;
        for (int d = 0; fits && d < h0->rank; d++) {
            int64_t dh = h0->shape[d], dw = want[d + x->rank - h0->rank];
            fits = dh == 1 || dh == dw;
        }
        if (!fits) {
            char sh[96], sw[96], sx[96];
            mi_error_set("%s: h0 %s does not broadcast to %s (x %s with axis %d of size 1)", op,
                         mi_shape_str(sh, sizeof sh, h0->rank, h0->shape),
                         mi_shape_str(sw, sizeof sw, x->rank, want),
                         mi_shape_str(sx, sizeof sx, x->rank, x->shape), ax);
            return -1;
        }
    }
    *dt = x->dtype;
    copy_shape(rank, shape, x);
    return 0;
}

static int linear_scan_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                             int *rank, int64_t *shape)
{
    (void)n;
    return scan_rec_shape("linear_scan", in, 2, at, dt, rank, shape);
}

/* t shifted one step along ax, the vacated end zero: later = true gives
 * out_t = t_{t−1} (out_0 = 0), later = false gives out_t = t_{t+1}. */
static mi_tensor *shift_one(mi_tensor *t, int ax, bool later)
{
    int64_t len = t->shape[ax];
    if (len <= 1) return mi_zeros(t->dtype, t->rank, t->shape);
    if (later) return mi_pad(mi_slice(t, ax, 0, len - 1), ax, 1, 0);
    return mi_pad(mi_slice(t, ax, 1, len), ax, 0, 1);
}

/* a's axis in its own frame, or -1 when a is constant along the scan axis
 * (absent there, or of size 1). */
static int a_axis(const mi_tensor *a, int ax, int rank)
{
    int ax_a = ax - (rank - a->rank);
    return ax_a < 0 || a->shape[ax_a] == 1 ? -1 : ax_a;
}

/* The adjoint λ = linear_scan(a_next, g, !reverse), a_next = a one step
 * against the scan's direction (no shift for an a constant along it). */
static mi_tensor *scan_adjoint(const mi_node *n, mi_tensor *g)
{
    mi_tensor *a = n->inputs[0];
    bool rev = n->attrs.reverse;
    int ax = attr_axis(&n->attrs, n->output->rank), ax_a = a_axis(a, ax, n->output->rank);
    mi_tensor *a_next = ax_a < 0 ? a : shift_one(a, ax_a, rev);
    return mi_linear_scan(a_next, g, ax, !rev);
}

static mi_tensor *linear_scan_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *h = n->output;
    mi_tensor *lambda = scan_adjoint(n, g);
    if (i == 1) return lambda;
    int ax = attr_axis(&n->attrs, h->rank);
    return mi_mul(lambda, shift_one(h, ax, !n->attrs.reverse)); /* λ_t ⊙ h_{t∓1} */
}

/* Decays in [0.3, 0.95] (a sign flip would be fine too); shapes with a of
 * x's shape, a broadcast over leading and trailing axes, and a rank-0 a. */
static int ex_linear_scan(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = ex_uniform(r, MI_SHAPE(4, 3), 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(4, 3));
        a->axis = 0;
        break;
    case 1:
        in[0] = ex_uniform(r, MI_SHAPE(4, 1), 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(2, 4, 3));
        a->axis = 1;
        a->reverse = true;
        break;
    case 2:
        in[0] = ex_uniform(r, 0, (const int64_t[]){1}, 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(5, 2));
        a->axis = -2;
        break;
    case 3:
        in[0] = ex_uniform(r, MI_SHAPE(2, 5, 1), -0.9, 0.9);
        in[1] = ex_normal(r, MI_SHAPE(2, 5, 3));
        a->axis = 1;
        break;
    default: return 0;
    }
    return 2;
}
const mi_op mi_op_linear_scan = {.name = "linear_scan",
                                 .formula = "h_t = a_t * h_{t-1} + x_t along axis, h_{-1} = 0",
                                 .arity = 2, .shape = linear_scan_shape, KERNELS(linear_scan),
                                 OWN_F32(linear_scan, own_select_scan),
                                 .vjp = linear_scan_vjp, .examples = ex_linear_scan};
/* attrs: axis (of x), reverse. */
mi_tensor *mi_linear_scan(mi_tensor *a, mi_tensor *x, int axis, bool reverse)
{
    mi_attrs at = {.axis = axis, .reverse = reverse};
    return RUN(&mi_op_linear_scan, &at, a, x);
}

/* ---------------------------------------------------------------- linear_scan_from
 * linear_scan from a given state: h_t = a_t ⊙ h_{t−1} + x_t, h_{−1} = h0
 * (reverse: h_len = h0). h0 broadcasts to x's shape with the scan axis of
 * size 1. This is a chunk of the MIRAS recurrence continuing from the state
 * the previous chunk left (Titans' S_t = η_t S_{t−1} − θ_t ∇ℓ, the decay
 * A_t = α_t A_{t−1} + S_t), without concatenating h0 in front of x.
 *
 * vjp (forward direction; reverse mirrors it): λ as in linear_scan, then
 *   ∂L/∂x_t  = λ_t
 *   ∂L/∂a_t  = λ_t ⊙ h_{t−1}      (h_{−1} = h0)
 *   ∂L/∂h0   = a_0 ⊙ λ_0          (summed to h0's shape by the engine) */
static int linear_scan_from_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                                  int *rank, int64_t *shape)
{
    (void)n;
    return scan_rec_shape("linear_scan_from", in, 3, at, dt, rank, shape);
}

static mi_tensor *linear_scan_from_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *a = n->inputs[0], *h0 = n->inputs[2], *h = n->output;
    bool rev = n->attrs.reverse;
    int ax = attr_axis(&n->attrs, h->rank);
    int64_t len = h->shape[ax], first = rev ? len - 1 : 0;
    mi_tensor *lambda = scan_adjoint(n, g);
    if (i == 1) return lambda;
    if (i == 2) {
        int ax_a = a_axis(a, ax, h->rank);
        mi_tensor *a_first = ax_a < 0 ? a : mi_slice(a, ax_a, first, first + 1);
        return mi_mul(a_first, mi_slice(lambda, ax, first, first + 1));
    }
    /* h_prev: h one step later along the scan, h0 in the vacated slot */
    int64_t one[MI_MAX_RANK];
    memcpy(one, h->shape, sizeof(int64_t) * (size_t)h->rank);
    one[ax] = 1;
    mi_tensor *start = h0->rank == h->rank && mi_shape_numel(h->rank, one) == h0->numel
                           ? h0
                           : mi_broadcast_to(h0, h->rank, one);
    mi_tensor *h_prev = start;
    if (len > 1) {
        mi_tensor *rest = rev ? mi_slice(h, ax, 1, len) : mi_slice(h, ax, 0, len - 1);
        h_prev = mi_concat(rev ? (mi_tensor *[]){rest, start} : (mi_tensor *[]){start, rest}, 2,
                           ax);
    }
    return mi_mul(lambda, h_prev); /* λ_t ⊙ h_{t∓1} */
}

/* linear_scan's shapes with a start state: h0 of x's shape with the axis
 * of size 1, of lower rank, broadcast along a trailing axis, and rank 0. */
static int ex_linear_scan_from(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = ex_uniform(r, MI_SHAPE(4, 3), 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(4, 3));
        in[2] = ex_normal(r, MI_SHAPE(1, 3));
        a->axis = 0;
        break;
    case 1:
        in[0] = ex_uniform(r, MI_SHAPE(4, 1), 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(2, 4, 3));
        in[2] = ex_normal(r, MI_SHAPE(2, 1, 3));
        a->axis = 1;
        a->reverse = true;
        break;
    case 2:
        in[0] = ex_uniform(r, 0, (const int64_t[]){1}, 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(5, 2));
        in[2] = ex_normal(r, MI_SHAPE(2));
        a->axis = -2;
        break;
    case 3:
        in[0] = ex_uniform(r, MI_SHAPE(2, 5, 1), -0.9, 0.9);
        in[1] = ex_normal(r, MI_SHAPE(2, 5, 3));
        in[2] = ex_normal(r, MI_SHAPE(2, 1, 1));
        a->axis = 1;
        break;
    case 4:
        in[0] = ex_uniform(r, MI_SHAPE(3, 4, 1), 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(3, 4, 2));
        in[2] = ex_normal(r, 0, (const int64_t[]){1});
        a->axis = 1;
        a->reverse = true;
        break;
    case 5: /* one step: h = a ⊙ h0 + x */
        in[0] = ex_uniform(r, MI_SHAPE(2, 1, 3), 0.3, 0.95);
        in[1] = ex_normal(r, MI_SHAPE(2, 1, 3));
        in[2] = ex_normal(r, MI_SHAPE(2, 1, 3));
        a->axis = 1;
        break;
    default: return 0;
    }
    return 3;
}
const mi_op mi_op_linear_scan_from = {
    .name = "linear_scan_from",
    .formula = "h_t = a_t * h_{t-1} + x_t along axis, h_{-1} = h0",
    .arity = 3, .shape = linear_scan_from_shape, KERNELS(linear_scan_from),
    OWN_F32(linear_scan_from, own_select_scan),
    .vjp = linear_scan_from_vjp, .examples = ex_linear_scan_from};
/* attrs: axis (of x), reverse. */
mi_tensor *mi_linear_scan_from(mi_tensor *a, mi_tensor *x, mi_tensor *h0, int axis, bool reverse)
{
    mi_attrs at = {.axis = axis, .reverse = reverse};
    return RUN(&mi_op_linear_scan_from, &at, a, x, h0);
}
