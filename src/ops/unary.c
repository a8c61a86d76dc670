/* Elementwise unary ops and their scalar-operand variants. Each vjp is the
 * derivative written with ops, so it is itself differentiable. Every op
 * takes a float tensor (f32 or f64) and returns one of the same dtype and
 * shape; the vjps may use the node's output y where the derivative is
 * cheapest in terms of it (exp, sqrt, tanh, sigmoid). */
#include "dnnl_kernels.h"
#include "internal.h"
#include "own_unary.h"

/* 1/√(2π), the standard normal density's constant. */
#define INV_SQRT_2PI 0.39894228040143267794

/* ---------------------------------------------------------------- shape rule
 * Same shape and dtype as x; x must be float. */
#define FLOAT_SHAPE(name)                                                              \
    static int name##_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, \
                            int *rank, int64_t *shape)                                 \
    {                                                                                  \
        if (require_float(#name, in, 0) != 0) return -1;                               \
        return shape_like_first(in, n, a, dt, rank, shape);                            \
    }

/* ---------------------------------------------------------------- backends
 * OWN (own_unary.c) is the fastest at every size measured, so it runs
 * whenever allowed. Without it, oneDNN runs from a size on where it beats
 * REF's loop; below, REF. Measured on this 2-core machine (AMD EPYC,
 * AVX-512), f32, µs per call, median:
 *   4096×128 through mi_apply, 1 / 2 threads, oneDNN primitive alone | OWN:
 *     tanh 97.8 / 52.2 | 95.6 / 50.1    sigmoid 98.3 / 51.0 | 85.5 / 45.7
 *     gelu 140 / 72.2 | 136 / 74.9      silu 117 / 80.2 | 90.8 / 50.0
 *     exp 73.9 / 36.5 | 69.8 / 37.2     relu 36.5 / 20.4 | 36.1 / 19.9
 *   kernel alone, 2 threads, REF / DNNL at 64, 256, 1024, 8192 elements:
 *     tanh  0.52/0.23  2.06/0.28  8.06/0.45  73.1/1.91
 *     gelu  0.26/0.29  1.06/0.35  4.20/0.58  33.1/2.68
 *     sqrt  0.15/0.21  0.52/0.22  1.98/0.27  27.4/0.80
 *     relu  0.03/0.18  0.04/0.19  0.09/0.22  0.55/0.57  (65536: 4.09/3.62)
 *   and OWN below REF everywhere (tanh at 16 elements 0.06 against 0.19).
 * oneDNN's own cost is ≈ 0.2 µs a call once its primitive is cached. */
#define DNNL_MIN_TRANS 256    /* transcendental ops and sqrt */
#define DNNL_MIN_CHEAP 65536  /* neg, abs, square, relu, add/mul_scalar */
static mi_backend pick(unsigned available, int64_t numel, int64_t dnnl_min)
{
    if (available >> MI_BACKEND_OWN & 1u) return MI_BACKEND_OWN;
    if ((available >> MI_BACKEND_DNNL & 1u) && numel >= dnnl_min) return MI_BACKEND_DNNL;
    return MI_BACKEND_REF;
}
static mi_backend select_trans(mi_tensor *const *in, int n, const mi_attrs *a,
                               const mi_tensor *out, unsigned available)
{
    (void)in, (void)n, (void)a;
    return pick(available, out->numel, DNNL_MIN_TRANS);
}
static mi_backend select_cheap(mi_tensor *const *in, int n, const mi_attrs *a,
                               const mi_tensor *out, unsigned available)
{
    (void)in, (void)n, (void)a;
    return pick(available, out->numel, DNNL_MIN_CHEAP);
}
/* OWN and DNNL f32 kernels of `name` with rule `sel`; OWN alone where
 * oneDNN has no primitive or one that differs from REF (dnnl_kernels.c). */
#define OWN_DNNL(name, sel)                                   \
    .kernel[MI_BACKEND_OWN][MI_F32] = own_##name##_f32,       \
    .kernel[MI_BACKEND_DNNL][MI_F32] = name##_dnnl_f32, .select = sel
#define OWN_ONLY(name) .kernel[MI_BACKEND_OWN][MI_F32] = own_##name##_f32, .select = select_trans

/* ---------------------------------------------------------------- examples
 * Three shapes (rank 2 odd, rank 4 with size-1 axes, rank 0) times a choice
 * of distribution: anywhere, positive (domains of log, sqrt, pow), away from
 * the kink at 0 (abs, sign, relu), or wide (the stable branches of
 * softplus and log-sigmoid). */
enum { EX_NORMAL, EX_POSITIVE, EX_AWAY, EX_WIDE };

static mi_tensor *ex_shaped(mi_rng *r, int v, int kind)
{
    static const int64_t shapes[3][4] = {{3, 5}, {2, 1, 3, 2}, {0}};
    static const int ranks[3] = {2, 4, 0};
    switch (kind) {
    case EX_POSITIVE: return ex_uniform(r, ranks[v], shapes[v], 0.5, 2.0);
    case EX_AWAY: return ex_away_from_zero(r, ranks[v], shapes[v], 0.2, 2.0);
    case EX_WIDE: return ex_uniform(r, ranks[v], shapes[v], -12.0, 12.0);
    default: return ex_normal(r, ranks[v], shapes[v]);
    }
}
#define EXAMPLES(name, kind)                                                 \
    static int ex_##name(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)      \
    {                                                                        \
        (void)a;                                                             \
        if (v >= 3) return 0;                                                \
        in[0] = ex_shaped(r, v, kind);                                       \
        return 1;                                                            \
    }
EXAMPLES(any, EX_NORMAL)
EXAMPLES(positive, EX_POSITIVE)
EXAMPLES(away, EX_AWAY)
EXAMPLES(wide, EX_WIDE)

/* ---------------------------------------------------------------- neg: y = −x */
UNARY_KERNELS(neg, -x)
FLOAT_SHAPE(neg)
static mi_tensor *neg_vjp(const mi_node *n, int i, mi_tensor *g) { return mi_neg(g); }
const mi_op mi_op_neg = {.name = "neg", .formula = "-x", .arity = 1, .shape = neg_shape,
                         KERNELS(neg),
                         OWN_DNNL(neg, select_cheap), .vjp = neg_vjp, .examples = ex_any};
mi_tensor *mi_neg(mi_tensor *x) { return RUN(&mi_op_neg, NULL, x); }

/* ---------------------------------------------------------------- abs: y = |x|, dy = sign(x) dx */
UNARY_KERNELS(abs, F(fabs)(x))
FLOAT_SHAPE(abs)
static mi_tensor *abs_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul(g, mi_sign(n->inputs[0]));
}
const mi_op mi_op_abs = {.name = "abs", .formula = "|x|", .arity = 1, .shape = abs_shape,
                         KERNELS(abs),
                         OWN_DNNL(abs, select_cheap), .vjp = abs_vjp, .examples = ex_away};
mi_tensor *mi_abs(mi_tensor *x) { return RUN(&mi_op_abs, NULL, x); }

/* ---------------------------------------------------------------- sign
 * y = (x > 0) − (x < 0), dy = 0 */
UNARY_KERNELS(sign, (x > 0) - (x < 0))
FLOAT_SHAPE(sign)
static mi_tensor *sign_vjp(const mi_node *n, int i, mi_tensor *g) { return mi_mul_scalar(g, 0.0); }
const mi_op mi_op_sign = {.name = "sign", .formula = "sign(x)", .arity = 1, .shape = sign_shape,
                          KERNELS(sign), OWN_ONLY(sign), .vjp = sign_vjp, .examples = ex_away};
mi_tensor *mi_sign(mi_tensor *x) { return RUN(&mi_op_sign, NULL, x); }

/* ---------------------------------------------------------------- exp: y = eˣ, dy = y dx */
UNARY_KERNELS(exp, F(exp)(x))
FLOAT_SHAPE(exp)
static mi_tensor *exp_vjp(const mi_node *n, int i, mi_tensor *g) { return mi_mul(g, n->output); }
const mi_op mi_op_exp = {.name = "exp", .formula = "exp(x)", .arity = 1, .shape = exp_shape,
                         KERNELS(exp), OWN_ONLY(exp), .vjp = exp_vjp, .examples = ex_any};
mi_tensor *mi_exp(mi_tensor *x) { return RUN(&mi_op_exp, NULL, x); }

/* ---------------------------------------------------------------- log: y = ln x, dy = dx / x */
UNARY_KERNELS(log, F(log)(x))
FLOAT_SHAPE(log)
static mi_tensor *log_vjp(const mi_node *n, int i, mi_tensor *g) { return mi_div(g, n->inputs[0]); }
const mi_op mi_op_log = {.name = "log", .formula = "log(x)", .arity = 1, .shape = log_shape,
                         KERNELS(log), OWN_ONLY(log), .vjp = log_vjp, .examples = ex_positive};
mi_tensor *mi_log(mi_tensor *x) { return RUN(&mi_op_log, NULL, x); }

/* ---------------------------------------------------------------- sqrt: y = √x, dy = dx / (2y) */
UNARY_KERNELS(sqrt, F(sqrt)(x))
FLOAT_SHAPE(sqrt)
static mi_tensor *sqrt_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_div(mi_mul_scalar(g, 0.5), n->output);
}
const mi_op mi_op_sqrt = {.name = "sqrt", .formula = "sqrt(x)", .arity = 1, .shape = sqrt_shape,
                          KERNELS(sqrt),
                          OWN_DNNL(sqrt, select_trans), .vjp = sqrt_vjp, .examples = ex_positive};
mi_tensor *mi_sqrt(mi_tensor *x) { return RUN(&mi_op_sqrt, NULL, x); }

/* ---------------------------------------------------------------- rsqrt
 * y = 1/√x, dy = −½ (y/x) dx */
UNARY_KERNELS(rsqrt, 1 / F(sqrt)(x))
FLOAT_SHAPE(rsqrt)
static mi_tensor *rsqrt_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul_scalar(mi_div(mi_mul(g, n->output), n->inputs[0]), -0.5);
}
const mi_op mi_op_rsqrt = {.name = "rsqrt", .formula = "1 / sqrt(x)", .arity = 1,
                           .shape = rsqrt_shape, KERNELS(rsqrt), OWN_ONLY(rsqrt), .vjp = rsqrt_vjp,
                           .examples = ex_positive};
mi_tensor *mi_rsqrt(mi_tensor *x) { return RUN(&mi_op_rsqrt, NULL, x); }

/* ---------------------------------------------------------------- square: y = x², dy = 2x dx */
UNARY_KERNELS(square, x *x)
FLOAT_SHAPE(square)
static mi_tensor *square_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul(g, mi_mul_scalar(n->inputs[0], 2.0));
}
const mi_op mi_op_square = {.name = "square", .formula = "x^2", .arity = 1,
                            .shape = square_shape, KERNELS(square),
                            OWN_DNNL(square, select_cheap), .vjp = square_vjp,
                            .examples = ex_any};
mi_tensor *mi_square(mi_tensor *x) { return RUN(&mi_op_square, NULL, x); }

/* ---------------------------------------------------------------- reciprocal
 * y = 1/x, dy = −y² dx */
UNARY_KERNELS(reciprocal, 1 / x)
FLOAT_SHAPE(reciprocal)
static mi_tensor *reciprocal_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_neg(mi_mul(g, mi_square(n->output)));
}
const mi_op mi_op_reciprocal = {.name = "reciprocal", .formula = "1 / x", .arity = 1,
                                .shape = reciprocal_shape, KERNELS(reciprocal),
                                OWN_ONLY(reciprocal),
                                .vjp = reciprocal_vjp, .examples = ex_positive};
mi_tensor *mi_reciprocal(mi_tensor *x) { return RUN(&mi_op_reciprocal, NULL, x); }

/* ---------------------------------------------------------------- pow_scalar
 * y = xᵖ (p = attrs.scalar)
 * dy = p·x^(p−1) dx. Non-integer p needs x > 0 (NaN otherwise, as in libm). */
UNARY_KERNELS(pow_scalar, F(pow)(x, (scalar_t)a->scalar))
FLOAT_SHAPE(pow_scalar)
static mi_tensor *pow_scalar_vjp(const mi_node *n, int i, mi_tensor *g)
{
    double p = n->attrs.scalar;
    return mi_mul(g, mi_mul_scalar(mi_pow_scalar(n->inputs[0], p - 1.0), p));
}
static int ex_pow_scalar(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const double p[3] = {3.0, -1.5, 0.5};
    if (v >= 3) return 0;
    a->scalar = p[v];
    in[0] = ex_shaped(r, v, EX_POSITIVE);
    return 1;
}
const mi_op mi_op_pow_scalar = {.name = "pow_scalar", .formula = "x^p", .arity = 1,
                                .shape = pow_scalar_shape, KERNELS(pow_scalar),
                                OWN_ONLY(pow_scalar),
                                .vjp = pow_scalar_vjp, .examples = ex_pow_scalar};
mi_tensor *mi_pow_scalar(mi_tensor *x, double p)
{
    return RUN(&mi_op_pow_scalar, &(mi_attrs){.scalar = p}, x);
}

/* ---------------------------------------------------------------- tanh
 * y = tanh x, dy = (1 − y²) dx */
UNARY_KERNELS(tanh, F(tanh)(x))
FLOAT_SHAPE(tanh)
static mi_tensor *tanh_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_tanh_backward(n->output, g);
}
const mi_op mi_op_tanh = {.name = "tanh", .formula = "tanh(x)", .arity = 1, .shape = tanh_shape,
                          KERNELS(tanh),
                          OWN_DNNL(tanh, select_trans), .vjp = tanh_vjp, .examples = ex_any};
mi_tensor *mi_tanh(mi_tensor *x) { return RUN(&mi_op_tanh, NULL, x); }

/* ---------------------------------------------------------------- sigmoid
 * y = 1/(1 + e⁻ˣ), dy = y(1 − y) dx
 * Evaluated as eˣ/(1 + eˣ) for x < 0 so that no exp overflows. */
UNARY_KERNELS(sigmoid, x >= 0 ? 1 / (1 + F(exp)(-x)) : F(exp)(x) / (1 + F(exp)(x)))
FLOAT_SHAPE(sigmoid)
static mi_tensor *sigmoid_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_sigmoid_backward(n->output, g);
}
const mi_op mi_op_sigmoid = {.name = "sigmoid", .formula = "1 / (1 + exp(-x))", .arity = 1,
                             .shape = sigmoid_shape, KERNELS(sigmoid),
                             OWN_DNNL(sigmoid, select_trans), .vjp = sigmoid_vjp,
                             .examples = ex_any};
mi_tensor *mi_sigmoid(mi_tensor *x) { return RUN(&mi_op_sigmoid, NULL, x); }

/* ---------------------------------------------------------------- silu: y = x·σ(x)
 * dy = σ(x)·(1 + x·(1 − σ(x))) dx */
UNARY_KERNELS(silu, x / (1 + F(exp)(-x)))
FLOAT_SHAPE(silu)
static mi_tensor *silu_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_silu_backward(n->inputs[0], g);
}
const mi_op mi_op_silu = {.name = "silu", .formula = "x * sigmoid(x)", .arity = 1,
                          .shape = silu_shape, KERNELS(silu),
                          OWN_DNNL(silu, select_trans), .vjp = silu_vjp,
                          .examples = ex_any};
mi_tensor *mi_silu(mi_tensor *x) { return RUN(&mi_op_silu, NULL, x); }

/* ---------------------------------------------------------------- gelu
 * y = x·Φ(x), Φ(x) = ½(1 + erf(x/√2))
 * dy = (Φ(x) + x·φ(x)) dx, φ(x) = e^(−x²/2)/√(2π). The exact (erf) form. */
UNARY_KERNELS(gelu, (scalar_t)0.5 * x * (1 + F(erf)(x * (scalar_t)M_SQRT1_2)))
FLOAT_SHAPE(gelu)
static mi_tensor *gelu_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_gelu_backward(n->inputs[0], g);
}
const mi_op mi_op_gelu = {.name = "gelu", .formula = "x * (1 + erf(x / sqrt(2))) / 2",
                          .arity = 1, .shape = gelu_shape, KERNELS(gelu),
                          OWN_DNNL(gelu, select_trans), .vjp = gelu_vjp,
                          .examples = ex_any};
mi_tensor *mi_gelu(mi_tensor *x) { return RUN(&mi_op_gelu, NULL, x); }

/* ---------------------------------------------------------------- erf
 * y = erf x, dy = (2/√π) e^(−x²) dx */
UNARY_KERNELS(erf, F(erf)(x))
FLOAT_SHAPE(erf)
static mi_tensor *erf_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul(g, mi_mul_scalar(mi_exp(mi_neg(mi_square(n->inputs[0]))), M_2_SQRTPI));
}
const mi_op mi_op_erf = {.name = "erf", .formula = "erf(x)", .arity = 1, .shape = erf_shape,
                         KERNELS(erf), OWN_ONLY(erf), .vjp = erf_vjp, .examples = ex_any};
mi_tensor *mi_erf(mi_tensor *x) { return RUN(&mi_op_erf, NULL, x); }

/* ---------------------------------------------------------------- relu
 * y = max(x, 0), dy = [x > 0] dx */
UNARY_KERNELS(relu, x > 0 ? x : 0)
FLOAT_SHAPE(relu)
static mi_tensor *relu_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0];
    return mi_mul(g, mi_gt(x, mi_scalar(x->dtype, 0.0)));
}
const mi_op mi_op_relu = {.name = "relu", .formula = "max(x, 0)", .arity = 1,
                          .shape = relu_shape, KERNELS(relu),
                          OWN_DNNL(relu, select_cheap), .vjp = relu_vjp,
                          .examples = ex_away};
mi_tensor *mi_relu(mi_tensor *x) { return RUN(&mi_op_relu, NULL, x); }

/* ---------------------------------------------------------------- softplus
 * y = log(1 + eˣ), dy = σ(x) dx
 * Evaluated as max(x, 0) + log1p(e^(−|x|)): no overflow for large x, no
 * loss of the tiny value for very negative x. */
UNARY_KERNELS(softplus, F(fmax)(x, 0) + F(log1p)(F(exp)(-F(fabs)(x))))
FLOAT_SHAPE(softplus)
static mi_tensor *softplus_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul(g, mi_sigmoid(n->inputs[0]));
}
const mi_op mi_op_softplus = {.name = "softplus", .formula = "log(1 + exp(x))", .arity = 1,
                              .shape = softplus_shape, KERNELS(softplus),
                              OWN_ONLY(softplus), .vjp = softplus_vjp,
                              .examples = ex_wide};
mi_tensor *mi_softplus(mi_tensor *x) { return RUN(&mi_op_softplus, NULL, x); }

/* ---------------------------------------------------------------- log_sigmoid
 * y = log σ(x) = −softplus(−x)
 * = min(x, 0) − log1p(e^(−|x|)); dy = σ(−x) dx. */
UNARY_KERNELS(log_sigmoid, F(fmin)(x, 0) - F(log1p)(F(exp)(-F(fabs)(x))))
FLOAT_SHAPE(log_sigmoid)
static mi_tensor *log_sigmoid_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul(g, mi_sigmoid(mi_neg(n->inputs[0])));
}
const mi_op mi_op_log_sigmoid = {.name = "log_sigmoid", .formula = "-log(1 + exp(-x))",
                                 .arity = 1, .shape = log_sigmoid_shape, KERNELS(log_sigmoid),
                                 OWN_ONLY(log_sigmoid),
                                 .vjp = log_sigmoid_vjp, .examples = ex_wide};
mi_tensor *mi_log_sigmoid(mi_tensor *x) { return RUN(&mi_op_log_sigmoid, NULL, x); }

/* ---------------------------------------------------------------- clamp: y = min(max(x, lo), hi)
 * (attrs.lo ≤ attrs.hi; either may be infinite). dy = [lo < x < hi] dx. */
UNARY_KERNELS(clamp, x < (scalar_t)a->lo   ? (scalar_t)a->lo
                     : x > (scalar_t)a->hi ? (scalar_t)a->hi
                                           : x)
static int clamp_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                       int64_t *shape)
{
    if (require_float("clamp", in, 0) != 0) return -1;
    if (!(a->lo <= a->hi)) {
        char b[96];
        mi_error_set("clamp: lo %g must not exceed hi %g (x %s)", a->lo, a->hi,
                     mi_shape_str(b, sizeof b, in[0]->rank, in[0]->shape));
        return -1;
    }
    return shape_like_first(in, n, a, dt, rank, shape);
}
static mi_tensor *clamp_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *x = n->inputs[0];
    mi_tensor *inside = mi_mul(mi_gt(x, mi_scalar(x->dtype, n->attrs.lo)),
                               mi_lt(x, mi_scalar(x->dtype, n->attrs.hi)));
    return mi_mul(g, inside);
}
/* Each element lies below lo, inside, or above hi, at least 0.1 from either edge. */
static int ex_clamp(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    static const double lo[3] = {-0.5, 0.25, -1.0}, hi[3] = {0.7, 1.5, 1.0};
    if (v >= 3) return 0;
    a->lo = lo[v];
    a->hi = hi[v];
    mi_tensor *x = in[0] = ex_shaped(r, v, EX_NORMAL);
    if (!x) return 1;
    for (int64_t k = 0; k < x->numel; k++) {
        double u = mi_rng_uniform(r);
        switch (mi_rng_below(r, 3)) {
        case 0: mi_set(x, k, a->lo - 0.1 - 1.4 * u); break;
        case 1: mi_set(x, k, a->lo + 0.1 + (a->hi - a->lo - 0.2) * u); break;
        default: mi_set(x, k, a->hi + 0.1 + 1.4 * u); break;
        }
    }
    return 1;
}
const mi_op mi_op_clamp = {.name = "clamp", .formula = "min(max(x, lo), hi)", .arity = 1,
                           .shape = clamp_shape, KERNELS(clamp), OWN_ONLY(clamp), .vjp = clamp_vjp,
                           .examples = ex_clamp};
mi_tensor *mi_clamp(mi_tensor *x, double lo, double hi)
{
    mi_attrs a = {.lo = lo, .hi = hi};
    return RUN(&mi_op_clamp, &a, x);
}

/* ---------------------------------------------------------------- add_scalar
 * y = x + s (s = attrs.scalar), dy = dx */
UNARY_KERNELS(add_scalar, x + (scalar_t)a->scalar)
FLOAT_SHAPE(add_scalar)
static mi_tensor *add_scalar_vjp(const mi_node *n, int i, mi_tensor *g) { return g; }
static int ex_add_scalar(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    if (v >= 3) return 0;
    a->scalar = v == 1 ? -2.5 : 0.75;
    in[0] = ex_shaped(r, v, EX_NORMAL);
    return 1;
}
const mi_op mi_op_add_scalar = {.name = "add_scalar", .formula = "x + s", .arity = 1,
                                .shape = add_scalar_shape, KERNELS(add_scalar),
                                OWN_DNNL(add_scalar, select_cheap),
                                .vjp = add_scalar_vjp, .examples = ex_add_scalar};
mi_tensor *mi_add_scalar(mi_tensor *x, double s)
{
    return RUN(&mi_op_add_scalar, &(mi_attrs){.scalar = s}, x);
}

/* ---------------------------------------------------------------- mul_scalar
 * y = s·x (s = attrs.scalar), dy = s dx */
UNARY_KERNELS(mul_scalar, x *(scalar_t)a->scalar)
FLOAT_SHAPE(mul_scalar)
static mi_tensor *mul_scalar_vjp(const mi_node *n, int i, mi_tensor *g)
{
    return mi_mul_scalar(g, n->attrs.scalar);
}
static int ex_mul_scalar(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    if (v >= 3) return 0;
    a->scalar = v == 1 ? -1.75 : 3.0;
    in[0] = ex_shaped(r, v, EX_NORMAL);
    return 1;
}
const mi_op mi_op_mul_scalar = {.name = "mul_scalar", .formula = "s * x", .arity = 1,
                                .shape = mul_scalar_shape, KERNELS(mul_scalar),
                                OWN_DNNL(mul_scalar, select_cheap),
                                .vjp = mul_scalar_vjp, .examples = ex_mul_scalar};
mi_tensor *mi_mul_scalar(mi_tensor *x, double s)
{
    return RUN(&mi_op_mul_scalar, &(mi_attrs){.scalar = s}, x);
}

/* ================================================================ grad ops
 * Fused backward kernels, registered as ops so that each has
 * its own vjp written with ops and higher orders still work; the forward
 * ops' vjps above call them. Two inputs of one shape: the forward's input x
 * (or its output y) and the incoming gradient g. Measured on 4096×128 f32,
 * 1 thread, the old vjp built from ops (OWN kernels) against the fused op:
 * gelu 822 → 231 µs, silu 411 → 127, tanh 171 → 56, sigmoid 191 → 56. */
static int grad_shape(const char *op, mi_tensor *const *in, int n, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    char b1[96], b2[96];
    for (int i = 0; i < n; i++) {
        if (require_float(op, in, i) != 0) return -1;
        if (!mi_same_shape(in[0], in[i])) {
            mi_error_set("%s: the inputs must have one shape, got %s and %s", op,
                         mi_shape_str(b1, sizeof b1, in[0]->rank, in[0]->shape),
                         mi_shape_str(b2, sizeof b2, in[i]->rank, in[i]->shape));
            return -1;
        }
    }
    return shape_like_first(in, n, NULL, dt, rank, shape);
}
#define GRAD_SHAPE(name)                                                                   \
    static int name##_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,  \
                            int *rank, int64_t *shape)                                     \
    {                                                                                      \
        return grad_shape(#name, in, n, dt, rank, shape);                                  \
    }

/* GRAD_KERNELS(name, EXPR): y[i] = EXPR of x = in[0][i] and g = in[1][i]. The
 * loop is grad_map in elementwise_impl.h, per dtype; PAIR_KERNEL_T (internal.h)
 * defines the element function (name_el_f32, name_el_f64: the one-line EXPR)
 * and the one-line kernel that hands it to the loop. */
#define GRAD_KERNEL_T(name, T, sfx, EXPR) PAIR_KERNEL_T(name, T, sfx, g, grad_map, EXPR)
#define GRAD_KERNELS(name, EXPR)                    \
    GRAD_KERNEL_T(name, float, _f32, EXPR)          \
    GRAD_KERNEL_T(name, double, _f64, EXPR)

/* σ(x) as the sigmoid op computes it, per dtype. */
static inline float sigmoid_of_f(float x)
{
    return x >= 0 ? 1 / (1 + expf(-x)) : expf(x) / (1 + expf(x));
}
static inline double sigmoid_of_d(double x)
{
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}
#define SIGMOID_OF(x) _Generic((x), float: sigmoid_of_f, double: sigmoid_of_d)(x)

/* x (or y) in [lo, hi] (normal when lo = hi), g normal; the unary shapes. */
static int ex_grad(mi_rng *r, int v, mi_tensor **in, double lo, double hi)
{
    static const int64_t shapes[3][4] = {{3, 5}, {2, 1, 3, 2}, {0}};
    static const int ranks[3] = {2, 4, 0};
    if (v >= 3) return 0;
    in[0] = lo < hi ? ex_uniform(r, ranks[v], shapes[v], lo, hi)
                    : ex_normal(r, ranks[v], shapes[v]);
    in[1] = ex_normal(r, ranks[v], shapes[v]);
    return 2;
}
static int ex_grad_x(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    return ex_grad(r, v, in, 0, 0);
}

/* gelu and gelu' (s, gp), and gelu'' (y), on raw arrays of n, exact (libm's
 * erf and exp): the REF kernels of the fused scans (cms_scan, hope_scan). */
#define REF_GELU_PAIR(T_, sfx, ERF, EXP)                                                        \
    void ref_gelu_pair_##sfx(const T_ *a, T_ *s, T_ *gp, int64_t n)                           \
    {                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T_ x = a[i], Phi = (T_)0.5 * (1 + ERF(x * (T_)M_SQRT1_2));                          \
            s[i] = x * Phi;                                                                    \
            gp[i] = Phi + x * (T_)INV_SQRT_2PI * EXP((T_)-0.5 * x * x);                        \
        }                                                                                      \
    }                                                                                          \
    void ref_gelu_second_##sfx(const T_ *a, T_ *y, int64_t n)                                 \
    {                                                                                          \
        for (int64_t i = 0; i < n; i++)                                                        \
            y[i] = (T_)INV_SQRT_2PI * EXP((T_)-0.5 * a[i] * a[i]) * (2 - a[i] * a[i]);         \
    }
REF_GELU_PAIR(float, f32, erff, expf)
REF_GELU_PAIR(double, f64, erf, exp)
#undef REF_GELU_PAIR

/* ---------------------------------------------------------------- gelu_backward
 * dx = g·(Φ(x) + x·φ(x))
 * d/dx = h·g·φ(x)·(2 − x²)  (φ' = −x φ),  d/dg = gelu_backward(x, h) */
GRAD_KERNELS(gelu_backward, g * ((scalar_t)0.5 * (1 + F(erf)(x * (scalar_t)M_SQRT1_2)) +
                                 x * (scalar_t)INV_SQRT_2PI * F(exp)((scalar_t)-0.5 * x * x)))
GRAD_SHAPE(gelu_backward)
static mi_tensor *gelu_backward_vjp(const mi_node *n, int i, mi_tensor *h)
{
    mi_tensor *x = n->inputs[0], *g = n->inputs[1];
    if (i == 1) return mi_gelu_backward(x, h);
    mi_tensor *x2 = mi_square(x);
    mi_tensor *phi = mi_mul_scalar(mi_exp(mi_mul_scalar(x2, -0.5)), INV_SQRT_2PI);
    return mi_mul(mi_mul(h, g), mi_mul(phi, mi_add_scalar(mi_neg(x2), 2.0)));
}
const mi_op mi_op_gelu_backward = {.name = "gelu_backward",
                                   .formula = "g * (Phi(x) + x * phi(x))", .arity = 2,
                                   .shape = gelu_backward_shape, KERNELS(gelu_backward),
                                   OWN_DNNL(gelu_backward, select_trans), .vjp = gelu_backward_vjp,
                                   .examples = ex_grad_x};
mi_tensor *mi_gelu_backward(mi_tensor *x, mi_tensor *g)
{
    return RUN(&mi_op_gelu_backward, NULL, x, g);
}

/* ---------------------------------------------------------------- silu_backward
 * dx = g·s·(1 + x·(1 − s)),  s = σ(x)
 * d/dx = h·g·s(1 − s)·(2 + x·(1 − 2s)),  d/dg = silu_backward(x, h) */
GRAD_KERNELS(silu_backward, g * (SIGMOID_OF(x) * (1 + x * (1 - SIGMOID_OF(x)))))
GRAD_SHAPE(silu_backward)
static mi_tensor *silu_backward_vjp(const mi_node *n, int i, mi_tensor *h)
{
    mi_tensor *x = n->inputs[0], *g = n->inputs[1];
    if (i == 1) return mi_silu_backward(x, h);
    mi_tensor *s = mi_sigmoid(x);
    mi_tensor *ds = mi_mul(s, mi_add_scalar(mi_neg(s), 1.0));
    mi_tensor *t = mi_add_scalar(mi_mul(x, mi_add_scalar(mi_mul_scalar(s, -2.0), 1.0)), 2.0);
    return mi_mul(mi_mul(h, g), mi_mul(ds, t));
}
const mi_op mi_op_silu_backward = {.name = "silu_backward",
                                   .formula = "g * s * (1 + x * (1 - s)), s = sigmoid(x)",
                                   .arity = 2, .shape = silu_backward_shape,
                                   KERNELS(silu_backward), OWN_DNNL(silu_backward, select_trans),
                                   .vjp = silu_backward_vjp, .examples = ex_grad_x};
mi_tensor *mi_silu_backward(mi_tensor *x, mi_tensor *g)
{
    return RUN(&mi_op_silu_backward, NULL, x, g);
}

/* ---------------------------------------------------------------- swiglu
 * The gated unit of a SwiGLU feed-forward ("GLU Variants Improve
 * Transformer", eq. 6, β = 1) on its two projections a = xW, b = xV, fused
 * so that silu(a) is never stored:
 *   y = silu(a) ⊙ b
 *   d/da = swiglu_backward(a, b, g) = g ⊙ b ⊙ silu'(a),  d/db = swiglu(a, g)
 * Not recorded, f32 with OWN: both in one pass over a, b and g
 * (own_swiglu_grads_f32), where the two ops read a and g twice. */
GRAD_KERNELS(swiglu, x * SIGMOID_OF(x) * g)
GRAD_SHAPE(swiglu)
static mi_tensor *swiglu_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1];
    return i == 0 ? mi_swiglu_backward(a, b, g) : mi_swiglu(a, g);
}
static int swiglu_vjp_all(const mi_node *n, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1];
    if (need[0] && need[1] && own_unrecorded_f32(a)) {
        grads[0] = mi_tensor_new(MI_F32, a->rank, a->shape);
        grads[1] = mi_tensor_new(MI_F32, a->rank, a->shape);
        if (!grads[0] || !grads[1]) return -1;
        own_swiglu_grads_f32(a, b, g, grads[0], grads[1]);
        return 0;
    }
    for (int i = 0; i < 2; i++)
        if (need[i] && !(grads[i] = swiglu_vjp(n, i, g))) return -1;
    return 0;
}
static int ex_swiglu(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    return ex_grad(r, v, in, -4, 4);
}
const mi_op mi_op_swiglu = {.name = "swiglu", .formula = "a * sigmoid(a) * b", .arity = 2,
                            .shape = swiglu_shape, KERNELS(swiglu), OWN_ONLY(swiglu),
                            .vjp = swiglu_vjp, .vjp_all = swiglu_vjp_all,
                            .examples = ex_swiglu};
mi_tensor *mi_swiglu(mi_tensor *a, mi_tensor *b)
{
    return RUN(&mi_op_swiglu, NULL, a, b);
}

/* ---------------------------------------------------------------- swiglu_backward
 * f = g ⊙ b ⊙ silu'(a),  silu'(a) = s·(1 + a·(1 − s)),  s = σ(a):
 *   d/da = h ⊙ g ⊙ b ⊙ silu''(a),  silu''(a) = s(1 − s)·(2 + a·(1 − 2s))
 *   d/db = swiglu_backward(a, h, g),  d/dg = swiglu_backward(a, b, h) */
#define SWIGLU_BACKWARD_T(T, sfx)                                                          \
    static void swiglu_backward##sfx(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a) \
    {                                                                                      \
        (void)a;                                                                           \
        const T *A = in[0]->data, *B = in[1]->data, *G = in[2]->data;                      \
        T *Y = o->data;                                                                    \
        for (int64_t i = 0; i < o->numel; i++) {                                           \
            T s = SIGMOID_OF(A[i]);                                                        \
            Y[i] = G[i] * B[i] * (s * (1 + A[i] * (1 - s)));                               \
        }                                                                                  \
    }
SWIGLU_BACKWARD_T(float, _f32)
SWIGLU_BACKWARD_T(double, _f64)
GRAD_SHAPE(swiglu_backward)
static mi_tensor *swiglu_backward_vjp(const mi_node *n, int i, mi_tensor *h)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1], *g = n->inputs[2];
    if (i == 1) return mi_swiglu_backward(a, h, g);
    if (i == 2) return mi_swiglu_backward(a, b, h);
    mi_tensor *s = mi_sigmoid(a);
    mi_tensor *ds = mi_mul(s, mi_add_scalar(mi_neg(s), 1.0));
    mi_tensor *t = mi_add_scalar(mi_mul(a, mi_add_scalar(mi_mul_scalar(s, -2.0), 1.0)), 2.0);
    return mi_mul(mi_mul(mi_mul(h, g), b), mi_mul(ds, t));
}
static int ex_swiglu_backward(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    if (ex_grad(r, v, in, -4, 4) == 0) return 0;
    in[2] = ex_normal(r, in[0]->rank, in[0]->shape);
    return 3;
}
const mi_op mi_op_swiglu_backward = {.name = "swiglu_backward",
                                     .formula = "g * b * s * (1 + a * (1 - s)), s = sigmoid(a)",
                                     .arity = 3, .shape = swiglu_backward_shape,
                                     KERNELS(swiglu_backward), OWN_ONLY(swiglu_backward),
                                     .vjp = swiglu_backward_vjp,
                                     .examples = ex_swiglu_backward};
mi_tensor *mi_swiglu_backward(mi_tensor *a, mi_tensor *b, mi_tensor *g)
{
    return RUN(&mi_op_swiglu_backward, NULL, a, b, g);
}

/* ---------------------------------------------------------------- tanh_backward
 * dx = g·(1 − y²) from tanh's output y
 * d/dy = −2·h·g·y,  d/dg = tanh_backward(y, h) */
GRAD_KERNELS(tanh_backward, g * (1 - x * x))
GRAD_SHAPE(tanh_backward)
static mi_tensor *tanh_backward_vjp(const mi_node *n, int i, mi_tensor *h)
{
    mi_tensor *y = n->inputs[0], *g = n->inputs[1];
    if (i == 1) return mi_tanh_backward(y, h);
    return mi_mul_scalar(mi_mul(mi_mul(h, g), y), -2.0);
}
static int ex_tanh_backward(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    return ex_grad(r, v, in, -0.95, 0.95);
}
const mi_op mi_op_tanh_backward = {.name = "tanh_backward", .formula = "g * (1 - y^2)",
                                   .arity = 2, .shape = tanh_backward_shape,
                                   KERNELS(tanh_backward), OWN_ONLY(tanh_backward),
                                   .vjp = tanh_backward_vjp, .examples = ex_tanh_backward};
mi_tensor *mi_tanh_backward(mi_tensor *y, mi_tensor *g)
{
    return RUN(&mi_op_tanh_backward, NULL, y, g);
}

/* ---------------------------------------------------------------- sigmoid_backward
 * dx = g·y·(1 − y) from σ's output y
 * d/dy = h·g·(1 − 2y),  d/dg = sigmoid_backward(y, h) */
GRAD_KERNELS(sigmoid_backward, g * (x * (1 - x)))
GRAD_SHAPE(sigmoid_backward)
static mi_tensor *sigmoid_backward_vjp(const mi_node *n, int i, mi_tensor *h)
{
    mi_tensor *y = n->inputs[0], *g = n->inputs[1];
    if (i == 1) return mi_sigmoid_backward(y, h);
    return mi_mul(mi_mul(h, g), mi_add_scalar(mi_mul_scalar(y, -2.0), 1.0));
}
static int ex_sigmoid_backward(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    return ex_grad(r, v, in, 0.02, 0.98);
}
const mi_op mi_op_sigmoid_backward = {.name = "sigmoid_backward", .formula = "g * y * (1 - y)",
                                      .arity = 2, .shape = sigmoid_backward_shape,
                                      KERNELS(sigmoid_backward), OWN_ONLY(sigmoid_backward),
                                      .vjp = sigmoid_backward_vjp,
                                      .examples = ex_sigmoid_backward};
mi_tensor *mi_sigmoid_backward(mi_tensor *y, mi_tensor *g)
{
    return RUN(&mi_op_sigmoid_backward, NULL, y, g);
}
