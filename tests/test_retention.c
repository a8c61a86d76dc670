/* The retention gates kl (Memora), lq (Moneta), elastic, elastic-ftrl, l1
 * and bregman: the per-token recurrence against each paper's update rule
 * written as a plain loop, chunked training against a plain loop of the
 * chunk rule (MIRAS, "Parallelizable Training": every gradient of a chunk at
 * M_{t'}, t' = t − mod(t, b); Memora's lag token as there), gradients
 * through the layer, each gate's own properties, and bad parameters. */
#include <string.h>

#include "retention_test_util.h"

/* A retention under test: its name and the configuration fields it reads. */
typedef struct ret_case {
    const char *retention;
    const char *bias;   /* "l2" or "lp" (Moneta) */
    double c, q, gamma;
    int lq_form;
    int l1_threshold;   /* MI_L1_SCALED (0) or MI_L1_CONSTANT */
} ret_case;

static mi_miras_config config_for(const ret_case *rc, const char *memory, int chunk, bool closed)
{
    mi_miras_config c = mi_miras_config_default();
    c.memory = memory;
    c.retention = rc->retention;
    char kv[64];
    snprintf(kv, sizeof kv, "bias=%s", rc->bias);
    config_set(&c, kv);
    c.kl_scale = rc->c ? rc->c : 1;
    if (!strcmp(rc->retention, "lq")) {
        config_setf(&c, "q=%.17g", rc->q ? rc->q : 4);
        config_set(&c, rc->lq_form == MI_LQ_PAPER ? "lq_form=paper" : "lq_form=frobenius");
    }
    if (mi_retention_find(rc->retention)->params == mi_l1_fields) {
        config_setf(&c, "l1_gamma=%.17g", rc->gamma);
        config_set(&c, rc->l1_threshold == MI_L1_CONSTANT ? "l1_threshold=constant"
                                                          : "l1_threshold=scaled");
    }
    if (!strcmp(rc->bias, "lp")) config_set(&c, "abs_eps=1e-30"); /* the paper's exact Sign(e)|e|^(p−1) */
    c.chunk = chunk;
    c.closed_form = closed;
    return c;
}

/* The retention's own parameters, read back by key (the defaults where the
 * chosen retention has none of them). */
typedef struct ret_params {
    double q, lq_eps, l1_gamma;
    int lq_form, l1_threshold;
} ret_params;

static ret_params params_of(const mi_miras_config *c)
{
    ret_params p = {4, 1e-6, 1e-3, MI_LQ_FROBENIUS, MI_L1_SCALED};
    if (!strcmp(c->retention, "lq")) {
        char form[32];
        p.q = config_real(c, "q");
        p.lq_eps = config_real(c, "lq_eps");
        ck_assert_int_eq(mi_miras_config_get(c, "lq_form", form, sizeof form), 0);
        p.lq_form = strcmp(form, "paper") ? MI_LQ_FROBENIUS : MI_LQ_PAPER;
    }
    if (mi_retention_find(c->retention)->params == mi_l1_fields) {
        mi_l1_params l;
        char text[32];
        ck_assert_int_eq(mi_miras_config_get(c, "l1_threshold", text, sizeof text), 0);
        l.gamma = config_real(c, "l1_gamma");
        l.threshold = strcmp(text, "constant") ? MI_L1_SCALED : MI_L1_CONSTANT;
        p.l1_gamma = l.gamma;
        p.l1_threshold = l.threshold;
    }
    return p;
}

/* ------------------------------------------------------------ plain-C pieces */
static double sgn(double x) { return (x > 0) - (x < 0); }
static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

/* ∇ℓ at W on a matrix memory: ℓ2, (W k − v) kᵀ; ℓp (Moneta),
 * p (Sign(W k − v) ⊙ |W k − v|^(p−1)) kᵀ (MIRAS eq:lp-attentional-bias). */
static void grad_at(const mi_miras_config *c, mat W, const tok *x, mat G)
{
    for (int i = 0; i < D; i++) {
        double e = -x->v[i];
        for (int j = 0; j < D; j++) e += W[i][j] * x->k[j];
        if (!strcmp(c->bias, "lp")) {
            double p = config_real(c, "p");
            e = p * sgn(e) * pow(fabs(e), p - 1);
        }
        for (int j = 0; j < D; j++) G[i][j] = e * x->k[j];
    }
}

static void load_w0(const seqs *s, mat W)
{
    for (int i = 0; i < D * D; i++) W[i / D][i % D] = mi_get(s->w0, i);
}

/* c · softmax of each row */
static void row_softmax(mat L, double c, mat W)
{
    for (int i = 0; i < D; i++) {
        double mx = L[i][0], z = 0;
        for (int j = 1; j < D; j++) mx = fmax(mx, L[i][j]);
        for (int j = 0; j < D; j++) z += exp(L[i][j] - mx);
        for (int j = 0; j < D; j++) W[i][j] = c * exp(L[i][j] - mx) / z;
    }
}

/* Moneta's ℓq step: the Frobenius form A / (‖A‖_F² + ε)^((q−2)/(2q)) or the
 * paper's A / (‖A‖_q^q + ε)^((q−2)/q), ε = lq_eps */
static void lq_normalize(const mi_miras_config *c, mat A, mat W)
{
    ret_params p = params_of(c);
    double q = p.q, s = p.lq_eps;
    bool fro = p.lq_form == MI_LQ_FROBENIUS;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) s += fro ? A[i][j] * A[i][j] : pow(fabs(A[i][j]), q);
    double scale = fro ? pow(s, -(q - 2) / (2 * q)) : pow(s, -(q - 2) / q);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) W[i][j] = A[i][j] * scale;
}

/* The accumulator that reads as W_0: the Frobenius form's
 * A_0 = W_0 (‖W_0‖_F² + ε)^(r/(2(1−r))), r = (q−2)/q; the paper's A_0 = W_0. */
static void lq_init(const mi_miras_config *c, mat A)
{
    ret_params p = params_of(c);
    if (p.lq_form != MI_LQ_FROBENIUS) return;
    double s = p.lq_eps, r = (p.q - 2) / p.q;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) s += A[i][j] * A[i][j];
    double f = pow(s, r / (2 * (1 - r)));
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) A[i][j] *= f;
}

/* The ℓ1 threshold after a step of size eta: γ η (scaled) or γ (constant) */
static double l1_tau(const mi_miras_config *c, double eta)
{
    ret_params p = params_of(c);
    return p.l1_threshold == MI_L1_CONSTANT ? p.l1_gamma : p.l1_gamma * eta;
}

/* S_γ(z), keeping the smallest distance of |z| from the kink at γ */
static double soft_threshold(double z, double gamma, double *margin)
{
    if (margin && fabs(fabs(z) - gamma) < *margin) *margin = fabs(fabs(z) - gamma);
    return sgn(z) * fmax(fabs(z) - gamma, 0);
}

/* ------------------------------------------------------------ the papers' rules, per token */

/* Memora, MIRAS eq:xmodel with (1 − λ_t) = α_t, η'_t = η_t:
 * W_t = c · Softmax(α_t log W_{t-1} − η_t ∇ℓ(W_{t-1})), W_0 = c · softmax(W0). */
static void paper_memora(const mi_miras_config *c, const seqs *s, double *y)
{
    for (int n = 0; n < N; n++) {
        mat W0, W, L, G;
        load_w0(s, W0);
        row_softmax(W0, c->kl_scale, W);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_at(c, W, &x, G);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) L[i][j] = x.alpha * log(W[i][j]) - x.eta * G[i][j];
            row_softmax(L, c->kl_scale, W);
            write_y(y, n, t, W, &x);
        }
    }
}

/* Moneta, MIRAS eq:q-norm: A_t = α_t A_{t-1} − η_t ∇ℓ_p(W_{t-1}), W_t = A_t / ‖A_t‖^(…),
 * A_0 such that W_0 = read(A_0) (lq_init). */
static void paper_moneta(const mi_miras_config *c, const seqs *s, double *y)
{
    for (int n = 0; n < N; n++) {
        mat A, W, G;
        load_w0(s, A);
        lq_init(c, A);
        lq_normalize(c, A, W);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_at(c, W, &x, G);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) A[i][j] = x.alpha * A[i][j] - x.eta * G[i][j];
            lq_normalize(c, A, W);
            write_y(y, n, t, W, &x);
        }
    }
}

/* Elastic net, MIRAS eq:Elastic: W_t = S_γ(λ W_{t-1} − ζ ∇ℓ(W_{t-1})), λ = α_t, ζ = η_t,
 * γ = l1_gamma · η_t (scaled) or l1_gamma; l1 (Lattice Eq. 17) is λ = 1. */
static void paper_elastic(const mi_miras_config *c, const seqs *s, double *y)
{
    bool l1 = !strcmp(c->retention, "l1");
    for (int n = 0; n < N; n++) {
        mat W, G;
        load_w0(s, W);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_at(c, W, &x, G);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++)
                    W[i][j] = soft_threshold((l1 ? 1 : x.alpha) * W[i][j] - x.eta * G[i][j],
                                             l1_tau(c, x.eta), NULL);
            write_y(y, n, t, W, &x);
        }
    }
}

/* Elastic net, FTRL form (MIRAS "Alternative Retention Gates", Variant 3),
 * as the paper states it: W_0 = 0, A_t = A_{t-1} − η ∇ℓ(W_{t-1}), W_t = S_γ(A_t),
 * γ = l1_gamma · η_t (scaled) or l1_gamma. (The test passes α ≡ 1 and W0 = 0.) */
static void paper_ftrl(const mi_miras_config *c, const seqs *s, double *y)
{
    for (int n = 0; n < N; n++) {
        mat A = {{0}}, W = {{0}}, G;
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_at(c, W, &x, G);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) {
                    A[i][j] -= x.eta * G[i][j];
                    W[i][j] = soft_threshold(A[i][j], l1_tau(c, x.eta), NULL);
                }
            write_y(y, n, t, W, &x);
        }
    }
}

/* Bregman with the sigmoid link (Variant 5):
 * W_t = σ(ln(W_{t-1} / (1 − W_{t-1})) − η ∇ℓ(W_{t-1})), W_0 = σ(W0). */
static void paper_bregman(const mi_miras_config *c, const seqs *s, double *y)
{
    for (int n = 0; n < N; n++) {
        mat W, G;
        load_w0(s, W);
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) W[i][j] = sigmoid(W[i][j]);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            grad_at(c, W, &x, G);
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++)
                    W[i][j] = sigmoid(log(W[i][j] / (1 - W[i][j])) - x.eta * G[i][j]);
            write_y(y, n, t, W, &x);
        }
    }
}

/* ------------------------------------------------------------ the chunk rule, plain
 * (MIRAS, "Parallelizable Training": ∇ℓ(M_{t'}; k_i, v_i), t' = t − mod(t, b), linear
 * inside a chunk, the retention's non-linear map across chunks; Memora's lag token) */
typedef struct chunk_ref {
    const mi_miras_config *c;
    bool lag;       /* Memora's lag token (on for kl; off to show it matters) */
    double margin;  /* the smallest distance from a soft-threshold kink */
    double eta;     /* η of the token that wrote A last (0: none yet) */
} chunk_ref;

static void ref_init(chunk_ref *r, mat W0, mat A)
{
    const mi_miras_config *c = r->c;
    for (int i = 0; i < D; i++) {
        double lse = 0;
        for (int j = 0; j < D; j++) lse += exp(W0[i][j]);
        lse = log(lse);
        for (int j = 0; j < D; j++) {
            if (!strcmp(c->retention, "kl")) A[i][j] = log(c->kl_scale) + W0[i][j] - lse;
            else if (!strcmp(c->retention, "elastic-ftrl") &&
                     params_of(c).l1_threshold == MI_L1_CONSTANT) {
                A[i][j] = W0[i][j] + params_of(c).l1_gamma * sgn(W0[i][j]);
                if (fabs(W0[i][j]) < r->margin) r->margin = fabs(W0[i][j]);
            } else A[i][j] = W0[i][j];
        }
    }
    if (!strcmp(c->retention, "lq")) lq_init(c, A);
}

static void ref_read(chunk_ref *r, mat A, mat W)
{
    const char *ret = r->c->retention;
    if (!strcmp(ret, "kl")) row_softmax(A, r->c->kl_scale, W);
    else if (!strcmp(ret, "lq")) lq_normalize(r->c, A, W);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            if (!strcmp(ret, "elastic") || !strcmp(ret, "l1")) W[i][j] = A[i][j];
            else if (!strcmp(ret, "elastic-ftrl"))
                W[i][j] = r->eta == 0 && params_of(r->c).l1_threshold != MI_L1_CONSTANT
                              ? A[i][j] /* nothing written: no threshold */
                              : soft_threshold(A[i][j], l1_tau(r->c, r->eta), &r->margin);
            else if (!strcmp(ret, "bregman")) W[i][j] = sigmoid(A[i][j]);
        }
}

static void ref_boundary(chunk_ref *r, mat A)
{
    const char *ret = r->c->retention;
    if (!strcmp(ret, "kl")) {
        mat W;
        row_softmax(A, r->c->kl_scale, W);
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) A[i][j] = log(W[i][j]);
    } else if (!strcmp(ret, "elastic") || !strcmp(ret, "l1")) {
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                A[i][j] = soft_threshold(A[i][j], l1_tau(r->c, r->eta), &r->margin);
    }
}

/* One part of a chunk, tokens [t0, t1): every gradient at read(A) as the
 * part starts; A_t = α_t A_{t-1} − η_t G_t (α ≡ 1 for bregman and l1); the
 * boundary after the part's last token; y_t read from A_t (the ℓ1 threshold
 * with the η of the token that wrote A last). */
static void ref_part(chunk_ref *r, const seqs *s, int n, int t0, int t1, mat A, double *y)
{
    bool alpha = strcmp(r->c->retention, "bregman") && strcmp(r->c->retention, "l1");
    mat Wg, W, G;
    ref_read(r, A, Wg);
    for (int t = t0; t < t1; t++) {
        tok x = token(s, n, t);
        grad_at(r->c, Wg, &x, G);
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                A[i][j] = (alpha ? x.alpha : 1) * A[i][j] - x.eta * G[i][j];
        r->eta = x.eta;
        if (t == t1 - 1) ref_boundary(r, A);
        ref_read(r, A, W);
        write_y(y, n, t, W, &x);
    }
}

/* Chunks of b tokens; with the lag token the first token of each chunk
 * (longer than one) runs alone first. */
static void ref_chunked(chunk_ref *r, const seqs *s, int b, double *y)
{
    for (int n = 0; n < N; n++) {
        mat W0, A;
        load_w0(s, W0);
        r->eta = 0;
        ref_init(r, W0, A);
        for (int t0 = 0; t0 < T; t0 += b) {
            int t1 = t0 + b < T ? t0 + b : T, start = t0;
            if (r->lag && t1 - t0 > 1) {
                ref_part(r, s, n, t0, t0 + 1, A, y);
                start = t0 + 1;
            }
            ref_part(r, s, n, start, t1, A, y);
        }
    }
}

/* ------------------------------------------------------------ tests */
static const ret_case cases[] = {
    {"kl", "l2", 1, 0, 0, 0, 0},
    {"kl", "l2", 2.5, 0, 0, 0, 0},
    {"lq", "lp", 0, 4, 0, MI_LQ_FROBENIUS, 0}, /* (3, 4)-Moneta, the Frobenius form */
    {"lq", "lp", 0, 4, 0, MI_LQ_PAPER, 0},     /* (3, 4)-Moneta, the paper's form */
    {"lq", "l2", 0, 3, 0, MI_LQ_PAPER, 0},
    {"lq", "l2", 0, 1.5, 0, MI_LQ_FROBENIUS, 0},
    {"elastic", "l2", 0, 0, 0.2, 0, MI_L1_SCALED},  /* threshold 0.2 η_t */
    {"elastic", "l2", 0, 0, 0.05, 0, MI_L1_CONSTANT},
    {"elastic-ftrl", "l2", 0, 0, 0.2, 0, MI_L1_SCALED},
    {"elastic-ftrl", "l2", 0, 0, 0.05, 0, MI_L1_CONSTANT},
    {"l1", "l2", 0, 0, 0.2, 0, MI_L1_SCALED},       /* Lattice Eq. 17 on a matrix */
    {"l1", "l2", 0, 0, 0.05, 0, MI_L1_CONSTANT},
    {"bregman", "l2", 0, 0, 0, 0, 0},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(per_token_is_the_papers_rule)
{
    mi_rng r;
    mi_rng_seed(&r, 21);
    for (int ci = 0; ci < N_CASES; ci++)
        for (int closed = 0; closed < 2; closed++) {
            const ret_case *rc = &cases[ci];
            seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
            if (!strcmp(rc->retention, "elastic-ftrl")) {
                /* the paper's statement: no decay, W_0 = 0 */
                s.alpha = mi_full(MI_F64, MI_SHAPE(N, T), 1.0);
                s.w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));
            }
            mi_miras_config c = config_for(rc, "matrix", 1, closed);
            mi_tensor *y = run_layer(&c, &s, s.w0, NULL, NULL);
            double want[N * T * D];
            const char *ret = rc->retention;
            if (!strcmp(ret, "kl")) paper_memora(&c, &s, want);
            else if (!strcmp(ret, "lq")) paper_moneta(&c, &s, want);
            else if (!strcmp(ret, "elastic") || !strcmp(ret, "l1")) paper_elastic(&c, &s, want);
            else if (!strcmp(ret, "elastic-ftrl")) paper_ftrl(&c, &s, want);
            else paper_bregman(&c, &s, want);
            char what[96];
            snprintf(what, sizeof what, "%s %s q=%g form %d/%d closed %d", ret, rc->bias, params_of(&c).q,
                     params_of(&c).lq_form, params_of(&c).l1_threshold, closed);
            assert_equal(y, want, 1e-12, what);
        }
}
END_TEST

START_TEST(chunked_is_the_chunk_rule)
{
    mi_rng r;
    mi_rng_seed(&r, 22);
    const int chunks[] = {1, 2, 3, 5, 8};
    for (int ci = 0; ci < N_CASES; ci++)
        for (int bi = 0; bi < 5; bi++)
            for (int closed = 0; closed < 2; closed++) {
                const ret_case *rc = &cases[ci];
                seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
                mi_miras_config c = config_for(rc, "matrix", chunks[bi], closed);
                mi_tensor *y = run_layer(&c, &s, s.w0, NULL, NULL);
                double want[N * T * D];
                chunk_ref ref = {.c = &c, .lag = !strcmp(rc->retention, "kl"), .margin = INFINITY};
                ref_chunked(&ref, &s, chunks[bi], want);
                char what[96];
                snprintf(what, sizeof what, "%s q=%g form %d/%d chunk %d closed %d",
                         rc->retention, params_of(&c).q, params_of(&c).lq_form,
                         params_of(&c).l1_threshold, chunks[bi], closed);
                assert_equal(y, want, 1e-12, what);
                if (ref.lag && chunks[bi] > 1) {
                    /* the lag token is in effect: without it the outputs differ */
                    chunk_ref plain = {.c = &c, .margin = INFINITY};
                    double other[N * T * D], diff = 0;
                    ref_chunked(&plain, &s, chunks[bi], other);
                    for (int i = 0; i < N * T * D; i++) diff = fmax(diff, fabs(other[i] - want[i]));
                    ck_assert_msg(diff > 1e-6, "%s: the lag token changes nothing", what);
                }
            }
}
END_TEST

/* ------------------------------------------------------------ gradients through the layer */
typedef struct gc_ctx {
    mi_miras m;
} gc_ctx;

/* inputs: q, k, v, eta, alpha, W0 */
static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    gc_ctx *g = ctx;
    mi_miras_gates gates = {.eta = in[3], .alpha = in[4]};
    out[0] = mi_miras_forward(&g->m, in[0], in[1], in[2], &gates, &in[5], NULL);
    return out[0] ? 1 : -1;
}

START_TEST(gradcheck_through_the_layer)
{
    for (int ci = 0; ci < N_CASES; ci++)
        for (int chunk = 1; chunk <= 3; chunk += 2)
            for (int closed = 0; closed < 2; closed++) {
                const ret_case *rc = &cases[ci];
                mi_miras_config c = config_for(rc, "matrix", chunk, closed);
                if (!strcmp(rc->bias, "lp")) config_set(&c, "abs_eps=1e-6"); /* the training form */
                /* Inputs away from the soft-threshold kinks by construction:
                 * draws are taken until the reference loop finds every
                 * thresholded entry (and, for elastic-ftrl, every W0 entry)
                 * at least 1e-3 from its kink. Seeded, so the inputs are fixed. */
                mi_rng r;
                mi_rng_seed(&r, 200 + (unsigned)ci);
                seqs s;
                chunk_ref ref;
                int draws = 0;
                do {
                    s = make_seqs(&r, 0.1, 0.6, 0.5);
                    ref = (chunk_ref){.c = &c, .lag = !strcmp(rc->retention, "kl"),
                                      .margin = INFINITY};
                    double y[N * T * D];
                    ref_chunked(&ref, &s, chunk, y);
                } while (ref.margin < 1e-3 && ++draws < 50);
                ck_assert_msg(ref.margin >= 1e-3, "%s chunk %d: no draw 1e-3 from the kinks",
                              rc->retention, chunk);
                gc_ctx g;
                ck_assert_int_eq(mi_miras_init(&g.m, &c), 0);
                mi_tensor *in[] = {s.q, s.k, s.v, s.eta, s.alpha, s.w0};
                for (int i = 0; i < 6; i++)
                    mi_requires_grad(in[i], i != 4 || g.m.retention->uses_alpha);
                mi_gradcheck_result res = mi_gradcheck(layer_fn, &g, in, 6, NULL);
                ck_assert_msg(res.ok, "%s q=%g form %d/%d chunk %d closed %d: %s", rc->retention,
                              params_of(&c).q, params_of(&c).lq_form, params_of(&c).l1_threshold, chunk,
                              closed, res.message);
            }
}
END_TEST

/* ------------------------------------------------------------ properties */
/* The weights read from the final state, [N, 1, ...], written last by the
 * step size η_T of s. */
static mi_tensor *final_weights(const mi_miras *m, const seqs *s, mi_tensor *a)
{
    int64_t shape[MI_MAX_RANK] = {N, 1, 1, 1};
    mi_tensor *eta = mi_reshape(mi_slice(s->eta, 1, T - 1, T), a->rank, shape);
    mi_tensor *w = m->retention->read ? m->retention->read(&m->config, a, eta) : a;
    ck_assert_ptr_nonnull(w);
    return w;
}

START_TEST(kl_rows_sum_to_c_and_stay_positive)
{
    mi_rng r;
    mi_rng_seed(&r, 23);
    const char *memories[] = {"matrix", "vector"};
    for (int mi = 0; mi < 2; mi++)
        for (int chunk = 1; chunk <= 4; chunk += 3) {
            seqs s = make_seqs(&r, 1, 4, 0.5); /* large steps */
            ret_case rc = {"kl", "l2", 2.5, 0, 0, 0, 0};
            mi_miras_config c = config_for(&rc, memories[mi], chunk, true);
            mi_tensor *w0 = mi == 0 ? mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 3)
                                    : mi_randn(&r, MI_F64, MI_SHAPE(D), 0, 3);
            mi_tensor *a;
            mi_miras m;
            run_layer(&c, &s, w0, &a, &m);
            mi_tensor *w = final_weights(&m, &s, a);
            int64_t rows = w->numel / D;
            for (int64_t i = 0; i < rows; i++) {
                double sum = 0;
                for (int j = 0; j < D; j++) {
                    double x = mi_get(w, i * D + j);
                    ck_assert_msg(x > 0, "%s chunk %d: weight %g <= 0", memories[mi], chunk, x);
                    sum += x;
                }
                ck_assert_close(sum, 2.5, 1e-12);
                /* the boundary keeps the state the log of the weights, Σ_j exp L_ij = c
                 * (it never changes an output when α is one per row: softmax
                 * ignores a row's constant; it keeps L from drifting) */
                double z = 0;
                for (int j = 0; j < D; j++) z += exp(mi_get(a, i * D + j));
                ck_assert_close(z, 2.5, 1e-12);
            }
            /* and the initial weights are c · softmax(W0): a zero W0 reads as c/dk */
            mi_tensor *a0 = m.retention->init(&c, mi_zeros(MI_F64, MI_SHAPE(1, 1, D, D)));
            mi_tensor *wz = m.retention->read(&c, a0, NULL);
            for (int i = 0; i < D * D; i++) ck_assert_close(mi_get(wz, i), 2.5 / D, 1e-15);
        }
}
END_TEST

START_TEST(elastic_gives_exact_zeros)
{
    mi_rng r;
    mi_rng_seed(&r, 24);
    const char *forms[] = {"elastic", "elastic-ftrl", "l1"};
    for (int f = 0; f < 3; f++)
        for (int chunk = 1; chunk <= 3; chunk += 2)
            for (int th = MI_L1_SCALED; th <= MI_L1_CONSTANT; th++) {
                seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
                /* thresholds 0.5 η_t ∈ [0.05, 0.3) (scaled) or 0.3 (constant) */
                ret_case rc = {forms[f], "l2", 0, 0, th == MI_L1_SCALED ? 0.5 : 0.3, 0, th};
                mi_miras_config c = config_for(&rc, "matrix", chunk, true);
                mi_tensor *a;
                mi_miras m;
                run_layer(&c, &s, s.w0, &a, &m);
                mi_tensor *w = final_weights(&m, &s, a);
                int zeros = 0;
                for (int64_t i = 0; i < w->numel; i++) zeros += mi_get(w, i) == 0.0;
                ck_assert_msg(zeros > 0 && zeros < w->numel,
                              "%s/%d chunk %d: %d exact zeros of %lld", forms[f], th, chunk, zeros,
                              (long long)w->numel);
            }
    /* the FTRL form starts exactly at W0: S_γ(W0 + γ sign(W0)) = W0 (constant);
     * W0 itself, no threshold before the first step (scaled) */
    seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
    const mi_retention_kind *ftrl = mi_retention_find("elastic-ftrl");
    for (int th = MI_L1_SCALED; th <= MI_L1_CONSTANT; th++) {
        ret_case rc = {"elastic-ftrl", "l2", 0, 0, 0.3, 0, th};
        mi_miras_config c = config_for(&rc, "matrix", 1, true);
        mi_tensor *w = ftrl->read(&c, ftrl->init(&c, s.w0), NULL);
        for (int i = 0; i < D * D; i++) ck_assert_close(mi_get(w, i), mi_get(s.w0, i), 1e-15);
    }
}
END_TEST

START_TEST(bregman_stays_in_the_unit_interval)
{
    mi_rng r;
    mi_rng_seed(&r, 25);
    for (int chunk = 1; chunk <= 3; chunk += 2) {
        seqs s = make_seqs(&r, 1, 3, 0.5);
        ret_case rc = {"bregman", "l2", 0, 0, 0, 0, 0};
        mi_miras_config c = config_for(&rc, "matrix", chunk, true);
        mi_tensor *a;
        mi_miras m;
        mi_tensor *w0 = mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 3);
        run_layer(&c, &s, w0, &a, &m);
        mi_tensor *w = final_weights(&m, &s, a);
        double lo = 1, hi = 0;
        for (int64_t i = 0; i < w->numel; i++) {
            lo = fmin(lo, mi_get(w, i));
            hi = fmax(hi, mi_get(w, i));
        }
        ck_assert_msg(lo > 0 && hi < 1, "chunk %d: weights in [%g, %g]", chunk, lo, hi);
    }
}
END_TEST

/* ‖W‖ from the ℓq step: the Frobenius form gives ‖W‖_F = ‖A‖_F^(2/q), the
 * paper's ‖W‖_q = ‖A‖_q^(3−q); on the vector memory the whole vector is
 * one weight. */
START_TEST(lq_norms_on_matrix_and_vector)
{
    mi_rng r;
    mi_rng_seed(&r, 26);
    const mi_retention_kind *lq = mi_retention_find("lq");
    for (int form = 0; form < 2; form++)
        for (int vec = 0; vec < 2; vec++) {
            ret_case rc = {"lq", "l2", 0, 4, 0, form, 0};
            mi_miras_config c = config_for(&rc, vec ? "vector" : "matrix", 1, true);
            config_set(&c, "lq_eps=0"); /* the exact norms */
            double q = config_real(&c, "q");
            mi_tensor *a = vec ? mi_randn(&r, MI_F64, MI_SHAPE(N, 2, D), 0, 1)
                               : mi_randn(&r, MI_F64, MI_SHAPE(N, 2, D, D), 0, 1);
            mi_tensor *w = lq->read(&c, a, NULL);
            ck_assert_ptr_nonnull(w);
            int64_t per = vec ? D : D * D;
            for (int64_t b = 0; b < a->numel / per; b++) {
                double sa = 0, sw = 0, pw = form == MI_LQ_FROBENIUS ? 2 : q;
                for (int64_t i = 0; i < per; i++) {
                    sa += pow(fabs(mi_get(a, b * per + i)), pw);
                    sw += pow(fabs(mi_get(w, b * per + i)), pw);
                }
                double na = pow(sa, 1 / pw), nw = pow(sw, 1 / pw);
                double want = form == MI_LQ_FROBENIUS ? pow(na, 2 / q) : pow(na, 3 - q);
                ck_assert_close(nw, want, 1e-12 * want);
            }
            /* and the layer runs on it */
            seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
            mi_tensor *w0 = vec ? mi_randn(&r, MI_F64, MI_SHAPE(D), 0, 0.5) : s.w0;
            mi_tensor *y1 = run_layer(&c, &s, w0, NULL, NULL);
            c.closed_form = false;
            mi_tensor *y2 = run_layer(&c, &s, w0, NULL, NULL);
            for (int64_t i = 0; i < y1->numel; i++)
                ck_assert_close(mi_get(y1, i), mi_get(y2, i), 1e-10 * (1 + fabs(mi_get(y2, i))));
        }
}
END_TEST

/* Moneta's recurrence written out as its equations, exactly (lq_eps = 0),
 * on a matrix memory with the ℓp bias, p = 3, independently of the helpers
 * above:
 *   A_t = α_t A_{t-1} − η_t ∇ℓ_p(W_{t-1}; k_t, v_t)                (MIRAS eq:q-norm)
 *   ∇ℓ_p = p (Sign(W k_t − v_t) ⊙ |W k_t − v_t|^(p−1)) k_tᵀ   (eq:lp-attentional-bias)
 *   paper: W_t = A_t / ‖A_t‖_q^(q−2),  ‖A‖_q = (Σ_ij |A_ij|^q)^(1/q)  (eq:q-norm)
 *   frobenius: W_t = A_t / ‖A_t‖_F^((q−2)/q)
 * Initial state: the paper's form A_0 = W_0; the Frobenius form's the A_0 that
 * reads as W_0, A_0 = W_0 ‖W_0‖_F^((q−2)/2). */
static void moneta_read(mat A, double q, bool paper, mat W)
{
    double sq = 0, sqq = 0;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) sq += A[i][j] * A[i][j], sqq += pow(fabs(A[i][j]), q);
    double div = paper ? pow(pow(sqq, 1 / q), q - 2) : pow(sqrt(sq), (q - 2) / q);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) W[i][j] = A[i][j] / div;
}

static void moneta_equations(const seqs *s, double q, bool paper, double *y)
{
    const double p = 3;
    for (int n = 0; n < N; n++) {
        mat A, W;
        double f0 = 0;
        for (int e = 0; e < D * D; e++) f0 += pow(mi_get(s->w0, e), 2);
        for (int e = 0; e < D * D; e++)
            A[e / D][e % D] = mi_get(s->w0, e) * (paper ? 1 : pow(sqrt(f0), (q - 2) / 2));
        moneta_read(A, q, paper, W);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            for (int i = 0; i < D; i++) {
                double e = -x.v[i];
                for (int j = 0; j < D; j++) e += W[i][j] * x.k[j];
                double de = p * (e > 0 ? 1 : e < 0 ? -1 : 0) * pow(fabs(e), p - 1);
                for (int j = 0; j < D; j++) A[i][j] = x.alpha * A[i][j] - x.eta * de * x.k[j];
            }
            moneta_read(A, q, paper, W);
            write_y(y, n, t, W, &x);
        }
    }
}

/* lq_form=paper against MIRAS eq:q-norm and lq_form=frobenius against the
 * Frobenius form, each written out (moneta_equations); the two forms differ. */
START_TEST(moneta_forms_are_their_equations)
{
    mi_rng r;
    mi_rng_seed(&r, 28);
    const double qs[] = {4, 3};
    for (int qi = 0; qi < 2; qi++) {
        seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
        double want[2][N * T * D];
        for (int form = MI_LQ_FROBENIUS; form <= MI_LQ_PAPER; form++) {
            moneta_equations(&s, qs[qi], form == MI_LQ_PAPER, want[form]);
            for (int closed = 0; closed < 2; closed++) {
                ret_case rc = {"lq", "lp", 0, qs[qi], 0, form, 0};
                mi_miras_config c = config_for(&rc, "matrix", 1, closed);
                config_set(&c, "lq_eps=0"); /* the exact norms */
                mi_tensor *y = run_layer(&c, &s, s.w0, NULL, NULL);
                char what[64];
                snprintf(what, sizeof what, "lq_form=%s q=%g closed %d",
                         form == MI_LQ_PAPER ? "paper" : "frobenius", qs[qi], closed);
                assert_equal(y, want[form], 1e-12, what);
            }
        }
        double diff = 0;
        for (int i = 0; i < N * T * D; i++) diff = fmax(diff, fabs(want[0][i] - want[1][i]));
        ck_assert_msg(diff > 1e-3, "q=%g: the two forms agree", qs[qi]);
    }
}
END_TEST

/* lq_form=frobenius names the Frobenius form; "spec", its earlier name, still
 * parses to it, so older checkpoints' overrides and commands keep working. */
START_TEST(lq_form_frobenius_and_its_alias)
{
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "retention=lq");
    ck_assert_int_eq(params_of(&c).lq_form, MI_LQ_FROBENIUS);
    const char *frobenius[] = {"lq_form=frobenius", "lq_form=spec"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(mi_miras_config_set(&c, "lq_form=paper"), 0);
        ck_assert_int_eq(params_of(&c).lq_form, MI_LQ_PAPER);
        ck_assert_int_eq(mi_miras_config_set(&c, frobenius[i]), 0);
        ck_assert_msg(params_of(&c).lq_form == MI_LQ_FROBENIUS, "%s", frobenius[i]);
    }
}
END_TEST

START_TEST(bad_parameters_are_reported)
{
    mi_miras m;
    struct {
        const char *field;
        double value;
        const char *message;
    } bad[] = {
        {"q", 1.0, "q must be > 1"},
        {"q", -3, "q must be > 1"},
        {"l1_gamma", -0.1, "l1_gamma must be >= 0"},
        {"kl_scale", 0, "kl_scale must be > 0"},
        {"kl_scale", -1, "kl_scale must be > 0"},
        {"lq_form", 7, "lq_form must be 'frobenius' or 'paper', got '7'"},
    };
    for (int i = 0; i < 6; i++) {
        mi_miras_config c = mi_miras_config_default();
        config_set(&c, !strcmp(bad[i].field, "q") || !strcmp(bad[i].field, "lq_form")
                           ? "retention=lq"
                       : !strcmp(bad[i].field, "kl_scale") ? "retention=kl"
                                                           : "retention=elastic");
        if (!strcmp(bad[i].field, "kl_scale")) { /* a config field: set in C, checked by init */
            c.kl_scale = bad[i].value;
            ck_assert_int_eq(mi_miras_init(&m, &c), -1);
        } else { /* a retention's own: refused when set */
            char kv[64];
            snprintf(kv, sizeof kv, "%s=%g", bad[i].field, bad[i].value);
            ck_assert_int_eq(mi_miras_config_set(&c, kv), -1);
        }
        ck_assert_error_has(bad[i].message);
        mi_error_clear();
    }
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "retention=lq");
    ck_assert_int_eq(mi_miras_config_set(&c, "lq_form=fro"), -1);
    ck_assert_error_has("lq_form must be 'frobenius' or 'paper'");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_config_set(&c, "retention=elastic-ftrl"), 0);
    ck_assert_str_eq(c.retention, "elastic-ftrl");
    /* bregman has no decay to take the gradient after */
    c = mi_miras_config_default();
    c.retention = "bregman";
    c.decay_first = true;
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("decay_first needs a retention gate with a decay, not 'bregman'");
    mi_error_clear();
    /* kl decays log W by alpha: the gate is needed */
    c = mi_miras_config_default();
    c.retention = "kl";
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    mi_rng r;
    mi_rng_seed(&r, 27);
    seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
    mi_miras_gates g = {.eta = s.eta};
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
    ck_assert_error_has("gate alpha is needed");
    mi_error_clear();
    for (int i = 0; i < 7; i++)
        ck_assert_msg(mi_retention_at(i) != NULL, "retention %d of the table is not defined", i);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("retention");
    TCase *tc = tcase_slow("retention");
    tcase_add_test(tc, per_token_is_the_papers_rule);
    tcase_add_test(tc, chunked_is_the_chunk_rule);
    tcase_add_test(tc, gradcheck_through_the_layer);
    tcase_add_test(tc, kl_rows_sum_to_c_and_stay_positive);
    tcase_add_test(tc, elastic_gives_exact_zeros);
    tcase_add_test(tc, bregman_stays_in_the_unit_interval);
    tcase_add_test(tc, lq_norms_on_matrix_and_vector);
    tcase_add_test(tc, moneta_forms_are_their_equations);
    tcase_add_test(tc, lq_form_frobenius_and_its_alias);
    tcase_add_test(tc, bad_parameters_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
