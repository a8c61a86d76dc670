/* What the HOPE suites share (test_hope.c, test_hope_lm.c): the small
 * configuration they check, and the self-modifying Titans part of HOPE in
 * plain loops, token by token, as the reference. */
#ifndef MIRAS_HOPE_TEST_UTIL_H
#define MIRAS_HOPE_TEST_UTIL_H

#include "nl_test_util.h"

enum { HD_MODEL = 4, HHEADS = 2 };

static inline mi_hope_config hope_config(int chunk, int memory_chunk, bool adaptive_q, int cms_blocks)
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

static inline void make_hope(mi_hope *h, const mi_hope_config *c, uint64_t seed)
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

static inline void ref_mlp_load(ref_mlp *m, const mi_tensor *w1, const mi_tensor *w2, int64_t off1,
                         int64_t off2, int in, int hid, int out, bool res)
{
    m->in = in, m->hid = hid, m->out = out, m->res = res;
    for (int i = 0; i < out; i++)
        for (int j = 0; j < hid; j++) m->W1[i][j] = P(w1, off1 + i * hid + j);
    for (int j = 0; j < hid; j++)
        for (int i = 0; i < in; i++) m->W2[j][i] = P(w2, off2 + j * in + i);
}

static inline void ref_mlp_read(const ref_mlp *m, const double *x, double *y, double *a, double *s)
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
static inline void ref_mlp_accumulate(ref_mlp *Pm, const ref_mlp *F, const double *k,
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

static inline void l2n(double *v, int n, double eps)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    for (int i = 0; i < n; i++) v[i] /= sqrt(s + eps);
}

/* The self-modifying Titans part of HOPE (no CMS) in plain loops, token by
 * token: every token is generated, read and stepped at the states in force
 * F; the steps accumulate in P (P ← α P − η step); a memory takes F ← P after
 * every position that is a multiple of its chunk size. */
static inline void ref_hope_titans(const mi_hope *h, const mi_tensor *x, double *y)
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

#endif
