/* HOPE (src/models/hope/hope.c): against a plain-loop reference of the
 * self-modifying Titans (chunk 1, and two different chunk sizes); gradchecks
 * (f64, tiny) w.r.t. the input and every parameter; causality; parameter
 * lists; f32 runs that stay bounded; bad configurations. HOPE's block in the
 * LM, both arrangements (cms_place=ffn, the default, and mixer): logits
 * against a hand-composed reference, gradcheck, one-token step against the
 * forward, parameter names (no MLP by default). */
#include <string.h>

#include "nl_test_util.h"

/* ---------------------------------------------------------------- HOPE */

enum { HD_MODEL = 4, HHEADS = 2 };

static mi_hope_config hope_config(int chunk, int memory_chunk, bool adaptive_q, int cms_blocks)
{
    mi_hope_config c = mi_hope_config_default(HD_MODEL, HHEADS);
    c.memory_expansion = 2;
    c.chunk = chunk;
    c.memory_chunk = memory_chunk;
    c.adaptive_q = adaptive_q;
    c.eta = 0.4;   /* mid-range levels, so the inner loop matters in the checks */
    c.alpha = 0.8;
    c.cms.hidden = 4;
    if (cms_blocks)
        ck_assert_int_eq(mi_cms_config_chunks(&c.cms, cms_blocks == 1 ? "2" : "1,3"), 0);
    else c.cms.n_blocks = 0;
    c.cms.eta = 0.4;
    c.cms_place = MI_HOPE_CMS_MIXER;   /* the layer alone: its CMS on the Titans output */
    return c;
}

static void make_hope(mi_hope *h, const mi_hope_config *c, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    ck_assert_msg(mi_hope_init(h, c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
}

/* A 2-layer MLP memory in plain doubles: W1 [out][hid], W2 [hid][in]. */
typedef struct ref_mlp {
    int in, hid, out;
    bool res;
    double W1[MAXD][MAXD], W2[MAXD][MAXD];
} ref_mlp;

static void ref_mlp_load(ref_mlp *m, const mi_tensor *w1, const mi_tensor *w2, int64_t off1,
                         int64_t off2, int in, int hid, int out, bool res)
{
    m->in = in, m->hid = hid, m->out = out, m->res = res;
    for (int i = 0; i < out; i++)
        for (int j = 0; j < hid; j++) m->W1[i][j] = P(w1, off1 + i * hid + j);
    for (int j = 0; j < hid; j++)
        for (int i = 0; i < in; i++) m->W2[j][i] = P(w2, off2 + j * in + i);
}

static void ref_mlp_read(const ref_mlp *m, const double *x, double *y, double *a, double *s)
{
    for (int j = 0; j < m->hid; j++) {
        a[j] = 0;
        for (int i = 0; i < m->in; i++) a[j] += m->W2[j][i] * x[i];
        s[j] = gelu(a[j]);
    }
    for (int i = 0; i < m->out; i++) {
        y[i] = m->res ? x[i] : 0;
        for (int j = 0; j < m->hid; j++) y[i] += m->W1[i][j] * s[j];
    }
}

/* One token's step of a memory, every gradient at the weights of F, into the
 * accumulating P, per layer W with input u (k for W2 with ε = eps, s for W1
 * with ε = MI_NL_MLP_HIDDEN_EPS), ℓ = ½‖F(k) − target‖², G = ∇_W ℓ(F) divided
 * by ‖u‖² + ε when lms, û = u/√(‖u‖² + ε):
 *   eq28  P ← P (α I − û ûᵀ) − η G          Nested Learning Eq. 28
 *   eq88  P ← P (α I − η û ûᵀ) − η G        its arXiv version's Eq. 88 */
static void ref_mlp_accumulate(ref_mlp *Pm, const ref_mlp *F, const double *k,
                               const double *target, double eta, double alpha, double eps,
                               int rule, bool lms)
{
    double a[MAXD], s[MAXD], y[MAXD], e[MAXD], ss = MI_NL_MLP_HIDDEN_EPS, kk = eps;
    ref_mlp_read(F, k, y, a, s);
    for (int i = 0; i < F->out; i++) e[i] = y[i] - target[i];
    for (int j = 0; j < F->hid; j++) ss += s[j] * s[j];
    for (int i = 0; i < F->in; i++) kk += k[i] * k[i];
    double n1 = lms ? ss : 1, n2 = lms ? kk : 1;   /* the gradient's divisor */
    double beta = rule == MI_HOPE_EQ28 ? 1 : eta;
    /* W1 (input s) */
    for (int i = 0; i < F->out; i++) {
        double ps = 0;
        for (int j = 0; j < F->hid; j++) ps += Pm->W1[i][j] * s[j] / sqrt(ss);
        for (int j = 0; j < F->hid; j++)
            Pm->W1[i][j] = alpha * Pm->W1[i][j] - beta * ps * s[j] / sqrt(ss) -
                           eta * e[i] * s[j] / n1;
    }
    /* W2 (input k), δ = gelu'(a) ⊙ F.W1ᵀ e */
    for (int j = 0; j < F->hid; j++) {
        double back = 0, pk = 0;
        for (int i = 0; i < F->out; i++) back += F->W1[i][j] * e[i];
        for (int i = 0; i < F->in; i++) pk += Pm->W2[j][i] * k[i] / sqrt(kk);
        double delta = gelu_prime(a[j]) * back;
        for (int i = 0; i < F->in; i++)
            Pm->W2[j][i] = alpha * Pm->W2[j][i] - beta * pk * k[i] / sqrt(kk) -
                           eta * delta * k[i] / n2;
    }
}

static void l2n(double *v, int n, double eps)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    for (int i = 0; i < n; i++) v[i] /= sqrt(s + eps);
}

/* The self-modifying Titans part of HOPE (no CMS) in plain loops, token by
 * token: every token is generated, read and stepped at the states in force
 * F; the steps accumulate in P (P ← α P − η step); a memory takes F ← P after
 * every position that is a multiple of its chunk size. */
static void ref_hope_titans(const mi_hope *h, const mi_tensor *x, double *y)
{
    const mi_hope_config *c = &h->config;
    int d = (int)c->d_model, H = (int)c->heads, hd = (int)h->head_dim, K = c->conv_kernel;
    int hc = c->component_expansion * d, hm = c->memory_expansion * hd;
    int64_t B = x->shape[0], T = x->shape[1];
    double eps = c->qk_eps;
    for (int64_t b = 0; b < B; b++) {
        ref_mlp F[5], Pm[5], MF[HHEADS], MP[HHEADS];
        for (int m = 0; m < 5; m++) {
            if (!h->w1[m]) continue;
            bool gate = m == MI_HOPE_ETA || m == MI_HOPE_ALPHA;
            ref_mlp_load(&F[m], h->w1[m], h->w2[m], 0, 0, d, hc, gate ? H : d, !gate);
            Pm[m] = F[m];
        }
        for (int hh = 0; hh < H; hh++) {
            ref_mlp_load(&MF[hh], h->w1[MI_HOPE_MEMORY], h->w2[MI_HOPE_MEMORY],
                         (int64_t)hh * hd * hm, (int64_t)hh * hm * hd, hd, hm, hd, true);
            MP[hh] = MF[hh];
        }
        double o[MAXT][MAXD];
        for (int64_t t = 0; t < T; t++) {
            double xt[MAXD], a[MAXD], s[MAXD];
            for (int i = 0; i < d; i++) {
                xt[i] = 0;
                for (int j = 0; j < K; j++) {
                    int64_t src = t - K + 1 + j;
                    if (src >= 0) xt[i] += P(h->conv, i * K + j) * P(x, (b * T + src) * d + i);
                }
            }
            l2n(xt, d, eps);
            double k[MAXD], v[MAXD], q[MAXD], ze[MAXD], za[MAXD], eta[MAXD], alpha[MAXD];
            ref_mlp_read(&F[MI_HOPE_K], xt, k, a, s);
            ref_mlp_read(&F[MI_HOPE_V], xt, v, a, s);
            if (h->w_q)
                for (int i = 0; i < d; i++) {
                    q[i] = 0;
                    for (int j = 0; j < d; j++) q[i] += xt[j] * P(h->w_q, j * d + i);
                }
            else
                ref_mlp_read(&F[MI_HOPE_Q], xt, q, a, s);
            ref_mlp_read(&F[MI_HOPE_ETA], xt, ze, a, s);
            ref_mlp_read(&F[MI_HOPE_ALPHA], xt, za, a, s);
            double eta_c = 0, alpha_c = 0;
            for (int hh = 0; hh < H; hh++) {
                eta[hh] = sigm(ze[hh] + P(h->eta_bias, hh));
                alpha[hh] = sigm(za[hh] + P(h->alpha_bias, hh));
                eta_c += eta[hh] / H;
                alpha_c += alpha[hh] / H;
                l2n(k + hh * hd, hd, eps);
                l2n(v + hh * hd, hd, eps);
                l2n(q + hh * hd, hd, eps);
                ref_mlp_read(&MF[hh], q + hh * hd, o[t] + hh * hd, a, s);
            }
            /* steps at F into P */
            double kbar[MAXD], vbar[MAXD], vhat[MAXD];
            for (int i = 0; i < d; i++) kbar[i] = k[i] / sqrt((double)H);
            for (int i = 0; i < d; i++) vbar[i] = v[i] / sqrt((double)H);
            for (int m = 0; m < 5; m++) {
                if (!h->w1[m]) continue;
                ref_mlp_read(&F[m], vbar, vhat, a, s);
                ref_mlp_accumulate(&Pm[m], &F[m], kbar, vhat, eta_c, alpha_c, eps, c->rule, c->lms);
            }
            for (int hh = 0; hh < H; hh++) {
                ref_mlp_read(&MF[hh], v + hh * hd, vhat, a, s);
                ref_mlp_accumulate(&MP[hh], &MF[hh], k + hh * hd, vhat, eta[hh], alpha[hh], eps,
                                   c->rule, c->lms);
            }
            if ((t + 1) % c->chunk == 0)
                for (int m = 0; m < 5; m++) F[m] = Pm[m];
            if ((t + 1) % c->memory_chunk == 0)
                for (int hh = 0; hh < H; hh++) MF[hh] = MP[hh];
        }
        /* per-head RMSNorm, gate, output projection */
        for (int64_t t = 0; t < T; t++) {
            double g[MAXD];
            for (int hh = 0; hh < H; hh++) {
                double ms = 0;
                for (int i = 0; i < hd; i++) ms += o[t][hh * hd + i] * o[t][hh * hd + i] / hd;
                for (int i = 0; i < hd; i++)
                    g[hh * hd + i] =
                        o[t][hh * hd + i] / sqrt(ms + c->norm_eps) * P(h->norm_weight, i);
            }
            for (int i = 0; i < d && h->config.out_gate; i++) {
                double z = 0;
                for (int j = 0; j < d; j++)
                    z += P(x, (b * T + t) * d + j) * P(h->w_gate, j * d + i);
                g[i] *= silu(z);
            }
            for (int i = 0; i < d; i++) {
                double s2 = 0;
                for (int j = 0; j < d; j++) s2 += g[j] * P(h->w_out, j * d + i);
                y[(b * T + t) * d + i] = s2;
            }
        }
    }
}

static void check_hope_rule(int chunk, int memory_chunk, bool adaptive_q, int cms, int rule,
                            bool lms)
{
    mi_hope_config c = hope_config(chunk, memory_chunk, adaptive_q, cms);
    c.rule = rule;
    c.lms = lms;
    mi_hope h;
    make_hope(&h, &c, 21);
    enum { B = 2, T = 8 };
    mi_tensor *x = input(22, B, T, HD_MODEL);
    mi_tensor *y = mi_hope_forward(&h, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert(y->rank == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == HD_MODEL);
    double want[B * T * HD_MODEL];
    ref_hope_titans(&h, x, want);
    mi_tensor *ref = mi_from_buffer(MI_F64, MI_SHAPE(B, T, HD_MODEL), want);
    if (h.has_cms) { /* the CMS after it: its plain-loop reference (Nested Learning, Eq. 30–31) */
        double after[B * T * HD_MODEL];
        ref_cms(&h.cms, ref, after);
        ref = mi_from_buffer(MI_F64, MI_SHAPE(B, T, HD_MODEL), after);
    }
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_msg(fabs(mi_get(y, i) - mi_get(ref, i)) < 1e-12 * (1 + fabs(mi_get(ref, i))),
                      "%s%s chunk %d/%d q %s: y[%lld] = %.15g, reference %.15g",
                      rule == MI_HOPE_EQ28 ? "eq28" : "eq88", lms ? "" : " no lms", chunk,
                      memory_chunk, adaptive_q ? "adaptive" : "static", (long long)i,
                      mi_get(y, i), mi_get(ref, i));
}

/* every rule and both gradient scalings */
static void check_hope_against_reference(int chunk, int memory_chunk, bool adaptive_q, int cms)
{
    for (int rule = MI_HOPE_EQ28; rule <= MI_HOPE_EQ88; rule++) {
        check_hope_rule(chunk, memory_chunk, adaptive_q, cms, rule, true);
        check_hope_rule(chunk, memory_chunk, adaptive_q, cms, rule, false);
    }
}

START_TEST(hope_equals_per_token_loop)
{
    check_hope_against_reference(1, 1, true, 0);
    check_hope_against_reference(1, 1, false, 0);
}
END_TEST

/* out_gate=false: no W_g, and y is the reference's without the gate */
START_TEST(hope_without_out_gate_equals_loop)
{
    mi_hope_config c = hope_config(2, 1, true, 0);
    ck_assert(c.out_gate);
    c.out_gate = false;
    mi_hope h;
    make_hope(&h, &c, 21);
    ck_assert_ptr_null(h.w_gate);
    enum { B = 2, T = 5 };
    mi_tensor *x = input(22, B, T, HD_MODEL);
    mi_tensor *y = mi_hope_forward(&h, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    double want[B * T * HD_MODEL];
    ref_hope_titans(&h, x, want);
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12 * (1 + fabs(want[i])),
                      "no gate: y[%lld] = %.15g, reference %.15g", (long long)i, mi_get(y, i),
                      want[i]);
}
END_TEST

START_TEST(hope_chunked_equals_loop)
{
    check_hope_against_reference(2, 3, true, 0);   /* segments cut at 2, 3, 4, 6 */
    check_hope_against_reference(3, 1, false, 2);  /* and through a CMS */
    check_hope_against_reference(8, 8, true, 0);   /* one chunk: no update is ever read */
}
END_TEST

START_TEST(hope_params_listed_and_trained)
{
    mi_hope_config c = hope_config(2, 1, true, 2);
    mi_hope a, b;
    make_hope(&a, &c, 31);
    make_hope(&b, &c, 31);
    int n, nb;
    const mi_named_tensor *p = mi_hope_params(&a, &n), *pb = mi_hope_params(&b, &nb);
    /* conv, 5 components × 2 + 2 biases, memory 2, norm, gate, out, CMS 2 × 6 */
    ck_assert_int_eq(n, 1 + 12 + 2 + 3 + 12);
    ck_assert_int_eq(nb, n);
    for (int i = 0; i < n; i++) {
        ck_assert(p[i].tensor->requires_grad);
        ck_assert(p[i].tensor->scope == test_scope);
        ck_assert_str_eq(p[i].name, pb[i].name);
        for (int j = 0; j < i; j++) ck_assert_str_ne(p[i].name, p[j].name);
        for (int64_t e = 0; e < p[i].tensor->numel; e++)
            ck_assert(mi_get(p[i].tensor, e) == mi_get(pb[i].tensor, e));
    }
    ck_assert_str_eq(p[0].name, "conv");
    ck_assert_str_eq(p[n - 1].name, "cms.1.eta_bias");
    ck_assert_int_eq(a.w1[MI_HOPE_MEMORY]->shape[0], HHEADS);
    ck_assert_int_eq(a.eta_bias->numel, HHEADS);
    ck_assert_close(sigm(mi_get(a.eta_bias, 0)), 0.4, 1e-12);
    ck_assert_close(sigm(mi_get(a.alpha_bias, 1)), 0.8, 1e-12);
    /* every parameter gets a gradient from the outer loss */
    mi_tensor *y = mi_hope_forward(&a, input(32, 2, 6, HD_MODEL));
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert_int_eq(mi_backward(mi_sum(mi_square(y), MI_ALL, false)), 0);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p[i].tensor->grad != NULL, "%s has no gradient", p[i].name);
        double s = mi_item(mi_sum(mi_square(p[i].tensor->grad), MI_ALL, false));
        ck_assert_msg(s > 0 && isfinite(s), "%s: |grad|^2 = %g", p[i].name, s);
    }
    /* static q: q_proj in place of q_mem */
    c.adaptive_q = false;
    make_hope(&b, &c, 31);
    p = mi_hope_params(&b, &nb);
    ck_assert_int_eq(nb, n - 1);
    ck_assert_str_eq(p[5].name, "q_proj");
    ck_assert_ptr_null(b.w1[MI_HOPE_Q]);
}
END_TEST

static int hope_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    out[0] = mi_hope_forward(ctx, in[0]);
    return out[0] ? 1 : -1;
}

START_TEST(hope_gradcheck_exact)
{
    mi_hope_config c = hope_config(1, 1, true, 0);
    mi_hope h;
    make_hope(&h, &c, 41);
    int n;
    const mi_named_tensor *p = mi_hope_params(&h, &n);
    gradcheck_params("hope chunk 1", hope_fn, &h, input(42, 2, 5, HD_MODEL), p, n);
}
END_TEST

/* both rules (Eq. 28 through the WY chunk form), and the CMS's Eq. 31 sum */
START_TEST(hope_gradcheck_chunked_with_cms)
{
    for (int rule = MI_HOPE_EQ28; rule <= MI_HOPE_EQ88; rule++) {
        mi_hope_config c = hope_config(2, 3, false, 2);
        c.rule = rule;
        c.cms.rate_mean = rule == MI_HOPE_EQ88;
        c.cms.lms = rule == MI_HOPE_EQ88;
        mi_hope h;
        make_hope(&h, &c, 43);
        int n;
        const mi_named_tensor *p = mi_hope_params(&h, &n);
        gradcheck_params(rule == MI_HOPE_EQ28 ? "hope eq28 chunk 2/3, static q, cms {1,3} sum"
                                              : "hope eq88 chunk 2/3, static q, cms {1,3} mean",
                         hope_fn, &h, input(44, 1, 7, HD_MODEL), p, n);
    }
}
END_TEST

/* The batch's rows on the threads (the default: their record kept from the
 * forward; with recompute, run again in the backward) against the loop
 * recorded on the caller's tape (composed): the output and the gradients of
 * the input and of every parameter equal to rounding, at 3 rows (two
 * threads: an uneven split) and 2; gradients of gradients only on the tape, which the
 * default also uses at one thread. */
START_TEST(hope_rows_equal_composed)
{
    int threads = mi_threads();
    mi_set_threads(2);
    for (int64_t B = 3; B >= 2; B--) {
        mi_hope_config c[3] = {hope_config(2, 3, true, 2), hope_config(2, 3, true, 2),
                               hope_config(2, 3, true, 2)};
        c[1].composed = true;
        c[2].recompute = true;
        mi_tensor *y[3], *g[3][MI_HOPE_MAX_PARAMS + 1];
        int n = 0;
        for (int k = 0; k < 3; k++) {
            mi_hope h;
            make_hope(&h, &c[k], 45);
            const mi_named_tensor *p = mi_hope_params(&h, &n);
            mi_tensor *wrt[MI_HOPE_MAX_PARAMS + 1];
            wrt[0] = mi_requires_grad(input(46, B, 7, HD_MODEL), true);
            for (int i = 0; i < n; i++) wrt[1 + i] = p[i].tensor;
            y[k] = mi_hope_forward(&h, wrt[0]);
            ck_assert_msg(y[k] != NULL, "%s", mi_error());
            /* a loss whose gradient differs at every output */
            mi_tensor *l = mi_sum_axes(mi_mul(y[k], input(47, B, 7, HD_MODEL)), 7, false);
            ck_assert_msg(mi_grad(&l, NULL, 1, wrt, n + 1, false, g[k]) == 0, "%s", mi_error());
        }
        for (int k = 0; k < 3; k += 2) {
            ck_assert_msg(max_abs_diff(y[k], y[1]) <= 1e-13, "B %lld, case %d: output differs "
                          "by %g", (long long)B, k, max_abs_diff(y[k], y[1]));
            for (int i = 0; i <= n; i++)
                ck_assert_msg(max_abs_diff(g[k][i], g[1][i]) <= 1e-12,
                              "B %lld, case %d: gradient %d differs by %g", (long long)B, k, i,
                              max_abs_diff(g[k][i], g[1][i]));
        }
    }
    for (int k = 0; k < 3; k++) {
        /* k: the default on two threads, composed, the default on one thread */
        bool on_tape = k > 0;
        mi_hope_config c = hope_config(2, 3, true, 0);
        c.composed = k == 1;
        mi_set_threads(k == 2 ? 1 : 2);
        mi_hope h;
        make_hope(&h, &c, 48);
        mi_tensor *x = mi_requires_grad(input(49, 2, 5, HD_MODEL), true), *gx, *gg;
        mi_tensor *l = mi_sum_axes(mi_square(mi_hope_forward(&h, x)), 7, false);
        ck_assert_msg(mi_grad(&l, NULL, 1, &x, 1, true, &gx) == (on_tape ? 0 : -1),
                      "case %d: %s", k, mi_error());
        if (!on_tape) {
            ck_assert_msg(strstr(mi_error(), "no second derivatives"), "%s", mi_error());
            mi_error_clear();
            continue;
        }
        mi_tensor *l2 = mi_sum_axes(mi_square(gx), 7, false);
        ck_assert_msg(mi_grad(&l2, NULL, 1, &x, 1, false, &gg) == 0, "%s", mi_error());
    }
    mi_set_threads(threads);
}
END_TEST

START_TEST(hope_is_causal)
{
    for (int variant = 0; variant < 2; variant++) {
        mi_hope_config c = variant ? hope_config(2, 3, true, 2) : hope_config(1, 1, true, 0);
        mi_hope h;
        make_hope(&h, &c, 51);
        enum { B = 2, T = 7 };
        mi_tensor *x = input(52, B, T, HD_MODEL);
        mi_tensor *y = mi_hope_forward(&h, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        for (int s = 0; s < T; s++) {
            mi_tensor *x2 = mi_tensor_to(x, MI_F64);
            for (int i = 0; i < HD_MODEL; i++)
                mi_set(x2, s * HD_MODEL + i, mi_get(x2, s * HD_MODEL + i) + 0.7);
            mi_tensor *y2 = mi_hope_forward(&h, x2);
            ck_assert_ptr_nonnull(y2);
            double changed = 0;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < HD_MODEL; i++) {
                    double diff = fabs(mi_get(y2, t * HD_MODEL + i) - mi_get(y, t * HD_MODEL + i));
                    if (t < s)
                        ck_assert_msg(diff == 0, "variant %d: y[%d] moved by %g when x[%d] changed",
                                      variant, t, diff, s);
                    if (t == s) changed += diff;
                    int64_t other = (T + t) * HD_MODEL + i;
                    ck_assert(mi_get(y2, other) == mi_get(y, other));
                }
            ck_assert_msg(changed > 0, "y[%d] ignores x[%d]", s, s);
        }
    }
}
END_TEST

/* f32 at the default levels over a longer sequence, exact and chunked, one
 * and two heads: the self-modifying states stay bounded (with unnormalised
 * values or plain GD steps they diverged within ~50 tokens at d = 8). */
START_TEST(hope_f32_defaults_stay_bounded)
{
    for (int variant = 0; variant < 3; variant++) {
        mi_hope_config c = mi_hope_config_default(8, variant == 2 ? 2 : 1);
        c.cms_place = MI_HOPE_CMS_MIXER;
        c.chunk = variant ? 4 : 1;
        c.memory_chunk = variant ? 2 : 1;
        mi_hope h;
        mi_rng r;
        mi_rng_seed(&r, 61 + variant);
        ck_assert_msg(mi_hope_init(&h, &c, MI_F32, &r, test_scope) == 0, "%s", mi_error());
        ck_assert_int_eq(h.cms.config.n_blocks, 3);
        ck_assert_int_eq(h.cms.hidden, 32);
        mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(2, 96, 8), 0, 1);
        mi_tensor *y = mi_hope_forward(&h, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        ck_assert(y->dtype == MI_F32 && y->shape[1] == 96);
        for (int64_t e = 0; e < y->numel; e++)
            ck_assert_msg(isfinite(mi_get(y, e)) && fabs(mi_get(y, e)) < 100,
                          "variant %d: y[%lld] = %g", variant, (long long)e, mi_get(y, e));
    }
}
END_TEST

/* f32, the main memory wiped (its W2 scaled by 1e-4, what a retention α ≈ 0
 * leaves: the hidden activations nearly vanish) at a large inner rate (η 0.3),
 * exact and chunked: the output and every parameter's gradient stay finite
 * and small (|grad|² ≤ 3e5 here). With the hidden layer's step divided by
 * ‖s‖² + 1e-6, memory.w2's |grad|² was 5e14: HOPE's NaN on MQAR (chunk 8). */
START_TEST(hope_f32_wiped_memory_stays_finite)
{
    for (int variant = 0; variant < 2; variant++) {
        mi_hope_config c = mi_hope_config_default(8, 2);
        c.chunk = variant ? 8 : 1;
        c.eta = 0.3;
        c.alpha = 0.97;
        c.cms.n_blocks = 0;
        mi_hope h;
        mi_rng r;
        mi_rng_seed(&r, 71 + variant);
        ck_assert_msg(mi_hope_init(&h, &c, MI_F32, &r, test_scope) == 0, "%s", mi_error());
        mi_tensor *w2 = h.w2[MI_HOPE_MEMORY];
        for (int64_t e = 0; e < w2->numel; e++) mi_set(w2, e, 1e-4 * mi_get(w2, e));
        mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(2, 64, 8), 0, 1);
        mi_tensor *y = mi_hope_forward(&h, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        for (int64_t e = 0; e < y->numel; e++)
            ck_assert_msg(isfinite(mi_get(y, e)) && fabs(mi_get(y, e)) < 100,
                          "chunk %d: y[%lld] = %g", c.chunk, (long long)e, mi_get(y, e));
        ck_assert_int_eq(mi_backward(mi_sum(mi_square(y), MI_ALL, false)), 0);
        int n;
        const mi_named_tensor *p = mi_hope_params(&h, &n);
        for (int i = 0; i < n; i++) {
            double g2 = mi_item(mi_sum(mi_square(mi_tensor_to(p[i].tensor->grad, MI_F64)), MI_ALL,
                                       false));
            ck_assert_msg(isfinite(g2) && g2 < 1e9, "chunk %d: %s: |grad|^2 = %g", c.chunk,
                          p[i].name, g2);
        }
    }
}
END_TEST

static void expect_hope_error(mi_hope_config c, const char *needle)
{
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_error_clear();
    ck_assert_int_eq(mi_hope_init(&h, &c, MI_F64, &r, test_scope), -1);
    ck_assert_error_has(needle);
    mi_error_clear();
}

START_TEST(hope_bad_configurations)
{
    mi_hope_config c = mi_hope_config_default(HD_MODEL, 3);
    expect_hope_error(c, "heads (3) must divide d_model (4)");
    c = mi_hope_config_default(HD_MODEL, 0);
    expect_hope_error(c, "d_model and heads must be >= 1");
    c = hope_config(0, 1, true, 0);
    expect_hope_error(c, "hope: chunk must be >= 1, got 0");
    c = hope_config(1, 0, true, 0);
    expect_hope_error(c, "hope: memory_chunk must be >= 1, got 0");
    c = hope_config(1, 1, true, 0);
    c.memory_expansion = 0;
    expect_hope_error(c, "hope: memory_expansion must be in [1, 1024], got 0");
    c = hope_config(1, 1, true, 0);
    c.conv_kernel = 0;
    expect_hope_error(c, "hope: conv_kernel must be in [1, 65536], got 0");
    c = hope_config(1, 1, true, 0);
    c.alpha = 1;
    expect_hope_error(c, "hope: alpha must be in (0, 1), got 1");
    c = hope_config(1, 1, true, 2);
    c.cms.chunk[1] = 0;
    expect_hope_error(c, "hope: cms: chunk size C^(2) = 0 must be >= 1");
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 1);
    c = hope_config(1, 1, true, 0);
    ck_assert_int_eq(mi_hope_init(&h, &c, MI_I64, &r, test_scope), -1);
    ck_assert_error_has("f32 or f64");
    mi_error_clear();
    make_hope(&h, &c, 1);
    ck_assert_ptr_null(mi_hope_forward(&h, mi_zeros(MI_F64, MI_SHAPE(2, 3))));
    ck_assert_error_has("hope: x is f64 [2,3]; expected f64 [B, T, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_forward(&h, mi_zeros(MI_F32, MI_SHAPE(1, 3, HD_MODEL))));
    ck_assert_error_has("expected f64");
    mi_error_clear();
    mi_hope_state *st = mi_hope_state_new(&h, 2, test_scope);
    ck_assert_ptr_nonnull(st);
    ck_assert_ptr_null(mi_hope_step(&h, st, mi_zeros(MI_F64, MI_SHAPE(2, 2, HD_MODEL))));
    ck_assert_error_has("hope: step: x is [2,2,4]; expected [2, 1, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_step(&h, st, mi_zeros(MI_F64, MI_SHAPE(3, 1, HD_MODEL))));
    ck_assert_error_has("expected [2, 1, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_state_new(&h, 0, test_scope));
    ck_assert_error_has("batch < 1");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_state_new(&h.cms, 2, test_scope));   /* this HOPE has no CMS */
    ck_assert_error_has("cms: state: needs an initialised CMS");
    mi_error_clear();
    c = hope_config(1, 1, true, 2);
    make_hope(&h, &c, 1);
    mi_cms_state *cs = mi_cms_state_new(&h.cms, 2, test_scope);
    ck_assert_ptr_nonnull(cs);
    ck_assert_ptr_null(mi_cms_step(&h.cms, cs, mi_zeros(MI_F64, MI_SHAPE(2, 3, HD_MODEL))));
    ck_assert_error_has("cms: step: cms: x is f64 [2,3,4]; expected f64 [2, 1, 4]");
    mi_error_clear();
}
END_TEST

START_TEST(hope_config_from_text)
{
    mi_hope_config c = mi_hope_config_default(8, 2);
    const char *good[] = {"chunk=16", "memory_chunk=4", "memory_expansion=2",
                          "component_expansion=3", "adaptive_q=false", "conv_kernel=2",
                          "eta=0.1", "alpha=0.9", "qk_eps=1e-5", "norm_eps=1e-4", "out_scale=0.5",
                          "cms=2,8", "cms.hidden=12", "cms.eta=0.05", "cms.norm_eps=1e-3",
                          "rule=eq88", "lms=false", "cms.rate=sum", "cms.lms=0",
                          "cms_place=mixer"};
    ck_assert(c.rule == MI_HOPE_EQ28 && c.lms && c.cms_place == MI_HOPE_CMS_FFN);
    for (int i = 0; i < 20; i++)
        ck_assert_msg(mi_hope_config_set(&c, good[i]) == 0, "%s: %s", good[i], mi_error());
    ck_assert(c.chunk == 16 && c.memory_chunk == 4 && c.memory_expansion == 2 &&
              c.component_expansion == 3 && !c.adaptive_q && c.conv_kernel == 2);
    ck_assert(c.eta == 0.1 && c.alpha == 0.9 && c.qk_eps == 1e-5 && c.norm_eps == 1e-4 &&
              c.out_scale == 0.5);
    ck_assert(c.cms.n_blocks == 2 && c.cms.chunk[0] == 2 && c.cms.chunk[1] == 8 &&
              c.cms.hidden == 12 && c.cms.eta == 0.05 && c.cms.norm_eps == 1e-3);
    ck_assert(c.rule == MI_HOPE_EQ88 && !c.lms && !c.cms.rate_mean && !c.cms.lms);
    ck_assert_int_eq(c.cms_place, MI_HOPE_CMS_MIXER);
    ck_assert_int_eq(mi_hope_config_set(&c, "rule=eq28"), 0);
    ck_assert_int_eq(mi_hope_config_set(&c, "cms.rate=mean"), 0);
    ck_assert(c.rule == MI_HOPE_EQ28 && c.cms.rate_mean);
    ck_assert(!c.cms.composed); /* the fused cms_scan by default */
    ck_assert_int_eq(mi_hope_config_set(&c, "cms.composed=true"), 0);
    ck_assert(c.cms.composed);
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 3);
    ck_assert_msg(mi_hope_init(&h, &c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    ck_assert_int_eq(h.cms.hidden, 12);
    ck_assert_ptr_nonnull(h.w_q);
    ck_assert_int_eq(mi_hope_config_set(&c, "cms=none"), 0);
    ck_assert_int_eq(c.cms.n_blocks, 0);
    ck_assert_int_eq(mi_hope_config_set(&c, "adaptive_q=1"), 0);
    ck_assert(c.adaptive_q);
    ck_assert(c.out_gate);
    ck_assert_int_eq(mi_hope_config_set(&c, "out_gate=false"), 0);
    ck_assert(!c.out_gate);
    const char *bad[][2] = {{"chunk", "expected KEY=VALUE"}, {"=3", "expected KEY=VALUE"},
                            {"chunk=2.5", "not a whole number"}, {"eta=fast", "not a number"},
                            {"adaptive_q=maybe", "hope: adaptive_q: 'maybe' is not true or false"},
                            {"out_gate=2", "hope: out_gate: '2' is not true or false"},
                            {"cms=1,0", "hope: cms: chunk size C^(2) = 0"},
                            {"heads=2", "unknown key 'heads'"},
                            {"chunk=1e99", "hope: chunk: '1e99' is not a whole number"},
                            {"rule=eq29", "hope: rule must be 'eq28' or 'eq88', got 'eq29'"},
                            {"cms.rate=max", "hope: cms.rate: 'max' is not sum or mean"},
                            {"lms=yes", "hope: lms: 'yes' is not true or false"},
                            {"cms_place=mlp", "hope: cms_place must be 'ffn' or 'mixer'"}};
    for (int i = 0; i < 13; i++) {
        mi_error_clear();
        ck_assert_int_eq(mi_hope_config_set(&c, bad[i][0]), -1);
        ck_assert_error_has(bad[i][1]);
    }
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- HOPE's block in the LM
 * The default block is Nested Learning's (§3, Fig. 3): the CMS in place of
 * the MLP, on the residual stream; cms_place=mixer gives the block before it
 * (the CMS on the Titans output inside the mixer, then the SwiGLU MLP). */

enum { LV = 7, LT = 6, LB = 2 };

static mi_lm_config hope_lm(const char *place)
{
    mi_lm_config c = mi_lm_config_default();
    c.vocab = LV, c.d_model = HD_MODEL, c.layers = 2, c.heads = HHEADS, c.mlp_hidden = 6;
    strcpy(c.mixer, "hope");
    const char *ov[] = {"mixer.memory_expansion=2", "mixer.chunk=2", "mixer.eta=0.4",
                        "mixer.alpha=0.8", "mixer.cms=2", "mixer.cms.hidden=4",
                        "mixer.cms.eta=0.4", place};
    for (int i = 0; i < 8 && ov[i]; i++)
        ck_assert_msg(mi_lm_config_set(&c, ov[i]) == 0, "%s: %s", ov[i], mi_error());
    return c;
}

static void make_hope_lm(mi_lm *lm, const mi_lm_config *c, uint64_t seed)
{
    ck_assert_msg(mi_lm_init(lm, c, MI_F64, seed, test_scope) == 0, "%s", mi_error());
    /* unit-size embeddings: the first RMSNorm then bends on the scale of the inputs */
    for (int64_t e = 0; e < lm->embeddings->numel; e++)
        mi_set(lm->embeddings, e, mi_get(lm->embeddings, e) / 0.02);
}

static mi_tensor *lm_tokens(uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    mi_tensor *t = mi_zeros(MI_I64, MI_SHAPE(LB, LT));
    for (int64_t i = 0; i < t->numel; i++) ((int64_t *)t->data)[i] = (int64_t)mi_rng_below(&r, LV);
    return t;
}

/* rows of x [n][d] → RMSNorm(x) ⊙ g */
static void ref_rms(const double *x, int64_t n, int d, const mi_tensor *g, double eps, double *y)
{
    for (int64_t r = 0; r < n; r++) {
        double ms = 0;
        for (int i = 0; i < d; i++) ms += x[r * d + i] * x[r * d + i] / d;
        for (int i = 0; i < d; i++) y[r * d + i] = x[r * d + i] / sqrt(ms + eps) * P(g, i);
    }
}

/* The LM's logits composed by hand from the plain-loop references of the
 * Titans part and of the CMS: per block
 *   ffn:   h = x + Titans(RMSNorm(x) ⊙ g);  x ← CMS(h)   (each level h + MLP(RMSNorm(h) ⊙ γ))
 *   mixer: h = x + CMS(Titans(RMSNorm(x) ⊙ g));  x ← h + SwiGLU(RMSNorm(h) ⊙ g')
 * then (RMSNorm(x) ⊙ g_f) Eᵀ. */
static void ref_lm_logits(const mi_lm *lm, const mi_tensor *tok, double *logits)
{
    enum { N = LB * LT, D = HD_MODEL };
    double x[N * D], u[N * D], y[N * D];
    double eps = lm->config.norm_eps;
    for (int64_t r = 0; r < N; r++)
        for (int i = 0; i < D; i++)
            x[r * D + i] = P(lm->embeddings, ((int64_t *)tok->data)[r] * D + i);
    for (int l = 0; l < lm->config.layers; l++) {
        const mi_lm_block *b = &lm->blocks[l];
        const mi_hope *h = b->mixer.self;
        bool ffn = h->config.cms_place == MI_HOPE_CMS_FFN;
        ref_rms(x, N, D, b->mixer_norm, eps, u);
        ref_hope_titans(h, mi_from_buffer(MI_F64, MI_SHAPE(LB, LT, D), u), y);
        if (!ffn) {
            memcpy(u, y, sizeof u);
            ref_cms(&h->cms, mi_from_buffer(MI_F64, MI_SHAPE(LB, LT, D), u), y);
        }
        for (int64_t e = 0; e < N * D; e++) x[e] += y[e];
        if (ffn) {
            ref_cms(&h->cms, mi_from_buffer(MI_F64, MI_SHAPE(LB, LT, D), x), y);
            memcpy(x, y, sizeof x);
            continue;
        }
        int64_t F = lm->mlp_hidden;
        ref_rms(x, N, D, b->mlp_norm, eps, u);
        for (int64_t r = 0; r < N; r++)
            for (int i = 0; i < D; i++) {
                double o = 0;
                for (int64_t f = 0; f < F; f++) {
                    double g = 0, up = 0;
                    for (int k = 0; k < D; k++) {
                        g += u[r * D + k] * P(b->w_gate, k * F + f);
                        up += u[r * D + k] * P(b->w_up, k * F + f);
                    }
                    o += silu(g) * up * P(b->w_down, f * D + i);
                }
                y[r * D + i] = o;
            }
        for (int64_t e = 0; e < N * D; e++) x[e] += y[e];
    }
    ref_rms(x, N, D, lm->final_norm, eps, u);
    for (int64_t r = 0; r < N; r++)
        for (int v = 0; v < LV; v++) {
            double z = 0;
            for (int i = 0; i < D; i++) z += u[r * D + i] * P(lm->embeddings, v * D + i);
            logits[r * LV + v] = z;
        }
}

START_TEST(hope_lm_block_equals_hand_composition)
{
    const char *places[] = {NULL, "mixer.cms_place=mixer"};
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(places[k]);
        mi_lm lm;
        make_hope_lm(&lm, &c, 51);
        mi_tensor *tok = lm_tokens(52);
        mi_tensor *y = mi_lm_forward(&lm, tok);
        ck_assert_msg(y != NULL, "%s", mi_error());
        double want[LB * LT * LV];
        ref_lm_logits(&lm, tok, want);
        for (int64_t i = 0; i < y->numel; i++)
            ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-11 * (1 + fabs(want[i])),
                          "cms_place=%s: logits[%lld] = %.15g, reference %.15g",
                          k ? "mixer" : "ffn", (long long)i, mi_get(y, i), want[i]);
    }
}
END_TEST

/* The default block has no MLP: no mlp.* parameters, the CMS's under the
 * block (blocks.l.cms.*), none under the mixer; cms_place=mixer the reverse;
 * the loader's lower bound follows. */
START_TEST(hope_lm_default_block_has_no_mlp)
{
    int64_t numel[2];
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(k ? "mixer.cms_place=mixer" : NULL);
        mi_lm lm;
        make_hope_lm(&lm, &c, 53);
        int n, mlp = 0, block_cms = 0, mixer_cms = 0;
        const mi_named_tensor *p = mi_lm_params(&lm, &n);
        for (int i = 0; i < n; i++) {
            mlp += strstr(p[i].name, "mlp") != NULL;
            block_cms += !strncmp(p[i].name, "blocks.1.cms.0.", 15);
            mixer_cms += !strncmp(p[i].name, "blocks.1.mixer.cms.0.", 21);
            for (int j = 0; j < i; j++) ck_assert_str_ne(p[i].name, p[j].name);
        }
        int64_t D = HD_MODEL, mlp_block = D + 3 * D * 6;
        ck_assert_int_eq(mlp, k ? 2 * 4 : 0);
        ck_assert_int_eq(block_cms, k ? 0 : 6);
        ck_assert_int_eq(mixer_cms, k ? 6 : 0);
        ck_assert(!k == (lm.blocks[0].w_gate == NULL && lm.blocks[1].mlp_norm == NULL));
        ck_assert(!k == (lm.blocks[0].mixer.ffn != NULL));
        ck_assert_int_eq(mi_lm_backbone_numel(&c), LV * D + D + (k ? 2 * mlp_block : 0));
        numel[k] = mi_lm_param_numel(&lm);
    }
    /* the same CMS either way: the arrangements differ by the MLPs' parameters */
    ck_assert_int_eq(numel[0] + 2 * (HD_MODEL + 3 * HD_MODEL * 6), numel[1]);
    /* no CMS: the block keeps the MLP whatever cms_place says */
    mi_lm_config c = hope_lm("mixer.cms=none");
    mi_lm lm;
    make_hope_lm(&lm, &c, 54);
    ck_assert_ptr_nonnull(lm.blocks[0].w_gate);
    ck_assert_ptr_null(lm.blocks[0].mixer.ffn);
    /* a bad placement is named, by the loader's bound as by init */
    c = hope_lm(NULL);
    ck_assert_int_eq(mi_lm_config_set(&c, "mixer.cms_place=mlp"), 0);
    mi_error_clear();
    ck_assert_int_eq(mi_lm_backbone_numel(&c), -1);
    ck_assert_error_has("cms_place must be 'ffn' or 'mixer', got 'mlp'");
    mi_error_clear();
    ck_assert_int_eq(mi_lm_init(&lm, &c, MI_F64, 1, test_scope), -1);
    ck_assert_error_has("cms_place must be 'ffn' or 'mixer', got 'mlp'");
    mi_error_clear();
    /* the layer's feed-forward entry refuses a CMS that is not the feed-forward */
    mi_hope_config hc = hope_config(1, 1, true, 1);
    mi_hope h;
    make_hope(&h, &hc, 55);
    ck_assert(!mi_hope_has_ffn(&h));
    ck_assert_ptr_null(mi_hope_ffn_forward(&h, input(1, 1, 2, HD_MODEL)));
    ck_assert_error_has("not the block's feed-forward");
    mi_error_clear();
}
END_TEST

typedef struct lm_ctx {
    const mi_lm *lm;
    mi_tensor *tokens, *targets;
} lm_ctx;

static int lm_loss_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)in, (void)n;
    const lm_ctx *c = ctx;
    out[0] = mi_lm_loss(c->lm, c->tokens, c->targets);
    return out[0] ? 1 : -1;
}

/* f64 central differences through the whole LM, every parameter, both arrangements. */
START_TEST(hope_lm_gradcheck)
{
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(k ? "mixer.cms_place=mixer" : NULL);
        mi_lm lm;
        make_hope_lm(&lm, &c, 56);
        mi_tensor *tok = lm_tokens(57), *tgt = lm_tokens(58);
        lm_ctx ctx = {&lm, tok, tgt};
        int n;
        const mi_named_tensor *p = mi_lm_params(&lm, &n);
        int64_t entries = gradcheck_params(k ? "hope lm, cms_place=mixer" : "hope lm, cms_place=ffn",
                                           lm_loss_fn, &ctx, NULL, p, n);
        ck_assert_int_eq(entries, mi_lm_param_numel(&lm));
    }
}
END_TEST

/* Generation's one-token step gives the full forward's logits at every position. */
START_TEST(hope_lm_step_equals_forward)
{
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(k ? "mixer.cms_place=mixer" : NULL);
        mi_lm lm;
        make_hope_lm(&lm, &c, 59);
        mi_tensor *tok = lm_tokens(60);
        mi_tensor *full = mi_lm_forward(&lm, tok);
        ck_assert_msg(full != NULL, "%s", mi_error());
        mi_lm_state *s = mi_lm_state_new(&lm, LB);
        ck_assert_msg(s != NULL, "%s", mi_error());
        for (int64_t t = 0; t < LT; t++) {
            mi_tensor *col = mi_zeros(MI_I64, MI_SHAPE(LB));
            for (int64_t b = 0; b < LB; b++)
                ((int64_t *)col->data)[b] = ((int64_t *)tok->data)[b * LT + t];
            mi_tensor *y = mi_lm_step(&lm, s, col);
            ck_assert_msg(y != NULL, "step %lld: %s", (long long)t, mi_error());
            for (int64_t b = 0; b < LB; b++)
                for (int64_t v = 0; v < LV; v++) {
                    double want = mi_get(full, (b * LT + t) * LV + v);
                    ck_assert_msg(fabs(mi_get(y, b * LV + v) - want) < 1e-12 * (1 + fabs(want)),
                                  "cms_place=%s t %lld: step %.15g, forward %.15g",
                                  k ? "mixer" : "ffn", (long long)t, mi_get(y, b * LV + v), want);
                }
        }
        ck_assert_int_eq(mi_lm_state_tokens(s), LT);
        mi_lm_state_free(s);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("hope");
    TCase *tc = tcase_slow("hope");
    tcase_add_test(tc, hope_equals_per_token_loop);
    tcase_add_test(tc, hope_chunked_equals_loop);
    tcase_add_test(tc, hope_without_out_gate_equals_loop);
    tcase_add_test(tc, hope_params_listed_and_trained);
    tcase_add_test(tc, hope_gradcheck_exact);
    tcase_add_test(tc, hope_gradcheck_chunked_with_cms);
    tcase_add_test(tc, hope_rows_equal_composed);
    tcase_add_test(tc, hope_is_causal);
    tcase_add_test(tc, hope_f32_defaults_stay_bounded);
    tcase_add_test(tc, hope_f32_wiped_memory_stays_finite);
    tcase_add_test(tc, hope_bad_configurations);
    tcase_add_test(tc, hope_config_from_text);
    tcase_add_test(tc, hope_lm_block_equals_hand_composition);
    tcase_add_test(tc, hope_lm_default_block_has_no_mlp);
    tcase_add_test(tc, hope_lm_gradcheck);
    tcase_add_test(tc, hope_lm_step_equals_forward);
    suite_add_tcase(s, tc);
    return s;
}
