/* Elementwise ops: unary forward values against libm, the stable branches of
 * softplus / log-sigmoid, scalar-attribute ops, a few derivatives by hand,
 * broadcasting binary ops and comparisons against a naive broadcast written
 * here, and every error path (dtype, shape, attributes, NULL chains). */
#include "harness.h"

typedef mi_tensor *(*unary_fn)(mi_tensor *);

static double ref_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
static double ref_square(double x) { return x * x; }
static double ref_reciprocal(double x) { return 1.0 / x; }
static double ref_neg(double x) { return -x; }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_gelu(double x) { return x * 0.5 * (1.0 + erf(x / sqrt(2.0))); }
static double ref_relu(double x) { return x > 0 ? x : 0.0; }
static double ref_softplus(double x) { return log(1.0 + exp(x)); } /* fine for small |x| */
static double ref_log_sigmoid(double x) { return log(ref_sigmoid(x)); }

static const struct unary_case {
    const char *name;
    unary_fn op;
    double (*ref)(double);
    bool positive; /* domain x > 0 */
} unary_cases[] = {
    {"neg", mi_neg, ref_neg, false},
    {"abs", mi_abs, fabs, false},
    {"sign", mi_sign, ref_sign, false},
    {"exp", mi_exp, exp, false},
    {"log", mi_log, log, true},
    {"sqrt", mi_sqrt, sqrt, true},
    {"rsqrt", mi_rsqrt, ref_rsqrt, true},
    {"square", mi_square, ref_square, false},
    {"reciprocal", mi_reciprocal, ref_reciprocal, true},
    {"tanh", mi_tanh, tanh, false},
    {"sigmoid", mi_sigmoid, ref_sigmoid, false},
    {"silu", mi_silu, ref_silu, false},
    {"gelu", mi_gelu, ref_gelu, false},
    {"erf", mi_erf, erf, false},
    {"relu", mi_relu, ref_relu, false},
    {"softplus", mi_softplus, ref_softplus, false},
    {"log_sigmoid", mi_log_sigmoid, ref_log_sigmoid, false},
};
#define N_UNARY (int)(sizeof unary_cases / sizeof unary_cases[0])

static const double any_points[] = {-2.5, -0.7, 0.3, 1.9, 3.25};
static const double pos_points[] = {0.5, 0.9, 1.3, 2.0, 3.7};

static void assert_rel(double got, double want, double rtol, const char *what, double x)
{
    double tol = rtol * (1.0 + fabs(want));
    ck_assert_msg(fabs(got - want) <= tol, "%s(%g) = %.17g, expected %.17g", what, x, got, want);
}

START_TEST(unary_forward_matches_libm_f64)
{
    for (int c = 0; c < N_UNARY; c++) {
        const struct unary_case *u = &unary_cases[c];
        const double *p = u->positive ? pos_points : any_points;
        mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(5), p);
        mi_tensor *y = u->op(x);
        ck_assert_msg(y != NULL, "%s: %s", u->name, mi_error());
        ck_assert_int_eq(y->dtype, MI_F64);
        ck_assert_int_eq(y->rank, 1);
        ck_assert_int_eq(y->shape[0], 5);
        for (int i = 0; i < 5; i++) assert_rel(mi_get(y, i), u->ref(p[i]), 1e-14, u->name, p[i]);
    }
}
END_TEST

/* The f32 kernels compute in float: within a few float ulps of the f64 value. */
START_TEST(unary_forward_f32_close_to_f64)
{
    for (int c = 0; c < N_UNARY; c++) {
        const struct unary_case *u = &unary_cases[c];
        const double *p = u->positive ? pos_points : any_points;
        mi_tensor *x = mi_tensor_to(mi_from_buffer(MI_F64, MI_SHAPE(5), p), MI_F32);
        mi_tensor *y = u->op(x);
        ck_assert_msg(y != NULL, "%s: %s", u->name, mi_error());
        ck_assert_int_eq(y->dtype, MI_F32);
        for (int i = 0; i < 5; i++)
            assert_rel(mi_get(y, i), u->ref((double)(float)p[i]), 1e-6, u->name, p[i]);
    }
}
END_TEST

START_TEST(unary_rank0_and_empty)
{
    mi_tensor *y = mi_tanh(mi_scalar(MI_F64, 0.5));
    ck_assert_int_eq(y->rank, 0);
    ck_assert_close(mi_item(y), tanh(0.5), 1e-15);
    mi_tensor *e = mi_exp(mi_zeros(MI_F64, MI_SHAPE(2, 0)));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->numel, 0);
    ck_assert_int_eq(e->shape[0], 2);
}
END_TEST

START_TEST(sign_and_relu_at_zero)
{
    mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){-0.0, 0.0, -3.0});
    mi_tensor *s = mi_sign(x), *r = mi_relu(x), *a = mi_abs(x);
    ck_assert(mi_get(s, 0) == 0.0 && mi_get(s, 1) == 0.0 && mi_get(s, 2) == -1.0);
    ck_assert(mi_get(r, 0) == 0.0 && mi_get(r, 1) == 0.0 && mi_get(r, 2) == 0.0);
    ck_assert(mi_get(a, 2) == 3.0);
}
END_TEST

/* log(1 + eˣ) computed naively overflows at x = 800 (f64) and 100 (f32). */
START_TEST(softplus_log_sigmoid_stable_for_large_x)
{
    static const double p[] = {-800.0, -40.0, 40.0, 800.0};
    mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(4), p);
    mi_tensor *sp = mi_softplus(x), *ls = mi_log_sigmoid(x), *sg = mi_sigmoid(x),
              *si = mi_silu(x);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(isfinite(mi_get(sp, i)) && isfinite(mi_get(ls, i)) &&
                          isfinite(mi_get(sg, i)) && isfinite(mi_get(si, i)),
                      "non-finite at x = %g", p[i]);
        /* softplus(x) = x + log1p(e^-x) for x > 0, log1p(e^x) for x < 0 */
        double want_sp = p[i] > 0 ? p[i] + log1p(exp(-p[i])) : log1p(exp(p[i]));
        assert_rel(mi_get(sp, i), want_sp, 1e-15, "softplus", p[i]);
        assert_rel(mi_get(ls, i), -(p[i] < 0 ? -p[i] + log1p(exp(p[i])) : log1p(exp(-p[i]))),
                   1e-15, "log_sigmoid", p[i]);
    }
    ck_assert(mi_get(sp, 1) > 0 && mi_get(sp, 1) < 1e-17); /* e^-40 ≈ 4.2e-18, not lost */
    ck_assert_close(mi_get(sp, 1) / exp(-40.0), 1.0, 1e-12);
    ck_assert_close(mi_get(ls, 2) / -exp(-40.0), 1.0, 1e-12);
    ck_assert(mi_get(sg, 0) == 0.0 && mi_get(sg, 3) == 1.0);

    mi_tensor *x32 = mi_tensor_to(mi_from_buffer(MI_F64, MI_SHAPE(2), (double[]){-100, 100}),
                                  MI_F32);
    mi_tensor *sp32 = mi_softplus(x32), *ls32 = mi_log_sigmoid(x32);
    ck_assert_close(mi_get(sp32, 1), 100.0, 1e-5);
    ck_assert_close(mi_get(ls32, 0), -100.0, 1e-5);
    ck_assert(isfinite(mi_get(sp32, 0)) && isfinite(mi_get(ls32, 1)));
}
END_TEST

START_TEST(scalar_attribute_ops)
{
    mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(5), pos_points);
    mi_tensor *p3 = mi_pow_scalar(x, 3.0), *pm = mi_pow_scalar(x, -1.5),
              *ph = mi_pow_scalar(x, 0.5);
    mi_tensor *as = mi_add_scalar(x, -2.25), *ms = mi_mul_scalar(x, 1.5);
    for (int i = 0; i < 5; i++) {
        double v = pos_points[i];
        assert_rel(mi_get(p3, i), v * v * v, 1e-15, "pow_scalar 3", v);
        assert_rel(mi_get(pm, i), 1.0 / (v * sqrt(v)), 1e-15, "pow_scalar -1.5", v);
        assert_rel(mi_get(ph, i), sqrt(v), 1e-15, "pow_scalar 0.5", v);
        ck_assert(mi_get(as, i) == v - 2.25);
        ck_assert(mi_get(ms, i) == v * 1.5);
    }
    /* clamp */
    mi_tensor *y = mi_from_buffer(MI_F64, MI_SHAPE(2, 3), (double[]){-3, -0.5, 0, 0.6, 0.7, 5});
    mi_tensor *c = mi_clamp(y, -0.5, 0.7);
    static const double want[] = {-0.5, -0.5, 0, 0.6, 0.7, 0.7};
    ck_assert_int_eq(c->rank, 2);
    for (int i = 0; i < 6; i++) ck_assert(mi_get(c, i) == want[i]);
    mi_tensor *c1 = mi_clamp(y, 0.0, INFINITY); /* one-sided clamp = relu */
    for (int i = 0; i < 6; i++) ck_assert(mi_get(c1, i) == ref_relu(mi_get(y, i)));
    mi_tensor *c32 = mi_clamp(mi_tensor_to(y, MI_F32), -0.5, 0.7);
    ck_assert_int_eq(c32->dtype, MI_F32);
    for (int i = 0; i < 6; i++) ck_assert_close(mi_get(c32, i), want[i], 1e-7);
}
END_TEST

/* d/dx of Σ op(x) at a few points, against hand-written derivatives. */
static mi_tensor *grad_of_sum(mi_tensor *(*f)(mi_tensor *, void *), void *ctx, mi_tensor *x)
{
    mi_tensor *y = f(x, ctx), *g = NULL;
    ck_assert_ptr_nonnull(y);
    mi_tensor *ones = mi_ones(y->dtype, y->rank, y->shape);
    ck_assert_int_eq(mi_grad(&y, &ones, 1, &x, 1, false, &g), 0);
    return g;
}
static mi_tensor *call_unary(mi_tensor *x, void *op)
{
    return ((const struct unary_case *)op)->op(x);
}
static mi_tensor *call_clamp(mi_tensor *x, void *c) { return mi_clamp(x, -0.5, 0.7); }
static mi_tensor *call_pow(mi_tensor *x, void *c) { return mi_pow_scalar(x, -1.5); }

static const struct unary_case *find_case(const char *name)
{
    for (int c = 0; c < N_UNARY; c++)
        if (strcmp(unary_cases[c].name, name) == 0) return &unary_cases[c];
    return NULL;
}

START_TEST(derivatives_by_hand)
{
    static const double p[] = {-2.5, -0.7, 0.3, 1.9};
    mi_tensor *x = mi_requires_grad(mi_from_buffer(MI_F64, MI_SHAPE(4), p), true);
    mi_tensor *gg = grad_of_sum(call_unary, (void *)find_case("gelu"), x);
    mi_tensor *gs = grad_of_sum(call_unary, (void *)find_case("softplus"), x);
    mi_tensor *gl = grad_of_sum(call_unary, (void *)find_case("log_sigmoid"), x);
    mi_tensor *ga = grad_of_sum(call_unary, (void *)find_case("abs"), x);
    mi_tensor *gn = grad_of_sum(call_unary, (void *)find_case("sign"), x);
    mi_tensor *gr = grad_of_sum(call_unary, (void *)find_case("relu"), x);
    mi_tensor *gc = grad_of_sum(call_clamp, NULL, x);
    mi_tensor *ge = grad_of_sum(call_unary, (void *)find_case("erf"), x);
    mi_tensor *gsi = grad_of_sum(call_unary, (void *)find_case("silu"), x);
    for (int i = 0; i < 4; i++) {
        double v = p[i], Phi = 0.5 * (1 + erf(v / sqrt(2))), phi = exp(-v * v / 2) / sqrt(2 * M_PI);
        ck_assert_close(mi_get(gg, i), Phi + v * phi, 1e-14);
        ck_assert_close(mi_get(gs, i), ref_sigmoid(v), 1e-14);
        ck_assert_close(mi_get(gl, i), 1 - ref_sigmoid(v), 1e-14);
        ck_assert(mi_get(ga, i) == ref_sign(v));
        ck_assert(mi_get(gn, i) == 0.0);
        ck_assert(mi_get(gr, i) == (v > 0 ? 1.0 : 0.0));
        ck_assert(mi_get(gc, i) == (v > -0.5 && v < 0.7 ? 1.0 : 0.0));
        ck_assert_close(mi_get(ge, i), 2 / sqrt(M_PI) * exp(-v * v), 1e-14);
        double s = ref_sigmoid(v);
        ck_assert_close(mi_get(gsi, i), s * (1 + v * (1 - s)), 1e-14);
    }
    mi_tensor *xp = mi_requires_grad(mi_from_buffer(MI_F64, MI_SHAPE(4), pos_points), true);
    mi_tensor *gp = grad_of_sum(call_pow, NULL, xp);
    for (int i = 0; i < 4; i++)
        ck_assert_close(mi_get(gp, i), -1.5 * pow(pos_points[i], -2.5), 1e-14);
}
END_TEST

/* ---------------------------------------------------------------- binary ops */

/* Element of t that output position `flat` (of an output of shape rank/shape)
 * reads under NumPy broadcasting; written independently of the kernels. */
static double bget(const mi_tensor *t, int rank, const int64_t *shape, int64_t flat)
{
    int64_t idx[MI_MAX_RANK];
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) {
        int od = d + rank - t->rank;
        off = off * t->shape[d] + (t->shape[d] == 1 ? 0 : idx[od]);
    }
    return mi_get(t, off);
}

typedef mi_tensor *(*binary_fn)(mi_tensor *, mi_tensor *);
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return a > b ? a : b; }
static double r_min(double a, double b) { return a < b ? a : b; }
static double r_gt(double a, double b) { return a > b; }
static double r_ge(double a, double b) { return a >= b; }
static double r_lt(double a, double b) { return a < b; }
static double r_le(double a, double b) { return a <= b; }
static double r_eq(double a, double b) { return a == b; }

static const struct binary_case {
    const char *name;
    binary_fn op;
    double (*ref)(double, double);
} binary_cases[] = {
    {"add", mi_add, r_add},         {"sub", mi_sub, r_sub}, {"mul", mi_mul, r_mul},
    {"div", mi_div, r_div},         {"maximum", mi_maximum, r_max},
    {"minimum", mi_minimum, r_min}, {"gt", mi_gt, r_gt},    {"ge", mi_ge, r_ge},
    {"lt", mi_lt, r_lt},            {"le", mi_le, r_le},    {"eq", mi_eq, r_eq},
};
#define N_BINARY (int)(sizeof binary_cases / sizeof binary_cases[0])

/* Values with ties between a and b so comparisons and max/min see them. */
static mi_tensor *tensor_seq(mi_dtype dt, int rank, const int64_t *shape, double start)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, start + (double)((i * 7) % 5) * 0.5);
    return t;
}

START_TEST(binary_broadcast_forward)
{
    static const struct {
        int ra, rb, rout;
        int64_t sa[4], sb[4], sout[4];
    } shapes[] = {
        {2, 2, 2, {2, 3}, {2, 3}, {2, 3}},                  /* equal */
        {2, 1, 2, {2, 3}, {3}, {2, 3}},                     /* trailing */
        {2, 2, 2, {2, 1}, {1, 3}, {2, 3}},                  /* both ways */
        {3, 0, 3, {2, 1, 4}, {0}, {2, 1, 4}},               /* rank-0 scalar */
        {1, 4, 4, {3}, {2, 1, 2, 1}, {2, 1, 2, 3}},         /* rank 4 */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int c = 0; c < N_BINARY; c++) {
            const struct binary_case *bc = &binary_cases[c];
            mi_tensor *a = tensor_seq(MI_F64, shapes[s].ra, shapes[s].sa, -0.5);
            mi_tensor *b = tensor_seq(MI_F64, shapes[s].rb, shapes[s].sb, 0.5);
            mi_tensor *y = bc->op(a, b);
            ck_assert_msg(y != NULL, "%s: %s", bc->name, mi_error());
            ck_assert_int_eq(y->dtype, MI_F64);
            ck_assert_int_eq(y->rank, shapes[s].rout);
            for (int d = 0; d < y->rank; d++) ck_assert_int_eq(y->shape[d], shapes[s].sout[d]);
            for (int64_t i = 0; i < y->numel; i++) {
                double va = bget(a, y->rank, y->shape, i), vb = bget(b, y->rank, y->shape, i);
                ck_assert_msg(mi_get(y, i) == bc->ref(va, vb), "%s case %zu at %lld: %g vs %g",
                              bc->name, s, (long long)i, mi_get(y, i), bc->ref(va, vb));
            }
            /* and the f32 kernel */
            mi_tensor *y32 = bc->op(mi_tensor_to(a, MI_F32), mi_tensor_to(b, MI_F32));
            ck_assert_int_eq(y32->dtype, MI_F32);
            for (int64_t i = 0; i < y->numel; i++)
                ck_assert_close(mi_get(y32, i), mi_get(y, i), 1e-6 * (1 + fabs(mi_get(y, i))));
        }
}
END_TEST

START_TEST(where_broadcasts)
{
    mi_tensor *c = mi_from_buffer(MI_F64, MI_SHAPE(2, 1), (double[]){1, 0});
    mi_tensor *a = tensor_seq(MI_F64, MI_SHAPE(2, 3), 10.0);
    mi_tensor *b = tensor_seq(MI_F64, MI_SHAPE(3), -10.0);
    mi_tensor *y = mi_where(c, a, b);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->rank, 2);
    for (int64_t i = 0; i < 6; i++) {
        double want = bget(c, 2, y->shape, i) != 0 ? bget(a, 2, y->shape, i)
                                                     : bget(b, 2, y->shape, i);
        ck_assert(mi_get(y, i) == want);
    }
    /* a mask from a comparison, the usual way to build the condition */
    mi_tensor *m = mi_gt(a, mi_scalar(MI_F64, 11.0));
    mi_tensor *z = mi_where(m, a, mi_scalar(MI_F64, 0.0));
    for (int64_t i = 0; i < 6; i++)
        ck_assert(mi_get(z, i) == (mi_get(a, i) > 11.0 ? mi_get(a, i) : 0.0));
}
END_TEST

/* max/min send the gradient of a tie to a (same shapes: un-broadcasting
 * needs sum_to, which the reductions family provides). */
START_TEST(maximum_tie_gradient_goes_to_a)
{
    mi_tensor *a = mi_requires_grad(mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){1, 2, 3}), true);
    mi_tensor *b = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(3), 2.0), true);
    mi_tensor *y = mi_maximum(a, b), *z = mi_minimum(a, b), *g[2], *h[2];
    mi_tensor *ones = mi_ones(MI_F64, MI_SHAPE(3));
    ck_assert_int_eq(mi_grad(&y, &ones, 1, (mi_tensor *[]){a, b}, 2, false, g), 0);
    ck_assert(mi_get(g[0], 0) == 0 && mi_get(g[0], 1) == 1 && mi_get(g[0], 2) == 1);
    ck_assert(mi_get(g[1], 0) == 1 && mi_get(g[1], 1) == 0 && mi_get(g[1], 2) == 0);
    ck_assert_int_eq(mi_grad(&z, &ones, 1, (mi_tensor *[]){a, b}, 2, false, h), 0);
    ck_assert(mi_get(h[0], 0) == 1 && mi_get(h[0], 1) == 1 && mi_get(h[0], 2) == 0);
    ck_assert(mi_get(h[1], 0) == 0 && mi_get(h[1], 1) == 0 && mi_get(h[1], 2) == 1);
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(unary_rejects_int_dtype)
{
    mi_tensor *i64 = mi_arange(MI_I64, 3);
    for (int c = 0; c < N_UNARY; c++) {
        ck_assert_ptr_null(unary_cases[c].op(i64));
        char want[64];
        snprintf(want, sizeof want, "%s: input 0 must be f32 or f64, got i64", unary_cases[c].name);
        ck_assert_error_has(want);
        mi_error_clear();
    }
    ck_assert_ptr_null(mi_pow_scalar(i64, 2.0));
    ck_assert_error_has("pow_scalar: input 0 must be f32 or f64");
    mi_error_clear();
    ck_assert_ptr_null(mi_clamp(mi_arange(MI_I32, 3), 0, 1));
    ck_assert_error_has("clamp: input 0 must be f32 or f64, got i32");
    mi_error_clear();
    ck_assert_ptr_null(mi_add_scalar(i64, 1.0));
    ck_assert_error_has("add_scalar:");
    mi_error_clear();
    ck_assert_ptr_null(mi_mul_scalar(i64, 1.0));
    ck_assert_error_has("mul_scalar:");
    mi_error_clear();
}
END_TEST

START_TEST(clamp_rejects_lo_above_hi)
{
    mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(3));
    ck_assert_ptr_null(mi_clamp(x, 2.0, 1.0));
    ck_assert_error_has("clamp: lo 2 must not exceed hi 1");
    ck_assert_error_has("[3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_clamp(x, NAN, 1.0));
    ck_assert_error_has("clamp:");
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_clamp(x, 1.0, 1.0)); /* lo = hi is a constant */
}
END_TEST

START_TEST(null_inputs_propagate)
{
    mi_tensor *a = mi_ones(MI_F64, MI_SHAPE(2));
    ck_assert_ptr_null(mi_exp(mi_mul(a, NULL)));
    ck_assert_error_has("mul");
    ck_assert_error_has("input 1 is NULL");
    mi_error_clear();
    /* the first failure of a chain is the one reported */
    ck_assert_ptr_null(mi_gelu(mi_tanh(mi_add(a, mi_ones(MI_F64, MI_SHAPE(3))))));
    ck_assert_error_has("[2]");
    ck_assert_msg(strstr(mi_error(), "gelu") == NULL && strstr(mi_error(), "tanh") == NULL,
                  "reported a consequence: %s", mi_error());
    mi_error_clear();
    for (int c = 0; c < N_UNARY; c++) {
        ck_assert_ptr_null(unary_cases[c].op(NULL));
        ck_assert_error_has(unary_cases[c].name);
        mi_error_clear();
    }
    ck_assert_ptr_null(mi_clamp(NULL, 0, 1));
    ck_assert_error_has("clamp: input 0 is NULL");
    mi_error_clear();
}
END_TEST

START_TEST(binary_rejects_dtype_mismatch)
{
    mi_tensor *a32 = mi_ones(MI_F32, MI_SHAPE(3)), *b64 = mi_ones(MI_F64, MI_SHAPE(3));
    for (int c = 0; c < N_BINARY; c++) {
        ck_assert_ptr_null(binary_cases[c].op(a32, b64));
        char want[64];
        snprintf(want, sizeof want, "%s: dtypes differ", binary_cases[c].name);
        ck_assert_error_has(want);
        ck_assert_error_has("f32");
        ck_assert_error_has("f64");
        mi_error_clear();
    }
    ck_assert_ptr_null(mi_where(b64, a32, b64));
    ck_assert_error_has("where: dtypes differ");
    mi_error_clear();
    /* the condition must be float too */
    ck_assert_ptr_null(mi_where(mi_arange(MI_I64, 3), b64, b64));
    ck_assert_error_has("where: input 0 must be f32 or f64, got i64");
    mi_error_clear();
}
END_TEST

START_TEST(binary_rejects_mismatched_shapes)
{
    mi_tensor *a = mi_ones(MI_F64, MI_SHAPE(3)), *b = mi_ones(MI_F64, MI_SHAPE(4));
    for (int c = 0; c < N_BINARY; c++) {
        ck_assert_ptr_null(binary_cases[c].op(a, b));
        ck_assert_error_has("shapes [3] and [4] do not broadcast");
        mi_error_clear();
    }
    mi_tensor *m = mi_ones(MI_F64, MI_SHAPE(2, 3)), *n = mi_ones(MI_F64, MI_SHAPE(4, 1, 2));
    ck_assert_ptr_null(mi_mul(m, n));
    ck_assert_error_has("[2,3] and [4,1,2]");
    mi_error_clear();
    ck_assert_ptr_null(mi_where(mi_ones(MI_F64, MI_SHAPE(2)), a, a));
    ck_assert_error_has("where: shapes [2] and [3] do not broadcast");
    mi_error_clear();
}
END_TEST

/* The op's name leads a broadcast error, like every other op error. */
/* swiglu's gradients, unrecorded in f32 with OWN (one pass for both), equal
 * the ops' (swiglu_backward and swiglu: REF alone, and recorded with every
 * backend), on a tensor two threads split. */
START_TEST(swiglu_gradients_in_one_pass_match_the_ops)
{
    mi_rng r;
    mi_rng_seed(&r, 31);
    mi_tensor *in[2] = {mi_randn(&r, MI_F32, MI_SHAPE(600, 130), 0, 2),
                        mi_randn(&r, MI_F32, MI_SHAPE(600, 130), 0, 1)};
    mi_tensor *w = mi_randn(&r, MI_F32, MI_SHAPE(600, 130), 0, 1), *g[3][2];
    int threads = mi_threads();
    mi_set_threads(2);
    for (int c = 0; c < 3; c++) {
        mi_backends_allow(c == 1 ? 1u << MI_BACKEND_REF : MI_BACKEND_ALL);
        for (int i = 0; i < 2; i++) mi_requires_grad(in[i], true);
        mi_tensor *loss = mi_sum(mi_mul(mi_swiglu(in[0], in[1]), w), MI_ALL, false);
        ck_assert_msg(loss && mi_grad(&loss, NULL, 1, in, 2, c == 2, g[c]) == 0, "%s",
                      mi_error());
    }
    mi_backends_allow(MI_BACKEND_ALL);
    mi_set_threads(threads);
    for (int c = 1; c < 3; c++) {
        int worst;
        double e = max_rel_err(g[0], g[c], 2, &worst, NULL);
        ck_assert_msg(e <= 1e-5, "against %s: the gradient of input %d differs by %g",
                      c == 1 ? "REF" : "the recorded ops", worst, e);
    }
}
END_TEST

START_TEST(broadcast_error_names_the_op)
{
    mi_tensor *a = mi_ones(MI_F64, MI_SHAPE(3)), *b = mi_ones(MI_F64, MI_SHAPE(4));
    for (int c = 0; c < N_BINARY; c++) {
        ck_assert_ptr_null(binary_cases[c].op(a, b));
        char want[96];
        snprintf(want, sizeof want, "%s: shapes [3] and [4] do not broadcast",
                 binary_cases[c].name);
        ck_assert_error_has(want);
        mi_error_clear();
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_slow("unary");
    tcase_add_test(tc, unary_forward_matches_libm_f64);
    tcase_add_test(tc, unary_forward_f32_close_to_f64);
    tcase_add_test(tc, unary_rank0_and_empty);
    tcase_add_test(tc, sign_and_relu_at_zero);
    tcase_add_test(tc, softplus_log_sigmoid_stable_for_large_x);
    tcase_add_test(tc, scalar_attribute_ops);
    tcase_add_test(tc, derivatives_by_hand);
    suite_add_tcase(s, tc);
    tc = tcase_slow("binary");
    tcase_add_test(tc, binary_broadcast_forward);
    tcase_add_test(tc, where_broadcasts);
    tcase_add_test(tc, maximum_tie_gradient_goes_to_a);
    suite_add_tcase(s, tc);
    tc = tcase_slow("errors");
    tcase_add_test(tc, unary_rejects_int_dtype);
    tcase_add_test(tc, clamp_rejects_lo_above_hi);
    tcase_add_test(tc, null_inputs_propagate);
    tcase_add_test(tc, binary_rejects_dtype_mismatch);
    tcase_add_test(tc, binary_rejects_mismatched_shapes);
    tcase_add_test(tc, broadcast_error_names_the_op);
    tcase_add_test(tc, swiglu_gradients_in_one_pass_match_the_ops);
    suite_add_tcase(s, tc);
    return s;
}
