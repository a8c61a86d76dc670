/* The attentional biases lp, huber, huber-norm, yaad and robust: each closed-
 * form error against the autodiff derivative of its loss, the layer with
 * closed forms against the layer with autodiff, the per-token (and chunked)
 * update on a matrix memory against the paper's update written out as a
 * plain loop, gradients through the layer, Yaad with the exact sign
 * (sign_sharpness = inf), and bad parameters. */
#include <string.h>

#include "harness.h"

enum { N = 2, T = 7, D = 3 };

/* ------------------------------------------------------------ inputs */
typedef struct seqs {
    mi_tensor *q, *k, *v, *eta, *alpha, *delta, *w0;
} seqs;

/* delta: one per head [N, T] (channel false) or per channel [N, T, D], drawn
 * from [lo, hi]; eta from [0.1, 0.6] · eta_scale. */
static seqs make_seqs(mi_rng *r, bool channel, double lo, double hi, double eta_scale)
{
    seqs s = {
        .q = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .k = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 0.6),
        .v = mi_randn(r, MI_F64, MI_SHAPE(N, T, D), 0, 1),
        .eta = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.1 * eta_scale, 0.6 * eta_scale),
        .alpha = mi_rand(r, MI_F64, MI_SHAPE(N, T), 0.7, 0.99),
        .delta = channel ? mi_rand(r, MI_F64, MI_SHAPE(N, T, D), lo, hi)
                         : mi_rand(r, MI_F64, MI_SHAPE(N, T), lo, hi),
        .w0 = mi_randn(r, MI_F64, MI_SHAPE(D, D), 0, 0.5),
    };
    return s;
}

/* The δ range of each bias that exercises both of its branches. */
static void delta_range(const char *bias, double *lo, double *hi)
{
    if (!strcmp(bias, "huber")) *lo = 0.4, *hi = 1.2;   /* per coordinate, |e_j| ~ 1 */
    else *lo = 0.8, *hi = 2.5;                           /* on the norm, ‖e‖ ~ 1.7 */
}

static bool uses_delta(const char *bias)
{
    return !strcmp(bias, "huber") || !strcmp(bias, "huber-norm") || !strcmp(bias, "yaad");
}

static mi_miras make_miras(const mi_miras_config *c)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, c) == 0, "%s", mi_error());
    return m;
}

/* KEY=x for a real key (a bias's own parameters are set by key) */
static void set_num(mi_miras_config *c, const char *key, double x)
{
    char kv[64];
    snprintf(kv, sizeof kv, "%s=%.17g", key, x);
    config_set(c, kv);
}

/* KEY's value, or dflt where the chosen bias has no such key */
static double param_or(const mi_miras_config *c, const char *key, double dflt)
{
    char text[64];
    if (mi_miras_config_get(c, key, text, sizeof text) != 0) return mi_error_clear(), dflt;
    return strtod(text, NULL);
}

static mi_miras_config config_for(const char *bias, const char *memory, int chunk, bool closed)
{
    mi_miras_config c = mi_miras_config_default();
    char kv[64];
    snprintf(kv, sizeof kv, "bias=%s", bias);
    config_set(&c, kv);
    c.memory = memory;
    c.chunk = chunk;
    c.closed_form = closed;
    return c;
}

static mi_tensor *run_layer(const mi_miras_config *c, const seqs *s, mi_tensor *w0)
{
    mi_miras m = make_miras(c);
    mi_miras_gates g = {.eta = s->eta, .alpha = s->alpha, .delta = s->delta};
    mi_tensor *y = mi_miras_forward(&m, s->q, s->k, s->v, &g, &w0, NULL);
    ck_assert_msg(y != NULL, "%s: %s", c->bias, mi_error());
    return y;
}

/* ------------------------------------------------------------ the paper's update rules
 * One token on a matrix memory with ℓ2 retention, each bias's update written
 * as the paper writes it:
 *   W ← α W − η G,  G = (error) kᵀ at the gradient point Wg.
 * d[i] is δ of row i (per head: the same for every row). `exact` writes the
 * paper's exact Sign and |·| (lp, robust), compared with a configuration
 * whose ε is negligible. Tracks the distance to the nearest kink of the
 * switch (margin) and how often each branch was taken. */
typedef struct ref {
    const mi_miras_config *c;
    bool exact;
    double margin;
    int branch[2]; /* [0]: quadratic / ℓ2 side, [1]: linear / ℓ1 side */
} ref;

static double sgn(double x) { return (x > 0) - (x < 0); }

static void paper_step(ref *r, const char *bias, double Wg[D][D], const double *k,
                       const double *v, const double *d, double eta, double alpha, double W[D][D])
{
    const mi_miras_config *c = r->c;
    double e[D], norm2 = 0, G[D][D];
    for (int i = 0; i < D; i++) {
        e[i] = -v[i];
        for (int j = 0; j < D; j++) e[i] += Wg[i][j] * k[j];
        norm2 += e[i] * e[i];
    }
    double norm = sqrt(norm2);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            double g;
            if (!strcmp(bias, "lp")) {
                /* eq:lp-attentional-bias: p (Sign(e) ⊙ |e|^(p−1)) kᵀ; smooth:
                 * Sign(e)|e|^(p−1) = (e/s)·s^(p−1), s = √(e² + ε) */
                double p = config_real(c, "p"), sa = sqrt(e[i] * e[i] + config_real(c, "abs_eps"));
                g = p * (r->exact ? sgn(e[i]) * pow(fabs(e[i]), p - 1)
                                  : e[i] / sa * pow(sa, p - 1)) * k[j];
                if (p < 2 && fabs(e[i]) < r->margin) r->margin = fabs(e[i]);
            } else if (!strcmp(bias, "huber")) {
                /* ((W k − v) kᵀ) ⊙ (I(|e| ≤ δ) 1ᵀ) + (δ Sign(e) kᵀ) ⊙ (I(|e| > δ) 1ᵀ) */
                bool in = fabs(e[i]) <= d[i];
                g = in ? e[i] * k[j] : d[i] * sgn(e[i]) * k[j];
                if (j == 0) r->branch[!in]++;
                if (fabs(fabs(e[i]) - d[i]) < r->margin) r->margin = fabs(fabs(e[i]) - d[i]);
            } else if (!strcmp(bias, "huber-norm")) {
                /* eq:temp42 */
                bool in = norm <= d[0];
                g = in ? e[i] * k[j] : d[0] * e[i] / norm * k[j];
                if (i == 0 && j == 0) r->branch[!in]++;
                if (fabs(norm - d[0]) < r->margin) r->margin = fabs(norm - d[0]);
            } else if (!strcmp(bias, "yaad")) {
                /* eq:huber-loss: ∇ℓ2 = e kᵀ, ∇ℓ1 = Sign(e) kᵀ with Sign ≈ tanh(a·),
                 * a = ∞ the exact Sign (whose kink at 0 then counts on the ℓ1 side) */
                double a = config_real(c, "sign_sharpness");
                bool in = norm <= d[i], sharp = isinf(a);
                g = in ? e[i] * k[j] : d[i] * (sharp ? sgn(e[i]) : tanh(a * e[i])) * k[j];
                if (j == 0) r->branch[!in]++;
                if (fabs(norm - d[i]) < r->margin) r->margin = fabs(norm - d[i]);
                if (sharp && !in && fabs(e[i]) < r->margin) r->margin = fabs(e[i]);
            } else if (!strcmp(bias, "robust")) {
                /* eq:tempRobustRegression's update: (e kᵀ + Δ e/‖e‖ kᵀ) */
                double nn = r->exact ? norm : sqrt(norm2 + config_real(c, "abs_eps"));
                g = e[i] * k[j] + config_real(c, "robust_delta") * e[i] / nn * k[j];
            } else {
                ck_abort_msg("no reference for bias %s", bias);
                g = 0;
            }
            G[i][j] = g;
        }
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) W[i][j] = alpha * W[i][j] - eta * G[i][j];
}

/* The whole sequence with the chunk rule (MIRAS, "Parallelizable Training",
 * t' = t − mod(t, b)): every token of a
 * chunk takes its gradient at the state the previous chunk left (b = 1: the
 * exact per-token recurrence); y_t = W_t q_t. y [N, T, D]. */
static void naive(ref *r, const char *bias, const seqs *s, int chunk, double *y)
{
    bool channel = s->delta && s->delta->rank == 3;
    for (int n = 0; n < N; n++) {
        double W[D][D], Wg[D][D] = {{0}};
        for (int i = 0; i < D * D; i++) W[i / D][i % D] = mi_get(s->w0, i);
        for (int t = 0; t < T; t++) {
            if (t % chunk == 0) memcpy(Wg, W, sizeof W);
            const int64_t b = (int64_t)(n * T + t) * D;
            double k[D], v[D], d[D];
            for (int i = 0; i < D; i++) {
                k[i] = mi_get(s->k, b + i);
                v[i] = mi_get(s->v, b + i);
                d[i] = !uses_delta(bias) ? 0
                       : channel        ? mi_get(s->delta, b + i)
                                        : mi_get(s->delta, n * T + t);
            }
            paper_step(r, bias, Wg, k, v, d, mi_get(s->eta, n * T + t),
                       mi_get(s->alpha, n * T + t), W);
            for (int i = 0; i < D; i++) {
                y[b + i] = 0;
                for (int j = 0; j < D; j++) y[b + i] += W[i][j] * mi_get(s->q, b + j);
            }
        }
    }
}

static void assert_equal(const mi_tensor *y, const double *want, double tol, const char *what)
{
    for (int64_t i = 0; i < y->numel; i++) {
        double a = mi_get(y, i);
        ck_assert_msg(fabs(a - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s: y[%lld] = %.15g, want %.15g", what, (long long)i, a, want[i]);
    }
}

/* ------------------------------------------------------------ tests */
typedef struct bias_case {
    const char *bias;
    double p;          /* lp only */
    bool channel;      /* δ per channel */
    double a;          /* yaad: sign_sharpness (0: the default; INFINITY: the exact sign) */
} bias_case;

static const bias_case cases[] = {
    {"lp", 3, false, 0},    {"lp", 1, false, 0},      {"lp", 1.5, false, 0}, {"lp", 4, false, 0},
    {"huber", 0, false, 0}, {"huber", 0, true, 0},    {"huber-norm", 0, false, 0},
    {"yaad", 0, false, 0},  {"yaad", 0, true, 0},     {"robust", 0, false, 0},
    {"yaad", 0, false, INFINITY},                     {"yaad", 0, true, INFINITY},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* Inputs for a case: δ in the range that takes both branches; smaller inner
 * steps for p ≥ 4 (its gradient grows as |e|³ and the loop diverges at η ~ 0.5). */
static seqs case_seqs(mi_rng *r, const bias_case *bc)
{
    double lo = 0, hi = 0;
    delta_range(bc->bias, &lo, &hi);
    return make_seqs(r, bc->channel, lo, hi, bc->p >= 4 ? 0.25 : 1);
}

/* The attentional biases' losses as MIRAS states them, one token's error
 * e = y − v (n channels) and thresholds d (d[0] per head, d[j] per channel):
 *   lp:         ‖e‖_p^p = Σ_j |e_j|^p           (MIRAS, Variant 1, ℓp-attentional bias)
 *   huber:      Σ_j H(e_j)                       (Variant 2, first approach)
 *   huber-norm: H(‖e‖₂)                          (Variant 2, second approach)
 *     H(a) = ½a² if |a| ≤ δ, δ(|a| − ½δ) otherwise
 *   robust:     max_{‖δv‖₂ ≤ Δ} ½‖e − δv‖²       (eq:tempRobustRegression), evaluated at
 *               the paper's maximiser δv* = −Δ e/‖e‖₂ (any point of the sphere when e = 0)
 * Returns NAN for a bias the paper gives no loss for (yaad: eq:huber-loss is an update). */
static double huber_h(double a, double d)
{
    return fabs(a) <= d ? 0.5 * a * a : d * (fabs(a) - 0.5 * d);
}

static double paper_loss(const char *bias, double p, double big_delta, const double *e,
                         const double *d, int n)
{
    double norm2 = 0, l = 0;
    for (int j = 0; j < n; j++) norm2 += e[j] * e[j];
    double norm = sqrt(norm2);
    if (!strcmp(bias, "lp")) {
        for (int j = 0; j < n; j++) l += pow(fabs(e[j]), p);
    } else if (!strcmp(bias, "huber")) {
        for (int j = 0; j < n; j++) l += huber_h(e[j], d[j]);
    } else if (!strcmp(bias, "huber-norm")) {
        l = huber_h(norm, d[0]);
    } else if (!strcmp(bias, "robust")) {
        for (int j = 0; j < n; j++) {
            double dv = norm > 0 ? -big_delta * e[j] / norm : (j == 0 ? big_delta : 0);
            l += 0.5 * (e[j] - dv) * (e[j] - dv);
        }
    } else {
        l = NAN;
    }
    return l;
}

/* e = ∂ℓ/∂y in closed form == mi_grad of Σ ℓ, including e = 0 exactly (a
 * zero error must give a finite, zero derivative). */
START_TEST(error_is_the_derivative_of_the_loss)
{
    mi_rng r;
    mi_rng_seed(&r, 11);
    const int n = 6;
    for (int ci = 0; ci < N_CASES; ci++) {
        const bias_case *bc = &cases[ci];
        mi_miras_config c = config_for(bc->bias, "matrix", 1, true);
        if (bc->p) set_num(&c, "p", bc->p);
        if (bc->a) set_num(&c, "sign_sharpness", bc->a);
        mi_miras m = make_miras(&c);
        double lo = 0, hi = 0;
        delta_range(bc->bias, &lo, &hi);
        mi_tensor *y = mi_randn(&r, MI_F64, MI_SHAPE(N, n, D), 0, 1);
        mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(N, n, D), 0, 0.5);
        for (int i = 0; i < D; i++) mi_set(v, i, mi_get(y, i)); /* token 0: e = 0 */
        mi_requires_grad(y, true);
        mi_tensor *delta = !uses_delta(bc->bias) ? NULL
                           : bc->channel ? mi_rand(&r, MI_F64, MI_SHAPE(N, n, D), lo, hi)
                                         : mi_rand(&r, MI_F64, MI_SHAPE(N, n), lo, hi);
        mi_tensor *loss = m.bias->loss(&m.config, y, v, delta);
        ck_assert_msg(loss != NULL, "%s: %s", bc->bias, mi_error());
        ck_assert_int_eq(loss->rank, 2);
        ck_assert_int_eq(loss->shape[1], n);
        /* the loss itself against the paper's (exact |·| and ‖·‖: ε negligible) */
        mi_miras_config cx = c;
        if (param_or(&cx, "abs_eps", 0)) set_num(&cx, "abs_eps", 1e-30);
        mi_tensor *lx = m.bias->loss(&cx, y, v, delta);
        ck_assert_msg(lx != NULL, "%s: %s", bc->bias, mi_error());
        int checked = 0;
        for (int nn = 0; nn < N; nn++)
            for (int t = 0; t < n; t++) {
                double e[D], d[D];
                for (int j = 0; j < D; j++) {
                    int64_t at = ((int64_t)nn * n + t) * D + j;
                    e[j] = mi_get(y, at) - mi_get(v, at);
                    d[j] = !delta ? 0 : bc->channel ? mi_get(delta, at) : mi_get(delta, nn * n + t);
                }
                double want = paper_loss(bc->bias, param_or(&cx, "p", 3), param_or(&cx, "robust_delta", 0), e, d, D);
                if (isnan(want)) continue;
                double got = mi_get(lx, nn * n + t);
                ck_assert_msg(fabs(got - want) <= 1e-12 * (1 + fabs(want)),
                              "%s p=%g channel %d: loss[%d,%d] = %.15g, the paper's %.15g",
                              bc->bias, param_or(&cx, "p", 0), bc->channel, nn, t, got, want);
                checked++;
            }
        ck_assert(checked == N * n || !strcmp(bc->bias, "yaad"));
        mi_tensor *total = mi_sum(loss, MI_ALL, false), *g;
        ck_assert_int_eq(mi_grad(&total, NULL, 1, &y, 1, false, &g), 0);
        mi_tensor *e = m.bias->error(&m.config, y, v, delta);
        ck_assert_msg(e != NULL, "%s: %s", bc->bias, mi_error());
        for (int64_t i = 0; i < e->numel; i++) {
            double a = mi_get(e, i), b = mi_get(g, i);
            ck_assert_msg(isfinite(a) && fabs(a - b) <= 1e-10 * (1 + fabs(b)),
                          "%s p=%g a=%g channel %d: e[%lld] = %.15g, autodiff %.15g", bc->bias,
                          param_or(&c, "p", 0), param_or(&c, "sign_sharpness", 0), bc->channel, (long long)i, a, b);
            if (i < D)
                ck_assert_msg(fabs(a) < 1e-12, "%s: e = 0 gives %g", bc->bias, a);
        }
    }
}
END_TEST

/* The layer with the closed-form errors == the layer with autodiff inner
 * gradients, on matrix and vector memories, per token and chunked. */
START_TEST(closed_form_layer_equals_autodiff_layer)
{
    mi_rng r;
    mi_rng_seed(&r, 12);
    const char *memories[] = {"matrix", "vector"};
    for (int ci = 0; ci < N_CASES; ci++)
        for (int mi = 0; mi < 2; mi++)
            for (int chunk = 1; chunk <= 3; chunk += 2) {
                const bias_case *bc = &cases[ci];
                seqs s = case_seqs(&r, bc);
                mi_tensor *w0 = mi == 0 ? s.w0 : mi_randn(&r, MI_F64, MI_SHAPE(D), 0, 0.5);
                mi_miras_config c = config_for(bc->bias, memories[mi], chunk, true);
                if (bc->p) set_num(&c, "p", bc->p);
                if (bc->a) set_num(&c, "sign_sharpness", bc->a);
                mi_tensor *y1 = run_layer(&c, &s, w0);
                c.closed_form = false;
                mi_tensor *y2 = run_layer(&c, &s, w0);
                for (int64_t i = 0; i < y1->numel; i++)
                    ck_assert_msg(fabs(mi_get(y1, i) - mi_get(y2, i)) <=
                                      1e-10 * (1 + fabs(mi_get(y2, i))),
                                  "%s p=%g a=%g %s chunk %d: closed %.15g, autodiff %.15g",
                                  bc->bias, param_or(&c, "p", 0), param_or(&c, "sign_sharpness", 0), memories[mi], chunk,
                                  mi_get(y1, i), mi_get(y2, i));
            }
}
END_TEST

/* chunk 1: the paper's per-token update; chunk 2, 3: the chunk rule. */
START_TEST(matrix_update_is_the_papers)
{
    mi_rng r;
    mi_rng_seed(&r, 13);
    for (int ci = 0; ci < N_CASES; ci++)
        for (int chunk = 1; chunk <= 3; chunk++)
            for (int closed = 0; closed < 2; closed++) {
                const bias_case *bc = &cases[ci];
                seqs s = case_seqs(&r, bc);
                mi_miras_config c = config_for(bc->bias, "matrix", chunk, closed);
                if (bc->p) set_num(&c, "p", bc->p);
                if (bc->a) set_num(&c, "sign_sharpness", bc->a);
                mi_tensor *y = run_layer(&c, &s, s.w0);
                double want[N * T * D];
                ref rf = {.c = &c, .margin = INFINITY};
                naive(&rf, bc->bias, &s, chunk, want);
                char what[96];
                snprintf(what, sizeof what, "%s p=%g a=%g channel %d chunk %d closed %d",
                         bc->bias, param_or(&c, "p", 0), param_or(&c, "sign_sharpness", 0), bc->channel, chunk, closed);
                assert_equal(y, want, 1e-12, what);
                if (uses_delta(bc->bias) && chunk == 1)
                    ck_assert_msg(rf.branch[0] > 0 && rf.branch[1] > 0,
                                  "%s: one branch never taken (%d, %d)", what, rf.branch[0],
                                  rf.branch[1]);
            }
}
END_TEST

/* With a negligible ε the smooth |x| and norm are the paper's exact ones:
 * lp is eq:lp-attentional-bias with Sign and |·| (p = 1: the value-less
 * memory W_t = W_{t-1} − η Sign(W k − v) kᵀ), robust its exact update. */
START_TEST(exact_limits_are_the_papers_formulas)
{
    mi_rng r;
    mi_rng_seed(&r, 14);
    const bias_case exact[] = {{"lp", 1, false, 0}, {"lp", 3, false, 0}, {"lp", 1.5, false, 0},
                               {"robust", 0, false, 0}};
    for (int ci = 0; ci < 4; ci++) {
        seqs s = make_seqs(&r, false, 1, 1, 1);
        mi_miras_config c = config_for(exact[ci].bias, "matrix", 1, true);
        if (exact[ci].p) set_num(&c, "p", exact[ci].p);
        set_num(&c, "abs_eps", 1e-30);
        mi_tensor *y = run_layer(&c, &s, s.w0);
        double want[N * T * D];
        ref rf = {.c = &c, .exact = true, .margin = INFINITY};
        naive(&rf, exact[ci].bias, &s, 1, want);
        assert_equal(y, want, 1e-12, exact[ci].bias);
    }
    /* yaad with a very sharp tanh is the exact Sign of eq:huber-loss */
    seqs s = make_seqs(&r, false, 0.8, 2.5, 1);
    mi_miras_config c = config_for("yaad", "matrix", 1, true);
    set_num(&c, "sign_sharpness", 1e12);
    mi_tensor *y = run_layer(&c, &s, s.w0);
    double want[N * T * D];
    ref rf = {.c = &c, .margin = INFINITY};
    naive(&rf, "yaad", &s, 1, want);
    assert_equal(y, want, 1e-12, "yaad a = 1e12");
}
END_TEST

/* ------------------------------------------------------------ Yaad with the exact sign
 * sign_sharpness = ∞ (mi_sign, mi_abs): per token y, v [N, n, D] and δ per head
 * [N, n] or per channel [N, n, D] in [0.8, 2.5] (‖e‖ ~ 1.7: both branches). */
enum { YN = 8 };

typedef struct yaad_inputs {
    mi_tensor *y, *v, *delta;
    double margin;  /* the distance of ‖e‖ to δ, and of e_j to 0 on the ℓ1 side */
    int branch[2];  /* coordinates on the ℓ2, ℓ1 side */
} yaad_inputs;

static double yaad_delta(const yaad_inputs *in, int64_t row, int j)
{
    return in->delta->rank == 3 ? mi_get(in->delta, row * D + j) : mi_get(in->delta, row);
}

/* The paper's error for row (token) `row`, coordinate j: e_j if ‖e‖ ≤ δ, else
 * δ Sign(e_j); the loss Σ_j [m ½e_j² + (1 − m) δ (|e_j| − ½δ)] in *loss. */
static double yaad_paper_error(yaad_inputs *in, int64_t row, int j, double *loss)
{
    double e[D], norm2 = 0;
    for (int i = 0; i < D; i++) {
        e[i] = mi_get(in->y, row * D + i) - mi_get(in->v, row * D + i);
        norm2 += e[i] * e[i];
    }
    double norm = sqrt(norm2), d = yaad_delta(in, row, j);
    bool l2 = norm <= d;
    in->branch[!l2]++;
    if (fabs(norm - d) < in->margin) in->margin = fabs(norm - d);
    if (!l2 && fabs(e[j]) < in->margin) in->margin = fabs(e[j]);
    *loss += l2 ? 0.5 * e[j] * e[j] : d * (fabs(e[j]) - 0.5 * d);
    return l2 ? e[j] : d * sgn(e[j]);
}

static yaad_inputs yaad_draw(mi_rng *r, bool channel)
{
    yaad_inputs in = {
        .y = mi_randn(r, MI_F64, MI_SHAPE(N, YN, D), 0, 1),
        .v = mi_randn(r, MI_F64, MI_SHAPE(N, YN, D), 0, 0.5),
        .delta = channel ? mi_rand(r, MI_F64, MI_SHAPE(N, YN, D), 0.8, 2.5)
                         : mi_rand(r, MI_F64, MI_SHAPE(N, YN), 0.8, 2.5),
        .margin = INFINITY,
    };
    return in;
}

static mi_miras_config yaad_exact_config(void)
{
    mi_miras_config c = config_for("yaad", "matrix", 1, true);
    set_num(&c, "sign_sharpness", INFINITY);
    return c;
}

/* The closed-form error is e on the ℓ2 branch and δ sign(e) on the ℓ1 branch,
 * exactly; Sign(0) = 0 on the ℓ1 branch (token 0: e_0 = 0, ‖e‖ ≥ 5 > δ) and
 * e = 0 on the ℓ2 branch (token 1). A tanh(a e) with a = ∞ gives NaN at 0. */
START_TEST(yaad_exact_sign_error_is_the_papers)
{
    mi_rng r;
    mi_rng_seed(&r, 16);
    mi_miras_config c = yaad_exact_config();
    mi_miras m = make_miras(&c);
    for (int channel = 0; channel < 2; channel++) {
        yaad_inputs in = yaad_draw(&r, channel);
        mi_set(in.v, 0, mi_get(in.y, 0));
        mi_set(in.y, 1, 5);
        mi_set(in.v, 1, 0);
        for (int j = 0; j < D; j++) mi_set(in.v, D + j, mi_get(in.y, D + j));
        mi_tensor *e = m.bias->error(&c, in.y, in.v, in.delta);
        ck_assert_msg(e != NULL, "%s", mi_error());
        ck_assert_int_eq(e->numel, in.y->numel);
        double loss = 0;
        for (int64_t i = 0; i < e->numel; i++) {
            double want = yaad_paper_error(&in, i / D, (int)(i % D), &loss);
            ck_assert_msg(mi_get(e, i) == want, "channel %d: e[%lld] = %.17g, want %.17g",
                          channel, (long long)i, mi_get(e, i), want);
        }
        ck_assert(mi_get(e, 0) == 0 && mi_get(e, D) == 0);
        ck_assert_msg(in.branch[0] > 0 && in.branch[1] > D, "channel %d: branches %d, %d",
                      channel, in.branch[0], in.branch[1]);
    }
}
END_TEST

/* The loss is the paper's (|e| exactly) and its autodiff gradient w.r.t. y is
 * the closed-form error, on draws away from the switch and from e_j = 0. */
START_TEST(yaad_exact_sign_error_is_the_loss_gradient)
{
    mi_rng r;
    mi_rng_seed(&r, 17);
    mi_miras_config c = yaad_exact_config();
    mi_miras m = make_miras(&c);
    for (int channel = 0; channel < 2; channel++) {
        yaad_inputs in;
        double want_loss[N * YN], want_e[N * YN * D];
        int draws = 0;
        do {
            in = yaad_draw(&r, channel);
            for (int64_t row = 0; row < N * YN; row++) {
                want_loss[row] = 0;
                for (int j = 0; j < D; j++)
                    want_e[row * D + j] = yaad_paper_error(&in, row, j, &want_loss[row]);
            }
        } while (in.margin < 1e-3 && ++draws < 50);
        ck_assert_msg(in.margin >= 1e-3, "channel %d: no draw 1e-3 from the kinks", channel);
        ck_assert(in.branch[0] > 0 && in.branch[1] > 0);
        mi_requires_grad(in.y, true);
        mi_tensor *loss = m.bias->loss(&c, in.y, in.v, in.delta);
        ck_assert_msg(loss != NULL, "%s", mi_error());
        ck_assert_int_eq(loss->numel, N * YN);
        for (int64_t i = 0; i < loss->numel; i++)
            ck_assert_msg(fabs(mi_get(loss, i) - want_loss[i]) <= 1e-14 * (1 + fabs(want_loss[i])),
                          "channel %d: loss[%lld] = %.17g, want %.17g", channel, (long long)i,
                          mi_get(loss, i), want_loss[i]);
        mi_tensor *total = mi_sum(loss, MI_ALL, false), *g;
        ck_assert_int_eq(mi_grad(&total, NULL, 1, &in.y, 1, false, &g), 0);
        mi_tensor *e = m.bias->error(&c, in.y, in.v, in.delta);
        ck_assert_msg(e != NULL, "%s", mi_error());
        for (int64_t i = 0; i < e->numel; i++) {
            ck_assert_msg(mi_get(e, i) == want_e[i], "channel %d: e[%lld] = %.17g, want %.17g",
                          channel, (long long)i, mi_get(e, i), want_e[i]);
            ck_assert_msg(fabs(mi_get(g, i) - want_e[i]) <= 1e-15 * (1 + fabs(want_e[i])),
                          "channel %d: autodiff [%lld] = %.17g, error %.17g", channel,
                          (long long)i, mi_get(g, i), want_e[i]);
        }
    }
}
END_TEST

/* "sign_sharpness=inf" is parsed and accepted (-inf and nan are not); the
 * layer and the yaad preset's block (MLP memory, inner gradient by autodiff
 * through |e|) run and give finite outer gradients. */
START_TEST(yaad_sign_sharpness_inf_is_accepted)
{
    mi_miras_config c = config_for("yaad", "matrix", 1, true);
    ck_assert_int_eq(mi_miras_config_set(&c, "sign_sharpness=inf"), 0);
    double a = config_real(&c, "sign_sharpness");
    ck_assert(isinf(a) && a > 0);
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &c) == 0, "%s", mi_error());
    mi_rng r;
    mi_rng_seed(&r, 18);
    seqs s = make_seqs(&r, false, 0.8, 2.5, 1);
    mi_tensor *y = run_layer(&c, &s, s.w0);
    for (int64_t i = 0; i < y->numel; i++) ck_assert(isfinite(mi_get(y, i)));
    const char *bad[] = {"sign_sharpness=-inf", "sign_sharpness=nan"};
    for (int i = 0; i < 2; i++) {
        mi_miras_config b = c;
        mi_error_clear();
        ck_assert_msg(mi_miras_config_set(&b, bad[i]) == -1, "%s accepted", bad[i]);
        ck_assert_error_has("config: sign_sharpness must be > 0, got");
        ck_assert(isinf(config_real(&b, "sign_sharpness")));  /* kept as it was */
        mi_error_clear();
    }

    const char *ov[] = {"sign_sharpness=inf", "gate_rank=2"};
    mi_mixer_options o = mi_mixer_options_default(4, 2);
    o.overrides = ov;
    o.n_overrides = 2;
    mi_mixer mx;
    ck_assert_msg(mi_mixer_create(&mx, "yaad", &o, MI_F64, &r, test_scope) == 0, "%s",
                  mi_error());
    ck_assert(isinf(config_real(&((const mi_miras_block *)mx.self)->miras.config, "sign_sharpness")));
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(2, 5, 4), 0, 1);
    mi_tensor *out = mx.forward(mx.self, x);
    ck_assert_msg(out != NULL, "%s", mi_error());
    ck_assert_int_eq(mi_backward(mi_sum(mi_square(out), MI_ALL, false)), 0);
    int n;
    const mi_named_tensor *p = mx.params(mx.self, &n);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p[i].tensor->grad != NULL, "%s has no gradient", p[i].name);
        for (int64_t e = 0; e < p[i].tensor->grad->numel; e++)
            ck_assert_msg(isfinite(mi_get(p[i].tensor->grad, e)), "%s: grad not finite",
                          p[i].name);
    }
}
END_TEST

/* ------------------------------------------------------------ gradients through the layer */
typedef struct gc_ctx {
    mi_miras m;
} gc_ctx;

/* inputs: q, k, v, eta, alpha, W0 [, delta] */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    gc_ctx *g = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4], .delta = n > 6 ? in[6] : NULL};
    out[0] = mi_miras_forward(&g->m, in[0], in[1], in[2], &gates, &in[5], NULL);
    return out[0] ? 1 : -1;
}

START_TEST(gradcheck_through_the_layer)
{
    /* yaad with a = ∞: the exact sign has derivative 0 and the switch is a
     * comparison, so only δ and the ℓ2 branch's error carry a gradient */
    const bias_case gc[] = {{"lp", 3, false, 0},         {"lp", 1.5, false, 0},
                            {"huber", 0, false, 0},      {"huber", 0, true, 0},
                            {"huber-norm", 0, false, 0}, {"yaad", 0, false, 0},
                            {"yaad", 0, true, 0},        {"robust", 0, false, 0},
                            {"yaad", 0, false, INFINITY}, {"yaad", 0, true, INFINITY}};
    const int n_gc = (int)(sizeof gc / sizeof gc[0]);
    for (int ci = 0; ci < n_gc; ci++)
        for (int chunk = 1; chunk <= 3; chunk += 2)
            for (int closed = 0; closed < 2; closed++) {
                const bias_case *bc = &gc[ci];
                double lo = 0, hi = 0;
                delta_range(bc->bias, &lo, &hi);
                mi_miras_config c = config_for(bc->bias, "matrix", chunk, closed);
                if (bc->p) set_num(&c, "p", bc->p);
                if (bc->a) set_num(&c, "sign_sharpness", bc->a);
                /* Inputs away from the kinks by construction: draws are
                 * taken until the reference loop finds every switch (|e_j|
                 * vs δ, ‖e‖ vs δ; |e_j| vs 0 for p < 2 and for yaad's exact
                 * sign on its ℓ1 side) at least 1e-3 from
                 * its kink; a finite-difference step of 1e-6 moves e by far
                 * less. The draws are seeded, so the inputs are fixed. */
                mi_rng r;
                mi_rng_seed(&r, 100 + (unsigned)ci);
                seqs s;
                ref rf;
                int draws = 0;
                do {
                    s = case_seqs(&r, bc);
                    rf = (ref){.c = &c, .margin = INFINITY};
                    double y[N * T * D];
                    naive(&rf, bc->bias, &s, chunk, y);
                } while (rf.margin < 1e-3 && ++draws < 50);
                ck_assert_msg(rf.margin >= 1e-3, "%s chunk %d: no draw 1e-3 from the kinks",
                              bc->bias, chunk);
                if (uses_delta(bc->bias))
                    ck_assert_msg(rf.branch[0] > 0 && rf.branch[1] > 0,
                                  "%s chunk %d: one branch never taken", bc->bias, chunk);
                gc_ctx g = {.m = make_miras(&c)};
                mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.w0, s.delta};
                int n_in = uses_delta(bc->bias) ? 7 : 6;
                for (int i = 0; i < n_in; i++) mi_requires_grad(in[i], true);
                mi_gradcheck_result res = mi_gradcheck(layer_fn, &g, in, n_in, NULL);
                ck_assert_msg(res.ok, "%s p=%g a=%g channel %d chunk %d closed %d: %s", bc->bias,
                              param_or(&c, "p", 0), param_or(&c, "sign_sharpness", 0), bc->channel, chunk, closed, res.message);
            }
}
END_TEST

START_TEST(bad_parameters_are_reported)
{
    mi_miras m;
    mi_miras_config c = config_for("lp", "matrix", 1, true);
    ck_assert_int_eq(mi_miras_config_set(&c, "p=0.9"), -1);
    ck_assert_error_has("p must be >= 1");
    mi_error_clear();
    c = config_for("robust", "matrix", 1, true);
    ck_assert_int_eq(mi_miras_config_set(&c, "robust_delta=-0.5"), -1);
    ck_assert_error_has("robust_delta must be >= 0");
    mi_error_clear();
    c = config_for("yaad", "matrix", 1, true);
    ck_assert_int_eq(mi_miras_config_set(&c, "sign_sharpness=0"), -1);
    ck_assert_error_has("sign_sharpness");
    mi_error_clear();

    mi_rng r;
    mi_rng_seed(&r, 15);
    seqs s = make_seqs(&r, true, 0.8, 2.5, 1);
    /* a bias with a threshold needs the gate */
    c = config_for("huber", "matrix", 1, true);
    m = make_miras(&c);
    mi_miras_gates g = {.eta = s.eta, .alpha = s.alpha};
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
    ck_assert_error_has("gate delta is needed by huber");
    mi_error_clear();
    /* the norm's threshold is one per head */
    c = config_for("huber-norm", "matrix", 1, true);
    m = make_miras(&c);
    g.delta = s.delta;
    for (int closed = 0; closed < 2; closed++) {
        m.config.closed_form = closed;
        ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
        ck_assert_error_has("huber-norm: delta must be one per head");
        mi_error_clear();
    }
    /* the text form */
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "bias=huber-norm"), 0);
    ck_assert_str_eq(c.bias, "huber-norm");
    ck_assert_int_eq(mi_miras_config_set(&c, "robust_delta=0.2"), -1);
    ck_assert_error_has("robust_delta is a parameter of bias robust, not of the chosen bias "
                        "'huber-norm' (set bias=robust first)");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "bias=robust"), 0);
    ck_assert_int_eq(mi_miras_config_set(&c, "robust_delta=x"), -1);
    ck_assert_error_has("not a number");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "robust_delta=0.2"), 0);
    ck_assert_double_eq(config_real(&c, "robust_delta"), 0.2);
    /* an unknown key's message lists the chosen components' own keys too */
    ck_assert_int_eq(mi_miras_config_set(&c, "robust_radius=0.2"), -1);
    ck_assert_error_has("unknown key 'robust_radius'");
    ck_assert_error_has("; bias robust: robust_delta, abs_eps");
    mi_error_clear();
    for (int i = 0; i < 7; i++)
        ck_assert_msg(mi_bias_at(i) != NULL, "bias %d of the table is not defined", i);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("biases");
    TCase *tc = tcase_slow("biases");
    tcase_add_test(tc, error_is_the_derivative_of_the_loss);
    tcase_add_test(tc, closed_form_layer_equals_autodiff_layer);
    tcase_add_test(tc, matrix_update_is_the_papers);
    tcase_add_test(tc, exact_limits_are_the_papers_formulas);
    tcase_add_test(tc, yaad_exact_sign_error_is_the_papers);
    tcase_add_test(tc, yaad_exact_sign_error_is_the_loss_gradient);
    tcase_add_test(tc, yaad_sign_sharpness_inf_is_accepted);
    tcase_add_test(tc, gradcheck_through_the_layer);
    tcase_add_test(tc, bad_parameters_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
