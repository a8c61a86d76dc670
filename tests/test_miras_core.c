/* The MIRAS recurrence with the basic components: the exact per-token rule,
 * the chunked rule against a naive loop implementing it, autodiff inner
 * gradients against the closed forms, and gradients through the inner loop. */
#include <string.h>

#include "harness.h"

enum { N = 2, T = 7, D = 3 };

typedef struct seqs {
    mi_tensor *q, *k, *v, *eta, *alpha, *mu;
} seqs;

static seqs make_seqs(mi_rng *r, bool grad)
{
    seqs s = {
        .q = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .k = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .v = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 1),
        .eta = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.1, 0.6),
        .alpha = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.7, 0.99),
        .mu = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.3, 0.9),
    };
    if (grad) {
        mi_tensor **all[] = {&s.q, &s.k, &s.v, &s.eta, &s.alpha, &s.mu};
        for (int i = 0; i < 6; i++) mi_requires_grad(*all[i], true);
    }
    return s;
}

static double at(const mi_tensor *t, int64_t i) { return mi_get(t, i); }

/* The reference: matrix memory, ℓ2 bias, ℓ2 retention, GD or momentum, with
 * the chunk rule (gradients at the state the previous chunk left: MIRAS,
 * "Parallelizable Training", ∇ℓ(M_{t'}), t' = t − mod(t, b)), written
 * as plain loops. y [N, T, D]. At chunk 1 it is
 *   GD:       W_t = α_t W_{t−1} − η_t (W_{t−1} k_t − v_t) k_tᵀ
 *             (MIRAS, eq:OGDupdate with the ℓ2 retention's α_t, Table 1's Gated rows)
 *   momentum: S_t = μ_t S_{t−1} − η_t ∇ℓ,  W_t = α_t W_{t−1} + S_t
 *             (MIRAS, Table 1, Titans-LMM, with Titans' sign of S_t) */
static void naive(const seqs *s, int chunk, bool momentum, double *y)
{
    for (int n = 0; n < N; n++) {
        double W[D][D] = {{0}}, S[D][D] = {{0}}, W0[D][D];
        for (int t = 0; t < T; t++) {
            if (t % chunk == 0) memcpy(W0, W, sizeof W);
            const int64_t b = (int64_t)(n * T + t) * D;
            double e[D];
            for (int i = 0; i < D; i++) {
                e[i] = -at(s->v, b + i);
                for (int j = 0; j < D; j++) e[i] += W0[i][j] * at(s->k, b + j);
            }
            double eta = at(s->eta, n * T + t), alpha = at(s->alpha, n * T + t),
                   mu = at(s->mu, n * T + t);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) {
                    double step = -eta * e[i] * at(s->k, b + j);
                    if (momentum) step = S[i][j] = mu * S[i][j] + step;
                    W[i][j] = alpha * W[i][j] + step;
                }
            for (int i = 0; i < D; i++) {
                y[b + i] = 0;
                for (int j = 0; j < D; j++) y[b + i] += W[i][j] * at(s->q, b + j);
            }
        }
    }
}

static mi_tensor *run(const char *retention, const char *algorithm, int chunk, bool closed,
                      const seqs *s)
{
    mi_miras_config c = mi_miras_config_default();
    c.retention = retention;
    c.algorithm = algorithm;
    c.chunk = chunk;
    c.closed_form = closed;
    c.form = MI_FORM_MINIBATCH; /* the naive loop's chunk rule */
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &c) == 0, "%s", mi_error());
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));
    mi_miras_gates g = {.eta = s->eta, .alpha = s->alpha, .mu = s->mu};
    mi_tensor *y = mi_miras_forward(&m, s->q, s->k, s->v, &g, &w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    return y;
}

START_TEST(chunk_rule_matches_naive_loop)
{
    mi_rng r;
    mi_rng_seed(&r, 1);
    seqs s = make_seqs(&r, false);
    const int chunks[] = {1, 2, 3, 5, 7, 16};
    double want[N * T * D];
    for (int mom = 0; mom < 2; mom++)
        for (int ci = 0; ci < 6; ci++)
            for (int closed = 0; closed < 2; closed++) {
                naive(&s, chunks[ci], mom, want);
                mi_tensor *y = run("l2", mom ? "momentum" : "gd", chunks[ci], closed, &s);
                for (int i = 0; i < N * T * D; i++)
                    ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12,
                                  "chunk %d momentum %d closed %d: y[%d] = %.15g, want %.15g",
                                  chunks[ci], mom, closed, i, mi_get(y, i), want[i]);
            }
}
END_TEST

/* DeltaNet, written as the paper does: M_t = M_{t-1}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ. */
START_TEST(deltanet_closed_form)
{
    mi_rng r;
    mi_rng_seed(&r, 2);
    seqs s = make_seqs(&r, false);
    mi_tensor *y = run("none", "gd", 1, true, &s);
    for (int n = 0; n < N; n++) {
        double M[D][D] = {{0}};
        for (int t = 0; t < T; t++) {
            const int64_t b = (int64_t)(n * T + t) * D;
            double beta = at(s.eta, n * T + t), P[D][D], Mn[D][D];
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) P[i][j] = (i == j) - beta * at(s.k, b + i) * at(s.k, b + j);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) {
                    Mn[i][j] = beta * at(s.v, b + i) * at(s.k, b + j);
                    for (int l = 0; l < D; l++) Mn[i][j] += M[i][l] * P[l][j];
                }
            memcpy(M, Mn, sizeof M);
            for (int i = 0; i < D; i++) {
                double yi = 0;
                for (int j = 0; j < D; j++) yi += M[i][j] * at(s.q, b + j);
                ck_assert_close(mi_get(y, b + i), yi, 1e-12);
            }
        }
    }
}
END_TEST

START_TEST(autodiff_inner_gradient_equals_closed_form)
{
    mi_rng r;
    mi_rng_seed(&r, 3);
    seqs s = make_seqs(&r, false);
    const char *biases[] = {"l2", "dot"};
    for (int b = 0; b < 2; b++)
        for (int chunk = 1; chunk <= 4; chunk += 3) {
            mi_miras_config c = mi_miras_config_default();
            c.bias = biases[b];
            c.chunk = chunk;
            mi_miras m1, m2;
            c.closed_form = true;
            ck_assert_int_eq(mi_miras_init(&m1, &c), 0);
            c.closed_form = false;
            ck_assert_int_eq(mi_miras_init(&m2, &c), 0);
            mi_tensor *w0 = mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 0.5);
            mi_miras_gates g = {.eta = s.eta, .alpha = s.alpha};
            mi_tensor *y1 = mi_miras_forward(&m1, s.q, s.k, s.v, &g, &w0, NULL);
            mi_tensor *y2 = mi_miras_forward(&m2, s.q, s.k, s.v, &g, &w0, NULL);
            ck_assert_ptr_nonnull(y1);
            ck_assert_ptr_nonnull(y2);
            for (int i = 0; i < N * T * D; i++)
                ck_assert_close(mi_get(y1, i), mi_get(y2, i), 1e-10 * (1 + fabs(mi_get(y1, i))));
        }
}
END_TEST

typedef struct gc_ctx {
    mi_miras m;
} gc_ctx;

/* inputs: q, k, v, eta, alpha, mu, W0 */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    gc_ctx *g = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4], .mu = in[5]};
    out[0] = mi_miras_forward(&g->m, in[0], in[1], in[2], &gates, &in[6], NULL);
    return out[0] ? 1 : -1;
}

START_TEST(outer_gradients_through_the_inner_loop)
{
    mi_rng r;
    mi_rng_seed(&r, 4);
    const char *algos[] = {"gd", "momentum"};
    for (int a = 0; a < 2; a++)
        for (int closed = 0; closed < 2; closed++) {
            seqs s = make_seqs(&r, true);
            gc_ctx g;
            mi_miras_config c = mi_miras_config_default();
            c.algorithm = algos[a];
            c.chunk = 3;
            c.closed_form = closed;
            ck_assert_int_eq(mi_miras_init(&g.m, &c), 0);
            mi_tensor *w0 = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 0.5), true);
            mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.mu, w0};
            mi_gradcheck_result res = mi_gradcheck(layer_fn, &g, in, 7, NULL);
            ck_assert_msg(res.ok, "%s closed %d: %s", algos[a], closed, res.message);
        }
}
END_TEST

START_TEST(bad_configurations_are_reported)
{
    mi_miras m;
    mi_miras_config c = mi_miras_config_default();
    c.memory = "tensor-train";
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("unknown memory 'tensor-train'");
    mi_error_clear();
    c = mi_miras_config_default();
    c.chunk = 0;
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("chunk must be >= 1");
    mi_error_clear();
    c = mi_miras_config_default();
    config_set(&c, "bias=lp");
    ck_assert_int_eq(mi_miras_config_set(&c, "p=0.5"), -1);
    ck_assert_error_has("p must be >= 1");
    mi_error_clear();
    /* a bias's parameter for another bias: refused, naming its owner */
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "p=4"), -1);
    ck_assert_error_has("p is a parameter of bias lp, not of the chosen bias 'l2'");
    mi_error_clear();
    /* a bias assigned in C has its defaults, and the block keeps another's
     * parameters until a bias is chosen by key, which gives it its defaults */
    c = mi_miras_config_default();
    c.bias = "lp";
    ck_assert_double_eq(config_real(&c, "p"), 3);
    config_set(&c, "p=4");
    ck_assert_double_eq(config_real(&c, "p"), 4);
    c.bias = "yaad";
    ck_assert_double_eq(config_real(&c, "sign_sharpness"), 1);
    c.bias = "lp";
    ck_assert_double_eq(config_real(&c, "p"), 4);
    config_set(&c, "bias=yaad");
    config_set(&c, "bias=lp");
    ck_assert_double_eq(config_real(&c, "p"), 3);
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    ck_assert_double_eq(config_real(&m.config, "p"), 3);
    mi_error_clear();
    c = mi_miras_config_default();
    config_set(&c, "retention=lq");
    ck_assert_int_eq(mi_miras_config_set(&c, "q=1"), -1);
    ck_assert_error_has("q must be > 1");
    mi_error_clear();
    /* a retention's parameter for another retention: refused, naming its owner */
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "q=3"), -1);
    ck_assert_error_has("q is a parameter of retention lq, not of the chosen retention 'l2'");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "bias=nope"), -1);
    ck_assert_error_has("unknown bias 'nope'");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "chunk=two"), -1);
    ck_assert_error_has("config: chunk: 'two' is not a whole number");
    mi_error_clear();
    /* found by the fuzzer: a number beyond int's range was converted (undefined) */
    ck_assert_int_eq(mi_miras_config_set(&c, "steps=5777777777777777777777777777777777"), -1);
    ck_assert_error_has("config: steps: '5777777777777777777777777777777777' is not a whole number");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "chunk=-1e300"), -1);
    ck_assert_error_has("config: chunk: '-1e300' is not a whole number");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "colour=red"), -1);
    ck_assert_error_has("unknown key 'colour'");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "chunk=16"), 0);
    ck_assert_int_eq(c.chunk, 16);
    /* shapes */
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    mi_rng r;
    mi_rng_seed(&r, 5);
    seqs s = make_seqs(&r, false);
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D + 1));
    mi_miras_gates g = {.eta = s.eta, .alpha = s.alpha};
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &w0, NULL));
    ck_assert_error_has("initial weight 0 is [3,4]");
    mi_error_clear();
    w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));
    g.alpha = NULL;
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &w0, NULL));
    ck_assert_error_has("gate alpha");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("miras_core");
    TCase *tc = tcase_slow("recurrence");
    tcase_add_test(tc, chunk_rule_matches_naive_loop);
    tcase_add_test(tc, deltanet_closed_form);
    tcase_add_test(tc, autodiff_inner_gradient_equals_closed_form);
    tcase_add_test(tc, outer_gradients_through_the_inner_loop);
    tcase_add_test(tc, bad_configurations_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
