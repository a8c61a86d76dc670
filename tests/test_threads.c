/* Thread counts: a backend that promises the same bits at any thread count
 * (mi_backend_same_bits_across_threads: REF, BLAS, OWN) gives bitwise the
 * same result with one OpenMP thread as with two; one that does not (oneDNN,
 * whose AVX2 kernels split sums by thread count) agrees to the parity suite's
 * rounding bound. Inputs are large enough for the parallel paths (the op's
 * examples grown to ~2^19 elements, and the benchmark shapes); so is a whole
 * MLP forward + backward, bitwise with oneDNN left out. Results must not
 * depend on the machine's core count or instruction set. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op_inputs.h"

static bool same_bits(const mi_tensor *x, const mi_tensor *y)
{
    return x && y && x->dtype == y->dtype && x->numel == y->numel &&
           memcmp(x->data, y->data, (size_t)x->numel * mi_dtype_size(x->dtype)) == 0;
}

/* Kernel b of op (b = MI_BACKEND_COUNT: through mi_op_call, selection
 * included) on c at `threads` threads. */
static mi_tensor *run_at(const mi_op *op, const op_case *c, mi_dtype dt, int b, int threads)
{
    mi_set_threads(threads);
    if (b == MI_BACKEND_COUNT) return mi_op_call(op, c->in, c->n, &c->attrs);
    mi_dtype odt;
    int rank;
    int64_t shape[MI_MAX_RANK];
    if (out_shape(op, c->in, c->n, &c->attrs, &odt, &rank, shape) != 0 || odt != dt) return NULL;
    mi_tensor *y = mi_tensor_new(dt, rank, shape);
    if (y && y->numel) op->kernel[b][dt](y, c->in, &c->attrs);
    return y;
}

typedef struct tally {
    int cases, compared, failed;
    char text[1024];
} tally;

/* Whether y2 (2 threads) may stand for y1 (1 thread): the same bits where
 * both runs' backends promise them, else within the rounding bound. */
static bool agree(const mi_op *op, const mi_tensor *y1, const mi_tensor *y2, bool bitwise,
                  double *err)
{
    *err = 0;
    if (same_bits(y1, y2)) return true;
    if (bitwise || y1->numel != y2->numel) return false;
    *err = nmse(y2, y1);
    return *err <= nmse_bound(op, y1->dtype);
}

static void compare_case(const mi_op *op, const op_case *c, tally *t)
{
    t->cases++;
    for (int dt = MI_F32; dt <= MI_F64; dt++) {
        op_case cd = op_case_to(c, (mi_dtype)dt);
        for (int b = 1; b <= MI_BACKEND_COUNT; b++) {
            if (b < MI_BACKEND_COUNT && !op->kernel[b][dt]) continue;
            mi_tensor *y1 = run_at(op, &cd, (mi_dtype)dt, b, 1);
            mi_backend b1 = b < MI_BACKEND_COUNT ? (mi_backend)b : mi_backend_last();
            mi_tensor *y2 = run_at(op, &cd, (mi_dtype)dt, b, 2);
            mi_backend b2 = b < MI_BACKEND_COUNT ? (mi_backend)b : mi_backend_last();
            if (!y1 || !y2 || y1->dtype != (mi_dtype)dt) {
                if (*mi_error()) { /* a call failed, not a dtype the op does not produce */
                    t->failed++;
                    size_t len = strlen(t->text);
                    snprintf(t->text + len, sizeof t->text - len, "%s %s %s %s: %s\n", op->name,
                             b < MI_BACKEND_COUNT ? mi_backend_name((mi_backend)b) : "dispatch",
                             mi_dtype_name((mi_dtype)dt), c->what, mi_error());
                }
                mi_error_clear();
                continue;
            }
            t->compared++;
            bool bitwise = mi_backend_same_bits_across_threads(b1) &&
                           mi_backend_same_bits_across_threads(b2);
            double err;
            if (agree(op, y1, y2, bitwise, &err)) continue;
            const char *who = b < MI_BACKEND_COUNT ? mi_backend_name((mi_backend)b) : "dispatch";
            t->failed++;
            size_t len = strlen(t->text);
            snprintf(t->text + len, sizeof t->text - len, "%s %s (ran %s, %s) %s %s: %s %.3g\n",
                     op->name, who, mi_backend_name(b1), mi_backend_name(b2),
                     mi_dtype_name((mi_dtype)dt), c->what,
                     bitwise ? "bits differ, nMSE" : "beyond the rounding bound, nMSE",
                     bitwise ? nmse(y2, y1) : err);
        }
    }
}

START_TEST(kernels_keep_their_promise_across_threads)
{
    const mi_op *op = mi_op_at(_i);
    if (!op || (op->flags & MI_OP_VIEW) || !op_has_backend_kernel(op, -1)) return;
    int threads_was = mi_threads();
    bool grad_was = mi_set_grad_enabled(false);
    tally t = {0};
    mi_rng r;
    mi_rng_seed(&r, 500u + (unsigned)_i);
    op_case ex, big;
    for (int v = 0; op_example(op, &r, v, &ex) > 0; v++)
        compare_case(op, op_example_grown(op, &r, &ex, 1, &big) ? &big : &ex, &t);
    for (int k = 0; k < N_BENCH_SHAPES; k++)
        if (op_bench_case(op, &r, k, &ex)) compare_case(op, &ex, &t);
    mi_set_grad_enabled(grad_was);
    mi_set_threads(threads_was);
    ck_assert_msg(t.failed == 0, "%d of %d results differ at 1 and 2 threads:\n%s", t.failed,
                  t.compared, t.text);
    /* every case compares at least the dispatch in one dtype */
    ck_assert_msg(t.cases > 0 && t.compared >= t.cases, "%s: %d comparisons for %d cases",
                  op->name, t.compared, t.cases);
}
END_TEST

/* ---------------------------------------------------------------- end to end
 * loss = cross_entropy(z, t) + Σ softmax(z) ⊙ tanh(z),
 * z = gelu(layer_norm(x) W1 + b1) W2: the gradients w.r.t. x, W1, b1, W2
 * (and the loss) at 1 and at 2 threads. */
enum { MLP_N = 256, MLP_D = 128, MLP_H = 384, MLP_C = 64 };

static int mlp_grads(mi_tensor *const *p, mi_tensor *targets, int threads, mi_tensor **out)
{
    mi_set_threads(threads);
    mi_tensor *h = mi_add(mi_matmul(mi_layer_norm(p[0], 1e-5), p[1]), p[2]);
    mi_tensor *z = mi_matmul(mi_gelu(h), p[3]);
    mi_tensor *extra = mi_sum(mi_mul(mi_softmax(z, -1), mi_tanh(z)), MI_ALL, false);
    out[0] = mi_add(mi_cross_entropy(z, targets, -1), extra);
    if (!out[0]) return -1;
    return mi_grad(out, NULL, 1, p, 4, false, out + 1);
}

/* The gradients at 1 and 2 threads with the backends in `mask`: bitwise
 * the same without oneDNN, within the rounding bound of a transcendental op
 * (the loss holds softmax, tanh, gelu and layer norm) with it. */
static void check_mlp_across_threads(unsigned mask, bool bitwise)
{
    int threads_was = mi_threads();
    unsigned allowed_was = mi_backends_allowed();
    mi_backends_allow(mask);
    mi_rng r;
    mi_rng_seed(&r, 42);
    mi_tensor *p[4] = {
        mi_randn(&r, MI_F32, MI_SHAPE(MLP_N, MLP_D), 0.0, 1.0),
        mi_randn(&r, MI_F32, MI_SHAPE(MLP_D, MLP_H), 0.0, 0.1),
        mi_randn(&r, MI_F32, MI_SHAPE(MLP_H), 0.0, 0.1),
        mi_randn(&r, MI_F32, MI_SHAPE(MLP_H, MLP_C), 0.0, 0.1),
    };
    for (int i = 0; i < 4; i++) ck_assert_ptr_nonnull(mi_requires_grad(p[i], true));
    mi_tensor *targets = mi_tensor_new(MI_I64, MI_SHAPE(MLP_N));
    ck_assert_ptr_nonnull(targets);
    for (int64_t i = 0; i < MLP_N; i++) mi_set(targets, i, (double)mi_rng_below(&r, MLP_C));
    mi_tensor *g1[5], *g2[5];
    ck_assert_msg(mlp_grads(p, targets, 1, g1) == 0, "%s", mi_error());
    ck_assert_msg(mlp_grads(p, targets, 2, g2) == 0, "%s", mi_error());
    mi_set_threads(threads_was);
    mi_backends_allow(allowed_was);
    static const char *const names[5] = {"loss", "dx", "dW1", "db1", "dW2"};
    for (int i = 0; i < 5; i++) {
        if (bitwise) {
            ck_assert_msg(same_bits(g1[i], g2[i]), "%s differs at 1 and 2 threads", names[i]);
            continue;
        }
        double e = nmse(g2[i], g1[i]);
        ck_assert_msg(e <= NMSE_TRANSCENDENTAL_F32, "%s at 1 and 2 threads: nMSE %.3g > %g",
                      names[i], e, NMSE_TRANSCENDENTAL_F32);
    }
}

START_TEST(mlp_gradients_are_bitwise_across_threads_without_dnnl)
{
    check_mlp_across_threads(MI_BACKEND_ALL & ~(1u << MI_BACKEND_DNNL), true);
}
END_TEST

START_TEST(mlp_gradients_agree_across_threads_with_every_backend)
{
    check_mlp_across_threads(MI_BACKEND_ALL, false);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_slow("kernels");
    tcase_add_loop_test(tc, kernels_keep_their_promise_across_threads, 0, mi_op_count());
    suite_add_tcase(s, tc);
    tc = tcase_slow("mlp");
    tcase_add_test(tc, mlp_gradients_are_bitwise_across_threads_without_dnnl);
    tcase_add_test(tc, mlp_gradients_agree_across_threads_with_every_backend);
    suite_add_tcase(s, tc);
    return s;
}
