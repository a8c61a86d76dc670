/* Lattice (the Lattice paper, §2 and Appendix B) as MIRAS components: the
 * lattice memory (m slots, φ), the biases lattice-dec / lattice-enc /
 * lattice-sim (Eq. 3–4, 6–7, 8–9), the retentions sphere / sphere-forget
 * (Eq. 11, 15) and l1 (Eq. 17), and the presets lattice-dec/-enc/-sim.
 *
 * The reference below is written the paper's way, independently of the
 * framework: the state S [d][m] with one slot per column (the framework
 * stores Sᵀ), the explicit O(dm) projection of Appendix B.2,
 *   h^{⊥s_i} = h − s_i (s_iᵀ h)/‖s_i‖²,   s_i ← s_i − η c_i h^{⊥s_i}/‖s_i‖,
 * with Eq. 10's (h, c) per objective, and Eq. 11's β form of the
 * projection, β = (1 + ‖Δs‖²)^(−1/2). */
#include <string.h>

#include "harness.h"

enum { N = 2, T = 7, D = 4, M = 3, T_LONG = 200 };

typedef enum { DEC, ENC, SIM } form;
typedef enum { RET_NONE, RET_SPHERE, RET_SPHERE_FORGET, RET_L2, RET_L1 } ret;
static const char *const bias_names[] = {"lattice-dec", "lattice-enc", "lattice-sim"};
static const char *const ret_names[] = {"none", "sphere", "sphere-forget", "l2", "l1"};

typedef struct seqs {
    int t;                                /* tokens */
    mi_tensor *q, *k, *v, *eta, *alpha;   /* q, k [N,t,M], v [N,t,D], gates [N,t] */
    mi_tensor *w0;                        /* Sᵀ, [M, D] */
} seqs;

static seqs make_seqs(mi_rng *r, int t, bool grad)
{
    seqs s = {
        .t = t,
        .q = mi_randn(r, MI_F64, MI_SHAPE(N, t, M), 0, 0.6),
        .k = mi_randn(r, MI_F64, MI_SHAPE(N, t, M), 0, 0.6),
        .v = mi_randn(r, MI_F64, MI_SHAPE(N, t, D), 0, 1),
        .eta = mi_rand(r, MI_F64, MI_SHAPE(N, t), 0.2, 0.9),
        .alpha = mi_rand(r, MI_F64, MI_SHAPE(N, t), 0.7, 0.99),
        /* slots of norm ≈ 1, not on the sphere (the projection has work to do) */
        .w0 = mi_randn(r, MI_F64, MI_SHAPE(M, D), 0, 0.5),
    };
    if (grad) {
        mi_tensor **all[] = {&s.q, &s.k, &s.v, &s.eta, &s.alpha, &s.w0};
        for (int i = 0; i < 6; i++) mi_requires_grad(*all[i], true);
    }
    return s;
}

static double at(const mi_tensor *t, int64_t i) { return mi_get(t, i); }

/* ---------------------------------------------------------------- the reference */
typedef struct ref_opts {
    form f;
    ret r;
    bool phi;      /* the state normalisation φ */
    int chunk;
    double tau;    /* l1: λ, the threshold λ γ_t (Eq. 17), or λ with constant */
    bool constant; /* l1: l1_threshold=constant */
} ref_opts;

static double col_norm(double S[D][M], int i)
{
    double ss = 0;
    for (int a = 0; a < D; a++) ss += S[a][i] * S[a][i];
    return sqrt(ss);
}

/* y [N, t, D]; final [N][D][M] (may be NULL). */
static void reference(const seqs *s, ref_opts o, double *y, double (*final)[D][M])
{
    const int t_n = s->t;
    for (int n = 0; n < N; n++) {
        double S[D][M], S0[D][M] = {{0}}, acc[D][M] = {{0}}; /* acc: Σ Δs since the chunk began */
        for (int a = 0; a < D; a++)
            for (int i = 0; i < M; i++) S[a][i] = at(s->w0, i * D + a); /* W0 is Sᵀ */
        bool sphere = o.r == RET_SPHERE || o.r == RET_SPHERE_FORGET;
        if (sphere) /* A_0 = P_C(W_0) */
            for (int i = 0; i < M; i++) {
                double nrm = col_norm(S, i);
                for (int a = 0; a < D; a++) S[a][i] /= nrm;
            }
        for (int t = 0; t < t_n; t++) {
            if (t % o.chunk == 0) {
                memcpy(S0, S, sizeof S);
                memset(acc, 0, sizeof acc);
            }
            const int64_t bk = (int64_t)(n * t_n + t) * M, bv = (int64_t)(n * t_n + t) * D;
            double eta = at(s->eta, n * t_n + t), alpha = at(s->alpha, n * t_n + t);
            /* φ(S0) and its norms: the chunk's gradients are taken there */
            double nrm[M], phi[D][M];
            for (int i = 0; i < M; i++) {
                nrm[i] = o.phi ? col_norm(S0, i) : 1;
                for (int a = 0; a < D; a++) phi[a][i] = S0[a][i] / nrm[i];
            }
            /* Eq. 10's h (in R^d) and c (in R^m) */
            double h[D], c[M];
            if (o.f == DEC) { /* e = φ(S)k − v, h = e, c = k */
                for (int a = 0; a < D; a++) {
                    h[a] = -at(s->v, bv + a);
                    for (int i = 0; i < M; i++) h[a] += phi[a][i] * at(s->k, bk + i);
                }
                for (int i = 0; i < M; i++) c[i] = at(s->k, bk + i);
            } else if (o.f == ENC) { /* e = φ(S)ᵀv − k, h = v, c = e */
                for (int a = 0; a < D; a++) h[a] = at(s->v, bv + a);
                for (int i = 0; i < M; i++) {
                    c[i] = -at(s->k, bk + i);
                    for (int a = 0; a < D; a++) c[i] += phi[a][i] * at(s->v, bv + a);
                }
            } else { /* h = −v, c = k */
                for (int a = 0; a < D; a++) h[a] = -at(s->v, bv + a);
                for (int i = 0; i < M; i++) c[i] = at(s->k, bk + i);
            }
            /* Appendix B.2: h^{⊥s_i} = h − s_i(s_iᵀh)/‖s_i‖², then Δs_i = −η c_i h^⊥/‖s_i‖ */
            double delta[D][M];
            for (int i = 0; i < M; i++) {
                double sh = 0, ss = 0;
                for (int a = 0; a < D; a++) sh += S0[a][i] * h[a], ss += S0[a][i] * S0[a][i];
                for (int a = 0; a < D; a++) {
                    double hp = o.phi ? h[a] - S0[a][i] * sh / ss : h[a];
                    delta[a][i] = -eta * c[i] * hp / nrm[i];
                }
            }
            bool decay = o.r == RET_SPHERE_FORGET || o.r == RET_L2;
            for (int a = 0; a < D; a++)
                for (int i = 0; i < M; i++) {
                    S[a][i] = (decay ? alpha : 1) * S[a][i] + delta[a][i];
                    acc[a][i] += delta[a][i];
                }
            bool boundary = t % o.chunk == o.chunk - 1 || t == t_n - 1;
            if (boundary && o.r == RET_SPHERE)
                /* Eq. 11: s = β (s0 + Δs), β = (1 + ‖Δs‖²)^(−1/2) (‖s0‖ = 1, Δs ⟂ s0) */
                for (int i = 0; i < M; i++) {
                    double dd = 0;
                    for (int a = 0; a < D; a++) dd += acc[a][i] * acc[a][i];
                    double beta = 1 / sqrt(1 + dd);
                    for (int a = 0; a < D; a++) S[a][i] = beta * (S0[a][i] + acc[a][i]);
                }
            if (boundary && o.r == RET_SPHERE_FORGET) /* P_C(α s + Δs) = x / ‖x‖ */
                for (int i = 0; i < M; i++) {
                    double nr = col_norm(S, i);
                    for (int a = 0; a < D; a++) S[a][i] /= nr;
                }
            if (boundary && o.r == RET_L1) /* Eq. 17: sign(z) max(|z| − γ_t λ, 0) */
                for (int a = 0; a < D; a++)
                    for (int i = 0; i < M; i++) {
                        double z = S[a][i], m = fabs(z) - (o.constant ? o.tau : eta * o.tau);
                        S[a][i] = m > 0 ? (z > 0 ? m : -m) : 0;
                    }
            /* read after write: y = φ(S_t) q_t */
            for (int a = 0; a < D; a++) {
                double ya = 0;
                for (int i = 0; i < M; i++)
                    ya += S[a][i] / (o.phi ? col_norm(S, i) : 1) * at(s->q, bk + i);
                y[bv + a] = ya;
            }
        }
        if (final) memcpy(final[n], S, sizeof S);
    }
}

/* ---------------------------------------------------------------- the framework */
static mi_miras_config lattice_config(form f, ret r, bool phi, int chunk, bool closed)
{
    mi_miras_config c = mi_miras_config_default();
    c.memory = "lattice";
    c.slots = M;
    c.bias = bias_names[f];
    c.retention = ret_names[r];
    c.algorithm = "gd";
    c.slot_norm = phi;
    c.chunk = chunk;
    c.closed_form = closed;
    return c;
}

static mi_tensor *run_config(const mi_miras_config *c, const seqs *s, mi_tensor **final)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, c) == 0, "%s", mi_error());
    mi_miras_gates g = {.eta = s->eta, .alpha = s->alpha};
    mi_tensor *y = mi_miras_forward(&m, s->q, s->k, s->v, &g, &s->w0, final);
    ck_assert_msg(y != NULL, "%s", mi_error());
    return y;
}

/* y and the final state against the reference, to tol·(1 + |want|). */
static void expect_reference(const seqs *s, ref_opts o, bool closed, double tol)
{
    mi_miras_config c = lattice_config(o.f, o.r, o.phi, o.chunk, closed);
    if (mi_retention_find(c.retention)->params) {  /* l1: the threshold */
        config_setf(&c, "l1_gamma=%.17g", o.tau);
        config_set(&c, o.constant ? "l1_threshold=constant" : "l1_threshold=scaled");
    }
    mi_tensor *final;
    mi_tensor *y = run_config(&c, s, &final);
    double *want = malloc(sizeof(double) * N * (size_t)s->t * D);
    double fin[N][D][M];
    reference(s, o, want, fin);
    const char *what = bias_names[o.f], *rn = ret_names[o.r];
    for (int64_t i = 0; i < (int64_t)N * s->t * D; i++)
        ck_assert_msg(fabs(mi_get(y, i) - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s/%s phi %d chunk %d closed %d: y[%lld] = %.15g, want %.15g", what, rn,
                      o.phi, o.chunk, closed, (long long)i, mi_get(y, i), want[i]);
    free(want);
    /* final state [N, 1, M, D] is Sᵀ */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < M; i++)
            for (int a = 0; a < D; a++) {
                double got = mi_get(final, (n * M + i) * D + a), w = fin[n][a][i];
                ck_assert_msg(fabs(got - w) <= tol * (1 + fabs(w)),
                              "%s/%s chunk %d closed %d: final S[%d][%d][%d] = %.15g, want %.15g",
                              what, rn, o.chunk, closed, n, a, i, got, w);
            }
}

/* ---------------------------------------------------------------- tests */

/* The explicit O(dm) update of Appendix B.2 (Eq. 4, 7, 9 through Eq. 10) ==
 * the framework's update, both from the closed form and from the autodiff
 * gradient of the stated loss; with and without the projection (Eq. 11, in
 * the reference as the β form), at chunk 1 (the exact rule) and 2, 3. */
START_TEST(explicit_update_matches_b2)
{
    mi_rng r;
    mi_rng_seed(&r, 11);
    seqs s = make_seqs(&r, T, false);
    const ret rets[] = {RET_NONE, RET_SPHERE};
    for (int f = DEC; f <= SIM; f++)
        for (int ri = 0; ri < 2; ri++)
            for (int chunk = 1; chunk <= 3; chunk++)
                for (int closed = 0; closed < 2; closed++)
                    expect_reference(&s, (ref_opts){.f = f, .r = rets[ri], .phi = true,
                                                    .chunk = chunk}, closed, 1e-10);
}
END_TEST

/* The component's closed forms against mi_grad of the stated loss, taken
 * directly (one state, several tokens): ∂/∂S of ½‖φ(S)k − v‖², ½‖φ(S)ᵀv − k‖²
 * and −⟨φ(S)ᵀv, k⟩, written here with ops independent of memory_lattice.c. */
START_TEST(closed_form_equals_autodiff_of_the_loss)
{
    mi_rng r;
    mi_rng_seed(&r, 12);
    const mi_memory_kind *mem = mi_memory_find("lattice");
    ck_assert_ptr_nonnull(mem);
    mi_miras_config c = lattice_config(DEC, RET_NONE, true, 1, true);
    for (int f = DEC; f <= SIM; f++) {
        const mi_bias_kind *b = mi_bias_find(bias_names[f]);
        ck_assert_ptr_nonnull(b);
        mi_tensor *w = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(1, 1, M, D), 0, 0.5), true);
        mi_tensor *k = mi_randn(&r, MI_F64, MI_SHAPE(1, 1, M), 0, 1);
        mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(1, 1, D), 0, 1);
        /* the loss from scratch: Φ = columns of S normalised; S = wᵀ */
        mi_tensor *sm = mi_transpose(mi_reshape(w, MI_SHAPE(M, D)), 0, 1);           /* [D, M] */
        mi_tensor *norms = mi_sqrt(mi_sum(mi_square(sm), 0, true));                  /* [1, M] */
        mi_tensor *phi = mi_div(sm, norms);
        mi_tensor *kk = mi_reshape(k, MI_SHAPE(M, 1)), *vv = mi_reshape(v, MI_SHAPE(D, 1));
        mi_tensor *loss;
        if (f == DEC)
            loss = mi_mul_scalar(mi_sum(mi_square(mi_sub(mi_matmul(phi, kk), vv)), MI_ALL, false), 0.5);
        else if (f == ENC)
            loss = mi_mul_scalar(
                mi_sum(mi_square(mi_sub(mi_matmul_t(phi, vv, true, false), kk)), MI_ALL, false), 0.5);
        else
            loss = mi_neg(mi_sum(mi_mul(mi_matmul_t(phi, vv, true, false), kk), MI_ALL, false));
        mi_tensor *g_auto;
        ck_assert_int_eq(mi_grad(&loss, NULL, 1, &w, 1, false, &g_auto), 0);
        /* the component: error from the bias, gradient from the memory */
        mi_tensor *g_closed;
        if (b->encoding) {
            mi_tensor *z = mem->encode(&c, &w, v);
            ck_assert_int_eq(mem->encode_grad(&c, &w, v, b->error(&c, z, k, NULL), &g_closed), 0);
        } else {
            mi_tensor *yy = mem->forward(&c, &w, k);
            ck_assert_int_eq(mem->grad(&c, &w, k, b->error(&c, yy, v, NULL), &g_closed), 0);
        }
        ck_assert_int_eq(g_closed->numel, M * D);
        for (int i = 0; i < M * D; i++)
            ck_assert_close(mi_get(g_closed, i), mi_get(g_auto, i), 1e-12);
        /* and the framework's loss (bias ∘ memory) equals the one written here */
        mi_tensor *l_fw = b->encoding ? b->loss(&c, mem->encode(&c, &w, v), k, NULL)
                                      : b->loss(&c, mem->forward(&c, &w, k), v, NULL);
        ck_assert_close(mi_get(l_fw, 0), mi_get(loss, 0), 1e-12);
    }
}
END_TEST

/* Slot norms stay 1 (to 1e-6) over T = 200 with the projection, at every
 * prefix checked, in f64 and f32, chunk 1 and 3, with and without the forget
 * gate; without it (retention none) the orthogonal updates only grow them
 * (Pythagoras, §2.3). */
START_TEST(slot_norms_stay_one)
{
    mi_rng r;
    mi_rng_seed(&r, 13);
    seqs s = make_seqs(&r, T_LONG, false);
    const int prefixes[] = {1, 2, 37, 120, T_LONG};
    const mi_dtype dts[] = {MI_F64, MI_F32};
    for (int di = 0; di < 2; di++)
        for (int f = DEC; f <= SIM; f++)
            for (int rr = RET_NONE; rr <= RET_SPHERE_FORGET; rr++)
                for (int chunk = 1; chunk <= 3; chunk += 2)
                    for (int pi = 0; pi < 5; pi++) {
                        int tp = prefixes[pi];
                        if (rr == RET_NONE && tp != T_LONG) continue;
                        seqs p = {
                            .t = tp,
                            .q = mi_tensor_to(mi_slice(s.q, 1, 0, tp), dts[di]),
                            .k = mi_tensor_to(mi_slice(s.k, 1, 0, tp), dts[di]),
                            .v = mi_tensor_to(mi_slice(s.v, 1, 0, tp), dts[di]),
                            .eta = mi_tensor_to(mi_slice(s.eta, 1, 0, tp), dts[di]),
                            .alpha = mi_tensor_to(mi_slice(s.alpha, 1, 0, tp), dts[di]),
                            .w0 = mi_tensor_to(s.w0, dts[di]),
                        };
                        mi_miras_config c = lattice_config(f, rr, true, chunk, true);
                        mi_tensor *final;
                        mi_tensor *y = run_config(&c, &p, &final);
                        ck_assert_int_eq(y->dtype, dts[di]);
                        for (int n = 0; n < N; n++)
                            for (int i = 0; i < M; i++) {
                                double ss = 0;
                                for (int a = 0; a < D; a++) {
                                    double x = mi_get(final, (n * M + i) * D + a);
                                    ss += x * x;
                                }
                                if (rr == RET_NONE) {
                                    double s0 = 0;
                                    for (int a = 0; a < D; a++)
                                        s0 += at(s.w0, i * D + a) * at(s.w0, i * D + a);
                                    ck_assert_msg(ss > s0 * (1 + 1e-3),
                                                  "%s none: slot %d norm² %g did not grow from %g",
                                                  bias_names[f], i, ss, s0);
                                } else
                                    ck_assert_msg(fabs(sqrt(ss) - 1) <= 1e-6,
                                                  "%s/%s %s chunk %d T %d: slot %d norm %.10f",
                                                  bias_names[f], ret_names[rr],
                                                  di ? "f32" : "f64", chunk, tp, i, sqrt(ss));
                            }
                    }
}
END_TEST

/* Remark A.2: without φ the decoding rule is the delta rule,
 * S_t = S_{t-1}(I − γ k kᵀ) + γ v kᵀ: the matrix/l2/none/gd layer with
 * W_0 = S_0. (And the similarity rule is linear attention's Hebbian
 * S_t = S_{t-1} + γ v kᵀ: matrix/dot/none/gd.) */
START_TEST(without_phi_is_the_delta_rule)
{
    mi_rng r;
    mi_rng_seed(&r, 14);
    seqs s = make_seqs(&r, T, false);
    mi_tensor *w_matrix = mi_transpose(s.w0, 0, 1); /* S = (Sᵀ)ᵀ, [D, M] */
    const form forms[] = {DEC, SIM};
    const char *matrix_bias[] = {"l2", "dot"};
    for (int fi = 0; fi < 2; fi++)
        for (int chunk = 1; chunk <= 2; chunk++)
            for (int closed = 0; closed < 2; closed++) {
                mi_miras_config c = lattice_config(forms[fi], RET_NONE, false, chunk, closed);
                mi_tensor *y = run_config(&c, &s, NULL);
                mi_miras_config cm = mi_miras_config_default();
                cm.memory = "matrix";
                cm.bias = matrix_bias[fi];
                cm.retention = "none";
                cm.algorithm = "gd";
                cm.chunk = chunk;
                cm.closed_form = closed;
                cm.form = MI_FORM_MINIBATCH; /* the lattice's chunk rule (it has no exact form) */
                mi_miras mm;
                ck_assert_int_eq(mi_miras_init(&mm, &cm), 0);
                mi_miras_gates g = {.eta = s.eta};
                mi_tensor *ym = mi_miras_forward(&mm, s.q, s.k, s.v, &g, &w_matrix, NULL);
                ck_assert_ptr_nonnull(ym);
                for (int i = 0; i < N * T * D; i++)
                    ck_assert_msg(fabs(mi_get(y, i) - mi_get(ym, i)) < 1e-12,
                                  "%s chunk %d closed %d: y[%d] = %.15g, matrix %.15g",
                                  bias_names[forms[fi]], chunk, closed, i, mi_get(y, i),
                                  mi_get(ym, i));
                /* and the reference with φ removed agrees */
                expect_reference(&s, (ref_opts){.f = forms[fi], .r = RET_NONE, .phi = false,
                                                .chunk = chunk}, closed, 1e-12);
            }
    /* Eq. 12 written out (chunk 1): S_t = S_{t-1}(I − γ_t k_t k_tᵀ) + γ_t v_t k_tᵀ, y_t = S_t q_t */
    mi_miras_config c = lattice_config(DEC, RET_NONE, false, 1, true);
    mi_tensor *y = run_config(&c, &s, NULL);
    for (int n = 0; n < N; n++) {
        double S[D][M];
        for (int a = 0; a < D; a++)
            for (int i = 0; i < M; i++) S[a][i] = at(s.w0, i * D + a);
        for (int t = 0; t < T; t++) {
            const int64_t bk = (int64_t)(n * T + t) * M, bv = (int64_t)(n * T + t) * D;
            double gam = at(s.eta, n * T + t), Sn[D][M];
            for (int a = 0; a < D; a++)
                for (int j = 0; j < M; j++) {
                    Sn[a][j] = gam * at(s.v, bv + a) * at(s.k, bk + j);
                    for (int i = 0; i < M; i++)
                        Sn[a][j] += S[a][i] * ((i == j) - gam * at(s.k, bk + i) * at(s.k, bk + j));
                }
            memcpy(S, Sn, sizeof S);
            for (int a = 0; a < D; a++) {
                double ya = 0;
                for (int i = 0; i < M; i++) ya += S[a][i] * at(s.q, bk + i);
                ck_assert_close(mi_get(y, bv + a), ya, 1e-12);
            }
        }
    }
}
END_TEST

/* The forget gate, Eq. 15: S_t = μ_t S_{t-1} − γ_t ∇ℓ (retention l2), and
 * the paper's final form, Eq. 15 then the projection of Eq. 11
 * (sphere-forget); every objective, chunk 1 and 2, closed and autodiff. */
START_TEST(forget_gate_eq15)
{
    mi_rng r;
    mi_rng_seed(&r, 15);
    seqs s = make_seqs(&r, T, false);
    const ret rets[] = {RET_L2, RET_SPHERE_FORGET};
    for (int f = DEC; f <= SIM; f++)
        for (int ri = 0; ri < 2; ri++)
            for (int chunk = 1; chunk <= 2; chunk++)
                for (int closed = 0; closed < 2; closed++)
                    expect_reference(&s, (ref_opts){.f = f, .r = rets[ri], .phi = true,
                                                    .chunk = chunk}, closed, 1e-10);
    /* with the projection the gate only rescales the step: P_C(αs + Δ) = P_C(s + Δ/α),
     * i.e. sphere-forget with (η, α) == sphere with η/α */
    mi_miras_config c1 = lattice_config(DEC, RET_SPHERE_FORGET, true, 1, true);
    mi_miras_config c2 = lattice_config(DEC, RET_SPHERE, true, 1, true);
    mi_tensor *y1 = run_config(&c1, &s, NULL);
    seqs s2 = s;
    s2.eta = mi_div(s.eta, s.alpha);
    mi_tensor *y2 = run_config(&c2, &s2, NULL);
    for (int i = 0; i < N * T * D; i++) ck_assert_close(mi_get(y1, i), mi_get(y2, i), 1e-12);
}
END_TEST

/* The ℓ1 proximal (ISTA) form, Eq. 17: S_t = prox_{γ_t λ‖·‖₁}(S_{t-1} − γ_t ∇ℓ),
 * γ_t = η_t (l1_threshold=scaled), and the constant threshold λ; the
 * threshold bites (some entries end exactly zero). */
START_TEST(l1_prox_eq17)
{
    mi_rng r;
    mi_rng_seed(&r, 16);
    seqs s = make_seqs(&r, T, false);
    for (int constant = 0; constant < 2; constant++) {
        const double lambda = constant ? 0.05 : 0.1;
        for (int f = DEC; f <= SIM; f++)
            for (int chunk = 1; chunk <= 2; chunk++)
                for (int closed = 0; closed < 2; closed++)
                    expect_reference(&s, (ref_opts){.f = f, .r = RET_L1, .phi = true,
                                                    .chunk = chunk, .tau = lambda,
                                                    .constant = constant}, closed, 1e-10);
        mi_miras_config c = lattice_config(DEC, RET_L1, true, 1, true);
        config_set(&c, constant ? "l1_gamma=0.3" : "l1_gamma=0.5");
        config_set(&c, constant ? "l1_threshold=constant" : "l1_threshold=scaled");
        mi_tensor *final;
        run_config(&c, &s, &final);
        int zeros = 0;
        for (int i = 0; i < N * M * D; i++) zeros += mi_get(final, i) == 0;
        ck_assert_msg(zeros > 0, "constant %d: no entry thresholded to zero", constant);
        ck_assert_msg(zeros < N * M * D, "constant %d: every entry thresholded to zero", constant);
    }
}
END_TEST

/* The initial state: orthonormal slots (seeded, deterministic); for m > d,
 * orthonormal in groups of d, every slot of unit norm. */
START_TEST(init_is_orthonormal)
{
    const mi_memory_kind *mem = mi_memory_find("lattice");
    const int ms[] = {3, 4, 6, 9};
    for (int mi = 0; mi < 4; mi++) {
        int m = ms[mi];
        mi_miras_config c = mi_miras_config_default();
        c.slots = m;
        mi_rng r1, r2, r3;
        mi_rng_seed(&r1, 99);
        mi_rng_seed(&r2, 99);
        mi_rng_seed(&r3, 100);
        mi_tensor *w, *w2, *w3;
        ck_assert_msg(mem->init(&c, m, D, &r1, MI_F64, &w) == 0, "%s", mi_error());
        ck_assert_int_eq(mem->init(&c, m, D, &r2, MI_F64, &w2), 0);
        ck_assert_int_eq(mem->init(&c, m, D, &r3, MI_F64, &w3), 0);
        ck_assert_int_eq(w->rank, 2);
        ck_assert_int_eq(w->shape[0], m);
        ck_assert_int_eq(w->shape[1], D);
        bool differs = false;
        for (int i = 0; i < m * D; i++) {
            ck_assert(mi_get(w, i) == mi_get(w2, i));
            differs |= mi_get(w, i) != mi_get(w3, i);
        }
        ck_assert(differs);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                if (i / D != j / D) continue; /* different groups */
                double dot = 0;
                for (int a = 0; a < D; a++) dot += mi_get(w, i * D + a) * mi_get(w, j * D + a);
                ck_assert_msg(fabs(dot - (i == j)) < 1e-12, "m %d: <s_%d, s_%d> = %g", m, i, j, dot);
            }
        mi_tensor *w32;
        ck_assert_int_eq(mem->init(&c, m, D, &r1, MI_F32, &w32), 0);
        ck_assert_int_eq(w32->dtype, MI_F32);
    }
}
END_TEST

/* ---------------------------------------------------------------- presets */
static const char *const preset_names[] = {"lattice-dec", "lattice-enc", "lattice-sim"};

START_TEST(presets_are_listed_and_follow_their_rules)
{
    mi_rng r;
    mi_rng_seed(&r, 17);
    seqs s = make_seqs(&r, T, false);
    int count = 0;
    while (mi_preset_at(count)) count++;
    for (int f = DEC; f <= SIM; f++) {
        const mi_preset *p = mi_preset_find(preset_names[f]);
        ck_assert_msg(p != NULL, "no preset %s", preset_names[f]);
        int index = -1;
        for (int i = 0; i < count; i++)
            if (mi_preset_at(i) == p) index = i;
        ck_assert_msg(index >= 16, "%s is at %d, not appended after the MIRAS table", p->name, index);
        ck_assert_msg(p->update && strstr(p->update, "P_C"), "%s: update text", p->name);
        ck_assert_str_eq(preset_config(p).memory, "lattice");
        ck_assert_str_eq(preset_config(p).bias, bias_names[f]);
        ck_assert_str_eq(preset_config(p).retention, "sphere-forget");
        ck_assert_str_eq(preset_config(p).algorithm, "gd");
        ck_assert(preset_config(p).slot_norm && preset_config(p).closed_form);
        ck_assert_int_eq(preset_config(p).chunk, 1);
        ck_assert_int_eq(preset_config(p).slots, mi_miras_config_default().slots);
        ck_assert_int_eq(p->eta.kind, MI_GATE_HEAD);
        ck_assert_int_eq(p->alpha.kind, MI_GATE_HEAD);
        ck_assert(p->eta.value > 0 && p->eta.value <= 1 && p->alpha.value > 0 && p->alpha.value <= 1);
        ck_assert_int_eq(p->mu.kind, MI_GATE_UNUSED);
        ck_assert_int_eq(p->delta.kind, MI_GATE_UNUSED);
        ck_assert(!p->key_is_one_minus_alpha);
        /* its rule: Eq. 10 with the forget gate and the projection */
        mi_miras_config c = preset_config(p);
        c.slots = M;
        mi_tensor *final;
        mi_tensor *y = run_config(&c, &s, &final);
        double want[N * T * D];
        reference(&s, (ref_opts){.f = f, .r = RET_SPHERE_FORGET, .phi = true, .chunk = 1}, want,
                  NULL);
        for (int i = 0; i < N * T * D; i++) ck_assert_close(mi_get(y, i), want[i], 1e-10);
    }
}
END_TEST

typedef struct gc_ctx {
    mi_miras m;
    mi_tensor *r;
} gc_ctx;

/* inputs: q, k, v, eta, alpha, W0; out = Σ y ⊙ r */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    gc_ctx *g = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4]};
    mi_tensor *y = mi_miras_forward(&g->m, in[0], in[1], in[2], &gates, &in[5], NULL);
    out[0] = mi_sum(mi_mul(y, g->r), MI_ALL, false);
    return out[0] ? 1 : -1;
}

/* Gradcheck through the layer (f64, N = 2, T = 5, d = 4, m = 3) for each
 * preset at chunk 1 and 2, closed form and autodiff inner gradients, with
 * respect to q, k, v, η, α and S_0. */
START_TEST(gradcheck_presets_through_the_layer)
{
    mi_rng r;
    mi_rng_seed(&r, 18);
    for (int f = DEC; f <= SIM; f++)
        for (int chunk = 1; chunk <= 2; chunk++)
            for (int closed = 0; closed < 2; closed++) {
                seqs s = make_seqs(&r, 5, true);
                gc_ctx g = {.r = mi_randn(&r, MI_F64, MI_SHAPE(N, 5, D), 0, 1)};
                mi_miras_config c = preset_config(mi_preset_find(preset_names[f]));
                c.slots = M;
                c.chunk = chunk;
                c.closed_form = closed;
                ck_assert_int_eq(mi_miras_init(&g.m, &c), 0);
                mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.w0};
                mi_gradcheck_result res = mi_gradcheck(layer_fn, &g, in, 6, NULL);
                ck_assert_msg(res.ok, "%s chunk %d closed %d: %s", preset_names[f], chunk, closed,
                              res.message);
            }
}
END_TEST

START_TEST(bad_configurations_are_reported)
{
    mi_miras m;
    mi_miras_config c = preset_config(mi_preset_find("lattice-dec"));
    const int bad[] = {0, -3};
    for (int i = 0; i < 2; i++) {
        c.slots = bad[i];
        ck_assert_int_eq(mi_miras_init(&m, &c), -1);
        ck_assert_error_has("slots must be >= 1");
        mi_error_clear();
    }
    /* from text */
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "memory=lattice"), 0);
    ck_assert_int_eq(mi_miras_config_set(&c, "bias=lattice-enc"), 0);
    ck_assert_int_eq(mi_miras_config_set(&c, "retention=sphere-forget"), 0);
    ck_assert_int_eq(mi_miras_config_set(&c, "memory.slots=5"), 0);
    ck_assert_int_eq(c.slots, 5);
    ck_assert_int_eq(mi_miras_config_set(&c, "memory.slot_norm=false"), 0);
    ck_assert(!c.slot_norm);
    ck_assert_int_eq(mi_miras_config_set(&c, "memory.slot_norm=1"), 0);
    ck_assert(c.slot_norm);
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    ck_assert_int_eq(mi_miras_config_set(&c, "memory.slots=0"), -1);
    ck_assert_error_has("config: memory.slots must be >= 1, got 0");
    mi_error_clear();
    c.slots = 0;  /* set in C */
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("miras: memory.slots must be >= 1, got 0");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "memory.slots=2.5"), -1);
    ck_assert_error_has("not a whole number");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "memory.slot_norm=maybe"), -1);
    ck_assert_error_has("config: memory.slot_norm: 'maybe' is not true or false");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "retention=sphere-ish"), -1);
    ck_assert_error_has("unknown retention 'sphere-ish'");
    mi_error_clear();
    /* an encoding objective on a memory that cannot encode */
    c = mi_miras_config_default();
    c.bias = "lattice-sim";
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("needs a memory that encodes");
    mi_error_clear();
    /* keys of the wrong size for the slots */
    mi_rng r;
    mi_rng_seed(&r, 19);
    seqs s = make_seqs(&r, T, false);
    c = lattice_config(DEC, RET_SPHERE, true, 1, true);
    c.slots = M + 2;
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    mi_miras_gates g = {.eta = s.eta};
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
    ck_assert_error_has("lattice memory has slots = 5, so keys and queries need dk = 5");
    mi_error_clear();
    /* gates are per head */
    c.slots = M;
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    g.eta = mi_rand(&r, MI_F64, MI_SHAPE(N, T, D), 0.1, 0.5);
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
    ck_assert_error_has("memory 'lattice' takes one eta per head");
    mi_error_clear();
    /* the forget gate is required by sphere-forget */
    c = lattice_config(DEC, RET_SPHERE_FORGET, true, 1, true);
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    g = (mi_miras_gates){.eta = s.eta};
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
    ck_assert_error_has("gate alpha");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("lattice");
    TCase *tc = tcase_slow("lattice");
    tcase_add_test(tc, explicit_update_matches_b2);
    tcase_add_test(tc, closed_form_equals_autodiff_of_the_loss);
    tcase_add_test(tc, slot_norms_stay_one);
    tcase_add_test(tc, without_phi_is_the_delta_rule);
    tcase_add_test(tc, forget_gate_eq15);
    tcase_add_test(tc, l1_prox_eq17);
    tcase_add_test(tc, init_is_orthonormal);
    tcase_add_test(tc, presets_are_listed_and_follow_their_rules);
    tcase_add_test(tc, gradcheck_presets_through_the_layer);
    tcase_add_test(tc, bad_configurations_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
