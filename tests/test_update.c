/* The fused state updates (ops/update.c) against their formulas computed
 * here element by element, in f64 and f32, for every gate layout (per
 * matrix, per row, on the key axis, a scalar, none), and their error paths.
 * Gradients are checked by the registry suite (gradcheck and
 * gradgradcheck of the ops' examples); a recurrence using them by
 * test_miras_scan and test_lm_step. */
#include <math.h>

#include "harness.h"

static mi_rng rng;
static void seed_setup(void) { mi_rng_seed(&rng, 4242); }

static mi_tensor *normal(mi_dtype dt, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_randn(&rng, dt, rank, shape, 0, 1);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* Flat offset in t of the element at idx (of a rank-`rank` frame, right
 * aligned), size-1 axes read at 0. */
static int64_t offset(const mi_tensor *t, int rank, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++)
        off = off * t->shape[d] + (t->shape[d] == 1 ? 0 : idx[d + rank - t->rank]);
    return off;
}

static void unflat(int rank, const int64_t *shape, int64_t k, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = k % shape[d];
        k /= shape[d];
    }
}

/* y = a ⊙ X + b ⊙ (d xᵀ) (a NULL: 1), one element at a time. */
static double outer_update_at(const mi_tensor *X, const mi_tensor *a, const mi_tensor *b,
                              const mi_tensor *d, const mi_tensor *x, int64_t k)
{
    int R = X->rank;
    int64_t idx[MI_MAX_RANK], row[MI_MAX_RANK];
    unflat(R, X->shape, k, idx);
    memcpy(row, idx, sizeof row);
    row[R - 1] = 0; /* b is read per row */
    int64_t d_off = k / X->shape[R - 1];
    int64_t x_off = (d_off / X->shape[R - 2]) * X->shape[R - 1] + idx[R - 1];
    double av = a ? mi_get(a, offset(a, R, idx)) : 1.0;
    return av * mi_get(X, k) + mi_get(b, offset(b, R, row)) * mi_get(d, d_off) * mi_get(x, x_off);
}

typedef struct layout {
    int rx, ra, rb;
    int64_t X[4], a[4], b[4];
    bool no_a;
} layout;

static const layout layouts[] = {
    {3, 3, 3, {2, 3, 4}, {2, 1, 1}, {2, 1, 1}, false},             /* per matrix */
    {4, 4, 4, {2, 1, 3, 4}, {2, 1, 3, 1}, {2, 1, 3, 1}, false},    /* per row */
    {4, 4, 2, {2, 1, 3, 5}, {2, 1, 1, 5}, {1, 1}, false},          /* a on the key axis */
    {3, 0, 1, {3, 2, 5}, {0}, {1}, false},                         /* a rank-0 a */
    {2, 0, 2, {33, 70}, {0}, {33, 1}, true},                       /* no a; long rows */
};

START_TEST(outer_update_matches_its_formula)
{
    const layout *L = &layouts[_i / 2];
    mi_dtype dt = _i % 2 ? MI_F64 : MI_F32;
    double tol = dt == MI_F64 ? 1e-14 : 1e-5;
    int64_t ds[4], xs[4];
    memcpy(ds, L->X, sizeof ds);
    memcpy(xs, L->X, sizeof xs);
    xs[L->rx - 2] = L->X[L->rx - 1];
    mi_tensor *X = normal(dt, L->rx, L->X), *b = normal(dt, L->rb, L->b);
    mi_tensor *a = L->no_a ? NULL : normal(dt, L->ra, L->a);
    mi_tensor *d = normal(dt, L->rx - 1, ds), *x = normal(dt, L->rx - 1, xs);
    mi_tensor *y = mi_outer_update(X, a, b, d, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert(mi_same_shape(y, X));
    for (int64_t k = 0; k < y->numel; k++) {
        double want = outer_update_at(X, a, b, d, x, k), got = mi_get(y, k);
        ck_assert_msg(fabs(got - want) <= tol * (1 + fabs(want)),
                      "layout %d %s element %lld: %.9g, want %.9g", _i / 2, mi_dtype_name(dt),
                      (long long)k, got, want);
    }
}
END_TEST

START_TEST(scale_add_matches_its_formula)
{
    static const int64_t X[3][3] = {{2, 3, 4}, {2, 3, 40}, {5}};
    static const int64_t A[3][3] = {{3, 1}, {2, 1, 40}, {1}};
    static const int rx[3] = {3, 3, 1}, ra[3] = {2, 3, 1};
    for (int v = 0; v < 3; v++)
        for (int p = 0; p < 2; p++) {
            mi_dtype dt = p ? MI_F64 : MI_F32;
            mi_tensor *x = normal(dt, rx[v], X[v]), *z = normal(dt, rx[v], X[v]);
            mi_tensor *a = normal(dt, ra[v], A[v]), *y = mi_scale_add(x, a, z);
            ck_assert_msg(y != NULL, "%s", mi_error());
            for (int64_t k = 0; k < y->numel; k++) {
                int64_t idx[MI_MAX_RANK];
                unflat(rx[v], X[v], k, idx);
                double want = mi_get(a, offset(a, rx[v], idx)) * mi_get(x, k) + mi_get(z, k);
                ck_assert_msg(fabs(mi_get(y, k) - want) <= (p ? 1e-14 : 1e-5) * (1 + fabs(want)),
                              "case %d %s element %lld", v, mi_dtype_name(dt), (long long)k);
            }
        }
}
END_TEST

/* States of millions of entries, where the OWN loops split the rows over two
 * threads (the gradients by whole matrices, and on one thread when a gate is
 * shared by matrices, whose sums two threads would race on): the outputs and
 * the fused vjps' gradients equal the one-thread REF loops', for gates per
 * matrix, per row, on the key axis and shared by every matrix. */
START_TEST(large_states_split_over_threads)
{
    static const int64_t A[4][4] = {{16, 1, 1, 1}, {16, 1, 512, 1}, {16, 1, 1, 256}, {1, 1, 1, 1}};
    const int64_t X[4] = {16, 1, 512, 256}, dshape[3] = {16, 1, 512}, xshape[3] = {16, 1, 256};
    int threads = mi_threads();
    mi_set_threads(2);
    for (int v = 0; v < 4; v++) {
        mi_tensor *in[5] = {normal(MI_F32, 4, X), normal(MI_F32, 4, A[v]),
                            normal(MI_F32, 4, A[v == 2 ? 0 : v]), normal(MI_F32, 3, dshape),
                            normal(MI_F32, 3, xshape)};
        mi_tensor *z = normal(MI_F32, 4, X), *w = normal(MI_F32, 4, X);
        mi_tensor *out[2][2], *grads[2][2][5];
        for (int p = 0; p < 2; p++) {
            mi_backends_allow(p ? 1u << MI_BACKEND_REF : MI_BACKEND_ALL);
            for (int i = 0; i < 5; i++) mi_requires_grad(in[i], true);
            out[p][0] = mi_outer_update(in[0], in[1], in[2], in[3], in[4]);
            out[p][1] = mi_scale_add(in[0], in[1], z);
            for (int o = 0; o < 2; o++) {
                mi_tensor *loss = mi_sum(mi_mul(out[p][o], w), MI_ALL, false);
                ck_assert_msg(mi_grad(&loss, NULL, 1, in, o ? 2 : 5, false, grads[p][o]) == 0,
                              "%s", mi_error());
            }
        }
        mi_backends_allow(MI_BACKEND_ALL);
        for (int o = 0; o < 2; o++) {
            int worst;
            double e = max_rel_err(out[0] + o, out[1] + o, 1, &worst, NULL);
            ck_assert_msg(e <= 1e-5, "gates %d op %d: output differs by %g", v, o, e);
            e = max_rel_err(grads[0][o], grads[1][o], o ? 2 : 5, &worst, NULL);
            ck_assert_msg(e <= 1e-4, "gates %d op %d: gradient %d differs by %g", v, o, worst, e);
        }
    }
    mi_set_threads(threads);
}
END_TEST

START_TEST(bad_inputs_are_refused)
{
    mi_tensor *X = mi_zeros(MI_F64, MI_SHAPE(2, 3, 4)), *g = mi_zeros(MI_F64, MI_SHAPE(2, 1, 1));
    mi_tensor *d = mi_zeros(MI_F64, MI_SHAPE(2, 3)), *x = mi_zeros(MI_F64, MI_SHAPE(2, 4));
    ck_assert_ptr_null(mi_outer_update(X, g, g, mi_zeros(MI_F64, MI_SHAPE(2, 4)), x));
    ck_assert_error_has("outer_update: X [2,3,4] needs d [..., out] [2,4] and x [..., in] [2,4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_outer_update(X, g, g, d, mi_zeros(MI_F64, MI_SHAPE(2, 3))));
    ck_assert_error_has("x [..., in] [2,3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_outer_update(X, g, mi_zeros(MI_F64, MI_SHAPE(2, 1, 4)), d, x));
    ck_assert_error_has("outer_update: gates a [2,1,1] and b [2,1,4] must broadcast to X "
                        "[2,3,4] (b with a last axis of 1)");
    mi_error_clear();
    ck_assert_ptr_null(mi_outer_update(X, mi_zeros(MI_F64, MI_SHAPE(3, 1, 1)), g, d, x));
    ck_assert_error_has("gates a [3,1,1]");
    mi_error_clear();
    ck_assert_ptr_null(mi_outer_update(mi_zeros(MI_F64, MI_SHAPE(4)), g, g, d, x));
    ck_assert_error_has("outer_update: X [4] needs");
    mi_error_clear();
    ck_assert_ptr_null(mi_outer_update(X, g, g, mi_zeros(MI_F32, MI_SHAPE(2, 3)), x));
    ck_assert_error_has("outer_update: dtypes differ: input 0 is f64, input 3 is f32");
    mi_error_clear();
    ck_assert_ptr_null(mi_outer_update(X, NULL, g, NULL, x));
    ck_assert_error_has("outer_update");
    mi_error_clear();

    ck_assert_ptr_null(mi_scale_add(X, g, d));
    ck_assert_error_has("scale_add: a [2,1,1] must broadcast to X [2,3,4], and Z [2,3] be X's "
                        "shape");
    mi_error_clear();
    ck_assert_ptr_null(mi_scale_add(X, mi_zeros(MI_F64, MI_SHAPE(3, 3)), X));
    ck_assert_error_has("scale_add: a [3,3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_scale_add(X, mi_arange(MI_I64, 4), X));
    ck_assert_error_has("scale_add: input 1 must be f32 or f64, got i64");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("update");
    TCase *tc = tcase_slow("update");
    tcase_add_checked_fixture(tc, seed_setup, NULL);
    tcase_add_loop_test(tc, outer_update_matches_its_formula, 0,
                        2 * (int)(sizeof layouts / sizeof layouts[0]));
    tcase_add_test(tc, scale_add_matches_its_formula);
    tcase_add_test(tc, large_states_split_over_threads);
    tcase_add_test(tc, bad_inputs_are_refused);
    suite_add_tcase(s, tc);
    return s;
}
