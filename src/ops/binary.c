/* Broadcasting binary ops, where, and comparisons. Each vjp returns the
 * gradient at the output's shape; the engine sums it back to the input's. */
#include "internal.h"
#include "own_kernels.h"

static mi_tensor *zero_like_dtype(const mi_tensor *t) { return mi_scalar(t->dtype, 0.0); }

/* Three broadcast shapes for the gradient checks: equal, broadcast both
 * ways with a size-1 axis, and tensor ⊕ rank-0 scalar. */
static int pair_shapes(mi_rng *r, int variant, mi_tensor **in, bool b_away)
{
    static const int64_t sa[3][3] = {{3, 5}, {2, 1, 4}, {5}}, sb[3][2] = {{3, 5}, {3, 1}, {0}};
    static const int ra[3] = {2, 3, 1}, rb[3] = {2, 2, 0};
    if (variant >= 3) return 0;
    in[0] = ex_normal(r, ra[variant], sa[variant]);
    in[1] = b_away ? ex_away_from_zero(r, rb[variant], sb[variant], 0.5, 2.0)
                   : ex_normal(r, rb[variant], sb[variant]);
    return 2;
}
static int ex_pair(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    (void)a;
    return pair_shapes(r, v, in, false);
}
static int ex_pair_b_away(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    (void)a;
    return pair_shapes(r, v, in, true);
}

/* ---------------------------------------------------------------- add, sub */
BINARY_KERNELS(add, x + y)
static mi_tensor *add_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)n;
    (void)i;
    return g;
}
const mi_op mi_op_add = {.name = "add", .formula = "a + b", .arity = 2, .shape = shape_broadcast,
                         KERNELS(add), OWN_F32(add, own_select_binary),
                         .vjp = add_vjp, .examples = ex_pair};
mi_tensor *mi_add(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_add, NULL, a, b); }

BINARY_KERNELS(sub, x - y)
static mi_tensor *sub_vjp(const mi_node *n, int i, mi_tensor *g)
{
    (void)n;
    return i == 0 ? g : mi_neg(g);
}
const mi_op mi_op_sub = {.name = "sub", .formula = "a - b", .arity = 2, .shape = shape_broadcast,
                         KERNELS(sub), OWN_F32(sub, own_select_binary),
                         .vjp = sub_vjp, .examples = ex_pair};
mi_tensor *mi_sub(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_sub, NULL, a, b); }

/* ---------------------------------------------------------------- mul, div */
BINARY_KERNELS(mul, x *y)
/* d(ab) = b da + a db */
static mi_tensor *mul_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul(g, n->inputs[1 - i]);
}
const mi_op mi_op_mul = {.name = "mul", .formula = "a * b", .arity = 2, .shape = shape_broadcast,
                         KERNELS(mul), OWN_F32(mul, own_select_binary),
                         .vjp = mul_vjp, .examples = ex_pair};
mi_tensor *mi_mul(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_mul, NULL, a, b); }

BINARY_KERNELS(div, x / y)
/* d(a/b) = da / b − (a/b) db / b */
static mi_tensor *div_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *b = n->inputs[1];
    if (i == 0) return mi_div(g, b);
    return mi_neg(mi_div(mi_mul(g, n->output), b));
}
const mi_op mi_op_div = {.name = "div", .formula = "a / b", .arity = 2, .shape = shape_broadcast,
                         KERNELS(div), OWN_F32(div, own_select_binary),
                         .vjp = div_vjp, .examples = ex_pair_b_away};
mi_tensor *mi_div(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_div, NULL, a, b); }

/* ---------------------------------------------------------------- maximum, minimum
 * The gradient goes to the larger (smaller) input; a tie sends it to a. */
BINARY_KERNELS(maximum, x >= y ? x : y)
static mi_tensor *maximum_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1];
    return mi_mul(g, i == 0 ? mi_ge(a, b) : mi_lt(a, b));
}
const mi_op mi_op_maximum = {.name = "maximum", .formula = "max(a, b)", .arity = 2,
                             .shape = shape_broadcast, KERNELS(maximum), .vjp = maximum_vjp,
                             OWN_F32(maximum, own_select_binary),
                             .examples = ex_pair};
mi_tensor *mi_maximum(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_maximum, NULL, a, b); }

BINARY_KERNELS(minimum, x <= y ? x : y)
static mi_tensor *minimum_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1];
    return mi_mul(g, i == 0 ? mi_le(a, b) : mi_gt(a, b));
}
const mi_op mi_op_minimum = {.name = "minimum", .formula = "min(a, b)", .arity = 2,
                             .shape = shape_broadcast, KERNELS(minimum), .vjp = minimum_vjp,
                             OWN_F32(minimum, own_select_binary),
                             .examples = ex_pair};
mi_tensor *mi_minimum(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_minimum, NULL, a, b); }

/* ---------------------------------------------------------------- where */
/* The loop is where_map in elementwise_impl.h, per dtype. */
static void where_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    (void)at;
    where_map_f32(o, in);
}
static void where_f64(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    (void)at;
    where_map_f64(o, in);
}
static int where_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                       int64_t *shape)
{
    if (require_float("where", in, 0) != 0) return -1;
    return shape_broadcast(in, n, a, dt, rank, shape);
}
static mi_tensor *where_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *c = n->inputs[0], *zero = zero_like_dtype(g);
    return i == 1 ? mi_where(c, g, zero) : mi_where(c, zero, g);
}
static int ex_where(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    (void)a;
    if (v >= 2) return 0;
    in[0] = mi_gt(mi_randn(r, MI_F64, MI_SHAPE(3, 4), 0, 1), mi_scalar(MI_F64, 0.0));
    in[1] = ex_normal(r, MI_SHAPE(3, 4));
    in[2] = v == 0 ? ex_normal(r, MI_SHAPE(3, 4)) : ex_normal(r, MI_SHAPE(4));
    return 3;
}
const mi_op mi_op_where = {.name = "where", .formula = "cond != 0 ? a : b", .arity = 3,
                           .shape = where_shape, KERNELS(where), .vjp = where_vjp,
                           OWN_F32(where, own_select_where),
                           .diff_inputs = 0x6, .examples = ex_where};
mi_tensor *mi_where(mi_tensor *c, mi_tensor *a, mi_tensor *b)
{
    return RUN(&mi_op_where, NULL, c, a, b);
}

/* ---------------------------------------------------------------- comparisons */
#define COMPARISON(op, EXPR, text)                                                        \
    BINARY_KERNELS(op, (EXPR) ? 1 : 0)                                                     \
    const mi_op mi_op_##op = {.name = #op, .formula = text, .arity = 2,                    \
                              .flags = MI_OP_NONDIFF, .shape = shape_broadcast,            \
                              KERNELS(op), .examples = ex_pair,                            \
                              OWN_F32(op, own_select_binary)};                             \
    mi_tensor *mi_##op(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_##op, NULL, a, b); }

COMPARISON(gt, x > y, "a > b")
COMPARISON(ge, x >= y, "a >= b")
COMPARISON(lt, x < y, "a < b")
COMPARISON(le, x <= y, "a <= b")
COMPARISON(eq, x == y, "a == b")
