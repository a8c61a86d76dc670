/* Memora's learned simplex scale c (config kl_scale_learn, kl_scale_t) and
 * channel-wise gates for the MLP memory: each against its equation written
 * out as a plain loop in f64 (not the library's helpers), gradchecks in f64,
 * the layer block's parameter and stream, and the errors. */
#include <string.h>

#include "retention_test_util.h"

/* ------------------------------------------------------------ plain-C pieces */

/* c · softmax of each row of a D×D matrix */
static void softmax_rows(mat L, double c, mat W)
{
    for (int i = 0; i < D; i++) {
        double mx = L[i][0], z = 0;
        for (int j = 1; j < D; j++) mx = fmax(mx, L[i][j]);
        for (int j = 0; j < D; j++) z += exp(L[i][j] - mx);
        for (int j = 0; j < D; j++) W[i][j] = c * exp(L[i][j] - mx) / z;
    }
}

/* MIRAS eq:xmodel on the matrix memory with the ℓ2 bias, (1 − λ_t) = α_t,
 * η'_t = η_t and sequence n's own scale c[n]:
 *   W_0 = c · softmax(W0 rows),  W_t = c · Softmax(α_t log W_{t-1} − η_t (W_{t-1} k_t − v_t) k_tᵀ)
 *   y_t = W_t q_t. Returns Σ y ⊙ r (r NULL: no sum) and writes y. */
static double memora_loop(const seqs *s, const double *c, const double *r, double *y)
{
    double sum = 0;
    for (int n = 0; n < N; n++) {
        mat L, W;
        for (int i = 0; i < D * D; i++) L[i / D][i % D] = mi_get(s->w0, i);
        softmax_rows(L, c[n], W);
        for (int t = 0; t < T; t++) {
            tok x = token(s, n, t);
            for (int i = 0; i < D; i++) {
                double e = -x.v[i];
                for (int j = 0; j < D; j++) e += W[i][j] * x.k[j];
                for (int j = 0; j < D; j++)
                    L[i][j] = x.alpha * log(W[i][j]) - x.eta * e * x.k[j];
            }
            softmax_rows(L, c[n], W);
            write_y(y, n, t, W, &x);
        }
    }
    if (r)
        for (int i = 0; i < N * T * D; i++) sum += y[i] * r[i];
    return sum;
}

static mi_miras_config memora_config(const char *memory, int chunk)
{
    mi_miras_config c = mi_miras_config_default();
    c.memory = memory;
    c.retention = "kl";
    c.kl_scale = 3;
    c.chunk = chunk;
    return c;
}

/* ------------------------------------------------------------ learned c */

/* One c per sequence: the layer's y is eq:xmodel's with that sequence's c,
 * and ∂(Σ y ⊙ r)/∂c from the graph equals the loop's central difference. */
START_TEST(per_sequence_scale_is_eq_xmodel)
{
    mi_rng rng;
    mi_rng_seed(&rng, 71);
    seqs s = make_seqs(&rng, 0.1, 0.6, 0.5);
    double c[N] = {2.5, 7}, r[N * T * D], want[N * T * D];
    for (int i = 0; i < N * T * D; i++) r[i] = mi_rng_uniform(&rng) - 0.5;
    memora_loop(&s, c, NULL, want);
    mi_miras_config cfg = memora_config("matrix", 1);
    mi_tensor *ct = mi_requires_grad(mi_from_buffer(MI_F64, 1, (int64_t[]){N}, c), true);
    cfg.kl_scale_t = ct;
    mi_tensor *y = run_layer(&cfg, &s, s.w0, NULL, NULL);
    assert_equal(y, want, 1e-12, "memora, c per sequence");
    /* the gradient with respect to c */
    mi_tensor *rt = mi_from_buffer(MI_F64, 3, (int64_t[]){N, T, D}, r);
    mi_tensor *f = mi_sum(mi_mul(y, rt), MI_ALL, false), *g;
    ck_assert_int_eq(mi_grad(&f, NULL, 1, &ct, 1, false, &g), 0);
    for (int n = 0; n < N; n++) {
        double h = 1e-6, cp[N], cm[N], yy[N * T * D];
        memcpy(cp, c, sizeof c), memcpy(cm, c, sizeof c);
        cp[n] += h, cm[n] -= h;
        double fd = (memora_loop(&s, cp, r, yy) - memora_loop(&s, cm, r, yy)) / (2 * h);
        ck_assert_msg(fabs(mi_get(g, n) - fd) <= 1e-6 * (1 + fabs(fd)),
                      "d/dc[%d]: graph %.12g, loop %.12g", n, mi_get(g, n), fd);
    }
}
END_TEST

typedef struct scale_ctx {
    mi_miras_config c;
} scale_ctx;

/* in: q, k, v, eta, alpha, c [N], then the memory's W_0 */
static int scale_fn(mi_tensor *const *in, int n, mi_tensor **out, void *vctx)
{
    scale_ctx *x = vctx;
    mi_miras_config c = x->c;
    c.kl_scale_t = in[5];
    mi_miras m;
    if (mi_miras_init(&m, &c) != 0) return -1;
    mi_miras_gates g = {.eta = in[3], .alpha = in[4]};
    mi_tensor *y = mi_miras_forward(&m, in[0], in[1], in[2], &g, in + 6, NULL);
    out[0] = mi_sum(mi_mul(y, y), MI_ALL, false);
    return out[0] ? 1 : -1;
}

/* f64 gradcheck of Memora (MLP memory, chunk 1 and chunk 3 with its lag
 * token) with c an input, every other input too. */
START_TEST(gradcheck_with_learned_scale)
{
    for (int chunk = 1; chunk <= 3; chunk += 2) {
        mi_rng rng;
        mi_rng_seed(&rng, 90 + (unsigned)chunk);
        scale_ctx x = {.c = memora_config("mlp", chunk)};
        x.c.mlp_expansion = 2;
        mi_miras m;
        ck_assert_int_eq(mi_miras_init(&m, &x.c), 0);
        seqs s = make_seqs(&rng, 0.05, 0.3, 0.5);
        mi_tensor *in[8] = {s.q, s.k, s.v, s.eta, s.alpha,
                            mi_rand(&rng, MI_F64, MI_SHAPE(N), 2, 6)};
        int nw, ranks[MI_MEMORY_MAX_WEIGHTS];
        int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
        ck_assert_int_eq(m.memory->shapes(&x.c, D, D, &nw, ranks, shapes), 0);
        ck_assert_int_eq(nw, 2);
        for (int i = 0; i < nw; i++) in[6 + i] = mi_randn(&rng, MI_F64, ranks[i], shapes[i], 0, 2);
        for (int i = 0; i < 8; i++) mi_requires_grad(in[i], true);
        mi_gradcheck_result res = mi_gradcheck(scale_fn, &x, in, 8, NULL);
        ck_assert_msg(res.ok, "chunk %d: %s", chunk, res.message);
    }
}
END_TEST

/* The layer block: the parameter, c = kl_scale at init (the same output as
 * the fixed c), its gradient (f64 gradcheck), and the stream with a learned c. */
typedef struct block_ctx {
    mi_miras_block *b;
    mi_tensor *x;
} block_ctx;

static int block_fn(mi_tensor *const *in, int n, mi_tensor **out, void *vctx)
{
    block_ctx *c = vctx;
    c->b->kl_scale_log = in[0];
    mi_tensor *y = mi_miras_block_forward(c->b, c->x);
    out[0] = mi_sum(mi_mul(y, y), MI_ALL, false);
    return out[0] ? 1 : -1;
}

static mi_miras_block_config memora_block(bool learn, int chunk)
{
    mi_miras_block_config c = mi_miras_block_config_default(8, 2, NULL);
    ck_assert_int_eq(mi_miras_block_config_preset(&c, "memora"), 0);
    c.miras.kl_scale_learn = learn;
    c.miras.chunk = chunk;
    c.miras.mlp_expansion = 2;
    c.gate_rank = 4;
    return c;
}

START_TEST(block_learns_the_scale)
{
    mi_scope *ps = mi_scope_new("params");
    mi_miras_block fixed, learned;
    mi_rng r1, r2, rx;
    mi_rng_seed(&r1, 5), mi_rng_seed(&r2, 5), mi_rng_seed(&rx, 6);
    mi_miras_block_config cf = memora_block(false, 2), cl = memora_block(true, 2);
    ck_assert_msg(mi_miras_block_init(&fixed, &cf, MI_F64, &r1, ps) == 0, "%s", mi_error());
    ck_assert_msg(mi_miras_block_init(&learned, &cl, MI_F64, &r2, ps) == 0, "%s", mi_error());
    ck_assert_ptr_null(fixed.kl_scale_log);
    ck_assert_ptr_nonnull(learned.kl_scale_log);
    int n;
    const mi_named_tensor *p = mi_miras_block_params(&learned, &n);
    bool found = false;
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].name, "memory.kl_scale")) {
            found = true;
            ck_assert_int_eq(p[i].tensor->rank, 1);
            ck_assert_int_eq(p[i].tensor->shape[0], 2); /* one per head */
            ck_assert(p[i].tensor->requires_grad);
        }
    ck_assert(found);
    mi_tensor *x = mi_randn(&rx, MI_F64, MI_SHAPE(2, 5, 8), 0, 1);
    mi_tensor *yf = mi_miras_block_forward(&fixed, x), *yl = mi_miras_block_forward(&learned, x);
    ck_assert_msg(yf && yl, "%s", mi_error());
    for (int64_t i = 0; i < yf->numel; i++)
        ck_assert_msg(fabs(mi_get(yf, i) - mi_get(yl, i)) <= 1e-12, "c = kl_scale at init: y[%lld]",
                      (long long)i);
    /* a learned c away from its start: the gradcheck and the stream */
    mi_tensor *s = mi_from_buffer(MI_F64, 1, (int64_t[]){2}, (double[]){0.4, -0.3});
    mi_requires_grad(s, true);
    block_ctx bc = {&learned, x};
    mi_gradcheck_result res = mi_gradcheck(block_fn, &bc, &s, 1, NULL);
    ck_assert_msg(res.ok, "block, d/ds: %s", res.message);
    learned.kl_scale_log = s;
    mi_tensor *y = mi_miras_block_forward(&learned, x);
    ck_assert_ptr_nonnull(y);
    mi_miras_block_state st;
    ck_assert_int_eq(mi_miras_block_state_init(&learned, &st, 2), 0);
    for (int t = 0; t < 4; t++) { /* whole chunks (the stream cannot know a chunk is last) */
        mi_tensor *yt = mi_miras_block_step(&learned, &st, mi_slice(x, 1, t, t + 1));
        ck_assert_msg(yt != NULL, "%s", mi_error());
        for (int b = 0; b < 2; b++)
            for (int j = 0; j < 8; j++) {
                double a = mi_get(yt, b * 8 + j), w = mi_get(y, (b * 5 + t) * 8 + j);
                ck_assert_msg(fabs(a - w) <= 1e-10, "stream t %d: %.15g vs %.15g", t, a, w);
            }
    }
    mi_scope_free(ps);
}
END_TEST

/* kl_init_sd: the block draws W_0's logits with that spread (and leaves the
 * memory's own init alone at 0) */
START_TEST(block_spreads_the_initial_logits)
{
    mi_scope *ps = mi_scope_new("params");
    const double sds[] = {0, 2};
    double spread[2];
    for (int i = 0; i < 2; i++) {
        mi_miras_block_config c = memora_block(false, 2);
        c.miras.kl_init_sd = sds[i];
        mi_miras_block b;
        mi_rng r;
        mi_rng_seed(&r, 8);
        ck_assert_msg(mi_miras_block_init(&b, &c, MI_F64, &r, ps) == 0, "%s", mi_error());
        double ss = 0;
        for (int64_t e = 0; e < b.w0[1]->numel; e++) ss += mi_get(b.w0[1], e) * mi_get(b.w0[1], e);
        spread[i] = sqrt(ss / (double)b.w0[1]->numel);
    }
    /* W_2 [8, 4] per head: N(0, 1/4) by default; N(0, 4) with kl_init_sd = 2 */
    ck_assert_msg(spread[0] > 0.3 && spread[0] < 0.7, "default spread %g", spread[0]);
    ck_assert_msg(spread[1] > 1.4 && spread[1] < 2.8, "kl_init_sd=2 spread %g", spread[1]);
    mi_scope_free(ps);
}
END_TEST

START_TEST(scale_errors_are_values)
{
    mi_miras_config c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "kl_scale_learn=true"), 0);
    ck_assert(c.kl_scale_learn);
    ck_assert_int_eq(mi_miras_config_set(&c, "kl_scale_learn=0"), 0);
    ck_assert(!c.kl_scale_learn);
    ck_assert_int_eq(mi_miras_config_set(&c, "kl_scale_learn=maybe"), -1);
    ck_assert_error_has("config: kl_scale_learn: 'maybe' is not true or false");
    mi_error_clear();
    mi_miras m;
    const char *others[] = {"l2", "f-div", "lq"};
    for (int i = 0; i < 3; i++) {
        c = mi_miras_config_default();
        c.memory = "mlp";
        c.retention = others[i];
        c.kl_scale_learn = true;
        ck_assert_int_eq(mi_miras_init(&m, &c), -1);
        ck_assert_error_has("kl_scale_learn learns Memora's simplex scale c: it needs "
                            "retention=kl");
        mi_error_clear();
    }
    /* a block: the same message, prefixed */
    mi_miras_block_config bc = mi_miras_block_config_default(8, 2, NULL);
    ck_assert_int_eq(mi_miras_block_config_preset(&bc, "titans"), 0);
    bc.miras.kl_scale_learn = true;
    mi_scope *ps = mi_scope_new("params");
    mi_miras_block b;
    mi_rng r;
    mi_rng_seed(&r, 1);
    ck_assert_int_eq(mi_miras_block_init(&b, &bc, MI_F64, &r, ps), -1);
    ck_assert_error_has("needs retention=kl");
    mi_error_clear();
    mi_scope_free(ps);
    /* kl_init_sd: a spread >= 0, for kl only */
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "kl_init_sd=0.5"), 0);
    ck_assert(c.kl_init_sd == 0.5);
    c.memory = "mlp";
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("kl_init_sd spreads the initial logits of Memora's simplex rows: it "
                        "needs retention=kl, got 'l2'");
    mi_error_clear();
    c.retention = "kl";
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    c.kl_init_sd = -1;
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("miras: kl_init_sd must be >= 0, got -1");
    mi_error_clear();
    /* c of the wrong shape */
    seqs s = make_seqs(&r, 0.1, 0.6, 0.5);
    c = memora_config("matrix", 1);
    c.kl_scale_t = mi_ones(MI_F64, MI_SHAPE(N + 1));
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    mi_miras_gates g = {.eta = s.eta, .alpha = s.alpha};
    ck_assert_ptr_null(mi_miras_forward(&m, s.q, s.k, s.v, &g, &s.w0, NULL));
    ck_assert_error_has("kl_scale_t is f64 [3]; expected f64 [2], one c per sequence");
    mi_error_clear();
}
END_TEST

/* ------------------------------------------------------------ channel-wise gates, MLP */

/* The MLP memory of depth 2 and expansion 2 (h = 2·D) written out:
 * M(x) = x + LN(W1 gelu(W2 x)), LN without affine, eps 1e-5, gelu(a) = a Φ(a). */
enum { H2 = 2 * D, UNITS = D + H2 };
typedef struct mlp2 {
    double w1[D][H2], w2[H2][D];
} mlp2;

static double Phi(double a) { return 0.5 * (1 + erf(a / sqrt(2))); }

/* y = M(x); with e = ∂ℓ/∂y given (e non-NULL) also ∂ℓ/∂W1, ∂ℓ/∂W2 into g. */
static void mlp2_run(const mlp2 *w, const double *x, double *y, const double *e, mlp2 *g)
{
    double a2[H2], u[H2], z[D], mean = 0, var = 0;
    for (int j = 0; j < H2; j++) {
        a2[j] = 0;
        for (int i = 0; i < D; i++) a2[j] += w->w2[j][i] * x[i];
        u[j] = a2[j] * Phi(a2[j]);
    }
    for (int i = 0; i < D; i++) {
        z[i] = 0;
        for (int j = 0; j < H2; j++) z[i] += w->w1[i][j] * u[j];
        mean += z[i] / D;
    }
    for (int i = 0; i < D; i++) var += (z[i] - mean) * (z[i] - mean) / D;
    double rs = 1 / sqrt(var + 1e-5), zh[D];
    for (int i = 0; i < D; i++) y[i] = x[i] + (zh[i] = (z[i] - mean) * rs);
    if (!e) return;
    /* LN backward: dz_i = rs (e_i − mean(e) − ẑ_i mean(e ⊙ ẑ)) */
    double me = 0, mez = 0, dz[D], du[H2];
    for (int i = 0; i < D; i++) me += e[i] / D, mez += e[i] * zh[i] / D;
    for (int i = 0; i < D; i++) dz[i] = rs * (e[i] - me - zh[i] * mez);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < H2; j++) g->w1[i][j] = dz[i] * u[j];
    for (int j = 0; j < H2; j++) {
        du[j] = 0;
        for (int i = 0; i < D; i++) du[j] += w->w1[i][j] * dz[i];
        du[j] *= Phi(a2[j]) + a2[j] * exp(-a2[j] * a2[j] / 2) / sqrt(2 * M_PI);
        for (int i = 0; i < D; i++) g->w2[j][i] = du[j] * x[i];
    }
}

/* MIRAS eq:OGDupdate with momentum (Titans) and the ℓ2 retention, every gate per
 * row r of each layer (entries 0..D−1: W1's rows, D..D+H2−1: W2's):
 *   S_t[r] = μ_t[r] S_{t−1}[r] − η_t[r] ∇ℓ(W_{t−1})[r],  W_t[r] = α_t[r] W_{t−1}[r] + S_t[r]
 * with ℓ = ½‖M(k_t) − v_t‖², read after write, y_t = M_{W_t}(q_t). */
static void titans_channel_loop(const mlp2 *w0, const double *q, const double *k,
                                const double *v, const double *eta, const double *alpha,
                                const double *mu, double *y)
{
    for (int n = 0; n < N; n++) {
        mlp2 w = *w0, s = {0}, g;
        for (int t = 0; t < T; t++) {
            int p = n * T + t;
            double yk[D], e[D];
            mlp2_run(&w, k + p * D, yk, NULL, NULL);
            for (int i = 0; i < D; i++) e[i] = yk[i] - v[p * D + i];
            mlp2_run(&w, k + p * D, yk, e, &g);
            const double *et = eta + p * UNITS, *at = alpha + p * UNITS, *mt = mu + p * UNITS;
            for (int i = 0; i < D; i++)
                for (int j = 0; j < H2; j++) {
                    s.w1[i][j] = mt[i] * s.w1[i][j] - et[i] * g.w1[i][j];
                    w.w1[i][j] = at[i] * w.w1[i][j] + s.w1[i][j];
                }
            for (int j = 0; j < H2; j++)
                for (int i = 0; i < D; i++) {
                    s.w2[j][i] = mt[D + j] * s.w2[j][i] - et[D + j] * g.w2[j][i];
                    w.w2[j][i] = at[D + j] * w.w2[j][i] + s.w2[j][i];
                }
            mlp2_run(&w, q + p * D, y + p * D, NULL, NULL);
        }
    }
}

static mi_miras_config titans_config(int chunk, bool closed)
{
    mi_miras_config c = mi_miras_config_default();
    c.memory = "mlp";
    c.mlp_expansion = 2;
    c.algorithm = "momentum";
    c.chunk = chunk;
    c.closed_form = closed;
    return c;
}

typedef struct channel_in {
    mi_tensor *q, *k, *v, *eta, *alpha, *mu, *w1, *w2;
} channel_in;

static channel_in channel_inputs(unsigned seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return (channel_in){
        .q = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1),
        .k = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1),
        .v = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1),
        .eta = mi_rand(&r, MI_F64, MI_SHAPE(N, T, UNITS), 0.05, 0.3),
        .alpha = mi_rand(&r, MI_F64, MI_SHAPE(N, T, UNITS), 0.7, 0.99),
        .mu = mi_rand(&r, MI_F64, MI_SHAPE(N, T, UNITS), 0.3, 0.9),
        .w1 = mi_randn(&r, MI_F64, MI_SHAPE(D, H2), 0, 1 / sqrt((double)H2)),
        .w2 = mi_randn(&r, MI_F64, MI_SHAPE(H2, D), 0, 1 / sqrt((double)D)),
    };
}

static mi_tensor *run_channel(const mi_miras_config *c, const channel_in *x)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, c) == 0, "%s", mi_error());
    mi_miras_gates g = {.eta = x->eta, .alpha = x->alpha, .mu = x->mu};
    mi_tensor *w0[2] = {x->w1, x->w2};
    mi_tensor *y = mi_miras_forward(&m, x->q, x->k, x->v, &g, w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    return y;
}

static double *values(const mi_tensor *t, double *out)
{
    for (int64_t i = 0; i < t->numel; i++) out[i] = mi_get(t, i);
    return out;
}

START_TEST(mlp_channel_gates_are_the_per_row_rule)
{
    channel_in x = channel_inputs(31);
    double q[N * T * D], k[N * T * D], v[N * T * D], eta[N * T * UNITS], alpha[N * T * UNITS],
        mu[N * T * UNITS], want[N * T * D];
    mlp2 w0;
    for (int i = 0; i < D * H2; i++) w0.w1[i / H2][i % H2] = mi_get(x.w1, i);
    for (int i = 0; i < H2 * D; i++) w0.w2[i / D][i % D] = mi_get(x.w2, i);
    titans_channel_loop(&w0, values(x.q, q), values(x.k, k), values(x.v, v),
                        values(x.eta, eta), values(x.alpha, alpha), values(x.mu, mu), want);
    for (int closed = 0; closed < 2; closed++) {
        mi_miras_config c = titans_config(1, closed);
        assert_equal(run_channel(&c, &x), want, 1e-12,
                     closed ? "channel gates, closed form" : "channel gates, autodiff");
    }
    /* per-head gates are the channel-wise ones with every row alike */
    mi_tensor *head[3] = {mi_slice(x.eta, 2, 0, 1), mi_slice(x.alpha, 2, 0, 1),
                          mi_slice(x.mu, 2, 0, 1)};
    channel_in xh = x, xc = x;
    xh.eta = mi_squeeze(head[0], 2), xh.alpha = mi_squeeze(head[1], 2), xh.mu = mi_squeeze(head[2], 2);
    xc.eta = mi_broadcast_to(head[0], MI_SHAPE(N, T, UNITS));
    xc.alpha = mi_broadcast_to(head[1], MI_SHAPE(N, T, UNITS));
    xc.mu = mi_broadcast_to(head[2], MI_SHAPE(N, T, UNITS));
    for (int chunk = 1; chunk <= 3; chunk += 2) {
        mi_miras_config c = titans_config(chunk, true);
        double yh[N * T * D];
        values(run_channel(&c, &xh), yh);
        assert_equal(run_channel(&c, &xc), yh, 1e-12, "channel gates with equal rows");
    }
}
END_TEST

/* Chunked (the mini-batch rule, one W per token): closed form equals
 * autodiff, and the stream (mi_miras_step) equals the forward. */
START_TEST(mlp_channel_gates_chunked_and_stream)
{
    channel_in x = channel_inputs(32);
    mi_miras_config c = titans_config(2, true), ca = titans_config(2, false);
    mi_tensor *y = run_channel(&c, &x);
    double yv[N * T * D];
    assert_equal(run_channel(&ca, &x), values(y, yv), 1e-12, "chunk 2: autodiff vs closed");
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    mi_miras_state st;
    mi_tensor *w0[2] = {x.w1, x.w2};
    ck_assert_int_eq(mi_miras_state_init(&m, &st, w0, N, D, D, MI_F64), 0);
    for (int t = 0; t < T - 1; t++) { /* whole chunks */
        mi_miras_gates g = {.eta = mi_slice(x.eta, 1, t, t + 1),
                            .alpha = mi_slice(x.alpha, 1, t, t + 1),
                            .mu = mi_slice(x.mu, 1, t, t + 1)};
        mi_tensor *yt = mi_miras_step(&m, &st, mi_slice(x.q, 1, t, t + 1),
                                      mi_slice(x.k, 1, t, t + 1), mi_slice(x.v, 1, t, t + 1), &g);
        ck_assert_msg(yt != NULL, "%s", mi_error());
        for (int n = 0; n < N; n++)
            for (int i = 0; i < D; i++)
                ck_assert_msg(fabs(mi_get(yt, n * D + i) - yv[(n * T + t) * D + i]) <= 1e-12,
                              "stream t %d", t);
    }
}
END_TEST

typedef struct channel_ctx {
    mi_miras_config c;
} channel_ctx;

static int channel_fn(mi_tensor *const *in, int n, mi_tensor **out, void *vctx)
{
    channel_ctx *x = vctx;
    mi_miras m;
    if (mi_miras_init(&m, &x->c) != 0) return -1;
    mi_miras_gates g = {.eta = in[3], .alpha = in[4], .mu = in[5]};
    mi_tensor *y = mi_miras_forward(&m, in[0], in[1], in[2], &g, in + 6, NULL);
    out[0] = mi_sum(mi_mul(y, y), MI_ALL, false);
    return out[0] ? 1 : -1;
}

/* f64 gradcheck, every input, per token and chunked; Memora (kl) too. */
START_TEST(gradcheck_mlp_channel_gates)
{
    for (int kl = 0; kl < 2; kl++)
        for (int chunk = 1; chunk <= 3; chunk += 2) {
            channel_in x = channel_inputs(40 + (unsigned)chunk);
            channel_ctx ctx = {.c = titans_config(chunk, true)};
            if (kl) {
                ctx.c.algorithm = "gd";
                ctx.c.retention = "kl";
                ctx.c.kl_scale = 3;
            }
            mi_tensor *in[8] = {x.q, x.k, x.v, x.eta, x.alpha, x.mu, x.w1, x.w2};
            for (int i = 0; i < 8; i++) mi_requires_grad(in[i], !kl || i != 5);
            mi_gradcheck_result res = mi_gradcheck(channel_fn, &ctx, in, 8, NULL);
            ck_assert_msg(res.ok, "%s chunk %d: %s", kl ? "memora" : "titans", chunk,
                          res.message);
        }
}
END_TEST

/* The layer block sizes a channel-wise gate to the memory's rows. */
START_TEST(block_sizes_mlp_channel_gates)
{
    mi_miras_block_config c = mi_miras_block_config_default(8, 2, NULL);
    ck_assert_int_eq(mi_miras_block_config_preset(&c, "memora"), 0);
    c.miras.mlp_expansion = 2;
    c.gate_rank = 4;
    c.eta.kind = c.alpha.kind = MI_GATE_CHANNEL;
    mi_scope *ps = mi_scope_new("params");
    mi_miras_block b;
    mi_rng r;
    mi_rng_seed(&r, 3);
    ck_assert_msg(mi_miras_block_init(&b, &c, MI_F32, &r, ps) == 0, "%s", mi_error());
    ck_assert_int_eq(b.gate_units, 4 + 8); /* head_dim 4: W_1 [4, 8], W_2 [8, 4] */
    ck_assert_int_eq(b.gate_up[MI_BLOCK_ETA]->shape[1], 2 * 12);
    ck_assert_int_eq(b.gate_up[MI_BLOCK_ALPHA]->shape[1], 2 * 12);
    mi_tensor *y = mi_miras_block_forward(&b, mi_randn(&r, MI_F32, MI_SHAPE(2, 6, 8), 0, 1));
    ck_assert_msg(y != NULL, "%s", mi_error());
    mi_scope_free(ps);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("memora_gates");
    TCase *tc = tcase_slow("memora_gates");
    tcase_add_test(tc, per_sequence_scale_is_eq_xmodel);
    tcase_add_test(tc, gradcheck_with_learned_scale);
    tcase_add_test(tc, block_learns_the_scale);
    tcase_add_test(tc, block_spreads_the_initial_logits);
    tcase_add_test(tc, scale_errors_are_values);
    tcase_add_test(tc, mlp_channel_gates_are_the_per_row_rule);
    tcase_add_test(tc, mlp_channel_gates_chunked_and_stream);
    tcase_add_test(tc, gradcheck_mlp_channel_gates);
    tcase_add_test(tc, block_sizes_mlp_channel_gates);
    suite_add_tcase(s, tc);
    return s;
}
