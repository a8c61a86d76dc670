/* Scans (cumsum, cumprod, linear_scan, linear_scan_from) and the MIRAS helpers (soft_threshold,
 * smooth_sign, smooth_abs, lq_normalize, sphere_retract): forward values
 * against naive computations written here, independently of the kernels,
 * and every error path. Gradients are checked by the registry suite. */
#include "harness.h"

/* ---------------------------------------------------------------- naive helpers */

/* Multi-index of flat index k in a row-major shape. */
static void unflat(int rank, const int64_t *shape, int64_t k, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = k % shape[d];
        k /= shape[d];
    }
}

/* Flat offset of idx (given in the frame of a rank-`rank` tensor, right
 * aligned) inside t, with NumPy broadcasting: size-1 axes read index 0. */
static int64_t bcast_offset(const mi_tensor *t, int rank, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) {
        int64_t i = idx[d + rank - t->rank];
        off = off * t->shape[d] + (t->shape[d] == 1 ? 0 : i);
    }
    return off;
}

/* x at idx with position `pos` along axis ax. */
static double at_pos(const mi_tensor *x, const int64_t *idx, int ax, int64_t pos)
{
    int64_t j[MI_MAX_RANK];
    memcpy(j, idx, sizeof j);
    j[ax] = pos;
    return mi_get(x, bcast_offset(x, x->rank, j));
}

/* Σ or Π over s ≤ t (s ≥ t when reverse), one output element at a time. */
static mi_tensor *naive_cumulate(const mi_tensor *x, int ax, bool reverse, bool product)
{
    mi_tensor *y = mi_zeros(MI_F64, x->rank, x->shape);
    int64_t idx[MI_MAX_RANK] = {0}, len = x->shape[ax];
    for (int64_t k = 0; k < x->numel; k++) {
        unflat(x->rank, x->shape, k, idx);
        int64_t t = idx[ax];
        double acc = product ? 1.0 : 0.0;
        for (int64_t s = reverse ? t : 0; s <= (reverse ? len - 1 : t); s++)
            acc = product ? acc * at_pos(x, idx, ax, s) : acc + at_pos(x, idx, ax, s);
        mi_set(y, k, acc);
    }
    return y;
}

/* The closed form of h_t = a_t h_{t−1} + x_t, h_{−1} = h0 (0 when h0 is NULL):
 *   h_t = Σ_{s ≤ t} (Π_{s < u ≤ t} a_u) x_s + (Π_{u ≤ t} a_u) h0
 * (mirrored when reverse), with a and h0 read through broadcasting. */
static mi_tensor *naive_linear_scan_from(const mi_tensor *a, const mi_tensor *x,
                                         const mi_tensor *h0, int ax, bool reverse)
{
    mi_tensor *h = mi_zeros(MI_F64, x->rank, x->shape);
    int64_t idx[MI_MAX_RANK] = {0}, j[MI_MAX_RANK], len = x->shape[ax];
    for (int64_t k = 0; k < x->numel; k++) {
        unflat(x->rank, x->shape, k, idx);
        int64_t t = idx[ax];
        double acc = 0;
        for (int64_t s = 0; s < len; s++) {
            if (reverse ? s < t : s > t) continue;
            double w = at_pos(x, idx, ax, s);
            int64_t lo = reverse ? t : s + 1, hi = reverse ? s - 1 : t;
            for (int64_t u = lo; u <= hi; u++) {
                memcpy(j, idx, sizeof j);
                j[ax] = u;
                w *= mi_get(a, bcast_offset(a, x->rank, j));
            }
            acc += w;
        }
        if (h0) {
            memcpy(j, idx, sizeof j);
            j[ax] = 0;
            double w = mi_get(h0, bcast_offset(h0, x->rank, j));
            for (int64_t u = reverse ? t : 0; u <= (reverse ? len - 1 : t); u++) {
                memcpy(j, idx, sizeof j);
                j[ax] = u;
                w *= mi_get(a, bcast_offset(a, x->rank, j));
            }
            acc += w;
        }
        mi_set(h, k, acc);
    }
    return h;
}

static mi_tensor *naive_linear_scan(const mi_tensor *a, const mi_tensor *x, int ax, bool reverse)
{
    return naive_linear_scan_from(a, x, NULL, ax, reverse);
}

static void assert_all_close(const mi_tensor *got, const mi_tensor *want, double tol)
{
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->rank, want->rank);
    for (int d = 0; d < want->rank; d++) ck_assert_int_eq(got->shape[d], want->shape[d]);
    for (int64_t k = 0; k < want->numel; k++)
        ck_assert_msg(fabs(mi_get(got, k) - mi_get(want, k)) <= tol * (1 + fabs(mi_get(want, k))),
                      "element %lld: %.12g, expected %.12g", (long long)k, mi_get(got, k),
                      mi_get(want, k));
}

static mi_rng rng_at(uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return r;
}

/* ---------------------------------------------------------------- scans */

START_TEST(cumsum_matches_naive_on_every_axis)
{
    mi_rng r = rng_at(1);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(3, 4, 5), 0, 1);
    mi_tensor *x32 = mi_tensor_to(x, MI_F32);
    for (int ax = -1; ax < 3; ax++)
        for (int rev = 0; rev < 2; rev++) {
            int axn = ax < 0 ? ax + 3 : ax;
            mi_tensor *want = naive_cumulate(x, axn, rev, false);
            assert_all_close(mi_cumsum(x, ax, rev), want, 1e-12);
            assert_all_close(mi_cumsum(x32, ax, rev), want, 1e-5);
        }
    /* a size-1 axis and a rank-1 tensor */
    mi_tensor *y = mi_randn(&r, MI_F64, MI_SHAPE(4, 1, 3), 0, 1);
    assert_all_close(mi_cumsum(y, 1, false), y, 0);
    mi_tensor *v = mi_from_buffer(MI_F64, MI_SHAPE(4), (double[]){1, 2, 3, 4});
    assert_all_close(mi_cumsum(v, 0, false),
                     mi_from_buffer(MI_F64, MI_SHAPE(4), (double[]){1, 3, 6, 10}), 0);
    assert_all_close(mi_cumsum(v, 0, true),
                     mi_from_buffer(MI_F64, MI_SHAPE(4), (double[]){10, 9, 7, 4}), 0);
}
END_TEST

START_TEST(cumprod_matches_naive_on_every_axis)
{
    mi_rng r = rng_at(2);
    mi_tensor *x = mi_rand(&r, MI_F64, MI_SHAPE(3, 4, 5), 0.5, 1.5);
    mi_tensor *x32 = mi_tensor_to(x, MI_F32);
    for (int ax = 0; ax < 3; ax++)
        for (int rev = 0; rev < 2; rev++) {
            mi_tensor *want = naive_cumulate(x, ax, rev, true);
            assert_all_close(mi_cumprod(x, ax, rev), want, 1e-12);
            assert_all_close(mi_cumprod(x32, ax, rev), want, 1e-5);
        }
    mi_tensor *v = mi_from_buffer(MI_F64, MI_SHAPE(4), (double[]){1, 2, -3, 0.5});
    assert_all_close(mi_cumprod(v, -1, false),
                     mi_from_buffer(MI_F64, MI_SHAPE(4), (double[]){1, 2, -6, -3}), 0);
    assert_all_close(mi_cumprod(v, -1, true),
                     mi_from_buffer(MI_F64, MI_SHAPE(4), (double[]){-3, -3, -1.5, 0.5}), 0);
}
END_TEST

START_TEST(linear_scan_matches_naive_same_shape)
{
    mi_rng r = rng_at(3);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(3, 4, 5), 0, 1);
    mi_tensor *a = mi_rand(&r, MI_F64, MI_SHAPE(3, 4, 5), -1.0, 1.0);
    mi_tensor *x32 = mi_tensor_to(x, MI_F32), *a32 = mi_tensor_to(a, MI_F32);
    for (int ax = 0; ax < 3; ax++) /* first, middle and last axis */
        for (int rev = 0; rev < 2; rev++) {
            mi_tensor *want = naive_linear_scan(a, x, ax, rev);
            assert_all_close(mi_linear_scan(a, x, ax, rev), want, 1e-12);
            assert_all_close(mi_linear_scan(a32, x32, ax - 3, rev), want, 1e-5);
        }
    /* a = 1 is cumsum; a = 0 is the identity */
    mi_tensor *ones = mi_ones(MI_F64, MI_SHAPE(3, 4, 5)), *zeros = mi_zeros_like(x);
    assert_all_close(mi_linear_scan(ones, x, 1, true), naive_cumulate(x, 1, true, false), 1e-12);
    assert_all_close(mi_linear_scan(zeros, x, 2, false), x, 0);
}
END_TEST

START_TEST(linear_scan_broadcasts_a)
{
    mi_rng r = rng_at(4);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(3, 4, 5), 0, 1);
    /* a varying along time (axis 1) only; constant along time; lower rank;
     * rank 0; varying along everything but the leading axis */
    mi_tensor *as[] = {
        mi_rand(&r, MI_F64, MI_SHAPE(4, 1), 0.2, 1.0),
        mi_rand(&r, MI_F64, MI_SHAPE(3, 1, 5), 0.2, 1.0),
        mi_rand(&r, MI_F64, MI_SHAPE(5), 0.2, 1.0),
        mi_full(MI_F64, 0, (const int64_t[]){1}, 0.9),
        mi_rand(&r, MI_F64, MI_SHAPE(1, 4, 5), -1.0, 1.0),
    };
    for (int k = 0; k < 5; k++)
        for (int ax = 0; ax < 3; ax++)
            for (int rev = 0; rev < 2; rev++) {
                mi_tensor *want = naive_linear_scan(as[k], x, ax, rev);
                mi_tensor *got = mi_linear_scan(as[k], x, ax, rev);
                assert_all_close(got, want, 1e-12);
                mi_tensor *got32 =
                    mi_linear_scan(mi_tensor_to(as[k], MI_F32), mi_tensor_to(x, MI_F32), ax, rev);
                assert_all_close(got32, want, 1e-5);
            }
    /* a hand-computed case: decay 0.5 over [1, 2, 3] */
    mi_tensor *v = mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){1, 2, 3});
    mi_tensor *half = mi_scalar(MI_F64, 0.5);
    assert_all_close(mi_linear_scan(half, v, 0, false),
                     mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){1, 2.5, 4.25}), 0);
    assert_all_close(mi_linear_scan(half, v, 0, true),
                     mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){2.75, 3.5, 3}), 0);
}
END_TEST

START_TEST(linear_scan_from_matches_naive)
{
    mi_rng r = rng_at(8);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(3, 4, 5), 0, 1);
    mi_tensor *as[] = {
        mi_rand(&r, MI_F64, MI_SHAPE(3, 4, 5), -1.0, 1.0),
        mi_rand(&r, MI_F64, MI_SHAPE(4, 1), 0.2, 1.0),
        mi_full(MI_F64, 0, (const int64_t[]){1}, 0.9),
    };
    for (int k = 0; k < 3; k++)
        for (int ax = 0; ax < 3; ax++)
            for (int rev = 0; rev < 2; rev++) {
                /* h0: x's shape with the axis of size 1; broadcast along
                 * every other axis; lower rank; rank 0 */
                int64_t one[3] = {3, 4, 5};
                one[ax] = 1;
                mi_tensor *h0s[] = {
                    mi_randn(&r, MI_F64, 3, one, 0, 1),
                    mi_randn(&r, MI_F64, MI_SHAPE(1, 1, 1), 0, 1),
                    mi_randn(&r, MI_F64, 2, one + 1, 0, 1),
                    mi_scalar(MI_F64, -0.7),
                };
                for (int m = 0; m < 4; m++) {
                    mi_tensor *want = naive_linear_scan_from(as[k], x, h0s[m], ax, rev);
                    assert_all_close(mi_linear_scan_from(as[k], x, h0s[m], ax, rev), want, 1e-12);
                    mi_tensor *got32 =
                        mi_linear_scan_from(mi_tensor_to(as[k], MI_F32), mi_tensor_to(x, MI_F32),
                                            mi_tensor_to(h0s[m], MI_F32), ax - 3, rev);
                    assert_all_close(got32, want, 1e-5);
                }
                /* a zero start is linear_scan */
                assert_all_close(mi_linear_scan_from(as[k], x, mi_scalar(MI_F64, 0), ax, rev),
                                 mi_linear_scan(as[k], x, ax, rev), 0);
            }
    /* hand-computed: decay 0.5 over [1, 2, 3] from 4 */
    mi_tensor *v = mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){1, 2, 3});
    mi_tensor *half = mi_scalar(MI_F64, 0.5), *four = mi_from_buffer(MI_F64, MI_SHAPE(1), (double[]){4});
    assert_all_close(mi_linear_scan_from(half, v, four, 0, false),
                     mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){3, 3.5, 4.75}), 0);
    assert_all_close(mi_linear_scan_from(half, v, four, 0, true),
                     mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){3.25, 4.5, 5}), 0);
}
END_TEST

/* OWN's f32 scan kernels give REF's bits (and the same bits on 1 and 2
 * threads) on every layout they take and the ones they hand back to REF:
 * lanes in registers (inner ≤ 256: 64- and 16-wide blocks, a tail), rows
 * through memory (inner > 256), the scan along the contiguous axis (inner
 * = 1); a and h0 of x's layout, one value per step, broadcast over the
 * leading axis, and (with two axes after the scan axis) broadcast along one
 * of them only, which OWN leaves to REF. */
START_TEST(own_linear_scans_give_ref_bits)
{
    const mi_op *ops[2] = {mi_op_find("linear_scan"), mi_op_find("linear_scan_from")};
    ck_assert_ptr_nonnull(ops[0]);
    ck_assert_ptr_nonnull(ops[1]);
    if (!ops[0]->kernel[MI_BACKEND_OWN][MI_F32] || !ops[1]->kernel[MI_BACKEND_OWN][MI_F32]) return;
    mi_rng r = rng_at(9);
    static const int64_t shapes[][4] = {
        {3, 37, 1, 93}, {2, 21, 1, 600}, {1200, 70, 1, 1}, {40, 33, 1, 2049}, {5, 30, 7, 40}};
    int threads = mi_threads();
    for (int sh = 0; sh < 5; sh++) {
        const int64_t *xs = shapes[sh];
        mi_tensor *x = mi_randn(&r, MI_F32, 4, xs, 0, 1);
        int64_t per_step[4] = {xs[0], xs[1], 1, 1}, odd_a[4] = {1, xs[1], xs[2], 1};
        mi_tensor *as[] = {mi_rand(&r, MI_F32, 4, xs, -1.0, 1.0),
                           mi_rand(&r, MI_F32, 4, per_step, 0.2, 1.0),
                           mi_rand(&r, MI_F32, 4, odd_a, 0.2, 1.0)};
        int64_t one[4] = {xs[0], 1, xs[2], xs[3]}, one_step[4] = {xs[0], 1, 1, 1},
                odd_h[4] = {1, 1, 1, xs[3]};
        mi_tensor *h0s[] = {mi_randn(&r, MI_F32, 4, one, 0, 1),
                            mi_randn(&r, MI_F32, 4, one_step, 0, 1),
                            mi_randn(&r, MI_F32, 4, odd_h, 0, 1), NULL};
        for (int k = 0; k < 3; k++)
            for (int m = 0; m < 4; m++)
                for (int rev = 0; rev < 2; rev++) {
                    const mi_op *op = ops[h0s[m] != NULL];
                    mi_tensor *in[3] = {as[k], x, h0s[m]};
                    mi_attrs at = {.axis = 1, .reverse = rev};
                    mi_tensor *ref = mi_zeros_like(x), *o1 = mi_zeros_like(x),
                              *o2 = mi_zeros_like(x);
                    op->kernel[MI_BACKEND_REF][MI_F32](ref, in, &at);
                    mi_set_threads(1);
                    op->kernel[MI_BACKEND_OWN][MI_F32](o1, in, &at);
                    mi_set_threads(2);
                    op->kernel[MI_BACKEND_OWN][MI_F32](o2, in, &at);
                    mi_set_threads(threads);
                    size_t bytes = (size_t)x->numel * sizeof(float);
                    ck_assert_msg(memcmp(ref->data, o1->data, bytes) == 0 &&
                                      memcmp(ref->data, o2->data, bytes) == 0,
                                  "%s: shape %d, a %d, h0 %d, reverse %d: OWN differs from REF",
                                  op->name, sh, k, m, rev);
                }
    }
}
END_TEST

START_TEST(scans_reject_bad_input)
{
    mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(3, 5));
    ck_assert_ptr_null(mi_cumsum(x, 2, false));
    ck_assert_error_has("cumsum: axis 2 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_cumprod(x, -3, true));
    ck_assert_error_has("cumprod: axis -3 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_cumsum(mi_scalar(MI_F64, 1.0), 0, false));
    ck_assert_error_has("cumsum: axis 0 out of range for rank 0");
    mi_error_clear();
    ck_assert_ptr_null(mi_cumprod(mi_arange(MI_I64, 4), 0, false));
    ck_assert_error_has("cumprod: input 0 must be f32 or f64, got i64");
    mi_error_clear();
    ck_assert_ptr_null(mi_cumsum(NULL, 0, false));
    ck_assert_error_has("cumsum");
    mi_error_clear();

    ck_assert_ptr_null(mi_linear_scan(mi_zeros(MI_F64, MI_SHAPE(4)), x, 1, false));
    ck_assert_error_has("linear_scan: a [4] does not broadcast to x [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan(mi_zeros(MI_F64, MI_SHAPE(1, 3, 5)), x, 1, false));
    ck_assert_error_has("linear_scan: a [1,3,5] does not broadcast to x [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan(mi_zeros(MI_F64, MI_SHAPE(3, 1)), x, 2, false));
    ck_assert_error_has("linear_scan: axis 2 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan(mi_arange(MI_I32, 5), x, 0, false));
    ck_assert_error_has("linear_scan: input 0 must be f32 or f64, got i32");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan(mi_zeros(MI_F32, MI_SHAPE(5)), x, 0, false));
    ck_assert_error_has("linear_scan: dtypes differ");
    mi_error_clear();

    mi_tensor *a = mi_full(MI_F64, MI_SHAPE(3, 1), 0.5);
    ck_assert_ptr_null(mi_linear_scan_from(a, x, mi_zeros(MI_F64, MI_SHAPE(3, 5)), 0, false));
    ck_assert_error_has(
        "linear_scan_from: h0 [3,5] does not broadcast to [1,5] (x [3,5] with axis 0 of size 1)");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(a, x, mi_zeros(MI_F64, MI_SHAPE(1, 1, 5)), 1, false));
    ck_assert_error_has("linear_scan_from: h0 [1,1,5] does not broadcast to [3,1]");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(a, x, mi_zeros(MI_F64, MI_SHAPE(4)), -1, true));
    ck_assert_error_has("linear_scan_from: h0 [4] does not broadcast to [3,1]");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(mi_zeros(MI_F64, MI_SHAPE(4)), x,
                                           mi_zeros(MI_F64, MI_SHAPE(1, 5)), 0, false));
    ck_assert_error_has("linear_scan_from: a [4] does not broadcast to x [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(a, x, mi_zeros(MI_F64, MI_SHAPE(1, 5)), 2, false));
    ck_assert_error_has("linear_scan_from: axis 2 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(a, x, mi_arange(MI_I64, 5), 0, false));
    ck_assert_error_has("linear_scan_from: input 2 must be f32 or f64, got i64");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(a, x, mi_zeros(MI_F32, MI_SHAPE(1, 5)), 0, false));
    ck_assert_error_has("linear_scan_from: dtypes differ");
    mi_error_clear();
    ck_assert_ptr_null(mi_linear_scan_from(a, x, NULL, 0, false));
    ck_assert_error_has("linear_scan_from: input 2 is NULL");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- MIRAS helpers */

START_TEST(soft_threshold_around_lambda)
{
    static const double xs[] = {-2, -0.6, -0.5, -0.4, 0, 0.4, 0.5, 0.6, 2};
    static const double want[] = {-1.5, -0.1, 0, 0, 0, 0, 0, 0.1, 1.5};
    mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(9), xs);
    assert_all_close(mi_soft_threshold(x, 0.5), mi_from_buffer(MI_F64, MI_SHAPE(9), want), 1e-15);
    assert_all_close(mi_soft_threshold(mi_tensor_to(x, MI_F32), 0.5),
                     mi_from_buffer(MI_F64, MI_SHAPE(9), want), 1e-7);
    assert_all_close(mi_soft_threshold(x, 0.0), x, 0); /* λ = 0: identity */
    mi_tensor *big = mi_soft_threshold(x, 3.0);      /* λ above every |x|: all zero */
    for (int k = 0; k < 9; k++) ck_assert(mi_get(big, k) == 0.0);
}
END_TEST

START_TEST(smooth_sign_and_abs_values)
{
    mi_rng r = rng_at(5);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(2, 7), 0, 2);
    mi_tensor *s = mi_smooth_sign(x, 3.0), *a = mi_smooth_abs(x, 1e-6);
    mi_tensor *s32 = mi_smooth_sign(mi_tensor_to(x, MI_F32), 3.0);
    mi_tensor *a32 = mi_smooth_abs(mi_tensor_to(x, MI_F32), 1e-6);
    for (int k = 0; k < 14; k++) {
        double v = mi_get(x, k);
        ck_assert_close(mi_get(s, k), tanh(3.0 * v), 1e-15);
        ck_assert_close(mi_get(a, k), sqrt(v * v + 1e-6), 1e-15);
        ck_assert_close(mi_get(s32, k), tanh(3.0 * v), 1e-6);
        ck_assert_close(mi_get(a32, k), sqrt(v * v + 1e-6), 1e-5);
    }
    /* at 0: sign 0, abs √eps */
    mi_tensor *z = mi_zeros(MI_F64, MI_SHAPE(1));
    ck_assert(mi_item(mi_smooth_sign(z, 5.0)) == 0.0);
    ck_assert_close(mi_item(mi_smooth_abs(z, 0.25)), 0.5, 1e-15);
}
END_TEST

/* W = A / (N^p + eps)^(r/p) per matrix, N the Frobenius (p = 2, r = (q−2)/q)
 * or entrywise q-norm (paper, p = q, r = q − 2). */
static void check_lq(const mi_tensor *A, double q, int form, double eps)
{
    mi_tensor *W = mi_lq_normalize((mi_tensor *)A, q, form, eps);
    ck_assert_ptr_nonnull(W);
    int64_t m = A->shape[A->rank - 2], n = A->shape[A->rank - 1];
    for (int64_t b = 0; b < A->numel / (m * n); b++) {
        double fro2 = 0, sq = 0;
        for (int64_t k = 0; k < m * n; k++) {
            double v = mi_get(A, b * m * n + k);
            fro2 += v * v;
            sq += pow(fabs(v), q);
        }
        double denom = form == MI_LQ_FROBENIUS ? pow(fro2 + eps, (q - 2) / (2 * q))
                                               : pow(sq + eps, (q - 2) / q);
        for (int64_t k = 0; k < m * n; k++) {
            int64_t i = b * m * n + k;
            ck_assert_close(mi_get(W, i), mi_get(A, i) / denom, 1e-12);
        }
    }
}

START_TEST(lq_normalize_both_forms)
{
    mi_rng r = rng_at(6);
    mi_tensor *A = mi_randn(&r, MI_F64, MI_SHAPE(2, 3, 4), 0, 1);
    mi_tensor *A4 = mi_randn(&r, MI_F64, MI_SHAPE(2, 1, 2, 5), 0, 1);
    static const double qs[] = {4, 3, 1.5, 2};
    for (int k = 0; k < 4; k++)
        for (int form = 0; form < 2; form++) {
            check_lq(A, qs[k], form, 0);
            check_lq(A4, qs[k], form, 0);
            check_lq(A, qs[k], form, 0.3);
        }
    /* A hand-worked 2×2 at q = 4: ‖A‖_F = 5 (Frobenius divides by 5^(1/2));
     * ‖A‖_4 = (3⁴ + 4⁴)^(1/4) = 337^(1/4) (paper divides by its square). */
    mi_tensor *h = mi_from_buffer(MI_F64, MI_SHAPE(2, 2), (double[]){3, 0, 0, -4});
    mi_tensor *wf = mi_lq_normalize(h, 4, MI_LQ_FROBENIUS, 0);
    mi_tensor *wp = mi_lq_normalize(h, 4, MI_LQ_PAPER, 0);
    ck_assert_close(mi_get(wf, 0), 3 / sqrt(5.0), 1e-14);
    ck_assert_close(mi_get(wf, 3), -4 / sqrt(5.0), 1e-14);
    ck_assert_close(mi_get(wp, 0), 3 / sqrt(337.0), 1e-14);
    ck_assert_close(mi_get(wp, 3), -4 / sqrt(337.0), 1e-14);
    /* f32 and the zero matrix (maps to zero) */
    mi_tensor *w32 = mi_lq_normalize(mi_tensor_to(h, MI_F32), 4, MI_LQ_PAPER, 0);
    ck_assert_close(mi_get(w32, 3), -4 / sqrt(337.0), 1e-6);
    mi_tensor *z = mi_lq_normalize(mi_zeros(MI_F64, MI_SHAPE(2, 3)), 4, MI_LQ_FROBENIUS, 0);
    for (int k = 0; k < 6; k++) ck_assert(mi_get(z, k) == 0.0);
    /* eps bounds the derivative at a vanishing matrix: at A = 1e-20·I₂
     * (Frobenius, q = 4, eps 1e-6) W ≈ A·eps^(−1/4), and ∂W₀₀/∂A₀₀ ≈ 31.6 (eps = 0: 1e10) */
    mi_tensor *tiny = mi_requires_grad(
        mi_from_buffer(MI_F64, MI_SHAPE(2, 2), (double[]){1e-20, 0, 0, 1e-20}), true);
    mi_tensor *w00 = mi_slice(
        mi_reshape(mi_lq_normalize(tiny, 4, MI_LQ_FROBENIUS, 1e-6), MI_SHAPE(4)), 0, 0, 1);
    mi_tensor *g;
    ck_assert_int_eq(mi_grad(&w00, NULL, 1, &tiny, 1, false, &g), 0);
    ck_assert_close(mi_get(g, 0), pow(1e-6, -0.25), 1e-9);
}
END_TEST

START_TEST(sphere_retract_gives_unit_rows)
{
    mi_rng r = rng_at(7);
    mi_tensor *s = mi_randn(&r, MI_F64, MI_SHAPE(2, 3, 4), 0, 1);
    mi_tensor *d = mi_randn(&r, MI_F64, MI_SHAPE(2, 3, 4), 0, 0.3);
    mi_tensor *y = mi_sphere_retract(s, d);
    mi_tensor *y32 = mi_sphere_retract(mi_tensor_to(s, MI_F32), mi_tensor_to(d, MI_F32));
    ck_assert_ptr_nonnull(y);
    for (int row = 0; row < 6; row++) {
        double n2 = 0, u2 = 0;
        for (int k = 0; k < 4; k++) {
            double u = mi_get(s, row * 4 + k) + mi_get(d, row * 4 + k);
            u2 += u * u;
            n2 += mi_get(y, row * 4 + k) * mi_get(y, row * 4 + k);
        }
        ck_assert_close(n2, 1.0, 1e-14);
        for (int k = 0; k < 4; k++) {
            double u = mi_get(s, row * 4 + k) + mi_get(d, row * 4 + k);
            ck_assert_close(mi_get(y, row * 4 + k), u / sqrt(u2), 1e-14);
            ck_assert_close(mi_get(y32, row * 4 + k), u / sqrt(u2), 1e-6);
        }
    }
    /* Lattice Eq. 11 with ‖s‖ = 1 and d ⟂ s: the factor is (1 + ‖d‖²)^(−1/2) */
    mi_tensor *e = mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){1, 0, 0});
    mi_tensor *p = mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){0, 0.6, 0.8});
    mi_tensor *q = mi_sphere_retract(e, p);
    ck_assert_close(mi_get(q, 0), 1 / sqrt(2.0), 1e-15);
    ck_assert_close(mi_get(q, 2), 0.8 / sqrt(2.0), 1e-15);
    /* s + d = 0: no direction, a zero row */
    mi_tensor *z = mi_sphere_retract(e, mi_from_buffer(MI_F64, MI_SHAPE(3), (double[]){-1, 0, 0}));
    for (int k = 0; k < 3; k++) ck_assert(mi_get(z, k) == 0.0);
}
END_TEST

START_TEST(miras_helpers_reject_bad_input)
{
    mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(3, 4));
    ck_assert_ptr_null(mi_soft_threshold(x, -0.1));
    ck_assert_error_has("soft_threshold: lambda must be finite and >= 0, got -0.1");
    mi_error_clear();
    ck_assert_ptr_null(mi_soft_threshold(x, NAN));
    ck_assert_error_has("soft_threshold: lambda");
    mi_error_clear();
    ck_assert_ptr_null(mi_soft_threshold(mi_arange(MI_I32, 3), 0.5));
    ck_assert_error_has("soft_threshold: input 0 must be f32 or f64, got i32");
    mi_error_clear();

    ck_assert_ptr_null(mi_smooth_sign(x, INFINITY));
    ck_assert_error_has("smooth_sign: a must be finite, got inf");
    mi_error_clear();
    ck_assert_ptr_null(mi_smooth_sign(mi_arange(MI_I64, 3), 1.0));
    ck_assert_error_has("smooth_sign: input 0 must be f32 or f64, got i64");
    mi_error_clear();

    ck_assert_ptr_null(mi_smooth_abs(x, 0.0));
    ck_assert_error_has("smooth_abs: eps must be finite and > 0, got 0");
    mi_error_clear();
    ck_assert_ptr_null(mi_smooth_abs(x, -1e-6));
    ck_assert_error_has("smooth_abs: eps must be finite and > 0, got -1e-06");
    mi_error_clear();

    ck_assert_ptr_null(mi_lq_normalize(x, 1.0, MI_LQ_FROBENIUS, 0));
    ck_assert_error_has("lq_normalize: q must be > 1, got 1");
    mi_error_clear();
    ck_assert_ptr_null(mi_lq_normalize(x, 0.5, MI_LQ_PAPER, 0));
    ck_assert_error_has("lq_normalize: q must be > 1, got 0.5");
    mi_error_clear();
    ck_assert_ptr_null(mi_lq_normalize(x, 4, MI_LQ_FROBENIUS, -1e-6));
    ck_assert_error_has("lq_normalize: eps must be >= 0 and finite, got -1e-06");
    mi_error_clear();
    ck_assert_ptr_null(mi_lq_normalize(x, 4, 7, 0));
    ck_assert_error_has("lq_normalize: form must be MI_LQ_FROBENIUS (0) or MI_LQ_PAPER (1), got 7");
    mi_error_clear();
    ck_assert_ptr_null(mi_lq_normalize(mi_zeros(MI_F64, MI_SHAPE(5)), 4, MI_LQ_FROBENIUS, 0));
    ck_assert_error_has("lq_normalize: needs rank >= 2 (a matrix per leading index), got [5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_lq_normalize(mi_arange(MI_I64, 4), 4, MI_LQ_FROBENIUS, 0));
    ck_assert_error_has("lq_normalize: input 0 must be f32 or f64, got i64");
    mi_error_clear();

    ck_assert_ptr_null(mi_sphere_retract(x, mi_zeros(MI_F64, MI_SHAPE(3, 5))));
    ck_assert_error_has("sphere_retract: s and d shapes differ: [3,4] vs [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_sphere_retract(x, mi_zeros(MI_F64, MI_SHAPE(4)))); /* no broadcasting */
    ck_assert_error_has("sphere_retract: s and d shapes differ: [3,4] vs [4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_sphere_retract(mi_scalar(MI_F64, 1), mi_scalar(MI_F64, 2)));
    ck_assert_error_has("sphere_retract: needs rank >= 1 (rows along the last axis), got []");
    mi_error_clear();
    ck_assert_ptr_null(mi_sphere_retract(x, mi_zeros(MI_F32, MI_SHAPE(3, 4))));
    ck_assert_error_has("sphere_retract: dtypes differ");
    mi_error_clear();
    ck_assert_ptr_null(mi_sphere_retract(x, NULL));
    ck_assert_error_has("sphere_retract: input 1 is NULL");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("scan_miras");
    TCase *tc = tcase_slow("scans");
    tcase_add_test(tc, cumsum_matches_naive_on_every_axis);
    tcase_add_test(tc, cumprod_matches_naive_on_every_axis);
    tcase_add_test(tc, linear_scan_matches_naive_same_shape);
    tcase_add_test(tc, linear_scan_broadcasts_a);
    tcase_add_test(tc, linear_scan_from_matches_naive);
    tcase_add_test(tc, own_linear_scans_give_ref_bits);
    tcase_add_test(tc, scans_reject_bad_input);
    suite_add_tcase(s, tc);
    tc = tcase_slow("miras_helpers");
    tcase_add_test(tc, soft_threshold_around_lambda);
    tcase_add_test(tc, smooth_sign_and_abs_values);
    tcase_add_test(tc, lq_normalize_both_forms);
    tcase_add_test(tc, sphere_retract_gives_unit_rows);
    tcase_add_test(tc, miras_helpers_reject_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
