/* Thread determinism: every backend kernel gives bitwise the same result with
 * one OpenMP thread as with two, on inputs large enough for its parallel
 * paths (the op's examples grown to ~2^19 elements, and the benchmark
 * shapes); so does a whole MLP forward + backward. Results must not depend
 * on the machine's core count. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op_inputs.h"

/* Kernels known to give thread-count-dependent results (e.g. a reduction
 * split across threads). Each entry needs a reason; none is known. An entry
 * here still runs, but a difference is printed instead of failing. */
static const struct {
    const char *op;
    mi_backend backend;
    const char *why;
} nondeterministic[] = {
    {NULL, MI_BACKEND_REF, NULL}, /* sentinel */
};

static const char *allowed_nondeterministic(const mi_op *op, mi_backend b)
{
    for (int i = 0; nondeterministic[i].op; i++)
        if (strcmp(nondeterministic[i].op, op->name) == 0 && nondeterministic[i].backend == b)
            return nondeterministic[i].why;
    return NULL;
}

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

static void compare_case(const mi_op *op, const op_case *c, tally *t)
{
    t->cases++;
    for (int dt = MI_F32; dt <= MI_F64; dt++) {
        op_case cd = op_case_to(c, (mi_dtype)dt);
        for (int b = 1; b <= MI_BACKEND_COUNT; b++) {
            if (b < MI_BACKEND_COUNT && !op->kernel[b][dt]) continue;
            mi_tensor *y1 = run_at(op, &cd, (mi_dtype)dt, b, 1);
            mi_tensor *y2 = run_at(op, &cd, (mi_dtype)dt, b, 2);
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
            if (same_bits(y1, y2)) continue;
            const char *who = b < MI_BACKEND_COUNT ? mi_backend_name((mi_backend)b) : "dispatch";
            const char *why = b < MI_BACKEND_COUNT ? allowed_nondeterministic(op, b) : NULL;
            if (why) {
                printf("threads: %s %s differs at 1 and 2 threads (allowed: %s)\n", op->name,
                       who, why);
                continue;
            }
            t->failed++;
            size_t len = strlen(t->text);
            snprintf(t->text + len, sizeof t->text - len, "%s %s %s %s\n", op->name, who,
                     mi_dtype_name((mi_dtype)dt), c->what);
        }
    }
}

START_TEST(kernels_are_deterministic_across_threads)
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

START_TEST(mlp_gradients_are_deterministic_across_threads)
{
    int threads_was = mi_threads();
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
    static const char *const names[5] = {"loss", "dx", "dW1", "db1", "dW2"};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(same_bits(g1[i], g2[i]), "%s differs at 1 and 2 threads", names[i]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_slow("kernels");
    tcase_add_loop_test(tc, kernels_are_deterministic_across_threads, 0, mi_op_count());
    suite_add_tcase(s, tc);
    tc = tcase_slow("mlp");
    tcase_add_test(tc, mlp_gradients_are_deterministic_across_threads);
    suite_add_tcase(s, tc);
    return s;
}
