/* Helpers shared by the Nested Learning suites (test_cms.c, test_hope.c):
 * scalar activations for the plain-loop references, a seeded f64 input, the
 * largest difference of two tensors, and a gradcheck over a layer's input
 * and every parameter. */
#ifndef MIRAS_NL_TEST_UTIL_H
#define MIRAS_NL_TEST_UTIL_H

#include "harness.h"

enum { MAXT = 12, MAXD = 16 };  /* the references' largest T and width */

static inline double P(const mi_tensor *t, int64_t i) { return mi_get(t, i); }
static inline double sigm(double z) { return 1 / (1 + exp(-z)); }
static inline double silu(double z) { return z * sigm(z); }
static inline double gelu(double z) { return 0.5 * z * (1 + erf(z * M_SQRT1_2)); }
static inline double gelu_prime(double z)
{
    return 0.5 * (1 + erf(z * M_SQRT1_2)) + z * exp(-0.5 * z * z) / sqrt(2 * M_PI);
}

static inline mi_tensor *input(uint64_t seed, int64_t B, int64_t T, int64_t d)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return mi_randn(&r, MI_F64, MI_SHAPE(B, T, d), 0, 1);
}

static inline double max_abs_diff(const mi_tensor *a, const mi_tensor *b)
{
    ck_assert_int_eq(a->numel, b->numel);
    double m = 0;
    for (int64_t i = 0; i < a->numel; i++) m = fmax(m, fabs(mi_get(a, i) - mi_get(b, i)));
    return m;
}

/* The CMS as plain loops, token by token (Nested Learning, Eq. 30–31): block ℓ accumulates
 * η_t [e_t s_tᵀ, δ_t u_tᵀ] (η_t ∇ℓ_t), at the weights in force, and applies
 * the sum after every position that is a multiple of C^(ℓ); η_t = σ(·), over
 * C with rate_mean; each term over ‖s_t‖² + 1 and ‖u_t‖² + eps with lms. */
static inline void ref_cms(const mi_cms *m, const mi_tensor *x, double *y)
{
    int64_t B = x->shape[0], T = x->shape[1], d = m->config.d_model, hdn = m->hidden;
    double eps = m->config.norm_eps;
    for (int64_t b = 0; b < B; b++) {
        double h[MAXT][MAXD];
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < d; i++) h[t][i] = P(x, (b * T + t) * d + i);
        for (int l = 0; l < m->config.n_blocks; l++) {
            const mi_cms_level *L = &m->level[l];
            int C = m->config.chunk[l];
            double W1[MAXD][MAXD], W2[MAXD][MAXD], G1[MAXD][MAXD] = {{0}}, G2[MAXD][MAXD] = {{0}};
            for (int64_t i = 0; i < d; i++)
                for (int64_t j = 0; j < hdn; j++) {
                    W1[i][j] = P(L->w1, i * hdn + j);
                    W2[j][i] = P(L->w2, j * d + i);
                }
            for (int64_t t = 0; t < T; t++) {
                double u[MAXD], ms = 0, a[MAXD], s[MAXD], mo[MAXD], v[MAXD], z = P(L->eta_bias, 0);
                for (int64_t i = 0; i < d; i++) ms += h[t][i] * h[t][i] / (double)d;
                for (int64_t i = 0; i < d; i++) u[i] = h[t][i] / sqrt(ms + eps) * P(L->norm, i);
                for (int64_t j = 0; j < hdn; j++) {
                    a[j] = 0;
                    for (int64_t i = 0; i < d; i++) a[j] += W2[j][i] * u[i];
                    s[j] = gelu(a[j]);
                }
                for (int64_t i = 0; i < d; i++) {
                    mo[i] = 0;
                    for (int64_t j = 0; j < hdn; j++) mo[i] += W1[i][j] * s[j];
                    v[i] = 0;
                    for (int64_t k = 0; k < d; k++) v[i] += u[k] * P(L->value, k * d + i);
                    z += u[i] * P(L->eta_w, i);
                }
                double eta = sigm(z) / (m->config.rate_mean ? C : 1), e[MAXD];
                double ss = MI_NL_MLP_HIDDEN_EPS, uu = eps;
                for (int64_t i = 0; i < d; i++) e[i] = mo[i] - v[i];
                for (int64_t j = 0; j < hdn; j++) ss += s[j] * s[j];
                for (int64_t i = 0; i < d; i++) uu += u[i] * u[i];
                if (!m->config.lms) ss = uu = 1;
                for (int64_t j = 0; j < hdn; j++) {
                    double back = 0;
                    for (int64_t i = 0; i < d; i++) back += W1[i][j] * e[i];
                    double delta = gelu_prime(a[j]) * back;
                    for (int64_t i = 0; i < d; i++) {
                        G1[i][j] += eta * e[i] * s[j] / ss;
                        G2[j][i] += eta * delta * u[i] / uu;
                    }
                }
                for (int64_t i = 0; i < d; i++) h[t][i] += mo[i];
                if ((t + 1) % C == 0) {
                    for (int64_t i = 0; i < d; i++)
                        for (int64_t j = 0; j < hdn; j++) {
                            W1[i][j] -= G1[i][j];
                            W2[j][i] -= G2[j][i];
                            G1[i][j] = G2[j][i] = 0;
                        }
                }
            }
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < d; i++) y[(b * T + t) * d + i] = h[t][i];
    }
}

#endif
