/* The fused component memories of HOPE, hope_scan (ops/hope_scan.c):
 * - HOPE's layer gives the same output and gradients (input and every
 *   parameter) with the op as with its memories composed on the tape, f64
 *   to ≤ 1e-12, over chunk sizes (a last partial chunk, the two chunk sizes
 *   apart), both rules, plain GD, a static q, at one and two threads;
 * - the backward from what the recorded forward kept equals the backward op
 *   run alone (which runs the forward again), f64 and f32;
 * - the op's output and gradients do not depend on the thread count (each
 *   row on one thread, the rows' parameter gradients summed in order);
 * - at the benchmark's sizes the OWN f32 kernel stays within f32 rounding of
 *   the f64 one;
 * - bad shapes, dtypes and attributes give messages, and a second
 *   derivative is refused with one.
 * The op's gradcheck against central differences is the registry's
 * (test_registry: its six examples). */
#include <math.h>
#include <string.h>

#include "nl_test_util.h"

/* ---------------------------------------------------------------- the layer */

typedef struct layer_case {
    int chunk, memory_chunk, rule;
    bool adaptive_q, lms;
    int64_t T;
} layer_case;

static const layer_case layer_cases[] = {
    {4, 4, MI_HOPE_EQ28, true, true, 11},  {3, 5, MI_HOPE_EQ88, false, true, 13},
    {2, 2, MI_HOPE_EQ28, true, false, 7},  {1, 1, MI_HOPE_EQ88, true, false, 5},
    {5, 2, MI_HOPE_EQ28, true, true, 12},
};

static mi_hope_config case_config(const layer_case *lc, bool composed)
{
    mi_hope_config c = mi_hope_config_default(8, 2);
    c.chunk = lc->chunk, c.memory_chunk = lc->memory_chunk, c.rule = lc->rule;
    c.adaptive_q = lc->adaptive_q, c.lms = lc->lms, c.composed = composed;
    c.memory_expansion = 2, c.eta = 0.3, c.alpha = 0.9;
    c.cms.n_blocks = 0;
    return c;
}

/* y and the gradients of ⟨y, r⟩ with respect to x and every parameter. */
static int layer_grads(const layer_case *lc, bool composed, int threads, int64_t B,
                       mi_tensor **y, mi_tensor **g)
{
    mi_set_threads(threads);
    mi_hope_config c = case_config(lc, composed);
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 31);
    ck_assert_msg(mi_hope_init(&h, &c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    int n;
    const mi_named_tensor *p = mi_hope_params(&h, &n);
    mi_tensor *wrt[MI_HOPE_MAX_PARAMS + 1];
    mi_rng_seed(&r, 32);
    wrt[0] = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(B, lc->T, 8), 0, 1), true);
    for (int i = 0; i < n; i++) wrt[1 + i] = p[i].tensor;
    *y = mi_hope_forward(&h, wrt[0]);
    ck_assert_msg(*y != NULL, "%s", mi_error());
    mi_tensor *l = mi_sum_axes(mi_mul(*y, mi_randn(&r, MI_F64, MI_SHAPE(B, lc->T, 8), 0, 1)), 7,
                               false);
    ck_assert_msg(mi_grad(&l, NULL, 1, wrt, n + 1, false, g) == 0, "%s", mi_error());
    return n + 1;
}

START_TEST(layer_fused_equals_composed)
{
    int threads = mi_threads();
    const layer_case *lc = &layer_cases[_i];
    for (int t = 1; t <= 2; t++) {
        mi_tensor *y[2], *g[2][MI_HOPE_MAX_PARAMS + 1];
        int n = layer_grads(lc, true, t, 3, &y[0], g[0]);
        layer_grads(lc, false, t, 3, &y[1], g[1]);
        double dy = max_abs_diff(y[0], y[1]);
        ck_assert_msg(dy <= 1e-12, "case %d, %d threads: y differs by %g", _i, t, dy);
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int64_t j = 0; j < g[0][i]->numel; j++) s = fmax(s, fabs(mi_get(g[0][i], j)));
            double dg = max_abs_diff(g[0][i], g[1][i]);
            ck_assert_msg(dg <= 1e-12 * (1 + s), "case %d, %d threads: gradient %d differs by %g",
                          _i, t, i, dg);
        }
    }
    mi_set_threads(threads);
}
END_TEST

/* ---------------------------------------------------------------- the op */

enum { N = 3, T = 9, DM = 8, HEADS = 2, HC = 3 };

/* x, s2, w1r, w1g, bias (nr residual components), all leaves. */
static void op_inputs(mi_tensor **in, int nr, mi_dtype dt, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    in[0] = mi_randn(&r, dt, MI_SHAPE(N, T, DM), 0, 1);
    in[1] = mi_rand(&r, dt, MI_SHAPE((nr + 2) * HC, DM), -0.8, 0.8);
    in[2] = mi_rand(&r, dt, MI_SHAPE(nr, DM, HC), -0.5, 0.5);
    in[3] = mi_rand(&r, dt, MI_SHAPE(2, HEADS, HC), -0.5, 0.5);
    in[4] = mi_rand(&r, dt, MI_SHAPE(2, HEADS), -1, 1);
    for (int i = 0; i < 5; i++) ck_assert_ptr_nonnull(mi_requires_grad(in[i], true));
}

static mi_tensor *op(mi_tensor *const *in, int64_t C, bool eq88)
{
    return mi_hope_scan(in[0], in[1], in[2], in[3], in[4], C, eq88, true, 1e-3, 1);
}

START_TEST(kept_forward_equals_rerun)
{
    mi_dtype dt = _i / 2 ? MI_F32 : MI_F64;
    int64_t C = _i % 2 ? 4 : 1;
    mi_tensor *in[5], *got[5];
    op_inputs(in, 3, dt, 50u + (unsigned)_i);
    mi_tensor *y = op(in, C, _i % 2), *gy = mi_ones(dt, 3, y ? y->shape : NULL);
    ck_assert_msg(y && mi_grad(&y, &gy, 1, in, 5, false, got) == 0, "%s", mi_error());
    mi_tensor *packed = mi_hope_scan_backward(in[0], in[1], in[2], in[3], in[4], gy, C, _i % 2,
                                              true, 1e-3, 1);
    ck_assert_msg(packed != NULL, "%s", mi_error());
    int64_t off = 0;
    for (int i = 0; i < 5; i++) {
        double worst = 0, scale = 0;
        for (int64_t j = 0; j < in[i]->numel; j++) {
            double a = mi_get(got[i], j), b = mi_get(packed, off + j);
            worst = fmax(worst, fabs(a - b)), scale = fmax(scale, fabs(b));
        }
        off += in[i]->numel;
        ck_assert_msg(scale > 0, "input %d's gradient is zero", i);
        ck_assert_msg(worst <= (dt == MI_F64 ? 1e-12 : 1e-5) * scale,
                      "C %lld %s: input %d's gradient differs by %.3g (largest %.3g)",
                      (long long)C, mi_dtype_name(dt), i, worst, scale);
    }
}
END_TEST

START_TEST(threads_give_the_same_bits)
{
    int threads = mi_threads();
    mi_dtype dt = _i ? MI_F32 : MI_F64;
    mi_tensor *in[5], *y[2], *g[2];
    op_inputs(in, 2, dt, 60);
    for (int t = 0; t < 2; t++) {
        mi_set_threads(1 + t);
        y[t] = op(in, 3, false);
        ck_assert_msg(y[t] != NULL, "%s", mi_error());
        g[t] = mi_hope_scan_backward(in[0], in[1], in[2], in[3], in[4], y[t], 3, false, true,
                                     1e-3, 1);
        ck_assert_msg(g[t] != NULL, "%s", mi_error());
    }
    mi_set_threads(threads);
    size_t es = mi_dtype_size(dt);
    ck_assert_msg(memcmp(y[0]->data, y[1]->data, es * (size_t)y[0]->numel) == 0,
                  "%s output differs between 1 and 2 threads", mi_dtype_name(dt));
    ck_assert_msg(memcmp(g[0]->data, g[1]->data, es * (size_t)g[0]->numel) == 0,
                  "%s gradients differ between 1 and 2 threads", mi_dtype_name(dt));
}
END_TEST

/* The benchmark's component sizes (d 128, 4 heads, h 128, chunk 16), two
 * rows of 48 tokens: f32 (OWN where the build has it) against f64. */
START_TEST(f32_at_full_size_follows_f64)
{
    mi_rng r;
    mi_rng_seed(&r, 70);
    int64_t n = 2, t = 48, d = 128, H = 4, hc = 128;
    mi_tensor *in[5];
    in[0] = mi_l2_normalize(mi_randn(&r, MI_F64, MI_SHAPE(n, t, d), 0, 1), 1e-6);
    in[1] = mi_randn(&r, MI_F64, MI_SHAPE(5 * hc, d), 0, 1);
    in[2] = mi_randn(&r, MI_F64, MI_SHAPE(3, d, hc), 0, 1 / sqrt((double)(hc * d)));
    in[3] = mi_randn(&r, MI_F64, MI_SHAPE(2, H, hc), 0, 0.1 / sqrt((double)hc));
    in[4] = mi_full(MI_F64, MI_SHAPE(2, H), -1);
    mi_tensor *gy = mi_randn(&r, MI_F64, MI_SHAPE(n, t, 3 * d + 2 * H), 0, 1), *out[2][2];
    for (int k = 0; k < 2; k++) {
        mi_dtype dt = k ? MI_F32 : MI_F64;
        mi_tensor *x[5];
        for (int i = 0; i < 5; i++) x[i] = mi_tensor_to(in[i], dt);
        mi_tensor *g = mi_tensor_to(gy, dt);
        out[k][0] = mi_hope_scan(x[0], x[1], x[2], x[3], x[4], 16, false, true, 1e-6, 1);
        out[k][1] = mi_hope_scan_backward(x[0], x[1], x[2], x[3], x[4], g, 16, false, true, 1e-6,
                                          1);
        ck_assert_msg(out[k][0] && out[k][1], "%s", mi_error());
    }
    for (int j = 0; j < 2; j++) {
        double worst = 0, scale = 0;
        for (int64_t i = 0; i < out[0][j]->numel; i++) {
            worst = fmax(worst, fabs(mi_get(out[0][j], i) - mi_get(out[1][j], i)));
            scale = fmax(scale, fabs(mi_get(out[0][j], i)));
        }
        ck_assert_msg(worst <= 1e-4 * scale, "%s: f32 differs from f64 by %.3g (largest %.3g)",
                      j ? "gradients" : "output", worst, scale);
    }
}
END_TEST

START_TEST(bad_inputs_give_messages)
{
    mi_tensor *in[5];
    op_inputs(in, 3, MI_F64, 80);
    mi_error_clear();
    mi_tensor *w1r4 = mi_zeros(MI_F64, MI_SHAPE(4, DM, HC));
    ck_assert_ptr_null(mi_hope_scan(in[0], in[1], w1r4, in[3], in[4], 2, false, true, 1e-3, 1));
    ck_assert_error_has("hope_scan: shapes do not fit");
    ck_assert_error_has("w1r [4,8,3]");
    mi_error_clear();
    mi_tensor *w1g3 = mi_zeros(MI_F64, MI_SHAPE(2, 3, HC)), *b3 = mi_zeros(MI_F64, MI_SHAPE(2, 3));
    ck_assert_ptr_null(mi_hope_scan(in[0], in[1], in[2], w1g3, b3, 2, false, true, 1e-3, 1));
    ck_assert_error_has("H dividing d");
    mi_error_clear();
    mi_tensor *s2 = mi_zeros(MI_F64, MI_SHAPE(5 * HC + 1, DM));
    ck_assert_ptr_null(mi_hope_scan(in[0], s2, in[2], in[3], in[4], 2, false, true, 1e-3, 1));
    ck_assert_error_has("s2 [16,8]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_scan(in[0], in[1], in[2], in[3], mi_zeros(MI_F64, MI_SHAPE(HEADS)),
                                    2, false, true, 1e-3, 1));
    ck_assert_error_has("ranks");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_scan(in[0], in[1], mi_tensor_to(in[2], MI_F32), in[3], in[4], 2,
                                    false, true, 1e-3, 1));
    ck_assert_error_has("dtype");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_scan(in[0], in[1], in[2], in[3], in[4], 0, false, true, 1e-3, 1));
    ck_assert_error_has("chunk C = 0");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_scan(in[0], in[1], in[2], in[3], in[4], 2, false, true, 1e-3, 0));
    ck_assert_error_has("hidden_eps");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_scan(in[0], NULL, in[2], in[3], in[4], 2, false, true, 1e-3, 1));
    ck_assert_error_has("hope_scan");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_scan_backward(in[0], in[1], in[2], in[3], in[4],
                                             mi_zeros(MI_F64, MI_SHAPE(N, T, DM)), 2, false,
                                             true, 1e-3, 1));
    ck_assert_error_has("hope_scan_backward: shapes do not fit");
    assert_no_second_derivative(op(in, 2, false), in[1]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("hope_scan");
    TCase *tc = tcase_slow("hope_scan");
    tcase_add_loop_test(tc, layer_fused_equals_composed, 0,
                        (int)(sizeof layer_cases / sizeof layer_cases[0]));
    tcase_add_loop_test(tc, kept_forward_equals_rerun, 0, 4);
    tcase_add_loop_test(tc, threads_give_the_same_bits, 0, 2);
    tcase_add_test(tc, f32_at_full_size_follows_f64);
    tcase_add_test(tc, bad_inputs_give_messages);
    suite_add_tcase(s, tc);
    return s;
}
