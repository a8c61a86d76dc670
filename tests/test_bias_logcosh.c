/* The log-cosh attentional bias (the worked example of docs/models.md "How to
 * add a component"), at its default scale a = 1 and at a = 2.5 (its own
 * parameter, logcosh_scale): its closed-form error is the derivative of its
 * loss, the layer on a matrix memory is W ← α W − η tanh(a (W k − v)) kᵀ
 * written as a plain loop, the closed-form and autodiff layers agree, and the
 * outer gradient flows through the inner loop. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { N = 2, T = 6, D = 3 };

static const double scales[] = {1, 2.5};

static mi_miras_config logcosh_config(double a)
{
    mi_miras_config c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "bias=logcosh"), 0);  /* found by name */
    char kv[64];
    snprintf(kv, sizeof kv, "logcosh_scale=%.17g", a);
    config_set(&c, kv);
    return c;
}

typedef struct seqs {
    mi_tensor *q, *k, *v, *eta, *alpha, *w0;
} seqs;

static seqs make_seqs(mi_rng *r)
{
    return (seqs){
        .q = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .k = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .v = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 2),  /* errors past the ℓ2 region */
        .eta = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.1, 0.6),
        .alpha = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.7, 0.99),
        .w0 = mi_randn(r, MI_F64, MI_SHAPE(D, D), 0, 0.5),
    };
}

static mi_miras logcosh_miras(double a, int chunk, bool closed)
{
    mi_miras_config c = logcosh_config(a);
    c.chunk = chunk;
    c.closed_form = closed;
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &c) == 0, "%s", mi_error());
    ck_assert_str_eq(m.bias->name, "logcosh");
    return m;
}

static mi_tensor *run(const mi_miras *m, const seqs *s)
{
    mi_miras_gates g = {.eta = s->eta, .alpha = s->alpha};
    mi_tensor *w0 = s->w0, *y = mi_miras_forward(m, s->q, s->k, s->v, &g, &w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    return y;
}

START_TEST(error_is_the_derivative_of_the_loss)
{
    mi_rng r;
    mi_rng_seed(&r, 1);
    const mi_bias_kind *b = mi_bias_find("logcosh");
    ck_assert_ptr_nonnull(b);
    for (int si = 0; si < 2; si++) {
        double a = scales[si];
        mi_miras_config c = logcosh_config(a);
        mi_tensor *y = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 3), true);
        mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 3), *dy;
        mi_tensor *per_token = b->loss(&c, y, v, NULL);
        for (int t = 0; t < N * T; t++) {
            double want = 0;
            for (int j = 0; j < D; j++)
                want += log(cosh(a * (mi_get(y, t * D + j) - mi_get(v, t * D + j)))) / a;
            ck_assert_close(mi_get(per_token, t), want, 1e-12 * (1 + want));
        }
        mi_tensor *loss = mi_sum(per_token, MI_ALL, false);
        ck_assert_int_eq(mi_grad(&loss, NULL, 1, &y, 1, false, &dy), 0);
        mi_tensor *e = b->error(&c, y, v, NULL);
        for (int64_t i = 0; i < e->numel; i++) {
            double x = mi_get(y, i) - mi_get(v, i);
            ck_assert_close(mi_get(e, i), tanh(a * x), 1e-15);
            ck_assert_close(mi_get(dy, i), mi_get(e, i), 1e-12);
        }
        /* large |e| (no overflow): log cosh(a e)/a = |e| − log 2 / a */
        mi_tensor *big = mi_full(MI_F64, MI_SHAPE(1, 1, 2), 800);
        ck_assert_close(mi_item(b->loss(&c, big, mi_zeros(MI_F64, MI_SHAPE(1, 1, 2)), NULL)),
                        2 * (800 - log(2.0) / a), 1e-9);
    }
}
END_TEST

/* The rule on a matrix memory as a plain loop, chunk 1:
 * W ← α W − η tanh(a (W k − v)) kᵀ, y_t = W q_t. */
START_TEST(matrix_update_is_the_rule)
{
    mi_rng r;
    mi_rng_seed(&r, 2);
    double a = scales[_i];
    seqs s = make_seqs(&r);
    mi_miras m = logcosh_miras(a, 1, true);
    mi_tensor *y = run(&m, &s);
    for (int n = 0; n < N; n++) {
        double W[D][D];
        for (int i = 0; i < D * D; i++) W[i / D][i % D] = mi_get(s.w0, i);
        for (int t = 0; t < T; t++) {
            const int64_t b = (int64_t)(n * T + t) * D;
            double eta = mi_get(s.eta, n * T + t), alpha = mi_get(s.alpha, n * T + t), e[D];
            for (int i = 0; i < D; i++) {
                e[i] = -mi_get(s.v, b + i);
                for (int j = 0; j < D; j++) e[i] += W[i][j] * mi_get(s.k, b + j);
            }
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++)
                    W[i][j] = alpha * W[i][j] - eta * tanh(a * e[i]) * mi_get(s.k, b + j);
            for (int i = 0; i < D; i++) {
                double yi = 0;
                for (int j = 0; j < D; j++) yi += W[i][j] * mi_get(s.q, b + j);
                ck_assert_close(mi_get(y, b + i), yi, 1e-12);
            }
        }
    }
}
END_TEST

START_TEST(closed_form_layer_equals_autodiff_layer)
{
    mi_rng r;
    mi_rng_seed(&r, 3);
    seqs s = make_seqs(&r);
    for (int chunk = 1; chunk <= 4; chunk += 3) {
        mi_miras a = logcosh_miras(scales[_i], chunk, true), b = logcosh_miras(scales[_i], chunk, false);
        mi_tensor *ya = run(&a, &s), *yb = run(&b, &s);
        for (int64_t i = 0; i < ya->numel; i++)
            ck_assert_close(mi_get(ya, i), mi_get(yb, i), 1e-10 * (1 + fabs(mi_get(ya, i))));
    }
}
END_TEST

typedef struct gc_ctx {
    mi_miras m;
} gc_ctx;

/* inputs: q, k, v, eta, alpha, W0 */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    gc_ctx *g = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4]};
    out[0] = mi_miras_forward(&g->m, in[0], in[1], in[2], &gates, &in[5], NULL);
    return out[0] ? 1 : -1;
}

START_TEST(gradcheck_through_the_layer)
{
    mi_rng r;
    mi_rng_seed(&r, 4);
    for (int closed = 0; closed < 2; closed++) {
        seqs s = make_seqs(&r);
        gc_ctx g = {.m = logcosh_miras(scales[_i], 2, closed)};
        mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.w0};
        for (int i = 0; i < 6; i++) mi_requires_grad(in[i], true);
        mi_gradcheck_result res = mi_gradcheck(layer_fn, &g, in, 6, NULL);
        ck_assert_msg(res.ok, "closed %d: %s", closed, res.message);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("bias_logcosh");
    TCase *tc = tcase_slow("logcosh");
    tcase_add_test(tc, error_is_the_derivative_of_the_loss);
    tcase_add_loop_test(tc, matrix_update_is_the_rule, 0, 2);          /* over scales */
    tcase_add_loop_test(tc, closed_form_layer_equals_autodiff_layer, 0, 2);
    tcase_add_loop_test(tc, gradcheck_through_the_layer, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
