/* Activation checkpointing, mi_checkpoint:
 * - the gradients equal the plain function's (f64, to rounding) with respect
 *   to its inputs, the leaves it uses (also when a leaf is used outside too,
 *   and through a checkpoint inside another), by mi_grad and mi_backward;
 * - f64 gradcheck of a loss through a checkpoint;
 * - the forward keeps only the output (the function's intermediate tensors
 *   are given back), and the backward of a chain of checkpoints holds one
 *   recorded run at a time, so the step's scope grows far less than
 *   without;
 * - the language model with checkpoint_blocks gives the same loss and
 *   parameter gradients for attention, gated DeltaNet, Titans and HOPE
 *   (test_memory.c: its training step reaches a steady size);
 * - misuse gives messages: a recorded tensor that is not an input, too many
 *   inputs, no function, a failing function, second derivatives. */
#include "harness.h"

enum { R = 6, C = 5 };

typedef struct two_layer {
    mi_tensor *w1, *w2; /* leaves: [C, C] */
    int inner;          /* 1: the tanh layer itself through a checkpoint */
} two_layer;

static mi_tensor *tanh_layer(void *ctx, mi_tensor *const *in, int n)
{
    (void)n;
    const two_layer *p = ctx;
    return mi_tanh(mi_matmul(in[0], p->w1));
}

/* f(x) = x + tanh(x W1) W2 ⊙ s, s a second input */
static mi_tensor *two_layer_fn(void *ctx, mi_tensor *const *in, int n)
{
    (void)n;
    two_layer *p = ctx;
    mi_tensor *h = p->inner ? mi_checkpoint(tanh_layer, p, in, 1) : tanh_layer(p, in, 1);
    return mi_add(in[0], mi_mul(mi_matmul(h, p->w2), in[1]));
}

static mi_tensor *leaf(mi_rng *r, int64_t rows, int64_t cols, double sd)
{
    return mi_requires_grad(mi_randn(r, MI_F64, MI_SHAPE(rows, cols), 0, sd), true);
}

typedef struct problem {
    two_layer p;
    mi_tensor *x0, *s, *r;
    int mode; /* 0 plain, 1 checkpoint, 2 checkpoint with a checkpoint inside,
                 3 checkpoint recorded after Σ W1² (so its backward runs last) */
} problem;

/* loss = ⟨f(2 x0), r⟩ + Σ W1² (W1 used outside the checkpoint too: the
 * outer pass's slot for W1 is filled before or after the checkpoint's
 * nested pass, by the recording order) */
static int loss_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)in, (void)n;
    problem *q = ctx;
    q->p.inner = q->mode == 2;
    mi_tensor *reg = q->mode == 3 ? mi_sum(mi_square(q->p.w1), MI_ALL, false) : NULL;
    mi_tensor *x = mi_mul_scalar(q->x0, 2); /* a recorded input, not a leaf */
    mi_tensor *args[2] = {x, q->s};
    mi_tensor *y = q->mode ? mi_checkpoint(two_layer_fn, &q->p, args, 2)
                           : two_layer_fn(&q->p, args, 2);
    if (!reg) reg = mi_sum(mi_square(q->p.w1), MI_ALL, false);
    out[0] = mi_add(mi_sum(mi_mul(y, q->r), MI_ALL, false), reg);
    return out[0] ? 1 : -1;
}

static problem make_problem(uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    problem q = {0};
    q.p.w1 = leaf(&r, C, C, 0.5);
    q.p.w2 = leaf(&r, C, C, 0.5);
    q.x0 = leaf(&r, R, C, 1);
    q.s = leaf(&r, R, C, 1);
    q.r = mi_randn(&r, MI_F64, MI_SHAPE(R, C), 0, 1);
    return q;
}

START_TEST(gradients_equal_the_plain_function)
{
    problem q = make_problem(1);
    mi_tensor *wrt[4] = {q.x0, q.s, q.p.w1, q.p.w2}, *want[4], *got[4], *loss;
    ck_assert_int_eq(loss_fn(NULL, 0, &loss, &q), 1);
    double plain = mi_item(loss);
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, wrt, 4, false, want), 0);
    for (int mode = 1; mode <= 3; mode++) {
        q.mode = mode;
        ck_assert_msg(loss_fn(NULL, 0, &loss, &q) == 1, "%s", mi_error());
        ck_assert_double_eq_tol(mi_item(loss), plain, 1e-14);
        ck_assert_msg(mi_grad(&loss, NULL, 1, wrt, 4, false, got) == 0, "%s", mi_error());
        for (int i = 0; i < 4; i++)
            for (int64_t j = 0; j < want[i]->numel; j++)
                ck_assert_msg(fabs(mi_get(got[i], j) - mi_get(want[i], j)) <= 1e-13,
                              "mode %d input %d entry %lld: %.17g, want %.17g", mode, i,
                              (long long)j, mi_get(got[i], j), mi_get(want[i], j));
    }
    /* mi_backward: the leaves' .grad */
    for (int mode = 1; mode <= 3; mode += 2) {
        q.mode = mode;
        mi_zero_grad(wrt, 4);
        ck_assert_int_eq(loss_fn(NULL, 0, &loss, &q), 1);
        ck_assert_msg(mi_backward(loss) == 0, "%s", mi_error());
        for (int i = 0; i < 4; i++)
            for (int64_t j = 0; j < want[i]->numel; j++)
                ck_assert_double_eq_tol(mi_get(wrt[i]->grad, j), mi_get(want[i], j), 1e-13);
    }
}
END_TEST

START_TEST(gradcheck_through_a_checkpoint)
{
    for (int mode = 1; mode <= 3; mode++) {
        problem q = make_problem(2);
        q.mode = mode;
        mi_tensor *in[4] = {q.x0, q.s, q.p.w1, q.p.w2};
        mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
        mi_gradcheck_result res = mi_gradcheck(loss_fn, &q, in, 4, &o);
        ck_assert_msg(res.ok, "mode %d: %s", mode, res.message);
    }
}
END_TEST

/* ---------------------------------------------------------------- memory */

enum { BIG = 128, DEPTH = 6 };

/* x ↦ tanh(tanh(… tanh(x W) …) W), DEPTH products of [BIG, BIG] */
static mi_tensor *deep_fn(void *ctx, mi_tensor *const *in, int n)
{
    (void)n;
    mi_tensor *w = ctx, *x = in[0];
    for (int d = 0; d < DEPTH; d++) x = mi_tanh(mi_matmul(x, w));
    return x;
}

/* The scope's bytes after the forward and after the backward of a chain
 * of four deep_fn blocks, with or without checkpoints. */
static void chain_bytes(bool checkpoint, size_t *forward, size_t *total)
{
    mi_rng r;
    mi_rng_seed(&r, 3);
    mi_tensor *w = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(BIG, BIG), 0, 0.05), true);
    mi_tensor *x0 = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(BIG, BIG), 0, 1), true);
    mi_scope *step = mi_scope_new("step");
    mi_scope_enter(step);
    mi_tensor *x = mi_mul_scalar(x0, 1);
    for (int b = 0; b < 4; b++) x = checkpoint ? mi_checkpoint(deep_fn, w, &x, 1) : deep_fn(w, &x, 1);
    mi_tensor *loss = mi_sum(x, MI_ALL, false);
    ck_assert_msg(loss != NULL, "%s", mi_error());
    *forward = mi_scope_stats_get(step).bytes_used;
    ck_assert_msg(mi_backward(loss) == 0, "%s", mi_error());
    *total = mi_scope_stats_get(step).bytes_used;
    mi_scope_leave();
    mi_scope_free(step);
}

START_TEST(checkpoints_keep_less)
{
    size_t plain_fwd, plain_total, ck_fwd, ck_total;
    chain_bytes(false, &plain_fwd, &plain_total);
    chain_bytes(true, &ck_fwd, &ck_total);
    size_t one = (size_t)BIG * BIG * sizeof(double);
    printf("checkpoint: forward %zu -> %zu bytes, step %zu -> %zu (one [%d,%d] tensor: %zu)\n",
           plain_fwd, ck_fwd, plain_total, ck_total, BIG, BIG, one);
    /* plain: 2·DEPTH tensors a block kept; checkpointed: each block's output
     * and the first block's run (reused by the next ones) */
    ck_assert_uint_ge(plain_fwd, 4 * 2 * DEPTH * one);
    ck_assert_uint_le(ck_fwd, (2 * DEPTH + 8) * one);
    ck_assert_uint_lt(2 * ck_total, plain_total);
}
END_TEST

/* ---------------------------------------------------------------- the LM */

static mi_lm_config tiny_lm(const char *mixer)
{
    mi_lm_config c = mi_lm_config_default();
    c.vocab = 11, c.d_model = 8, c.layers = 3, c.heads = 2, c.mlp_hidden = 12;
    strcpy(c.mixer, mixer);
    if (strcmp(mixer, "attention"))
        ck_assert_msg(mi_lm_config_set(&c, "mixer.chunk=2") == 0, "%s", mi_error());
    return c;
}

static void lm_batch(uint64_t seed, int64_t B, int64_t T, mi_tensor **in, mi_tensor **tg)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    *in = mi_zeros(MI_I64, MI_SHAPE(B, T));
    *tg = mi_zeros(MI_I64, MI_SHAPE(B, T));
    for (int64_t i = 0; i < B * T; i++) {
        ((int64_t *)(*in)->data)[i] = (int64_t)mi_rng_below(&r, 11);
        ((int64_t *)(*tg)->data)[i] = (int64_t)mi_rng_below(&r, 11);
    }
}

START_TEST(lm_blocks_checkpointed_give_the_same_gradients)
{
    const char *specs[] = {"attention", "gated-deltanet", "titans", "hope"};
    for (int s = 0; s < 4; s++) {
        mi_lm_config c = tiny_lm(specs[s]);
        mi_lm lm;
        ck_assert_msg(mi_lm_init(&lm, &c, MI_F64, 5, test_scope) == 0, "%s", mi_error());
        mi_tensor *in, *tg;
        lm_batch(7, 2, 6, &in, &tg);
        int n;
        const mi_named_tensor *p = mi_lm_params(&lm, &n);
        mi_tensor **wrt = mi_scope_alloc(test_scope, sizeof *wrt * (size_t)n * 3);
        mi_tensor **want = wrt + n, **got = wrt + 2 * n;
        for (int i = 0; i < n; i++) wrt[i] = p[i].tensor;
        mi_tensor *loss = mi_lm_loss(&lm, in, tg);
        ck_assert_msg(loss && mi_grad(&loss, NULL, 1, wrt, n, false, want) == 0, "%s",
                      mi_error());
        double plain = mi_item(loss);
        lm.checkpoint_blocks = true;
        loss = mi_lm_loss(&lm, in, tg);
        ck_assert_msg(loss && mi_grad(&loss, NULL, 1, wrt, n, false, got) == 0, "%s: %s",
                      specs[s], mi_error());
        ck_assert_double_eq_tol(mi_item(loss), plain, 1e-13);
        double worst = 0;
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < want[i]->numel; j++) {
                double d = fabs(mi_get(got[i], j) - mi_get(want[i], j));
                ck_assert_msg(d <= 1e-12 * (1 + fabs(mi_get(want[i], j))), "%s %s[%lld]: %.17g, "
                              "want %.17g", specs[s], p[i].name, (long long)j,
                              mi_get(got[i], j), mi_get(want[i], j));
                if (d > worst) worst = d;
            }
        printf("checkpoint lm %-15s: %d parameters, max difference %.2e\n", specs[s], n, worst);
    }
}
END_TEST

/* ---------------------------------------------------------------- misuse */

static mi_tensor *outside;

static mi_tensor *uses_outside(void *ctx, mi_tensor *const *in, int n)
{
    (void)ctx, (void)n;
    return mi_add(in[0], outside);
}

static mi_tensor *fails(void *ctx, mi_tensor *const *in, int n)
{
    (void)ctx, (void)in, (void)n;
    mi_error_set("the function failed");
    return NULL;
}

START_TEST(misuse_gives_messages)
{
    problem q = make_problem(4);
    mi_tensor *x = mi_mul_scalar(q.x0, 2);
    outside = mi_mul_scalar(q.s, 3); /* recorded, not an input */
    ck_assert_ptr_null(mi_checkpoint(uses_outside, NULL, &x, 1));
    ck_assert_error_has("neither an input nor a leaf");
    mi_error_clear();
    ck_assert_ptr_null(mi_checkpoint(NULL, NULL, &x, 1));
    ck_assert_error_has("needs a function");
    mi_error_clear();
    mi_tensor *many[MI_MAX_INPUTS] = {0};
    for (int i = 0; i < MI_MAX_INPUTS; i++) many[i] = x;
    ck_assert_ptr_null(mi_checkpoint(deep_fn, q.p.w1, many, MI_MAX_INPUTS));
    ck_assert_error_has("inputs");
    mi_error_clear();
    ck_assert_ptr_null(mi_checkpoint(fails, NULL, &x, 1));
    ck_assert_error_has("the function failed");
    mi_error_clear();
    mi_tensor *args[2] = {x, q.s};
    assert_no_second_derivative(mi_checkpoint(two_layer_fn, &q.p, args, 2), q.x0);
    /* recording off: the function itself */
    bool was = mi_set_grad_enabled(false);
    mi_tensor *y = mi_checkpoint(two_layer_fn, &q.p, args, 2);
    mi_set_grad_enabled(was);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_null(y->node);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_slow("checkpoint");
    tcase_add_test(tc, gradients_equal_the_plain_function);
    tcase_add_test(tc, gradcheck_through_a_checkpoint);
    tcase_add_test(tc, checkpoints_keep_less);
    tcase_add_test(tc, lm_blocks_checkpointed_give_the_same_gradients);
    tcase_add_test(tc, misuse_gives_messages);
    suite_add_tcase(s, tc);
    return s;
}
