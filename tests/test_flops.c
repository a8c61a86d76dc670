/* The matrix-product tally mi_flops: each op call adds its products'
 * operations once, whichever backend runs it — 2·M·N·K per matmul and
 * matmul_acc product (times the batch), M·N per outer product, the fused
 * ops' products from their shapes — and a refused call adds nothing. The
 * expected counts are worked out here from the shapes. */
#include <math.h>

#include "harness.h"

static mi_rng rng;
/* tcase_slow's fixture makes and frees the test's scope */
static void seed_setup(void)
{
    mi_backends_allow(MI_BACKEND_ALL);
    mi_rng_seed(&rng, 7);
}
static void teardown(void)
{
    mi_backends_allow(MI_BACKEND_ALL);
}

static mi_tensor *randn(int rank, const int64_t *shape)
{
    return mi_randn(&rng, MI_F32, rank, shape, 0, 1);
}

/* The tally's growth over one call (the inputs are made before): the mark
 * is taken, then the call runs as since's argument. */
static uint64_t mark;
static uint64_t since(const mi_tensor *y)
{
    ck_assert_msg(y != NULL, "%s", mi_error());
    return mi_flops() - mark;
}
#define DELTA(expr) (mark = mi_flops(), since(expr))

static const unsigned masks[] = {1u << MI_BACKEND_REF, 1u << MI_BACKEND_BLAS,
                                 1u << MI_BACKEND_DNNL, 1u << MI_BACKEND_OWN, MI_BACKEND_ALL};

/* [a,b]·[b,c], batched, a shared B (folded into one GEMM), transposed,
 * and sizes that send the select rule to each library. */
START_TEST(matmul_counts_2mnk)
{
    mi_backends_allow(masks[_i]);
    const int64_t sz[][3] = {{3, 4, 5}, {33, 65, 7}, {64, 64, 64}};
    for (size_t s = 0; s < sizeof sz / sizeof *sz; s++) {
        int64_t a = sz[s][0], b = sz[s][1], c = sz[s][2];
        uint64_t abc = (uint64_t)(a * b * c);
        mi_tensor *A = randn(MI_SHAPE(a, b)), *B = randn(MI_SHAPE(b, c));
        ck_assert_uint_eq(DELTA(mi_matmul(A, B)), 2 * abc);
        mi_tensor *A3 = randn(MI_SHAPE(6, a, b)), *B3 = randn(MI_SHAPE(6, b, c));
        ck_assert_uint_eq(DELTA(mi_matmul(A3, B3)), 12 * abc);
        ck_assert_uint_eq(DELTA(mi_matmul(A3, B)), 12 * abc);
        mi_tensor *At = randn(MI_SHAPE(2, 1, b, a)), *Bt = randn(MI_SHAPE(3, c, b));
        ck_assert_uint_eq(DELTA(mi_matmul_t(At, Bt, true, true)), 12 * abc);
        mi_tensor *C = randn(MI_SHAPE(a, c));
        ck_assert_uint_eq(DELTA(mi_matmul_acc(C, A3, B3, false, false, -0.5)), 12 * abc);
    }
}
END_TEST

START_TEST(outer_counts_mn)
{
    mi_backends_allow(masks[_i]);
    const int64_t sz[][2] = {{3, 4}, {96, 96}, {1024, 1024}};
    for (size_t s = 0; s < sizeof sz / sizeof *sz; s++) {
        int64_t m = sz[s][0], n = sz[s][1];
        mi_tensor *x = randn(MI_SHAPE(m)), *y = randn(MI_SHAPE(n));
        ck_assert_uint_eq(DELTA(mi_outer(x, y)), (uint64_t)(m * n));
        mi_tensor *xb = randn(MI_SHAPE(5, m)), *yb = randn(MI_SHAPE(1, n));
        ck_assert_uint_eq(DELTA(mi_outer(xb, yb)), (uint64_t)(5 * m * n));
    }
}
END_TEST

/* The vjps' products count too: dA = g Bᵀ and dB = Aᵀ g, 2abc each. */
START_TEST(backward_counts_vjp_products)
{
    int64_t a = 5, b = 6, c = 7;
    mi_tensor *A = mi_requires_grad(randn(MI_SHAPE(a, b)), true);
    mi_tensor *B = mi_requires_grad(randn(MI_SHAPE(b, c)), true);
    uint64_t f0 = mi_flops();
    mi_tensor *loss = mi_sum(mi_matmul(A, B), MI_ALL, false);
    ck_assert_int_eq(mi_backward(loss), 0);
    ck_assert_uint_eq(mi_flops() - f0, (uint64_t)(3 * 2 * a * b * c));
}
END_TEST

/* A refused call and elementwise ops add nothing. */
START_TEST(refused_and_elementwise_add_nothing)
{
    mi_tensor *A = randn(MI_SHAPE(3, 4)), *B = randn(MI_SHAPE(5, 6));
    uint64_t f0 = mi_flops();
    ck_assert_ptr_null(mi_matmul(A, B));
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_exp(mi_add(mi_mul(A, A), A)));
    ck_assert_ptr_nonnull(mi_sum(A, MI_ALL, false));
    ck_assert_uint_eq(mi_flops() - f0, 0);
}
END_TEST

/* Causal attention with a window: query t reads min(t + 1, W) keys, each
 * 2·(D + Dv) for q·k and the weighted add of v. */
START_TEST(attention_counts_read_keys)
{
    int64_t H = 3, T = 6, D = 4, Dv = 5, W = 3;
    mi_tensor *q = randn(MI_SHAPE(H, T, D)), *k = randn(MI_SHAPE(H, T, D));
    mi_tensor *v = randn(MI_SHAPE(H, T, Dv));
    uint64_t keys = 1 + 2 + 3 + 3 + 3 + 3;
    ck_assert_uint_eq(DELTA(mi_attention(q, k, v, true, W)), H * keys * 2 * (uint64_t)(D + Dv));
    ck_assert_uint_eq(DELTA(mi_attention(q, k, v, false, 0)),
                      (uint64_t)(H * T * T * 2 * (D + Dv)));
}
END_TEST

/* attention's f32 vjp with OWN, not recorded: the products over the keys
 * each block of 64 query rows reads, 4·(D + Dv) per row and key of a block:
 * causal T 150, blocks of 64 rows over 64 and 128 keys, 22 rows over 150. */
START_TEST(attention_vjp_counts_block_products)
{
    mi_backends_allow(MI_BACKEND_ALL);
    int64_t H = 2, T = 150, D = 4, Dv = 3;
    mi_tensor *x[3] = {mi_requires_grad(randn(MI_SHAPE(H, T, D)), true),
                       mi_requires_grad(randn(MI_SHAPE(H, T, D)), true),
                       mi_requires_grad(randn(MI_SHAPE(H, T, Dv)), true)};
    mi_tensor *y = mi_sum(mi_attention(x[0], x[1], x[2], true, 0), MI_ALL, false), *g[3];
    ck_assert_ptr_nonnull(y);
    uint64_t f0 = mi_flops();
    ck_assert_msg(mi_grad(&y, NULL, 1, x, 3, false, g) == 0, "%s", mi_error());
    uint64_t cells = 64 * 64 + 64 * 128 + 22 * 150;
    ck_assert_uint_eq(mi_flops() - f0, (uint64_t)H * cells * 4 * (uint64_t)(D + Dv));
}
END_TEST

/* delta_scan: 3 products of 2·dv·dk per token forward, 10 backward, on
 * every backend. */
START_TEST(delta_scan_counts_per_token)
{
    mi_backends_allow(masks[_i]);
    int64_t N = 2, T = 5, dv = 3, dk = 4;
    mi_tensor *s0 = randn(MI_SHAPE(N, dv, dk)), *q = randn(MI_SHAPE(N, T, dk));
    mi_tensor *k = randn(MI_SHAPE(N, T, dk)), *v = randn(MI_SHAPE(N, T, dv));
    mi_tensor *beta = mi_full(MI_F32, MI_SHAPE(N, T), 0.5);
    mi_tensor *alpha = mi_full(MI_F32, MI_SHAPE(N, T), 0.9);
    uint64_t per = (uint64_t)(2 * dv * dk * N * T);
    ck_assert_uint_eq(DELTA(mi_delta_scan_packed(s0, q, k, v, beta, alpha, MI_DELTA_RULE_DELTA)),
                      3 * per);
    mi_tensor *g = randn(MI_SHAPE(N, T * dv + dv * dk));
    ck_assert_uint_eq(DELTA(mi_delta_scan_backward(s0, q, k, v, beta, alpha, g,
                                                   MI_DELTA_RULE_DELTA)),
                      10 * per);
}
END_TEST

/* cms_scan with chunks of 2 over T = 5: every token's read (2 products of
 * 2·d·h) and the 4 tokens of the two full chunks before T their update (3). */
START_TEST(cms_scan_counts_reads_and_updates)
{
    int64_t B = 2, T = 5, d = 3, h = 4;
    mi_tensor *u = randn(MI_SHAPE(B, T, d)), *v = randn(MI_SHAPE(B, T, d));
    mi_tensor *eta = mi_full(MI_F32, MI_SHAPE(B, T), 0.1);
    mi_tensor *w1 = randn(MI_SHAPE(d, h)), *w2 = randn(MI_SHAPE(h, d));
    uint64_t per = (uint64_t)(2 * d * h * B);
    ck_assert_uint_eq(DELTA(mi_cms_scan(u, v, eta, w1, w2, 2, false, 1e-6, 1e-6)),
                      (2 * 5 + 3 * 4) * per);
}
END_TEST

/* cms_scan's backward: the forward's products rerun and two per product. */
START_TEST(cms_scan_backward_counts_three_forwards)
{
    int64_t B = 1, T = 4, d = 2, h = 3;
    mi_tensor *u = randn(MI_SHAPE(B, T, d)), *v = randn(MI_SHAPE(B, T, d));
    mi_tensor *eta = mi_full(MI_F32, MI_SHAPE(B, T), 0.1);
    mi_tensor *w1 = randn(MI_SHAPE(d, h)), *w2 = randn(MI_SHAPE(h, d));
    mi_tensor *g = randn(MI_SHAPE(B, T, d));
    uint64_t per = (uint64_t)(2 * d * h * B), fwd = (2 * 4 + 3 * 3) * per; /* C = 1 */
    ck_assert_uint_eq(DELTA(mi_cms_scan(u, v, eta, w1, w2, 1, true, 1e-6, 1e-6)), fwd);
    ck_assert_uint_eq(DELTA(mi_cms_scan_backward(u, v, eta, w1, w2, g, 1, true, 1e-6, 1e-6)),
                      3 * fwd);
}
END_TEST

/* mlp_scan: 7 products of 2·d·h per token forward, 30 backward (25 from a
 * recorded forward's checkpoints); with
 * momentum the state is twice as long and h the same. */
START_TEST(mlp_scan_counts_per_token)
{
    int64_t N = 2, T = 3, d = 4, h = 5;
    uint64_t per = (uint64_t)(2 * d * h * N * T);
    for (int mom = 0; mom < 2; mom++) {
        mi_mlp_scan_rule rule = {.momentum = mom, .read = MI_MLP_READ_STATE};
        mi_tensor *st = mi_mul_scalar(randn(MI_SHAPE(N, (mom ? 4 : 2) * d * h)), 0.3);
        mi_tensor *q = randn(MI_SHAPE(N, T, d)), *k = randn(MI_SHAPE(N, T, d));
        mi_tensor *v = randn(MI_SHAPE(N, T, d)), *gates = mi_full(MI_F32, MI_SHAPE(N, T, 4), 0.5);
        ck_assert_uint_eq(DELTA(mi_mlp_scan_packed(st, q, k, v, gates, &rule)), 7 * per);
        mi_tensor *g = randn(MI_SHAPE(N, T * d + st->shape[1]));
        ck_assert_uint_eq(DELTA(mi_mlp_scan_backward(st, q, k, v, gates, g, &rule)), 30 * per);
        /* recorded, the forward keeps the checkpoints: the backward writes once */
        mi_tensor *out = mi_mlp_scan_packed(mi_requires_grad(st, true), q, k, v, gates, &rule);
        mi_tensor *gst = NULL;
        mark = mi_flops();
        ck_assert_int_eq(mi_grad(&out, &g, 1, &st, 1, false, &gst), 0);
        ck_assert_uint_eq(mi_flops() - mark, 25 * per);
    }
}
END_TEST

/* The peak the benchmarks divide by: measured, so only its sanity is
 * checked (any CPU runs more than 0.1 GFLOP/s; no speed is asserted). */
START_TEST(fma_peak_is_measured)
{
    double one = mi_fma_peak(1), none = mi_fma_peak(0);
    ck_assert_msg(isfinite(one) && one > 0.1, "mi_fma_peak(1) = %g", one);
    ck_assert_msg(isfinite(none) && none > 0.1, "mi_fma_peak(0) = %g", none);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("flops");
    TCase *tc = tcase_slow("tally");
    tcase_add_checked_fixture(tc, seed_setup, teardown);
    int nm = (int)(sizeof masks / sizeof *masks);
    tcase_add_loop_test(tc, matmul_counts_2mnk, 0, nm);
    tcase_add_loop_test(tc, outer_counts_mn, 0, nm);
    tcase_add_test(tc, backward_counts_vjp_products);
    tcase_add_test(tc, refused_and_elementwise_add_nothing);
    tcase_add_test(tc, attention_counts_read_keys);
    tcase_add_test(tc, attention_vjp_counts_block_products);
    tcase_add_loop_test(tc, delta_scan_counts_per_token, 0, nm);
    tcase_add_test(tc, cms_scan_counts_reads_and_updates);
    tcase_add_test(tc, cms_scan_backward_counts_three_forwards);
    tcase_add_test(tc, mlp_scan_counts_per_token);
    tcase_add_test(tc, fma_peak_is_measured);
    suite_add_tcase(s, tc);
    return s;
}
