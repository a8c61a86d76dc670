/* Nested Learning's continuum memory system (src/models/hope/cms.c, nl_mlp.c): the
 * MLP memory's accumulated step against Eq. 31 by hand; CMS block ℓ's weights
 * change only at positions that are multiples of C^(ℓ) (from the trace); the
 * CMS against a plain-loop reference (all C = 1, and mixed C with T not a
 * multiple); gradchecks (f64, tiny) w.r.t. the input and every parameter;
 * causality; bad configurations. */
#include <string.h>

#include "nl_test_util.h"

/* ---------------------------------------------------------------- the MLP memory's step */

/* D1, D2 of mi_nl_mlp_step (W − its new weights) == the gradients of
 *   Σ_t c1_t ½‖M(x_t) − v_t‖²  w.r.t. W1,  c1_t = c_t / (‖s_t‖² + hidden_eps)
 *   Σ_t c2_t ½‖M(x_t) − v_t‖²  w.r.t. W2,  c2_t = c_t / (‖x_t‖² + eps)
 * (c1 = c2 = c without lms; the weights held fixed), for shared and
 * per-sequence weights, with and without the residual; and the rank-one
 * factors of mi_nl_mlp_factors, Σ_t c_t g_t û_tᵀ, equal the same sums. */
START_TEST(mlp_step_is_the_eq31_gradient_sum)
{
    enum { N = 2, n = 4, IN = 3, H = 5 };
    const double eps = 1e-6, hidden_eps = 0.7;   /* distinct, so a swap shows */
    for (int variant = 0; variant < 8; variant++) {
        bool residual = variant & 1, per_seq = variant & 2, lms = variant & 4;
        int64_t out = residual ? IN : 2;
        mi_rng r;
        mi_rng_seed(&r, 100 + variant);
        mi_tensor *w1 = per_seq ? mi_randn(&r, MI_F64, MI_SHAPE(N, out, H), 0, 0.5)
                                : mi_randn(&r, MI_F64, MI_SHAPE(out, H), 0, 0.5);
        mi_tensor *w2 = per_seq ? mi_randn(&r, MI_F64, MI_SHAPE(N, H, IN), 0, 0.5)
                                : mi_randn(&r, MI_F64, MI_SHAPE(H, IN), 0, 0.5);
        mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(N, n, IN), 0, 1);
        mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(N, n, out), 0, 1);
        mi_tensor *c = mi_rand(&r, MI_F64, MI_SHAPE(N, n), 0.1, 1);
        mi_tensor *n1, *n2;   /* W − D */
        ck_assert_int_eq(mi_nl_mlp_step(w1, w2, residual, x, v, c, lms, eps, hidden_eps, &n1, &n2),
                         0);
        mi_tensor *d1 = mi_sub(w1, n1), *d2 = mi_sub(w2, n2);

        /* Nested Learning, Eq. 31 with f = ∇L (gradient descent), L = ½‖M(x_t) − v_t‖²,
         * M(x) = [x +] W1 gelu(W2 x), summed over the chunk with weights c_t, the
         * backward pass by hand in plain f64 (the weights held fixed):
         *   a = W2 x, s = gelu(a), e = M(x) − v,
         *   ∂L/∂W1 = e sᵀ,  ∂L/∂W2 = (gelu'(a) ⊙ W1ᵀ e) xᵀ,
         * each term over ‖s‖² + hidden_eps and ‖x‖² + eps with lms (the normalised-LMS
         * option, not in Eq. 31). g1: [N][out][H], g2: [N][H][IN]. */
        double g1[N][IN][H] = {{{0}}}, g2[N][H][IN] = {{{0}}};
        for (int b = 0; b < N; b++)
            for (int t = 0; t < n; t++) {
                double xt[IN], a[H], sh[H], e[IN], ss = hidden_eps, xx = eps;
                for (int i = 0; i < IN; i++) xt[i] = mi_get(x, (b * n + t) * IN + i);
                for (int j = 0; j < H; j++) {
                    a[j] = 0;
                    for (int i = 0; i < IN; i++)
                        a[j] += mi_get(w2, (per_seq ? b * H * IN : 0) + j * IN + i) * xt[i];
                    sh[j] = 0.5 * a[j] * (1 + erf(a[j] / sqrt(2.0)));
                    ss += sh[j] * sh[j];
                }
                for (int i = 0; i < IN; i++) xx += xt[i] * xt[i];
                for (int o = 0; o < out; o++) {
                    double m = residual ? xt[o] : 0;
                    for (int j = 0; j < H; j++)
                        m += mi_get(w1, (per_seq ? b * out * H : 0) + o * H + j) * sh[j];
                    e[o] = m - mi_get(v, (b * n + t) * out + o);
                }
                double ct = mi_get(c, b * n + t), c1 = lms ? ct / ss : ct, c2 = lms ? ct / xx : ct;
                for (int j = 0; j < H; j++) {
                    double back = 0;
                    for (int o = 0; o < out; o++) {
                        double w = mi_get(w1, (per_seq ? b * out * H : 0) + o * H + j);
                        back += w * e[o];
                        g1[b][o][j] += c1 * e[o] * sh[j];
                    }
                    double gp = 0.5 * (1 + erf(a[j] / sqrt(2.0))) +
                                a[j] * exp(-0.5 * a[j] * a[j]) / sqrt(2 * M_PI);
                    for (int i = 0; i < IN; i++) g2[b][j][i] += c2 * gp * back * xt[i];
                }
            }
#define G1_AT(i) g1[(i) / (out * H)][(i) % (out * H) / H][(i) % H]
#define G2_AT(i) (&g2[0][0][0])[i]
        ck_assert_int_eq(d1->rank, 3);
        ck_assert(d1->shape[0] == N && d2->shape[0] == N);
        for (int64_t i = 0; i < d1->numel; i++)
            ck_assert_msg(fabs(mi_get(d1, i) - G1_AT(i)) < 1e-12,
                          "variant %d: D1[%lld] = %.15g, Eq. 31 %.15g", variant, (long long)i,
                          mi_get(d1, i), G1_AT(i));
        for (int64_t i = 0; i < d2->numel; i++)
            ck_assert_msg(fabs(mi_get(d2, i) - G2_AT(i)) < 1e-12,
                          "variant %d: D2[%lld] = %.15g, Eq. 31 %.15g", variant, (long long)i,
                          mi_get(d2, i), G2_AT(i));
        mi_nl_mlp_factor f[2];
        ck_assert_int_eq(mi_nl_mlp_factors(w1, w2, residual, x, v, lms, eps, hidden_eps, f), 0);
        mi_tensor *cc = mi_unsqueeze(c, -1);
        mi_tensor *sum1 = mi_matmul_t(mi_mul(cc, f[0].g), f[0].u, true, false);
        mi_tensor *sum2 = mi_matmul_t(mi_mul(cc, f[1].g), f[1].u, true, false);
        for (int64_t i = 0; i < d1->numel; i++)
            ck_assert_msg(fabs(mi_get(sum1, i) - G1_AT(i)) < 1e-12,
                          "variant %d: factors of D1[%lld] = %.15g, Eq. 31 %.15g", variant,
                          (long long)i, mi_get(sum1, i), G1_AT(i));
        for (int64_t i = 0; i < d2->numel; i++)
            ck_assert_msg(fabs(mi_get(sum2, i) - G2_AT(i)) < 1e-12,
                          "variant %d: factors of D2[%lld] = %.15g, Eq. 31 %.15g", variant,
                          (long long)i, mi_get(sum2, i), G2_AT(i));
#undef G1_AT
#undef G2_AT
    }
}
END_TEST

/* A wiped memory (W2 ≈ 0, so the hidden activations s ≈ 0, what a retention
 * α ≈ 0 leaves): the normalised step on W1, c e sᵀ/(‖s‖² + hidden_eps), stays
 * within c‖e‖/2 at hidden_eps = MI_NL_MLP_HIDDEN_EPS, and so does the rank-one
 * form c g ûᵀ HOPE uses. With the input's eps (1e-6) in its place it was
 * c‖e‖/‖s‖, here ~10⁴ times that bound: how HOPE went to NaN on MQAR. */
START_TEST(mlp_step_bounded_when_the_hidden_layer_vanishes)
{
    enum { IN = 4, H = 16 };
    mi_rng r;
    mi_rng_seed(&r, 140);
    mi_tensor *w1 = mi_randn(&r, MI_F64, MI_SHAPE(IN, H), 0, 1);
    mi_tensor *w2 = mi_randn(&r, MI_F64, MI_SHAPE(H, IN), 0, 1e-4);  /* wiped */
    mi_tensor *x = mi_l2_normalize(mi_randn(&r, MI_F64, MI_SHAPE(1, 1, IN), 0, 1), 0.0);
    mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(1, 1, IN), 0, 1);
    mi_tensor *c = mi_full(MI_F64, MI_SHAPE(1, 1), 0.5);
    mi_tensor *n1, *n2;
    ck_assert_int_eq(mi_nl_mlp_step(w1, w2, true, x, v, c, true, 1e-6, MI_NL_MLP_HIDDEN_EPS,
                                    &n1, &n2), 0);
    mi_tensor *d1 = mi_sub(w1, n1);
    mi_nl_mlp_factor f[2];
    ck_assert_int_eq(mi_nl_mlp_factors(w1, w2, true, x, v, true, 1e-6, MI_NL_MLP_HIDDEN_EPS, f),
                     0);
    mi_tensor *rank_one = mi_mul_scalar(mi_matmul_t(f[0].g, f[0].u, true, false), 0.5);
    mi_tensor *s = mi_gelu(mi_matmul_t(x, w2, false, true));
    mi_tensor *e = mi_sub(mi_add(x, mi_matmul_t(s, w1, false, true)), v);
    double err = sqrt(mi_item(mi_sum(mi_square(e), MI_ALL, false)));
    double s_norm = sqrt(mi_item(mi_sum(mi_square(s), MI_ALL, false)));
    ck_assert_msg(s_norm < 1e-3, "the hidden layer is not wiped: |s| = %g", s_norm);
    mi_tensor *steps[2] = {d1, rank_one};
    for (int i = 0; i < 2; i++) {
        double step = sqrt(mi_item(mi_sum(mi_square(steps[i]), MI_ALL, false)));
        ck_assert_msg(isfinite(step) && step <= 0.5 * err / 2 * (1 + 1e-12),
                      "%s: |D1| = %g > c|e|/2 = %g (|s| = %g)", i ? "factors" : "step", step,
                      0.5 * err / 2, s_norm);
    }
}
END_TEST

/* ---------------------------------------------------------------- CMS */

enum { CD = 3, CH = 4 };

static mi_cms_config cms_config(const char *chunks, double eta)
{
    mi_cms_config c = mi_cms_config_default(CD);
    c.hidden = CH;
    c.eta = eta;
    ck_assert_msg(mi_cms_config_chunks(&c, chunks) == 0, "%s", mi_error());
    return c;
}

static void make_cms(mi_cms *m, const mi_cms_config *c, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    ck_assert_msg(mi_cms_init(m, c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
}

static void check_cms_form(const char *chunks, int64_t B, int64_t T, bool rate_mean, bool lms)
{
    mi_cms_config c = cms_config(chunks, 0.6);
    c.rate_mean = rate_mean;
    c.lms = lms;
    mi_cms m;
    make_cms(&m, &c, 5);
    mi_tensor *x = input(6, B, T, CD);
    mi_tensor *y = mi_cms_forward(&m, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert(y->rank == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == CD);
    double want[2 * MAXT * CD];
    ref_cms(&m, x, want);
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12 * (1 + fabs(want[i])),
                      "C = {%s}%s%s: y[%lld] = %.15g, reference %.15g", chunks,
                      rate_mean ? " mean" : "", lms ? " lms" : "", (long long)i, mi_get(y, i),
                      want[i]);
}

/* Eq. 31's sum and plain gradient, and each option */
static void check_cms_against_reference(const char *chunks, int64_t B, int64_t T)
{
    for (int form = 0; form < 4; form++) check_cms_form(chunks, B, T, form & 1, form & 2);
}

START_TEST(cms_all_chunks_one_equals_per_token_loop)
{
    check_cms_against_reference("1,1,1", 2, 7);
    check_cms_against_reference("1", 1, 5);
}
END_TEST

START_TEST(cms_mixed_chunks_equal_loop)
{
    check_cms_against_reference("1,3,4", 2, 10);  /* 10 is no multiple of 3 or 4 */
    check_cms_against_reference("4,2,16", 1, 9);  /* 16 > T: that block never updates */
}
END_TEST

/* Eq. 31's schedule: block ℓ's effective weights at position p differ from
 * those at p − 1 exactly when p is a multiple of C^(ℓ) (0-based positions;
 * the paper's 1-based position i = p after which Eq. 31 updates). */
START_TEST(cms_weights_change_only_at_multiples_of_chunk)
{
    mi_cms_config c = cms_config("1,3,4", 0.5);
    mi_cms m;
    make_cms(&m, &c, 7);
    enum { B = 2, T = 11 };
    mi_cms_trace tr;
    mi_tensor *y = mi_cms_forward_trace(&m, input(8, B, T, CD), &tr);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert_int_eq(tr.n_blocks, 3);
    for (int l = 0; l < 3; l++) {
        int C = c.chunk[l];
        mi_tensor *w[2] = {tr.w1[l], tr.w2[l]};
        const mi_tensor *w0[2] = {m.level[l].w1, m.level[l].w2};
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(w[k]->rank, 4);
            ck_assert(w[k]->shape[0] == B && w[k]->shape[1] == T);
            int64_t per = w[k]->shape[2] * w[k]->shape[3];
            ck_assert_int_eq(per, w0[k]->numel);
            int changes = 0;
            for (int64_t b = 0; b < B; b++) {
                /* position 0 uses θ_0 */
                for (int64_t e = 0; e < per; e++)
                    ck_assert(mi_get(w[k], (b * T) * per + e) == mi_get(w0[k], e));
                for (int64_t p = 1; p < T; p++) {
                    double diff = 0;
                    for (int64_t e = 0; e < per; e++)
                        diff = fmax(diff, fabs(mi_get(w[k], (b * T + p) * per + e) -
                                               mi_get(w[k], (b * T + p - 1) * per + e)));
                    if (p % C)
                        ck_assert_msg(diff == 0, "block %d (C = %d), w%d: changed at p = %lld by "
                                      "%g", l + 1, C, 1 + k, (long long)p, diff);
                    else {
                        ck_assert_msg(diff > 1e-6, "block %d (C = %d), w%d: no update at p = %lld",
                                      l + 1, C, 1 + k, (long long)p);
                        changes++;
                    }
                }
            }
            ck_assert_int_eq(changes, B * ((T - 1) / C));
        }
    }
    /* the two batch rows learn different things */
    ck_assert(mi_get(tr.w1[0], 5 * CD * CH) != mi_get(tr.w1[0], (T + 5) * CD * CH));
}
END_TEST

/* With η → 0 nothing is learned in context: each block is a plain pre-norm
 * FFN, h + W1 gelu(W2 RMSNorm(h) ⊙ γ) (the paper's Transformer case). */
START_TEST(cms_without_updates_is_a_prenorm_ffn_chain)
{
    mi_cms_config c = cms_config("1,2", 0.5);
    mi_cms m;
    make_cms(&m, &c, 9);
    for (int l = 0; l < 2; l++) mi_fill(m.level[l].eta_bias, -1e4);  /* σ = 0 exactly */
    mi_tensor *x = input(10, 2, 6, CD);
    mi_tensor *y = mi_cms_forward(&m, x);
    ck_assert_ptr_nonnull(y);
    /* Nested Learning, Eq. 30 with Eq. 31's update zero: y_t = MLP^(f_2)(MLP^(f_1)(x_t)),
     * each block h ← h + W1 gelu(W2 u), u = h / √(mean h² + ε) ⊙ γ (the
     * normalisation and residual Eq. 30 leaves out), in plain f64 */
    enum { B = 2, T = 6 };
    double h[B * T][CD];
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < CD; i++) h[bt][i] = P(x, bt * CD + i);
    for (int l = 0; l < 2; l++) {
        const mi_cms_level *L = &m.level[l];
        for (int bt = 0; bt < B * T; bt++) {
            double ms = 0, u[CD], s[CH];
            for (int i = 0; i < CD; i++) ms += h[bt][i] * h[bt][i] / CD;
            for (int i = 0; i < CD; i++) u[i] = h[bt][i] / sqrt(ms + c.norm_eps) * P(L->norm, i);
            for (int j = 0; j < CH; j++) {
                double a = 0;
                for (int i = 0; i < CD; i++) a += P(L->w2, j * CD + i) * u[i];
                s[j] = gelu(a);
            }
            for (int i = 0; i < CD; i++)
                for (int j = 0; j < CH; j++) h[bt][i] += P(L->w1, i * CH + j) * s[j];
        }
    }
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < CD; i++)
            ck_assert_msg(fabs(mi_get(y, bt * CD + i) - h[bt][i]) < 1e-14,
                          "y[%d] = %.17g, Eq. 30 %.17g", bt * CD + i, mi_get(y, bt * CD + i),
                          h[bt][i]);
}
END_TEST

static int cms_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    out[0] = mi_cms_forward(ctx, in[0]);
    return out[0] ? 1 : -1;
}

START_TEST(cms_gradcheck)
{
    mi_cms_config c = cms_config("1,2,4", 0.6);
    mi_cms m;
    make_cms(&m, &c, 11);
    int n;
    const mi_named_tensor *p = mi_cms_params(&m, &n);
    ck_assert_int_eq(n, 18);
    gradcheck_params("cms {1,2,4}", cms_fn, &m, input(12, 2, 6, CD), p, n);
}
END_TEST

START_TEST(cms_is_causal)
{
    mi_cms_config c = cms_config("1,2,3", 0.5);
    mi_cms m;
    make_cms(&m, &c, 13);
    enum { T = 7 };
    mi_tensor *x = input(14, 2, T, CD);
    mi_tensor *y = mi_cms_forward(&m, x);
    ck_assert_ptr_nonnull(y);
    for (int s = 0; s < T; s++) {
        mi_tensor *x2 = mi_tensor_to(x, MI_F64);
        for (int i = 0; i < CD; i++) mi_set(x2, s * CD + i, mi_get(x2, s * CD + i) + 0.7);
        mi_tensor *y2 = mi_cms_forward(&m, x2);
        ck_assert_ptr_nonnull(y2);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < CD; i++) {
                double diff = fabs(mi_get(y2, t * CD + i) - mi_get(y, t * CD + i));
                if (t < s) ck_assert_msg(diff == 0, "y[%d] moved when x[%d] changed", t, s);
                if (t >= s) ck_assert_msg(diff > 0, "y[%d] ignores x[%d]", t, s);
                ck_assert(mi_get(y2, (T + t) * CD + i) == mi_get(y, (T + t) * CD + i));
            }
    }
}
END_TEST

static void expect_cms_error(mi_cms_config c, mi_dtype dt, const char *needle)
{
    mi_cms m;
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_error_clear();
    ck_assert_int_eq(mi_cms_init(&m, &c, dt, &r, test_scope), -1);
    ck_assert_error_has(needle);
    mi_error_clear();
}

START_TEST(cms_bad_configurations)
{
    mi_cms_config c = mi_cms_config_default(CD);
    c.chunk[1] = 0;
    expect_cms_error(c, MI_F64, "chunk size C^(2) = 0 must be >= 1");
    c = mi_cms_config_default(CD);
    c.chunk[0] = -3;
    expect_cms_error(c, MI_F64, "chunk size C^(1) = -3 must be >= 1");
    c = mi_cms_config_default(CD);
    c.n_blocks = 0;
    expect_cms_error(c, MI_F64, "n_blocks must be in [1, 8], got 0");
    c.n_blocks = 9;
    expect_cms_error(c, MI_F64, "n_blocks must be in [1, 8], got 9");
    c = mi_cms_config_default(0);
    expect_cms_error(c, MI_F64, "d_model must be >= 1");
    c = mi_cms_config_default(CD);
    c.hidden = -1;
    expect_cms_error(c, MI_F64, "cms: hidden must be >= 0, got -1");
    c = mi_cms_config_default(CD);
    c.eta = 1.5;
    expect_cms_error(c, MI_F64, "cms: eta must be in (0, 1), got 1.5");
    c = mi_cms_config_default(CD);
    expect_cms_error(c, MI_I32, "f32 or f64");

    /* chunk lists */
    const char *bad[][2] = {{"", "empty chunk list"}, {"1,0,4", "C^(2) = 0"},
                            {"1,x", "expected integers"}, {"1,2,", "ends with a comma"},
                            {"2,-1", "C^(2) = -1"}, {"1,1,1,1,1,1,1,1,1", "more than 8"}};
    for (int i = 0; i < 6; i++) {
        c = mi_cms_config_default(CD);
        mi_error_clear();
        ck_assert_int_eq(mi_cms_config_chunks(&c, bad[i][0]), -1);
        ck_assert_error_has(bad[i][1]);
        ck_assert_int_eq(c.n_blocks, 3);  /* left as it was */
    }
    mi_error_clear();
    ck_assert_int_eq(mi_cms_config_chunks(&c, "2,8"), 0);
    ck_assert(c.n_blocks == 2 && c.chunk[0] == 2 && c.chunk[1] == 8);

    /* inputs of the wrong width or dtype */
    mi_cms m;
    make_cms(&m, &c, 1);
    ck_assert_ptr_null(mi_cms_forward(&m, mi_zeros(MI_F64, MI_SHAPE(1, 3, CD + 1))));
    ck_assert_error_has("x is f64 [1,3,4]; expected f64 [B, T, 3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_forward(&m, mi_zeros(MI_F32, MI_SHAPE(1, 3, CD))));
    ck_assert_error_has("expected f64");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("cms");
    TCase *tc = tcase_slow("cms");
    tcase_add_test(tc, mlp_step_is_the_eq31_gradient_sum);
    tcase_add_test(tc, mlp_step_bounded_when_the_hidden_layer_vanishes);
    tcase_add_test(tc, cms_all_chunks_one_equals_per_token_loop);
    tcase_add_test(tc, cms_mixed_chunks_equal_loop);
    tcase_add_test(tc, cms_weights_change_only_at_multiples_of_chunk);
    tcase_add_test(tc, cms_without_updates_is_a_prenorm_ffn_chain);
    tcase_add_test(tc, cms_gradcheck);
    tcase_add_test(tc, cms_is_causal);
    tcase_add_test(tc, cms_bad_configurations);
    suite_add_tcase(s, tc);
    return s;
}
