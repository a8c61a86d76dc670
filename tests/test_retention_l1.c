/* The ℓ1 retentions' soft threshold (config l1_threshold) against the papers:
 * l1 (Lattice, Eq. 17), elastic (MIRAS eq:Elastic) and elastic-ftrl (MIRAS
 * "Alternative Retention Gates", Variant 3). Each rule is written out below
 * as a plain f64 loop in its paper's own symbols, over tokens whose step
 * varies, in both forms: scaled, the papers' threshold (the step times the ℓ1
 * weight), and constant (l1_gamma at every token); with η one per head and
 * one per channel. Then mi_miras_step against mi_miras_forward, a gradcheck
 * with channel-wise η, and the config key. (test_retention.c runs the same
 * retentions through its chunk-rule and gradcheck tables.) */
#include "retention_test_util.h"

/* prox_{μ‖·‖₁}(z) = S_μ(z) = sign(z) max(|z| − μ, 0); *zeros counts exact
 * zeros, *margin keeps the smallest distance of |z| from the kink at μ. */
typedef struct prox_log {
    int zeros, entries;
    double margin;
} prox_log;

static double prox_l1(double z, double mu, prox_log *log)
{
    double m = fabs(z) - mu;
    log->entries++;
    log->zeros += m <= 0;
    if (fabs(m) < log->margin) log->margin = fabs(m);
    return m > 0 ? (z > 0 ? m : -m) : 0;
}

/* A gate of s at sequence n, token t, row i: [N, T] or channel-wise [N, T, D]. */
static double gate_at(const mi_tensor *g, int n, int t, int i)
{
    return g->rank == 3 ? mi_get(g, (n * T + t) * D + i) : mi_get(g, n * T + t);
}

/* Row i of ∇_W ½‖W k − v‖² = (W k − v) kᵀ. */
static void grad_l2(mat W, const tok *x, mat G)
{
    for (int i = 0; i < D; i++) {
        double e = -x->v[i];
        for (int j = 0; j < D; j++) e += W[i][j] * x->k[j];
        for (int j = 0; j < D; j++) G[i][j] = e * x->k[j];
    }
}

/* Lattice, Eq. 17, on a matrix memory S [D, D] (no φ):
 *   S_t = prox_{γ_t λ_t ‖·‖₁}(S_{t-1} − γ_t ∇_S ½‖S_{t-1} k_t − v_t‖²)
 * with the step γ_t = η_t (row i's own with channel-wise η) and λ_t = λ;
 * constant: the threshold λ whatever the step. */
static void lattice_eq17(const seqs *s, double lambda, bool constant, double *y, prox_log *log)
{
    for (int n = 0; n < N; n++) {
        mat S, G;
        for (int e = 0; e < D * D; e++) S[e / D][e % D] = mi_get(s->w0, e);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_l2(S, &x, G);
            for (int i = 0; i < D; i++) {
                double gamma_t = gate_at(s->eta, n, t, i);
                double mu = constant ? lambda : gamma_t * lambda;
                for (int j = 0; j < D; j++) S[i][j] = prox_l1(S[i][j] - gamma_t * G[i][j], mu, log);
            }
            write_y(y, n, t, S, &x);
        }
    }
}

/* MIRAS eq:Elastic, from the retention 1/(2β)‖W‖² + 1/α ‖W‖₁ with step η:
 *   W_t = S_γ(λ W_{t-1} − ζ ∇ℓ(W_{t-1})),
 *   γ = ηβ / (α(η + β)),  λ = β / (β + η),  ζ = ηλ
 * with the paper's η_t = eta_p and β_t = beta per token (and row), α fixed;
 * constant: S_{1/α} whatever the step. */
static void miras_elastic(const seqs *s, const mi_tensor *eta_p, const mi_tensor *beta,
                          double alpha_p, bool constant, double *y, prox_log *log)
{
    for (int n = 0; n < N; n++) {
        mat W, G;
        for (int e = 0; e < D * D; e++) W[e / D][e % D] = mi_get(s->w0, e);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_l2(W, &x, G);
            for (int i = 0; i < D; i++) {
                double eta = gate_at(eta_p, n, t, i), b = gate_at(beta, n, t, i);
                double gamma = eta * b / (alpha_p * (eta + b));
                double lambda = b / (b + eta), zeta = eta * lambda;
                for (int j = 0; j < D; j++)
                    W[i][j] = prox_l1(lambda * W[i][j] - zeta * G[i][j],
                                      constant ? 1 / alpha_p : gamma, log);
            }
            write_y(y, n, t, W, &x);
        }
    }
}

/* MIRAS Variant 3 (FTRL), W_0 = 0:
 *   A_t = A_{t-1} − η ∇ℓ(W_{t-1}),   W_t = S_{η/α}(A_t)
 * with the token's η_t for η; constant: S_{1/α}. */
static void miras_ftrl(const seqs *s, double alpha_p, bool constant, double *y, prox_log *log)
{
    for (int n = 0; n < N; n++) {
        mat A = {{0}}, W = {{0}}, G;
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_l2(W, &x, G);
            for (int i = 0; i < D; i++) {
                double eta = gate_at(s->eta, n, t, i);
                for (int j = 0; j < D; j++) {
                    A[i][j] -= eta * G[i][j];
                    W[i][j] = prox_l1(A[i][j], constant ? 1 / alpha_p : eta / alpha_p, log);
                }
            }
            write_y(y, n, t, W, &x);
        }
    }
}

static mi_miras_config l1_config(const char *retention, double gamma, bool constant, int chunk,
                                 bool closed)
{
    mi_miras_config c = mi_miras_config_default();
    c.memory = "matrix";
    c.bias = "l2";
    c.retention = retention;
    config_setf(&c, "l1_gamma=%.17g", gamma);
    config_set(&c, constant ? "l1_threshold=constant" : "l1_threshold=scaled");
    c.chunk = chunk;
    c.closed_form = closed;
    return c;
}

/* The layer against want, and the threshold acted in want (it zeroed some
 * entries, not all). */
static void expect(const mi_miras_config *c, const seqs *s, const double *want,
                   const prox_log *log, bool channel)
{
    mi_tensor *y = run_layer(c, s, s->w0, NULL, NULL);
    char what[96];
    snprintf(what, sizeof what, "%s %s closed %d %s", c->retention,
             mi_l1_params_of(c).threshold == MI_L1_CONSTANT ? "constant" : "scaled", c->closed_form,
             channel ? "per channel" : "per head");
    assert_equal(y, want, 1e-12, what);
    ck_assert_msg(log->zeros > 0 && log->zeros < log->entries, "%s: %d zeros of %d", what,
                  log->zeros, log->entries);
}

static double max_diff(const double *a, const double *b)
{
    double d = 0;
    for (int i = 0; i < N * T * D; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

/* ------------------------------------------------------------ the papers' rules */
START_TEST(l1_is_lattice_eq17)
{
    mi_rng r;
    mi_rng_seed(&r, 61);
    for (int channel = 0; channel < 2; channel++) {
        seqs s = make_seqs(&r, 0.1, 0.9, 0.5);
        if (channel) s.eta = mi_rand(&r, MI_F64, MI_SHAPE(N, T, D), 0.1, 0.9);
        double want[2][N * T * D];
        for (int constant = 0; constant < 2; constant++) {
            const double lambda = constant ? 0.05 : 0.2;
            prox_log log = {.margin = INFINITY};
            lattice_eq17(&s, lambda, constant, want[constant], &log);
            for (int closed = 0; closed < 2; closed++) {
                mi_miras_config c = l1_config("l1", lambda, constant, 1, closed);
                expect(&c, &s, want[constant], &log, channel);
            }
        }
        ck_assert_msg(max_diff(want[0], want[1]) > 1e-3, "the two forms agree");
    }
}
END_TEST

/* The layer's gates are the paper's derived ones, α_t = λ_t = β/(β + η) and
 * η_t = ζ_t = ηλ, with l1_gamma = 1/α; the threshold the layer derives,
 * l1_gamma · ζ_t, must be the paper's γ = ηβ/(α(η + β)). */
START_TEST(elastic_is_miras_eq_elastic)
{
    mi_rng r;
    mi_rng_seed(&r, 62);
    const double alpha_p = 4; /* the ℓ1 weight 1/α = 0.25 */
    for (int channel = 0; channel < 2; channel++) {
        seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
        const int64_t shape[3] = {N, T, D};
        mi_tensor *eta_p = mi_rand(&r, MI_F64, 2 + channel, shape, 0.2, 1.2);
        mi_tensor *beta = mi_rand(&r, MI_F64, 2 + channel, shape, 1, 4);
        s.alpha = mi_div(beta, mi_add(beta, eta_p));
        s.eta = mi_mul(eta_p, s.alpha);
        double want[2][N * T * D];
        for (int constant = 0; constant < 2; constant++) {
            prox_log log = {.margin = INFINITY};
            miras_elastic(&s, eta_p, beta, alpha_p, constant, want[constant], &log);
            for (int closed = 0; closed < 2; closed++) {
                mi_miras_config c = l1_config("elastic", 1 / alpha_p, constant, 1, closed);
                expect(&c, &s, want[constant], &log, channel);
            }
        }
        ck_assert_msg(max_diff(want[0], want[1]) > 1e-3, "the two forms agree");
    }
}
END_TEST

START_TEST(elastic_ftrl_is_miras_variant3)
{
    mi_rng r;
    mi_rng_seed(&r, 63);
    const double alpha_p = 5; /* the ℓ1 weight 1/α = 0.2 */
    for (int channel = 0; channel < 2; channel++) {
        seqs s = make_seqs(&r, 0.1, 0.9, 0.5);
        if (channel) s.eta = mi_rand(&r, MI_F64, MI_SHAPE(N, T, D), 0.1, 0.9);
        s.alpha = mi_full(MI_F64, MI_SHAPE(N, T), 1.0); /* the paper's rule: no decay */
        s.w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));        /* and W_0 = 0 */
        double want[2][N * T * D];
        for (int constant = 0; constant < 2; constant++) {
            prox_log log = {.margin = INFINITY};
            miras_ftrl(&s, alpha_p, constant, want[constant], &log);
            for (int closed = 0; closed < 2; closed++) {
                mi_miras_config c = l1_config("elastic-ftrl", 1 / alpha_p, constant, 1, closed);
                expect(&c, &s, want[constant], &log, channel);
            }
        }
        ck_assert_msg(max_diff(want[0], want[1]) > 1e-3, "the two forms agree");
    }
}
END_TEST

/* ------------------------------------------------------------ the stream */
/* mi_miras_step, token by token, gives mi_miras_forward's outputs at every
 * token of the whole chunks (a stream does not know a partial chunk is the
 * last); multistep: each token's steps one after the other (b = 1). */
START_TEST(stream_is_the_forward)
{
    mi_rng r;
    mi_rng_seed(&r, 64);
    const char *rets[] = {"l1", "elastic", "elastic-ftrl"};
    const int chunks[] = {1, 3, 7};
    for (int ri = 0; ri < 3; ri++)
        for (int constant = 0; constant < 2; constant++)
            for (int bi = 0; bi < 4; bi++) {
                bool multi = bi == 3;
                int chunk = multi ? 1 : chunks[bi], steps = multi ? 2 : 1;
                mi_miras_config c = l1_config(rets[ri], 0.3, constant, chunk, true);
                if (multi) c.algorithm = "multistep", c.steps = steps;
                /* k, v and the gates at steps·T positions, q at T */
                seqs s = make_seqs(&r, 0.1, 0.9, 0.5);
                const int64_t per[3] = {N, (int64_t)steps * T, D};
                mi_tensor *k = mi_randn(&r, MI_F64, 3, per, 0, 0.6);
                mi_tensor *v = mi_randn(&r, MI_F64, 3, per, 0, 1);
                mi_tensor *eta = mi_rand(&r, MI_F64, 2, per, 0.1, 0.9);
                mi_tensor *alpha = mi_rand(&r, MI_F64, 2, per, 0.7, 0.99);
                mi_miras m;
                ck_assert_msg(mi_miras_init(&m, &c) == 0, "%s", mi_error());
                mi_miras_gates g = {.eta = eta, .alpha = alpha};
                mi_tensor *y = mi_miras_forward(&m, s.q, k, v, &g, &s.w0, NULL);
                ck_assert_msg(y != NULL, "%s", mi_error());
                mi_miras_state st;
                ck_assert_int_eq(mi_miras_state_init(&m, &st, &s.w0, N, D, D, MI_F64), 0);
                for (int t = 0; t < T - T % chunk; t++) {
                    int p0 = t * steps, p1 = p0 + steps;
                    mi_miras_gates gt = {.eta = mi_slice(eta, 1, p0, p1),
                                         .alpha = mi_slice(alpha, 1, p0, p1)};
                    mi_tensor *yt = mi_miras_step(&m, &st, mi_slice(s.q, 1, t, t + 1),
                                                  mi_slice(k, 1, p0, p1), mi_slice(v, 1, p0, p1),
                                                  &gt);
                    ck_assert_msg(yt != NULL, "%s", mi_error());
                    for (int n = 0; n < N; n++)
                        for (int i = 0; i < D; i++) {
                            double want = mi_get(y, (n * T + t) * D + i);
                            ck_assert_msg(fabs(mi_get(yt, n * D + i) - want) <= 1e-12,
                                          "%s constant %d chunk %d steps %d: token %d y = "
                                          "%.15g, forward's %.15g", rets[ri], constant, chunk,
                                          steps, t, mi_get(yt, n * D + i), want);
                        }
                }
            }
}
END_TEST

/* ------------------------------------------------------------ gradients */
/* inputs: q, k, v, eta, alpha, W0 */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    mi_miras *m = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4]};
    out[0] = mi_miras_forward(m, in[0], in[1], in[2], &gates, &in[5], NULL);
    return out[0] ? 1 : -1;
}

/* The scaled threshold with η per channel (test_retention.c checks η per
 * head): the outer gradient reaches each row's η through its threshold.
 * Inputs drawn until every thresholded entry is 1e-3 from its kink. */
START_TEST(gradcheck_channel_eta)
{
    mi_rng r;
    mi_rng_seed(&r, 65);
    const char *rets[] = {"l1", "elastic-ftrl"};
    for (int ri = 0; ri < 2; ri++) {
        seqs s;
        prox_log log;
        int draws = 0;
        do {
            s = make_seqs(&r, 0.1, 0.6, 0.5);
            s.eta = mi_rand(&r, MI_F64, MI_SHAPE(N, T, D), 0.1, 0.6);
            s.alpha = mi_full(MI_F64, MI_SHAPE(N, T), 1.0);
            if (ri == 1) s.w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));
            log = (prox_log){.margin = INFINITY};
            double y[N * T * D];
            if (ri == 0) lattice_eq17(&s, 0.2, false, y, &log);
            else miras_ftrl(&s, 5, false, y, &log);
        } while (log.margin < 1e-3 && ++draws < 50);
        ck_assert_msg(log.margin >= 1e-3, "%s: no draw 1e-3 from the kinks", rets[ri]);
        mi_miras_config c = l1_config(rets[ri], 0.2, false, 1, true);
        mi_miras m;
        ck_assert_int_eq(mi_miras_init(&m, &c), 0);
        mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.w0};
        for (int i = 0; i < 6; i++) mi_requires_grad(in[i], i != 4 && !(ri == 1 && i == 5));
        mi_gradcheck_result res = mi_gradcheck(layer_fn, &m, in, 6, NULL);
        ck_assert_msg(res.ok, "%s: %s", rets[ri], res.message);
    }
}
END_TEST

/* ------------------------------------------------------------ configuration */
START_TEST(l1_threshold_key)
{
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "retention=elastic");
    ck_assert_int_eq(mi_l1_params_of(&c).threshold, MI_L1_SCALED);
    ck_assert_int_eq(mi_miras_config_set(&c, "l1_threshold=constant"), 0);
    ck_assert_int_eq(mi_l1_params_of(&c).threshold, MI_L1_CONSTANT);
    ck_assert_int_eq(mi_miras_config_set(&c, "l1_threshold=scaled"), 0);
    ck_assert_int_eq(mi_l1_params_of(&c).threshold, MI_L1_SCALED);
    ck_assert_int_eq(mi_miras_config_set(&c, "l1_threshold=eta"), -1);
    ck_assert_error_has("l1_threshold must be 'scaled' or 'constant'");
    ck_assert_error_has("got 'eta'");
    mi_error_clear();
    ck_assert_int_eq(mi_l1_params_of(&c).threshold, MI_L1_SCALED);
    /* the three l1 retentions share the keys, and keep them from one to the other
     * only through the text: a retention chosen by key gets its defaults */
    config_set(&c, "l1_gamma=0.25");
    config_set(&c, "retention=l1");
    ck_assert_double_eq(mi_l1_params_of(&c).gamma, 1e-3);
    config_set(&c, "l1_gamma=0.25");
    ck_assert_double_eq(config_real(&c, "l1_gamma"), 0.25);
    /* the key is listed where an unknown one is reported */
    ck_assert_int_eq(mi_miras_config_set(&c, "l1_form=scaled"), -1);
    ck_assert_error_has("config: unknown key 'l1_form'");
    mi_error_clear();
    /* and is the retention's: with another it is refused */
    config_set(&c, "retention=l2");
    ck_assert_int_eq(mi_miras_config_set(&c, "l1_threshold=constant"), -1);
    ck_assert_error_has("l1_threshold is a parameter of retention");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("retention_l1");
    TCase *tc = tcase_slow("retention_l1");
    tcase_add_test(tc, l1_is_lattice_eq17);
    tcase_add_test(tc, elastic_is_miras_eq_elastic);
    tcase_add_test(tc, elastic_ftrl_is_miras_variant3);
    tcase_add_test(tc, stream_is_the_forward);
    tcase_add_test(tc, gradcheck_channel_eta);
    tcase_add_test(tc, l1_threshold_key);
    suite_add_tcase(s, tc);
    return s;
}
