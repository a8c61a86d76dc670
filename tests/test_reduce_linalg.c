/* Reductions (sum, mean, max, logsumexp, norm, sum_to) and linear algebra
 * (matmul, outer): forward values against naive loops written here, error
 * messages, gradients through the engine, and the registry checks. */
#include "harness.h"

static mi_rng rng;

static mi_tensor *randn(mi_dtype dt, int rank, const int64_t *shape)
{
    return mi_randn(&rng, dt, rank, shape, 0.0, 1.0);
}

/* ---------------------------------------------------------------- naive reductions */
enum { R_SUM, R_MEAN, R_MAX, R_LSE, R_NORM };

/* out[keepdim index] over x's elements, by multi-index arithmetic. */
static int64_t naive_reduce(const mi_tensor *x, uint32_t mask, int mode, double p, double *out)
{
    int64_t ks[MI_MAX_RANK], nout = 1, count = 1;
    if (mask == 0) mask = (1u << x->rank) - 1u;
    for (int d = 0; d < x->rank; d++) {
        ks[d] = (mask >> d) & 1u ? 1 : x->shape[d];
        nout *= ks[d];
        if ((mask >> d) & 1u) count *= x->shape[d];
    }
    double *m = calloc((size_t)nout, sizeof *m);
    int64_t *oidx = malloc(sizeof *oidx * (size_t)(x->numel ? x->numel : 1));
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t rem = i, o = 0, mul = 1;
        for (int d = x->rank - 1; d >= 0; d--) {
            int64_t c = rem % x->shape[d];
            rem /= x->shape[d];
            o += ((mask >> d) & 1u ? 0 : c) * mul;
            mul *= ks[d];
        }
        oidx[i] = o;
    }
    for (int64_t o = 0; o < nout; o++) {
        out[o] = mode == R_MAX ? -INFINITY : 0.0;
        m[o] = -INFINITY;
    }
    for (int64_t i = 0; i < x->numel; i++) {
        double v = mi_get(x, i);
        if (v > m[oidx[i]]) m[oidx[i]] = v;
    }
    for (int64_t i = 0; i < x->numel; i++) {
        double v = mi_get(x, i);
        double *y = &out[oidx[i]];
        switch (mode) {
        case R_SUM:
        case R_MEAN: *y += v; break;
        case R_MAX: *y = v > *y ? v : *y; break;
        case R_LSE: *y += exp(v - m[oidx[i]]); break;
        case R_NORM: *y += pow(fabs(v), p); break;
        }
    }
    for (int64_t o = 0; o < nout; o++) {
        if (mode == R_MEAN) out[o] /= (double)count;
        if (mode == R_LSE) out[o] = m[o] + log(out[o]);
        if (mode == R_NORM) out[o] = pow(out[o], 1.0 / p);
    }
    free(m);
    free(oidx);
    return nout;
}

/* Checks y (any dtype) against expected values, relative to their size. */
static void assert_values(const mi_tensor *y, const double *want, int64_t n, double tol,
                          const char *what)
{
    ck_assert_ptr_nonnull(y);
    ck_assert_msg(y->numel == n, "%s: numel %lld, expected %lld", what, (long long)y->numel,
                  (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double got = mi_get(y, i), w = want[i];
        ck_assert_msg(fabs(got - w) <= tol * (1.0 + fabs(w)), "%s: [%lld] = %.12g, expected %.12g",
                      what, (long long)i, got, w);
    }
}

static void assert_shape(const mi_tensor *y, int rank, const int64_t *shape)
{
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->rank, rank);
    for (int d = 0; d < rank; d++) ck_assert_int_eq(y->shape[d], shape[d]);
}

typedef struct red_case {
    int rank;
    int64_t shape[4];
    int axis;      /* as given to the wrapper (may be negative, MI_ALL) */
    bool keepdim;
} red_case;

static const red_case red_cases[] = {
    {3, {3, 4, 5}, -1, false}, {3, {3, 4, 5}, 1, true},     {3, {3, 4, 5}, 0, false},
    {4, {2, 1, 3, 4}, -3, true}, {4, {2, 1, 3, 4}, -2, false}, {2, {3, 300}, 0, false},
    {3, {2, 300, 3}, 1, true}, {3, {2, 3, 7}, MI_ALL, false}, {1, {6}, -1, true},
    {2, {1, 1}, MI_ALL, true},
};

static mi_tensor *call_reduce(int mode, mi_tensor *x, int axis, bool keepdim, double p)
{
    switch (mode) {
    case R_SUM: return mi_sum(x, axis, keepdim);
    case R_MEAN: return mi_mean(x, axis, keepdim);
    case R_MAX: return mi_max(x, axis, keepdim);
    case R_LSE: return mi_logsumexp(x, axis, keepdim);
    default: return mi_norm(x, p, axis, keepdim);
    }
}

START_TEST(reductions_match_naive)
{
    static const char *names[] = {"sum", "mean", "max", "logsumexp", "norm"};
    static const double ps[] = {1.0, 2.0, 3.0, 1.5};
    mi_dtype dt = _i ? MI_F64 : MI_F32;
    double tol = dt == MI_F32 ? 2e-5 : 1e-12;
    for (size_t c = 0; c < sizeof red_cases / sizeof red_cases[0]; c++) {
        const red_case *rc = &red_cases[c];
        mi_tensor *x = randn(dt, rc->rank, rc->shape);
        int ax = rc->axis == MI_ALL ? -1 : rc->axis < 0 ? rc->axis + rc->rank : rc->axis;
        uint32_t mask = ax < 0 ? 0 : 1u << ax;
        for (int mode = R_SUM; mode <= R_NORM; mode++)
            for (int pi = 0; pi < (mode == R_NORM ? 4 : 1); pi++) {
                double want[1024];
                int64_t n = naive_reduce(x, mask, mode, ps[pi], want);
                mi_tensor *y = call_reduce(mode, x, rc->axis, rc->keepdim, ps[pi]);
                char what[96];
                snprintf(what, sizeof what, "%s case %zu p %g %s", names[mode], c, ps[pi],
                         mi_dtype_name(dt));
                ck_assert_msg(y != NULL, "%s: %s", what, mi_error());
                ck_assert_int_eq(y->dtype, dt);
                /* the result's shape: x's with the axis dropped or kept as 1 */
                int r = 0;
                for (int d = 0; d < rc->rank; d++) {
                    bool red = mask == 0 || d == ax;
                    if (!red) ck_assert_int_eq(y->shape[r++], rc->shape[d]);
                    else if (rc->keepdim) ck_assert_int_eq(y->shape[r++], 1);
                }
                ck_assert_int_eq(y->rank, r);
                assert_values(y, want, n, tol, what);
            }
    }
}
END_TEST

START_TEST(sum_axes_mask_matches_naive)
{
    mi_tensor *x = randn(MI_F64, MI_SHAPE(2, 3, 4, 5));
    uint32_t masks[] = {0x5, 0xa, 0x6, 0x9, 0xf, 0x1};
    for (size_t k = 0; k < sizeof masks / sizeof masks[0]; k++)
        for (int keep = 0; keep < 2; keep++) {
            double want[128];
            int64_t n = naive_reduce(x, masks[k], R_SUM, 0, want);
            mi_tensor *y = mi_sum_axes(x, masks[k], keep);
            assert_values(y, want, n, 1e-12, "sum_axes");
            int bits = __builtin_popcount(masks[k]);
            ck_assert_int_eq(y->rank, keep ? 4 : 4 - bits);
        }
}
END_TEST

START_TEST(sum_all_of_matrix_is_rank0)
{
    mi_tensor *x = mi_arange(MI_F64, 12);
    x = mi_reshape(x, MI_SHAPE(3, 4));
    mi_tensor *y = mi_sum(x, MI_ALL, false);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->rank, 0);
    ck_assert_int_eq(y->numel, 1);
    ck_assert(mi_item(y) == 66.0);
    y = mi_sum(x, MI_ALL, true);
    assert_shape(y, MI_SHAPE(1, 1));
    ck_assert(mi_item(y) == 66.0);
    y = mi_mean(mi_scalar(MI_F32, 2.5), MI_ALL, false); /* rank 0 in, rank 0 out */
    ck_assert_int_eq(y->rank, 0);
    ck_assert(mi_item(y) == 2.5);
}
END_TEST

/* The f32 kernels accumulate in double: a million 0.1f sum to 1e5 (a float
 * accumulator drifts by ~1%), along rows and along columns. */
START_TEST(f32_sums_accumulate_in_double)
{
    mi_tensor *x = mi_full(MI_F32, MI_SHAPE(1000000), 0.1);
    double want = 1e6 * (double)0.1f;
    ck_assert_close(mi_item(mi_sum(x, 0, false)), want, 1e-6 * want);
    ck_assert_close(mi_item(mi_mean(x, 0, false)), (double)0.1f, 1e-7);
    mi_tensor *c = mi_sum(mi_reshape(x, MI_SHAPE(250000, 4)), 0, false);
    for (int j = 0; j < 4; j++) ck_assert_close(mi_get(c, j), want / 4, 1e-6 * want);
    ck_assert_close(mi_item(mi_norm(x, 2, 0, false)), sqrt(1e6) * (double)0.1f, 1e-3);
}
END_TEST

START_TEST(reductions_edge_values)
{
    /* logsumexp and norm are stable far from 1 */
    mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(2), (double[]){1000, 1000});
    ck_assert_close(mi_item(mi_logsumexp(x, 0, false)), 1000 + log(2.0), 1e-9);
    x = mi_from_buffer(MI_F64, MI_SHAPE(2), (double[]){1e200, -1e200});
    ck_assert_close(mi_item(mi_norm(x, 3, 0, false)) / 1e200, cbrt(2.0), 1e-12);
    x = mi_from_buffer(MI_F32, MI_SHAPE(2), (float[]){-INFINITY, -INFINITY});
    ck_assert(isinf(mi_item(mi_logsumexp(x, 0, false))) && mi_item(mi_logsumexp(x, 0, false)) < 0);
    /* max propagates NaN */
    x = mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){1, NAN, 2});
    ck_assert(isnan(mi_item(mi_max(x, 0, false))));
    /* reducing an empty axis: sum 0, mean NaN, norm 0, logsumexp −inf */
    x = mi_zeros(MI_F64, MI_SHAPE(0, 3));
    mi_tensor *s = mi_sum(x, 0, false);
    assert_shape(s, MI_SHAPE(3));
    ck_assert(mi_get(s, 2) == 0.0);
    ck_assert(isnan(mi_get(mi_mean(x, 0, false), 0)));
    ck_assert(mi_get(mi_norm(x, 2, 0, false), 1) == 0.0);
    ck_assert(mi_get(mi_logsumexp(x, 0, false), 0) == -INFINITY);
    /* the kept axis empty: an empty result */
    ck_assert_int_eq(mi_sum(x, 1, false)->numel, 0);
}
END_TEST

START_TEST(sum_to_matches_naive)
{
    mi_dtype dt = _i ? MI_F64 : MI_F32;
    mi_tensor *x = randn(dt, MI_SHAPE(2, 3, 4));
    /* [2,3,4] → [3,1]: y[j] = Σ_{i,k} x[i,j,k] */
    mi_tensor *y = mi_sum_to(x, MI_SHAPE(3, 1));
    assert_shape(y, MI_SHAPE(3, 1));
    for (int j = 0; j < 3; j++) {
        double w = 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++) w += mi_get(x, (i * 3 + j) * 4 + k);
        ck_assert_close(mi_get(y, j), w, 1e-5);
    }
    /* [2,3,4] → [4] and → [1,3,1] and → [] and → itself */
    y = mi_sum_to(x, MI_SHAPE(4));
    assert_shape(y, MI_SHAPE(4));
    for (int k = 0; k < 4; k++) {
        double w = 0;
        for (int i = 0; i < 6; i++) w += mi_get(x, i * 4 + k);
        ck_assert_close(mi_get(y, k), w, 1e-5);
    }
    y = mi_sum_to(x, MI_SHAPE(2, 1, 4));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            double w = 0;
            for (int j = 0; j < 3; j++) w += mi_get(x, (i * 3 + j) * 4 + k);
            ck_assert_close(mi_get(y, i * 4 + k), w, 1e-5);
        }
    double all = 0;
    for (int i = 0; i < 24; i++) all += mi_get(x, i);
    y = mi_sum_to(x, 0, NULL);
    ck_assert_int_eq(y->rank, 0);
    ck_assert_close(mi_item(y), all, 1e-5);
    y = mi_sum_to(x, MI_SHAPE(2, 3, 4));
    for (int i = 0; i < 24; i++) ck_assert(mi_get(y, i) == mi_get(x, i));
    /* the adjoint of broadcast_to: sum_to(broadcast_to(b)) = b · copies */
    mi_tensor *b = randn(dt, MI_SHAPE(3, 1));
    y = mi_sum_to(mi_broadcast_to(b, MI_SHAPE(5, 3, 2)), MI_SHAPE(3, 1));
    for (int j = 0; j < 3; j++) ck_assert_close(mi_get(y, j), 10 * mi_get(b, j), 1e-5);
}
END_TEST

/* ---------------------------------------------------------------- naive linear algebra */
/* C = op(A) op(B) with batch broadcast, element by element. */
static void naive_matmul(const mi_tensor *a, const mi_tensor *b, bool ta, bool tb,
                         const mi_tensor *c, double *out)
{
    int ra = a->rank, rb = b->rank, rc = c->rank, nb = rc - 2;
    int64_t M = c->shape[rc - 2], N = c->shape[rc - 1];
    int64_t K = ta ? a->shape[ra - 2] : a->shape[ra - 1];
    int64_t nbatch = c->numel / (M * N);
    for (int64_t q = 0; q < nbatch; q++) {
        /* batch multi-index of q in c, then flat batch index of a and b */
        int64_t idx[MI_MAX_RANK], rem = q;
        for (int d = nb - 1; d >= 0; d--) {
            idx[d] = rem % c->shape[d];
            rem /= c->shape[d];
        }
        int64_t qa = 0, qb = 0;
        for (int d = 0; d < nb; d++) {
            int da = d - (nb - (ra - 2)), db = d - (nb - (rb - 2));
            if (da >= 0) qa = qa * a->shape[da] + (a->shape[da] == 1 ? 0 : idx[d]);
            if (db >= 0) qb = qb * b->shape[db] + (b->shape[db] == 1 ? 0 : idx[d]);
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = mi_get(a, qa * M * K + (ta ? k * M + i : i * K + k));
                    double bv = mi_get(b, qb * K * N + (tb ? j * K + k : k * N + j));
                    s += av * bv;
                }
                out[(q * M + i) * N + j] = s;
            }
    }
}

START_TEST(matmul_matches_naive)
{
    mi_dtype dt = _i ? MI_F64 : MI_F32;
    double tol = dt == MI_F32 ? 1e-5 : 1e-12;
    const int64_t M = 3, K = 4, N = 5;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        /* a: batch [2,1], b: batch [3] → c: [2,3,M,N]; plus rank 2 x rank 3 */
        int64_t sa[4] = {2, 1, ta ? K : M, ta ? M : K};
        int64_t sb[3] = {3, tb ? N : K, tb ? K : N};
        mi_tensor *a = randn(dt, 4, sa), *b = randn(dt, 3, sb);
        mi_tensor *c = mi_matmul_t(a, b, ta, tb);
        ck_assert_msg(c != NULL, "%s", mi_error());
        assert_shape(c, MI_SHAPE(2, 3, 3, 5));
        double want[2 * 3 * 3 * 5];
        naive_matmul(a, b, ta, tb, c, want);
        assert_values(c, want, c->numel, tol, "matmul batched");

        mi_tensor *a2 = randn(dt, 2, sa + 2);
        c = mi_matmul_t(a2, b, ta, tb);
        assert_shape(c, MI_SHAPE(3, 3, 5));
        naive_matmul(a2, b, ta, tb, c, want);
        assert_values(c, want, c->numel, tol, "matmul rank 2 x rank 3");
    }
    /* plain mi_matmul, a larger size, and a k = 0 product (zeros) */
    mi_tensor *a = randn(dt, MI_SHAPE(17, 33)), *b = randn(dt, MI_SHAPE(33, 9));
    mi_tensor *c = mi_matmul(a, b);
    double *want = malloc(sizeof(double) * 17 * 9);
    naive_matmul(a, b, false, false, c, want);
    assert_values(c, want, c->numel, tol * 10, "matmul 17x33x9");
    free(want);
    c = mi_matmul(mi_zeros(dt, MI_SHAPE(2, 0)), mi_zeros(dt, MI_SHAPE(0, 3)));
    assert_shape(c, MI_SHAPE(2, 3));
    for (int i = 0; i < 6; i++) ck_assert(mi_get(c, i) == 0.0);
}
END_TEST

START_TEST(outer_matches_naive)
{
    mi_dtype dt = _i ? MI_F64 : MI_F32;
    mi_tensor *a = randn(dt, MI_SHAPE(2, 1, 3)), *b = randn(dt, MI_SHAPE(4, 2));
    mi_tensor *y = mi_outer(a, b);
    ck_assert_msg(y != NULL, "%s", mi_error());
    assert_shape(y, MI_SHAPE(2, 4, 3, 2));
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 4; q++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 2; j++)
                    ck_assert(mi_get(y, ((p * 4 + q) * 3 + i) * 2 + j) ==
                              (double)(dt == MI_F32 ? (float)(mi_get(a, p * 3 + i) *
                                                              mi_get(b, q * 2 + j))
                                                    : mi_get(a, p * 3 + i) * mi_get(b, q * 2 + j)));
    y = mi_outer(randn(dt, MI_SHAPE(3)), randn(dt, MI_SHAPE(5)));
    assert_shape(y, MI_SHAPE(3, 5));
}
END_TEST

/* Gradients through the engine: batch broadcast summed back by sum_to. */
START_TEST(matmul_gradient_sums_broadcast_batch)
{
    mi_tensor *a = mi_requires_grad(randn(MI_F64, MI_SHAPE(3, 4)), true);
    mi_tensor *b = mi_requires_grad(randn(MI_F64, MI_SHAPE(2, 4, 5)), true);
    mi_tensor *loss = mi_sum(mi_matmul(a, b), MI_ALL, false);
    ck_assert_int_eq(mi_backward(loss), 0);
    assert_shape(a->grad, MI_SHAPE(3, 4));
    assert_shape(b->grad, MI_SHAPE(2, 4, 5));
    /* dL/da[i,k] = Σ_{p,n} b[p,k,n];  dL/db[p,k,n] = Σ_i a[i,k] */
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) {
            double w = 0;
            for (int p = 0; p < 2; p++)
                for (int n = 0; n < 5; n++) w += mi_get(b, (p * 4 + k) * 5 + n);
            ck_assert_close(mi_get(a->grad, i * 4 + k), w, 1e-12);
        }
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 4; k++)
            for (int n = 0; n < 5; n++) {
                double w = 0;
                for (int i = 0; i < 3; i++) w += mi_get(a, i * 4 + k);
                ck_assert_close(mi_get(b->grad, (p * 4 + k) * 5 + n), w, 1e-12);
            }
}
END_TEST

START_TEST(ops_pass_registry_checks)
{
    static const char *ops[] = {"sum", "mean", "max", "logsumexp", "norm", "sum_to",
                                "matmul", "outer"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        const mi_op *op = mi_op_find(ops[i]);
        ck_assert_msg(op != NULL, "%s not registered", ops[i]);
        mi_op_check_result r = mi_op_check(op, 77u + (unsigned)i);
        ck_assert_msg(r.ok, "%s", r.message);
        ck_assert_int_ge(r.gradchecks, 2 * r.variants);
    }
}
END_TEST

/* ---------------------------------------------------------------- errors */
#define EXPECT_ERROR(call, needle)                                \
    do {                                                          \
        mi_error_clear();                                         \
        ck_assert_ptr_null(call);                                 \
        ck_assert_error_has(needle);                              \
        mi_error_clear();                                         \
    } while (0)

START_TEST(reduction_errors)
{
    mi_tensor *x = randn(MI_F32, MI_SHAPE(3, 4));
    mi_tensor *xi = mi_arange(MI_I32, 4);
    EXPECT_ERROR(mi_sum(x, 2, false), "sum: axis 2 out of range for rank 2");
    EXPECT_ERROR(mi_mean(x, -3, true), "mean: axis -3 out of range for rank 2");
    EXPECT_ERROR(mi_max(x, 5, false), "max: axis 5 out of range for rank 2");
    EXPECT_ERROR(mi_logsumexp(x, -9, false), "logsumexp: axis -9 out of range for rank 2");
    EXPECT_ERROR(mi_norm(x, 2, 3, false), "norm: axis 3 out of range for rank 2");
    EXPECT_ERROR(mi_sum(mi_scalar(MI_F32, 1), 0, false), "sum: axis 0 out of range for rank 0");
    EXPECT_ERROR(mi_sum_axes(x, 0x4, false),
                 "sum: axes mask 0x4 names axes beyond rank 2 of [3,4]");
    EXPECT_ERROR(mi_sum(xi, 0, false), "sum: input 0 must be f32 or f64, got i32");
    EXPECT_ERROR(mi_mean(xi, MI_ALL, false), "mean: input 0 must be f32 or f64, got i32");
    EXPECT_ERROR(mi_max(xi, 0, false), "max: input 0 must be f32 or f64, got i32");
    EXPECT_ERROR(mi_logsumexp(xi, 0, false), "logsumexp: input 0 must be f32 or f64");
    EXPECT_ERROR(mi_norm(xi, 2, 0, false), "norm: input 0 must be f32 or f64");
    EXPECT_ERROR(mi_max(mi_zeros(MI_F64, MI_SHAPE(0, 3)), 0, false),
                 "max: cannot reduce an empty axis of [0,3]");
    EXPECT_ERROR(mi_norm(x, 0.5, 0, false), "norm: p must be >= 1, got 0.5");
    EXPECT_ERROR(mi_norm(x, NAN, 0, false), "norm: p must be >= 1, got nan");
    EXPECT_ERROR(mi_norm(x, INFINITY, 0, false), "norm: p must be finite, got inf");
    /* NULL inputs propagate with the op's name */
    EXPECT_ERROR(mi_sum(NULL, 0, false), "sum: input 0 is NULL");
    EXPECT_ERROR(mi_sum_axes(NULL, 1, false), "sum: input 0 is NULL");
    EXPECT_ERROR(mi_mean(NULL, MI_ALL, false), "mean: input 0 is NULL");
    EXPECT_ERROR(mi_max(NULL, -1, false), "max: input 0 is NULL");
    EXPECT_ERROR(mi_logsumexp(NULL, 0, true), "logsumexp: input 0 is NULL");
    EXPECT_ERROR(mi_norm(NULL, 2, 0, false), "norm: input 0 is NULL");
    /* the first message of a chain is the one kept */
    mi_error_clear();
    ck_assert_ptr_null(mi_exp(mi_sum(x, 7, false)));
    ck_assert_error_has("sum: axis 7");
    mi_error_clear();
}
END_TEST

START_TEST(sum_to_errors)
{
    mi_tensor *x = randn(MI_F64, MI_SHAPE(2, 3));
    EXPECT_ERROR(mi_sum_to(x, MI_SHAPE(4)), "sum_to: [2,3] cannot be summed to [4]");
    EXPECT_ERROR(mi_sum_to(x, MI_SHAPE(3, 1)), "sum_to: [2,3] cannot be summed to [3,1]");
    EXPECT_ERROR(mi_sum_to(x, MI_SHAPE(1, 2, 3)), "sum_to: [2,3] cannot be summed to [1,2,3]");
    EXPECT_ERROR(mi_sum_to(x, 9, (int64_t[9]){0}), "sum_to: target rank 9 outside 0..6");
    EXPECT_ERROR(mi_sum_to(x, 2, NULL), "sum_to: target shape is NULL (rank 2)");
    EXPECT_ERROR(mi_sum_to(mi_arange(MI_I64, 3), MI_SHAPE(1)),
                 "sum_to: input 0 must be f32 or f64, got i64");
    EXPECT_ERROR(mi_sum_to(NULL, MI_SHAPE(1)), "sum_to: input 0 is NULL");
    /* through the registry, with a bad attribute rank */
    mi_attrs a = {.rank = -1};
    EXPECT_ERROR(mi_op_call(mi_op_find("sum_to"), &x, 1, &a), "sum_to: target rank -1");
}
END_TEST

START_TEST(linalg_errors)
{
    mi_tensor *a = randn(MI_F32, MI_SHAPE(4, 3)), *b = randn(MI_F32, MI_SHAPE(5, 2));
    EXPECT_ERROR(mi_matmul(a, b), "matmul: inner dims differ: [4,3] x [5,2]");
    EXPECT_ERROR(mi_matmul_t(a, b, true, true),
                 "matmul: inner dims differ: [4,3] x [5,2] (trans_a, trans_b)");
    EXPECT_ERROR(mi_matmul_t(a, a, false, false), "matmul: inner dims differ: [4,3] x [4,3]");
    ck_assert_ptr_nonnull(mi_matmul_t(a, a, false, true)); /* [4,3]·[4,3]ᵀ fits */
    EXPECT_ERROR(mi_matmul(randn(MI_F32, MI_SHAPE(3)), a),
                 "matmul: input 0 must have rank 2 to 6, got [3]");
    EXPECT_ERROR(mi_matmul(a, randn(MI_F32, MI_SHAPE(3))),
                 "matmul: input 1 must have rank 2 to 6, got [3]");
    EXPECT_ERROR(mi_matmul(randn(MI_F32, MI_SHAPE(2, 3, 4)), randn(MI_F32, MI_SHAPE(3, 4, 5))),
                 "matmul: batch dims do not broadcast: [2,3,4] x [3,4,5]");
    EXPECT_ERROR(mi_matmul(mi_zeros(MI_I64, MI_SHAPE(2, 2)), a),
                 "matmul: input 0 must be f32 or f64, got i64");
    EXPECT_ERROR(mi_matmul(a, randn(MI_F64, MI_SHAPE(3, 2))), "matmul: dtypes differ");
    EXPECT_ERROR(mi_matmul(NULL, b), "matmul: input 0 is NULL");
    EXPECT_ERROR(mi_matmul_t(a, NULL, true, false), "matmul: input 1 is NULL");

    EXPECT_ERROR(mi_outer(mi_scalar(MI_F32, 1), randn(MI_F32, MI_SHAPE(3))),
                 "outer: inputs must have rank >= 1, got [] x [3]");
    EXPECT_ERROR(mi_outer(randn(MI_F32, MI_SHAPE(2, 3)), randn(MI_F32, MI_SHAPE(3, 4))),
                 "outer: batch dims do not broadcast: [2,3] x [3,4]");
    EXPECT_ERROR(mi_outer(randn(MI_F32, MI_SHAPE(1, 1, 1, 1, 1, 2)), randn(MI_F32, MI_SHAPE(3))),
                 "outer: result rank 7 exceeds 6: [1,1,1,1,1,2] x [3]");
    EXPECT_ERROR(mi_outer(mi_arange(MI_I32, 3), randn(MI_F32, MI_SHAPE(3))),
                 "outer: input 0 must be f32 or f64, got i32");
    EXPECT_ERROR(mi_outer(randn(MI_F32, MI_SHAPE(3)), randn(MI_F64, MI_SHAPE(3))),
                 "outer: dtypes differ");
    EXPECT_ERROR(mi_outer(a, NULL), "outer: input 1 is NULL");
}
END_TEST

static void seed_setup(void) { mi_rng_seed(&rng, 20240611u); }

Suite *make_suite(void)
{
    Suite *s = suite_create("reduce_linalg");
    TCase *tc = tcase_slow("reduce");
    tcase_add_checked_fixture(tc, seed_setup, NULL);
    tcase_add_loop_test(tc, reductions_match_naive, 0, 2);
    tcase_add_test(tc, sum_axes_mask_matches_naive);
    tcase_add_test(tc, sum_all_of_matrix_is_rank0);
    tcase_add_test(tc, f32_sums_accumulate_in_double);
    tcase_add_test(tc, reductions_edge_values);
    tcase_add_loop_test(tc, sum_to_matches_naive, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_slow("linalg");
    tcase_add_checked_fixture(tc, seed_setup, NULL);
    tcase_add_loop_test(tc, matmul_matches_naive, 0, 2);
    tcase_add_loop_test(tc, outer_matches_naive, 0, 2);
    tcase_add_test(tc, matmul_gradient_sums_broadcast_batch);
    suite_add_tcase(s, tc);

    tc = tcase_slow("errors");
    tcase_add_checked_fixture(tc, seed_setup, NULL);
    tcase_add_test(tc, reduction_errors);
    tcase_add_test(tc, sum_to_errors);
    tcase_add_test(tc, linalg_errors);
    suite_add_tcase(s, tc);

    tc = tcase_slow("gradients");
    tcase_add_checked_fixture(tc, seed_setup, NULL);
    tcase_add_test(tc, ops_pass_registry_checks);
    suite_add_tcase(s, tc);
    return s;
}
