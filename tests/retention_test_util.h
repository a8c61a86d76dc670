/* Helpers shared by the retention suites (test_retention.c,
 * test_retention_fdiv.c): N sequences of T tokens of width D, their random
 * inputs and gates, the layer run on them, a tolerance check, and one
 * token's inputs as plain doubles for the papers' rules written as loops. */
#ifndef MIRAS_RETENTION_TEST_UTIL_H
#define MIRAS_RETENTION_TEST_UTIL_H

#include "harness.h"

enum { N = 2, T = 7, D = 3 };

typedef double mat[D][D];

typedef struct seqs {
    mi_tensor *q, *k, *v, *eta, *alpha, *w0;
} seqs;

/* η_t uniform in [eta_lo, eta_hi), α_t in [0.7, 0.99), W_0 ~ N(0, w0_sd²). */
static inline seqs make_seqs(mi_rng *r, double eta_lo, double eta_hi, double w0_sd)
{
    return (seqs){
        .q = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .k = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .v = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 1),
        .eta = mi_rand(r, MI_F64, MI_SHAPE(N, T), eta_lo, eta_hi),
        .alpha = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.7, 0.99),
        .w0 = mi_randn(r, MI_F64, MI_SHAPE(D, D), 0, w0_sd),
    };
}

static inline mi_tensor *run_layer(const mi_miras_config *c, const seqs *s, mi_tensor *w0,
                                   mi_tensor **final_state, mi_miras *out)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, c) == 0, "%s", mi_error());
    mi_miras_gates g = {.eta = s->eta, .alpha = s->alpha};
    mi_tensor *y = mi_miras_forward(&m, s->q, s->k, s->v, &g, &w0, final_state);
    ck_assert_msg(y != NULL, "%s: %s", c->retention, mi_error());
    if (out) *out = m;
    return y;
}

static inline void assert_equal(const mi_tensor *y, const double *want, double tol,
                                const char *what)
{
    for (int64_t i = 0; i < y->numel; i++) {
        double a = mi_get(y, i);
        ck_assert_msg(fabs(a - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s: y[%lld] = %.15g, want %.15g", what, (long long)i, a, want[i]);
    }
}

typedef struct tok {
    double k[D], v[D], q[D], eta, alpha;
} tok;

static inline tok token(const seqs *s, int n, int t)
{
    tok o;
    const int64_t b = (int64_t)(n * T + t) * D;
    for (int i = 0; i < D; i++) {
        o.k[i] = mi_get(s->k, b + i);
        o.v[i] = mi_get(s->v, b + i);
        o.q[i] = mi_get(s->q, b + i);
    }
    o.eta = mi_get(s->eta, n * T + t);
    o.alpha = mi_get(s->alpha, n * T + t);
    return o;
}

/* y_t = W q_t into y [N, T, D] */
static inline void write_y(double *y, int n, int t, mat W, const tok *x)
{
    for (int i = 0; i < D; i++) {
        double s = 0;
        for (int j = 0; j < D; j++) s += W[i][j] * x->q[j];
        y[(n * T + t) * D + i] = s;
    }
}

#endif
