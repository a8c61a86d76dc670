/* mi_scan_rows, mi_scan with its rows on the threads (two here, whatever
 * the machine has):
 * - values and f64 gradients (to carry0, every xs and, when it requires
 *   grad, a parameter the body reads) equal mi_scan's to rounding, at N
 *   rows that split evenly, unevenly, into fewer rows than threads (N = 1),
 *   recording and not, and again at a second backward pass; and so do
 *   those of segment MI_SCAN_RECORD (the record kept from the forward),
 *   which is segment 0's inside a checkpoint's backward;
 * - with a learned parameter the backward still runs on both threads, and
 *   a parameter that is a function of a leaf passes its gradient on;
 * - an f64 central-difference gradcheck through it;
 * - what it refuses: a carry without the rows, a body whose y's shape
 *   depends on the rows, a body failing on one thread's rows only. */
#include <pthread.h>

#include "harness.h"

enum { D = 3, T = 7 };

/* c_t = tanh(c_{t−1} W + x_t) ⊙ a_t,  y_t = 2 c_t ⊙ x_t: rows independent;
 * fail_rows: the body fails at token 3 where it sees that many rows. */
typedef struct rnn {
    mi_tensor *W;
    int64_t fail_rows;
    pthread_t caller;
    int seen; /* recording: 1 on the caller's thread, 2 on another */
} rnn;

static int rnn_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                    mi_tensor **y)
{
    rnn *m = ctx;
    static _Thread_local int calls;
    if (m->fail_rows && c[0]->shape[0] == m->fail_rows && ++calls % T == 3) {
        mi_error_set("rows %lld refused", (long long)m->fail_rows);
        return -1;
    }
    if (mi_grad_enabled())
        __atomic_fetch_or(&m->seen, pthread_equal(pthread_self(), m->caller) ? 1 : 2,
                          __ATOMIC_RELAXED);
    c_out[0] = mi_mul(mi_tanh(mi_add(mi_matmul(c[0], m->W), x[0])), x[1]);
    y[0] = mi_mul_scalar(mi_mul(c_out[0], x[0]), 2);
    return 0;
}

/* y_t = x_t x_tᵀ: [N, N], which mixes the rows */
static int mixing_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                       mi_tensor **y)
{
    (void)ctx;
    c_out[0] = mi_add(c[0], x[0]);
    y[0] = mi_matmul(x[0], mi_transpose(x[0], 0, 1));
    return 0;
}

static mi_tensor *uniform(mi_rng *r, int rank, const int64_t *shape, double lo, double hi)
{
    mi_tensor *t = mi_zeros(MI_F64, rank, shape);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < t->numel; i++)
        ((double *)t->data)[i] = lo + (hi - lo) * mi_rng_uniform(r);
    return t;
}

typedef struct problem {
    rnn m;
    int segment; /* scan_loss's */
    mi_tensor *c0, *xs[2], *rc, *ry; /* rc, ry: the loss's weights */
} problem;

static problem make(int64_t N, bool w_grad, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    problem p = {.m.W = uniform(&r, MI_SHAPE(D, D), -0.8, 0.8)};
    p.c0 = mi_requires_grad(uniform(&r, MI_SHAPE(N, D), -1, 1), true);
    p.xs[0] = mi_requires_grad(uniform(&r, MI_SHAPE(N, T, D), -1, 1), true);
    p.xs[1] = mi_requires_grad(uniform(&r, MI_SHAPE(N, T, D), 0.5, 1), true);
    p.rc = uniform(&r, MI_SHAPE(N, D), -1, 1);
    p.ry = uniform(&r, MI_SHAPE(N, T, D), -1, 1);
    mi_requires_grad(p.m.W, w_grad);
    return p;
}

/* loss = ⟨c_T, rc⟩ + ⟨ys, ry⟩ by mi_scan_rows (rows) or mi_scan */
static mi_tensor *loss_of(problem *p, bool rows, int segment, mi_tensor *const *c0,
                          mi_tensor *const *xs)
{
    mi_tensor *c, *ys;
    int rc = (rows ? mi_scan_rows : mi_scan)(rnn_body, &p->m, 1, c0, 2, xs, 1, segment, &c, &ys);
    if (rc != 0) return NULL;
    return mi_add(mi_sum(mi_mul(c, p->rc), MI_ALL, false), mi_sum(mi_mul(ys, p->ry), MI_ALL, false));
}

static double max_diff(const mi_tensor *a, const mi_tensor *b)
{
    double worst = 0;
    for (int64_t i = 0; i < a->numel; i++) worst = fmax(worst, fabs(mi_get(a, i) - mi_get(b, i)));
    return worst;
}

/* mi_scan at `segment` against mi_scan_rows at rows_segment */
static void check_equal(int64_t N, bool w_grad, int segment, int rows_segment)
{
    problem p = make(N, w_grad, 100 + (uint64_t)N);
    mi_tensor *w[4] = {p.c0, p.xs[0], p.xs[1], p.m.W}, *g[2][4];
    int n = w_grad ? 4 : 3;
    double loss[2];
    for (int k = 0; k < 2; k++) {
        mi_tensor *l = loss_of(&p, k == 1, k ? rows_segment : segment, &p.c0, p.xs);
        ck_assert_msg(l != NULL, "N %lld: %s", (long long)N, mi_error());
        loss[k] = mi_item(l);
        ck_assert_msg(mi_grad(&l, NULL, 1, w, n, false, g[k]) == 0, "%s", mi_error());
        if (k == 1) { /* a second pass through the same node refills its kept carries */
            mi_tensor *again[4];
            ck_assert_msg(mi_grad(&l, NULL, 1, w, n, false, again) == 0, "%s", mi_error());
            for (int i = 0; i < n; i++)
                ck_assert_msg(max_diff(again[i], g[1][i]) <= 1e-14,
                              "N %lld: second pass, gradient %d differs", (long long)N, i);
        }
    }
    ck_assert_msg(fabs(loss[0] - loss[1]) <= 1e-13 * (1 + fabs(loss[0])),
                  "N %lld: loss %.17g by rows, %.17g by mi_scan", (long long)N, loss[1], loss[0]);
    for (int i = 0; i < n; i++)
        ck_assert_msg(max_diff(g[0][i], g[1][i]) <= 1e-13,
                      "N %lld, W %s, segments %d, %d: gradient %d differs by %g", (long long)N,
                      w_grad ? "learned" : "fixed", segment, rows_segment, i,
                      max_diff(g[0][i], g[1][i]));
}

START_TEST(rows_equal_scan)
{
    mi_set_threads(2);
    const int64_t rows[] = {1, 2, 5, 8};
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
        check_equal(rows[k], false, 0, 0);
        check_equal(rows[k], true, 0, 0);
        check_equal(rows[k], false, 1, 1);
        check_equal(rows[k], true, 3, 3);
        /* the record kept from the forward, on the threads and not */
        check_equal(rows[k], false, 0, MI_SCAN_RECORD);
        check_equal(rows[k], true, 0, MI_SCAN_RECORD);
        check_equal(rows[k], true, MI_SCAN_RECORD, 2);
    }
}
END_TEST

/* the backward of a body with a learned parameter runs on both threads */
START_TEST(parameters_on_the_threads)
{
    mi_set_threads(2);
    problem p = make(6, true, 5);
    p.m.caller = pthread_self();
    mi_tensor *w[4] = {p.c0, p.xs[0], p.xs[1], p.m.W}, *g[4];
    mi_tensor *l = loss_of(&p, true, 0, &p.c0, p.xs);
    ck_assert_msg(l && mi_grad(&l, NULL, 1, w, 4, false, g) == 0, "%s", mi_error());
    ck_assert_msg(p.m.seen == 3, "the recorded tokens ran on %s", p.m.seen == 1 ? "the caller's thread alone" : "one thread");
    /* the record kept from the forward is made on both threads */
    p.m.seen = 0;
    ck_assert_msg(loss_of(&p, true, MI_SCAN_RECORD, &p.c0, p.xs), "%s", mi_error());
    ck_assert_msg(p.m.seen == 3, "the record was made on %s",
                  p.m.seen == 1 ? "the caller's thread alone" : "one thread");
}
END_TEST

/* a parameter that is a function of a leaf: the leaf's gradient goes on
 * through the function's node, as with mi_scan */
START_TEST(parameter_with_history)
{
    mi_set_threads(2);
    problem p = make(5, false, 9);
    mi_tensor *W0 = mi_requires_grad(mi_detach(p.m.W), true), *g[3];
    for (int k = 0; k < 3; k++) {   /* mi_scan; rows; rows keeping the record */
        p.m.W = mi_mul_scalar(mi_transpose(W0, 0, 1), 0.7);
        mi_tensor *l = loss_of(&p, k >= 1, k == 2 ? MI_SCAN_RECORD : 0, &p.c0, p.xs);
        ck_assert_msg(l && mi_grad(&l, NULL, 1, &W0, 1, false, &g[k]) == 0, "%s", mi_error());
    }
    for (int k = 1; k < 3; k++)
        ck_assert_msg(max_diff(g[0], g[k]) <= 1e-13, "dL/dW0 differs by %g", max_diff(g[0], g[k]));
}
END_TEST

START_TEST(no_recording_equals_scan)
{
    mi_set_threads(2);
    problem p = make(5, false, 7);
    bool was = mi_set_grad_enabled(false);
    mi_tensor *c[2], *ys[2];
    for (int k = 0; k < 2; k++)
        ck_assert_msg((k ? mi_scan_rows : mi_scan)(rnn_body, &p.m, 1, &p.c0, 2, p.xs, 1, 0, &c[k],
                                                   &ys[k]) == 0, "%s", mi_error());
    mi_set_grad_enabled(was);
    ck_assert(mi_same_shape(ys[0], ys[1]) && mi_same_shape(c[0], c[1]));
    ck_assert(max_diff(c[0], c[1]) <= 1e-14 && max_diff(ys[0], ys[1]) <= 1e-14);
}
END_TEST

static int scan_loss(mi_tensor *const *in, int n_in, mi_tensor **out, void *ctx)
{
    (void)n_in;
    problem *p = ctx;
    p->m.W = in[3];
    return (out[0] = loss_of(p, true, p->segment, &in[0], &in[1])) ? 1 : -1;
}

START_TEST(gradcheck_rows)
{
    mi_set_threads(2);
    for (int w_grad = 0; w_grad < 4; w_grad++) {
        problem p = make(5, w_grad & 1, 11);
        p.segment = w_grad < 2 ? 2 : MI_SCAN_RECORD;
        mi_tensor *in[4] = {p.c0, p.xs[0], p.xs[1], p.m.W};
        mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
        o.atol = 1e-7;
        o.rtol = 1e-6;
        mi_gradcheck_result r = mi_gradcheck(scan_loss, &p, in, 4, &o);
        ck_assert_msg(r.ok, "W %s, segment %d: %s", w_grad & 1 ? "learned" : "fixed", p.segment,
                      r.message);
    }
}
END_TEST

/* mi_checkpoint's function holding a scan that keeps its record: the
 * checkpoint's backward runs the function again inside the outer pass, where
 * the scan's node lives for a nested pass only; there the scan runs as at
 * segment 0 (the same gradients, and no record left in the step's scope: it
 * holds what segment 0 leaves, byte for byte). */
typedef struct ck_ctx {
    problem *p;
    int segment;
} ck_ctx;

static mi_tensor *checkpointed(void *ctx, mi_tensor *const *in, int n_in)
{
    (void)n_in;
    ck_ctx *k = ctx;
    return loss_of(k->p, true, k->segment, &in[0], &in[1]);
}

START_TEST(record_inside_checkpoint)
{
    mi_set_threads(2);
    problem p = make(6, true, 21);
    mi_tensor *w[4] = {p.c0, p.xs[0], p.xs[1], p.m.W}, *g[2][4];
    size_t used[2];
    for (int k = 0; k < 2; k++) {
        mi_scope *s = mi_scope_new("step");
        mi_scope_enter(s);
        ck_ctx ctx = {&p, k ? MI_SCAN_RECORD : 0};
        mi_tensor *in[3] = {p.c0, p.xs[0], p.xs[1]};
        mi_tensor *l = mi_checkpoint(checkpointed, &ctx, in, 3);
        ck_assert_msg(l && mi_grad(&l, NULL, 1, w, 4, false, g[k]) == 0, "%s", mi_error());
        mi_scope_leave();
        used[k] = mi_scope_stats_get(s).bytes_used;
        for (int i = 0; i < 4; i++) g[k][i] = mi_detach(g[k][i]); /* into the test's scope */
        mi_scope_free(s);
    }
    for (int i = 0; i < 4; i++)
        ck_assert_msg(max_diff(g[0][i], g[1][i]) <= 1e-13, "gradient %d differs by %g", i,
                      max_diff(g[0][i], g[1][i]));
    ck_assert_msg(used[1] == used[0], "the step's scope holds %zu bytes, %zu at segment 0",
                  used[1], used[0]);
}
END_TEST

START_TEST(refusals)
{
    mi_set_threads(2);
    problem p = make(5, false, 3);
    mi_tensor *c, *ys;
    /* a carry without the rows */
    mi_tensor *flat = mi_zeros(MI_F64, MI_SHAPE(D));
    ck_assert_int_eq(mi_scan_rows(rnn_body, &p.m, 1, &flat, 2, p.xs, 1, 0, &c, &ys), -1);
    ck_assert_msg(strstr(mi_error(), "mi_scan_rows: carry0[0] is [3]"), "%s", mi_error());
    mi_error_clear();
    /* a y whose shape depends on the rows: [2, 2] and [3, 3] */
    ck_assert_int_eq(mi_scan_rows(mixing_body, NULL, 1, &p.c0, 1, p.xs, 1, 0, &c, &ys), -1);
    ck_assert_msg(strstr(mi_error(), "y[0]") && strstr(mi_error(), "rows"), "%s", mi_error());
    mi_error_clear();
    /* a failure on the second thread's rows (3 of 5) reaches the caller */
    p.m.fail_rows = 3;
    ck_assert_int_eq(mi_scan_rows(rnn_body, &p.m, 1, &p.c0, 2, p.xs, 1, 0, &c, &ys), -1);
    ck_assert_msg(strstr(mi_error(), "mi_scan: the body failed at token") &&
                  strstr(mi_error(), "rows 3 refused"), "%s", mi_error());
    mi_error_clear();
    /* and while it records, keeping the record */
    ck_assert_int_eq(mi_scan_rows(rnn_body, &p.m, 1, &p.c0, 2, p.xs, 1, MI_SCAN_RECORD, &c, &ys),
                     -1);
    ck_assert_msg(strstr(mi_error(), "rows 3 refused"), "%s", mi_error());
    mi_error_clear();
    /* and the same call succeeds once the body does */
    p.m.fail_rows = 0;
    ck_assert_msg(mi_scan_rows(rnn_body, &p.m, 1, &p.c0, 2, p.xs, 1, 0, &c, &ys) == 0, "%s",
                  mi_error());
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("scan_rows");
    TCase *tc = tcase_slow("scan_rows");
    tcase_add_test(tc, rows_equal_scan);
    tcase_add_test(tc, parameters_on_the_threads);
    tcase_add_test(tc, parameter_with_history);
    tcase_add_test(tc, no_recording_equals_scan);
    tcase_add_test(tc, gradcheck_rows);
    tcase_add_test(tc, record_inside_checkpoint);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return s;
}
