/* Elementwise unary ops and their scalar-operand variants. Each vjp is the
 * derivative written with ops, so it is itself differentiable. */
#include "internal.h"

static int ex_normal_3x4(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    (void)a;
    static const int64_t shapes[2][3] = {{3, 4, 0}, {2, 1, 5}};
    if (v >= 2) return 0;
    in[0] = ex_normal(r, v == 0 ? 2 : 3, shapes[v]);
    return 1;
}

/* ---------------------------------------------------------------- neg: y = −x */
UNARY_KERNELS(neg, -x)
static mi_tensor *neg_vjp(const mi_node *n, int i, mi_tensor *g) { return mi_neg(g); }
const mi_op mi_op_neg = {.name = "neg", .formula = "-x", .arity = 1, .shape = shape_like_first,
                         KERNELS(neg), .vjp = neg_vjp, .examples = ex_normal_3x4};
mi_tensor *mi_neg(mi_tensor *x) { return RUN(&mi_op_neg, NULL, x); }

/* ---------------------------------------------------------------- exp: y = eˣ, dy = y dx */
UNARY_KERNELS(exp, F(exp)(x))
static mi_tensor *exp_vjp(const mi_node *n, int i, mi_tensor *g) { return mi_mul(g, n->output); }
const mi_op mi_op_exp = {.name = "exp", .formula = "exp(x)", .arity = 1, .shape = shape_like_first,
                         KERNELS(exp), .vjp = exp_vjp, .examples = ex_normal_3x4};
mi_tensor *mi_exp(mi_tensor *x) { return RUN(&mi_op_exp, NULL, x); }
