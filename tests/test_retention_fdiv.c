/* The f-divergence retention (retention=f-div, MIRAS eq:generalf-divergence):
 * g = exp is retention kl (Memora) to rounding, outputs and gradients; the
 * other g's against the paper's rule written as a plain loop, with ζ found
 * by bisection; the chunk rule and the token-at-a-time step; gradients
 * through the layer; the rows on the scaled simplex; bad names. */
#include <float.h>
#include <string.h>

#include "retention_test_util.h"

static mi_miras_config fdiv_config(const char *g, const char *memory, int chunk, bool closed)
{
    mi_miras_config c = mi_miras_config_default();
    char set[64];
    snprintf(set, sizeof set, "f_div=%s", g);
    ck_assert_msg(mi_miras_config_set(&c, "retention=f-div") == 0, "%s", mi_error());
    ck_assert_msg(mi_miras_config_set(&c, set) == 0, "%s", mi_error());
    c.memory = memory;
    c.kl_scale = 2.5;
    c.chunk = chunk;
    c.closed_form = closed;
    return c;
}

/* ------------------------------------------------------------ the rule, plain */
/* g(u) = (1 − u/p)^(−p): p = 1 (inverse, reverse KL), p = 2 (inverse-square,
 * squared Hellinger); defined for u < p. */
static double g_of(double p, double u) { return pow(1 - u / p, -p); }

/* ζ with Σ_j prior_j g(u_j − ζ) = c, by bisection: the sum is infinite at
 * the pole ζ = max u − p and falls to 0 as ζ grows. */
static double zeta_by_bisection(double p, const double *prior, const double *u, double c)
{
    double pole = -INFINITY;
    for (int j = 0; j < D; j++) pole = fmax(pole, u[j] - p);
    double lo = pole, hi = pole + 1;
    for (;;) {
        double sum = 0;
        for (int j = 0; j < D; j++) sum += prior[j] * g_of(p, u[j] - hi);
        if (sum < c) break;
        hi = pole + 2 * (hi - pole);
    }
    for (int it = 0; it < 5000; it++) {
        double mid = 0.5 * (lo + hi), sum = 0;
        if (mid <= lo || mid >= hi) break;
        for (int j = 0; j < D; j++) sum += prior[j] * g_of(p, u[j] - mid);
        if (sum > c) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* ∇ℓ of ½‖W k − v‖² at W: (W k − v) kᵀ */
static void grad_at(mat W, const tok *x, mat G)
{
    for (int i = 0; i < D; i++) {
        double e = -x->v[i];
        for (int j = 0; j < D; j++) e += W[i][j] * x->k[j];
        for (int j = 0; j < D; j++) G[i][j] = e * x->k[j];
    }
}

/* W_0 = c · softmax of each row of W0 (the state's start, as for kl) */
static void start_weights(const seqs *s, double c, mat W)
{
    for (int i = 0; i < D; i++) {
        double z = 0;
        for (int j = 0; j < D; j++) z += exp(mi_get(s->w0, i * D + j));
        for (int j = 0; j < D; j++) W[i][j] = c * exp(mi_get(s->w0, i * D + j)) / z;
    }
}

/* One row of MIRAS eq:generalf-divergence with the decayed prior W'^α:
 * W_j = W'_j^α g(u_j − ζ), u = −η ∇ℓ (or a chunk's summed step). */
static void fdiv_row(double p, double c, const double *prior_log, const double *u, double *w)
{
    double prior[D];
    for (int j = 0; j < D; j++) prior[j] = exp(prior_log[j]);
    double zeta = zeta_by_bisection(p, prior, u, c);
    for (int j = 0; j < D; j++) w[j] = prior[j] * g_of(p, u[j] - zeta);
}

/* The paper's rule token by token: W_t = W_{t-1}^α_t ⊙ g(−ζ_t − η_t ∇ℓ(W_{t-1})). */
static void paper_fdiv(double p, double c, const seqs *s, double *y)
{
    for (int n = 0; n < N; n++) {
        mat W, G;
        start_weights(s, c, W);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_at(W, &x, G);
            for (int i = 0; i < D; i++) {
                double prior_log[D], u[D];
                for (int j = 0; j < D; j++) {
                    prior_log[j] = x.alpha * log(W[i][j]);
                    u[j] = -x.eta * G[i][j];
                }
                fdiv_row(p, c, prior_log, u, W[i]);
            }
            write_y(y, n, t, W, &x);
        }
    }
}

/* The chunk rule: a segment's tokens take their gradients at W_{t'}; token t
 * reads W_t = W_{t'}^ᾱ_t ⊙ g(U_t − ζ_t), U_t = α_t U_{t-1} − η_t ∇ℓ_t from
 * U = 0; the first token of a chunk longer than one runs alone (the lag token). */
static void chunk_rule_fdiv(double p, double c, const seqs *s, int b, double *y)
{
    for (int n = 0; n < N; n++) {
        mat W;
        start_weights(s, c, W);
        for (int t0 = 0; t0 < T; t0 += b) {
            int t1 = t0 + b < T ? t0 + b : T;
            int parts[2][2] = {{t0, t1}}, n_parts = 1;
            if (t1 - t0 > 1) {
                parts[0][1] = t0 + 1;
                parts[1][0] = t0 + 1, parts[1][1] = t1;
                n_parts = 2;
            }
            for (int part = 0; part < n_parts; part++) {
                mat W_start, U = {{0}}, G;
                memcpy(W_start, W, sizeof W);
                double alpha_bar = 1;
                for (int t = parts[part][0]; t < parts[part][1]; t++) {
                    tok x = token(s, n, t);
                    grad_at(W_start, &x, G);
                    alpha_bar *= x.alpha;
                    for (int i = 0; i < D; i++) {
                        double prior_log[D];
                        for (int j = 0; j < D; j++) {
                            U[i][j] = x.alpha * U[i][j] - x.eta * G[i][j];
                            prior_log[j] = alpha_bar * log(W_start[i][j]);
                        }
                        fdiv_row(p, c, prior_log, U[i], W[i]);
                    }
                    write_y(y, n, t, W, &x);
                }
            }
        }
    }
}

static const struct {
    const char *name;
    double p;
} powers[] = {{"inverse", 1}, {"inverse-square", 2}};

/* ------------------------------------------------------------ tests */
/* Σ_i y_i R_i and its gradients with respect to q, k, v, eta, alpha, W0 */
static void outputs_and_grads(const mi_miras_config *c, const seqs *s, mi_tensor *R,
                              mi_tensor **y, mi_tensor **grads)
{
    mi_tensor *in[] = {s->q, s->k, s->v, s->eta, s->alpha, s->w0};
    for (int i = 0; i < 6; i++) mi_requires_grad(in[i], true);
    *y = run_layer(c, s, s->w0, NULL, NULL);
    mi_tensor *loss = mi_sum(mi_mul(*y, R), MI_ALL, false);
    ck_assert_msg(loss && mi_grad(&loss, NULL, 1, in, 6, false, grads) == 0, "%s", mi_error());
}

START_TEST(exp_is_kl)
{
    mi_rng r;
    mi_rng_seed(&r, 41);
    const char *inputs[] = {"q", "k", "v", "eta", "alpha", "W0"};
    for (int chunk = 1; chunk <= 3; chunk += 2)
        for (int closed = 0; closed < 2; closed++) {
            seqs s = make_seqs(&r, 0.1, 0.6, 1);
            mi_tensor *R = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1);
            mi_miras_config fdiv = fdiv_config("exp", "matrix", chunk, closed), kl = fdiv;
            kl.retention = "kl";
            mi_tensor *y_fdiv, *y_kl, *g_fdiv[6], *g_kl[6];
            outputs_and_grads(&fdiv, &s, R, &y_fdiv, g_fdiv);
            outputs_and_grads(&kl, &s, R, &y_kl, g_kl);
            char what[96];
            snprintf(what, sizeof what, "chunk %d closed %d: y", chunk, closed);
            double want[N * T * D];
            for (int i = 0; i < N * T * D; i++) want[i] = mi_get(y_kl, i);
            assert_equal(y_fdiv, want, 1e-12, what);
            for (int i = 0; i < 6; i++)
                for (int64_t e = 0; e < g_kl[i]->numel; e++)
                    ck_assert_msg(fabs(mi_get(g_fdiv[i], e) - mi_get(g_kl[i], e)) <= 1e-12,
                                  "chunk %d closed %d: d/d%s[%lld] = %.15g, kl's %.15g", chunk,
                                  closed, inputs[i], (long long)e, mi_get(g_fdiv[i], e),
                                  mi_get(g_kl[i], e));
        }
}
END_TEST

START_TEST(per_token_is_the_papers_rule)
{
    mi_rng r;
    mi_rng_seed(&r, 42);
    for (int gi = 0; gi < 2; gi++)
        for (int closed = 0; closed < 2; closed++)
            for (int decay = 0; decay < 2; decay++) {
                seqs s = make_seqs(&r, 0.1, 1.5, 1);
                /* without the decay: the paper's equation as it stands */
                if (!decay) s.alpha = mi_full(MI_F64, MI_SHAPE(N, T), 1.0);
                mi_miras_config c = fdiv_config(powers[gi].name, "matrix", 1, closed);
                mi_tensor *y = run_layer(&c, &s, s.w0, NULL, NULL);
                double want[N * T * D];
                paper_fdiv(powers[gi].p, c.kl_scale, &s, want);
                char what[96];
                snprintf(what, sizeof what, "%s closed %d decay %d", powers[gi].name, closed,
                         decay);
                assert_equal(y, want, 1e-12, what);
            }
}
END_TEST

START_TEST(chunked_is_the_chunk_rule)
{
    mi_rng r;
    mi_rng_seed(&r, 43);
    const int chunks[] = {2, 3, 5, 8};
    for (int gi = 0; gi < 2; gi++)
        for (int bi = 0; bi < 4; bi++) {
            seqs s = make_seqs(&r, 0.1, 1.5, 1);
            mi_miras_config c = fdiv_config(powers[gi].name, "matrix", chunks[bi], true);
            mi_tensor *y = run_layer(&c, &s, s.w0, NULL, NULL);
            double want[N * T * D];
            chunk_rule_fdiv(powers[gi].p, c.kl_scale, &s, chunks[bi], want);
            char what[96];
            snprintf(what, sizeof what, "%s chunk %d", powers[gi].name, chunks[bi]);
            assert_equal(y, want, 1e-12, what);
        }
}
END_TEST

/* mi_miras_step, token by token, gives mi_miras_forward's outputs */
START_TEST(stream_is_the_forward)
{
    mi_rng r;
    mi_rng_seed(&r, 44);
    for (int gi = 0; gi < 2; gi++)
        for (int chunk = 1; chunk <= 7; chunk += 2) {
            seqs s = make_seqs(&r, 0.1, 1.5, 1);
            mi_miras_config c = fdiv_config(powers[gi].name, "matrix", chunk, true);
            mi_tensor *y = run_layer(&c, &s, s.w0, NULL, NULL);
            mi_miras m;
            ck_assert_int_eq(mi_miras_init(&m, &c), 0);
            mi_miras_state st;
            ck_assert_int_eq(mi_miras_state_init(&m, &st, &s.w0, N, D, D, MI_F64), 0);
            for (int t = 0; t < T; t++) {
                mi_tensor *at[5] = {s.q, s.k, s.v, s.eta, s.alpha}, *one[5];
                for (int i = 0; i < 5; i++) one[i] = mi_slice(at[i], 1, t, t + 1);
                mi_miras_gates g = {.eta = one[3], .alpha = one[4]};
                mi_tensor *yt = mi_miras_step(&m, &st, one[0], one[1], one[2], &g);
                ck_assert_msg(yt != NULL, "%s", mi_error());
                for (int n = 0; n < N; n++)
                    for (int i = 0; i < D; i++) {
                        double want = mi_get(y, (n * T + t) * D + i);
                        ck_assert_msg(fabs(mi_get(yt, n * D + i) - want) <= 1e-12,
                                      "%s chunk %d: token %d y = %.15g, forward's %.15g",
                                      powers[gi].name, chunk, t, mi_get(yt, n * D + i), want);
                    }
            }
        }
}
END_TEST

/* inputs: q, k, v, eta, alpha, W0 */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    mi_miras *m = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4]};
    out[0] = mi_miras_forward(m, in[0], in[1], in[2], &gates, &in[5], NULL);
    return out[0] ? 1 : -1;
}

START_TEST(gradcheck_through_the_layer)
{
    for (int gi = 0; gi < 2; gi++)
        for (int chunk = 1; chunk <= 3; chunk += 2)
            for (int closed = 0; closed < 2; closed++) {
                mi_rng r;
                mi_rng_seed(&r, 300 + (unsigned)gi);
                seqs s = make_seqs(&r, 0.1, 1.5, 1);
                mi_miras_config c = fdiv_config(powers[gi].name, "matrix", chunk, closed);
                mi_miras m;
                ck_assert_int_eq(mi_miras_init(&m, &c), 0);
                mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.w0};
                for (int i = 0; i < 6; i++) mi_requires_grad(in[i], true);
                mi_gradcheck_result res = mi_gradcheck(layer_fn, &m, in, 6, NULL);
                ck_assert_msg(res.ok, "%s chunk %d closed %d: %s", powers[gi].name, chunk, closed,
                              res.message);
            }
}
END_TEST

/* Large steps and peaked starts: every row stays on the simplex scaled by c,
 * every weight positive, and the state is log W. */
START_TEST(rows_sum_to_c_and_stay_positive)
{
    mi_rng r;
    mi_rng_seed(&r, 45);
    const char *memories[] = {"matrix", "vector"};
    for (int gi = 0; gi < 2; gi++)
        for (int mi = 0; mi < 2; mi++)
            for (int chunk = 1; chunk <= 4; chunk += 3) {
                seqs s = make_seqs(&r, 1, 4, 3);
                mi_miras_config c = fdiv_config(powers[gi].name, memories[mi], chunk, true);
                mi_tensor *w0 = mi == 0 ? s.w0 : mi_randn(&r, MI_F64, MI_SHAPE(D), 0, 3);
                mi_tensor *a;
                run_layer(&c, &s, w0, &a, NULL);
                for (int64_t i = 0; i < a->numel / D; i++) {
                    double sum = 0;
                    for (int j = 0; j < D; j++) {
                        double w = exp(mi_get(a, i * D + j));
                        ck_assert_msg(w > 0, "%s %s chunk %d: weight %g", powers[gi].name,
                                      memories[mi], chunk, w);
                        sum += w;
                    }
                    ck_assert_close(sum, 2.5, 1e-12);
                }
            }
}
END_TEST

/* A row whose largest step falls on a weight of prior 1e-30: ζ sits 1e-30
 * from the pole of g. The solver finds it (measured from the pole), checked
 * against a bisection on that distance s, y_j = s + max U − U_j. */
START_TEST(zeta_next_to_the_pole)
{
    for (int gi = 0; gi < 2; gi++) {
        double p = powers[gi].p, c = 1;
        mi_miras_config cfg = fdiv_config(powers[gi].name, "matrix", 1, true);
        cfg.kl_scale = c;
        const mi_retention_kind *ret = mi_retention_find("f-div");
        double prior_log[D] = {log(1e-30), log(0.5), log(0.5)}, u[D] = {10, 0, -1};
        double l[D];
        for (int j = 0; j < D; j++) l[j] = prior_log[j] + u[j];
        mi_tensor *carried = mi_from_buffer(MI_F64, MI_SHAPE(D), prior_log);
        mi_tensor *state = mi_from_buffer(MI_F64, MI_SHAPE(D), l);
        mi_tensor *w = ret->read_split(&cfg, carried, state);
        ck_assert_msg(w != NULL, "%s", mi_error());
        /* Σ_j P_j y_j^(−p) = c p^(−p), bisected on log s */
        double lo = log(1e-300), hi = log(1e3);
        for (int it = 0; it < 3000; it++) {
            double mid = 0.5 * (lo + hi), sum = 0;
            for (int j = 0; j < D; j++) sum += exp(prior_log[j]) * pow(exp(mid) + (10 - u[j]), -p);
            if (sum > c * pow(p, -p)) lo = mid;
            else hi = mid;
        }
        double s = exp(0.5 * (lo + hi));
        for (int j = 0; j < D; j++) {
            double want = exp(prior_log[j]) * pow((s + (10 - u[j])) / p, -p);
            ck_assert_msg(fabs(mi_get(w, j) - want) <= 1e-12 * want + 1e-300,
                          "%s: W[%d] = %.15g, want %.15g (s = %g)", powers[gi].name, j,
                          mi_get(w, j), want, s);
        }
        ck_assert_msg(s < 1e-14 && mi_get(w, 0) > 0.5, "%s: s = %g, W[0] = %g: not at the pole",
                      powers[gi].name, s, mi_get(w, 0));
    }
}
END_TEST

START_TEST(bad_names_are_reported)
{
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "retention=f-div");
    ck_assert_int_eq(mi_miras_config_set(&c, "f_div=chi2"), -1);
    ck_assert_error_has("f_div must be 'exp', 'inverse' or 'inverse-square'");
    ck_assert_error_has("got 'chi2'");
    mi_error_clear();
    char g[32];
    ck_assert_int_eq(mi_miras_config_get(&c, "f_div", g, sizeof g), 0);
    ck_assert_str_eq(g, "exp");
    ck_assert_int_eq(mi_miras_config_set(&c, "f_div="), -1);
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "f_div=inverse-square"), 0);
    ck_assert_int_eq(mi_miras_config_get(&c, "f_div", g, sizeof g), 0);
    ck_assert_str_eq(g, "inverse-square");
    ck_assert_int_eq(mi_miras_config_set(&c, "f_div=inverse"), 0);
    ck_assert_int_eq(mi_miras_config_get(&c, "f_div", g, sizeof g), 0);
    ck_assert_str_eq(g, "inverse");
    /* the key is the f-divergence retention's own */
    mi_miras_config other = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&other, "f_div=exp"), -1);
    ck_assert_error_has("f_div is a parameter of retention f-div, not of the chosen retention 'l2'");
    mi_error_clear();
    /* and the config's own fields are still checked with it */
    mi_miras m;
    c.kl_scale = 0;
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("kl_scale must be > 0");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("retention_fdiv");
    TCase *tc = tcase_slow("retention_fdiv");
    tcase_add_test(tc, exp_is_kl);
    tcase_add_test(tc, per_token_is_the_papers_rule);
    tcase_add_test(tc, chunked_is_the_chunk_rule);
    tcase_add_test(tc, stream_is_the_forward);
    tcase_add_test(tc, gradcheck_through_the_layer);
    tcase_add_test(tc, rows_sum_to_c_and_stay_positive);
    tcase_add_test(tc, zeta_next_to_the_pole);
    tcase_add_test(tc, bad_names_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
