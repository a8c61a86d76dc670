/* Presets (MIRAS tab:memory-perspective-all): each preset's layer, run with
 * gates built from its gate specs, equals its update rule written out here
 * independently with plain f64 loops:
 *   - the matrix presets against the table's closed forms (linear attention
 *     as (Q Kᵀ ⊙ causal mask) V, RetNet/Mamba2/GLA/HGRN2 as decayed sums,
 *     DeltaNet and its gated forms as Householder updates, DeltaProduct as a
 *     product of Householder factors, Longhorn's implicit step), and against
 *     a naive loop of the generic MIRAS rule at chunk b = 1, 2, 3 (b = 1: the
 *     per-token loop, exact);
 *   - the MLP presets (ttt-mlp, titans, moneta, yaad, memora) against a
 *     per-token loop (read after write) with the MLP's backward pass
 *     written by hand.
 * A preset whose components are not in this build fails with a message
 * naming the missing component. */
#include <string.h>

#include "harness.h"

enum { N = 2, T = 6, D = 3, H = 4 * D, S_MAX = 2, P_MAX = S_MAX * T, N_PRESETS = 16 };

static const char *const expected_names[N_PRESETS] = {
    "linear-attention", "retnet", "mamba2", "gla", "hgrn2", "deltanet",
    "gated-deltanet", "rwkv7", "deltaproduct", "longhorn", "ttt-linear", "ttt-mlp",
    "titans", "moneta", "yaad", "memora"};

/* One preset's inputs, as plain arrays (for the references) and tensors. */
typedef struct kase {
    const mi_preset *p;
    int steps, P;                         /* write positions P = steps · T */
    bool mlp;
    double q[N][T][D], k[N][P_MAX][D], v[N][P_MAX][D];
    double eta[N][P_MAX][D], alpha[N][P_MAX][D], mu[N][P_MAX], delta[N][P_MAX];
    double w0[2][H * D];                  /* matrix: [D][D]; mlp: W1 [D][H], W2 [H][D] */
    mi_tensor *tq, *tk, *tv, *tw0[2];
    mi_miras_gates gates;
} kase;

static double uniform(mi_rng *r, double lo, double hi) { return lo + (hi - lo) * mi_rng_uniform(r); }

/* Test ranges of the data-dependent gates (sensible, away from 0 and 1). */
static void gate_range(const kase *c, char which, int n, int p, double *lo, double *hi)
{
    switch (which) {
    case 'e': *lo = c->mlp ? 0.05 : 0.2; *hi = c->mlp ? 0.3 : 0.9; break;
    case 'a': *lo = 0.7; *hi = 0.99; break;
    case 'm': *lo = 0.3; *hi = 0.9; break;
    default: /* δ: far below or far above the error norm (≈ 1–3), never near the switch */
        if ((n + p) % 2) *lo = 0.05, *hi = 0.3;
        else *lo = 5, *hi = 20;
    }
}

/* Fills out[N][P_MAX][D] (channel-expanded) from a gate spec and returns the
 * tensor: CONST [N,P] full of the value, HEAD [N,P], CHANNEL [N,P,D]. */
static mi_tensor *make_gate(kase *c, mi_rng *r, mi_gate_spec spec, char which, double *out)
{
    if (spec.kind == MI_GATE_UNUSED) return NULL;
    double head[N * P_MAX], chan[N * P_MAX * D];
    for (int n = 0; n < N; n++)
        for (int p = 0; p < c->P; p++) {
            double lo, hi, g = spec.value;
            gate_range(c, which, n, p, &lo, &hi);
            if (spec.kind == MI_GATE_HEAD) g = uniform(r, lo, hi);
            /* DeltaProduct's α: one per token, given at its first step */
            bool later_step = which == 'a' && p % c->steps != 0;
            if (later_step) g = 1;
            head[n * c->P + p] = g;
            for (int i = 0; i < D; i++) {
                double gi = spec.kind == MI_GATE_CHANNEL ? (later_step ? 1 : uniform(r, lo, hi)) : g;
                chan[(n * c->P + p) * D + i] = gi;
                if (which == 'e' || which == 'a') out[(n * P_MAX + p) * D + i] = gi;
                else if (i == 0) out[n * P_MAX + p] = gi;
            }
        }
    if (spec.kind == MI_GATE_CHANNEL) return mi_from_buffer(MI_F64, MI_SHAPE(N, c->P, D), chan);
    return mi_from_buffer(MI_F64, MI_SHAPE(N, c->P), head);
}

static void make_case(kase *c, const mi_preset *p, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    mi_rng r;
    mi_rng_seed(&r, seed);
    c->p = p;
    c->mlp = strcmp(preset_config(p).memory, "mlp") == 0;
    c->steps = strcmp(preset_config(p).algorithm, "multistep") == 0 ? preset_config(p).steps : 1;
    ck_assert_int_le(c->steps, S_MAX);
    c->P = c->steps * T;
    double scale = c->mlp ? 1 : 0.6;
    for (int n = 0; n < N; n++) {
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++) c->q[n][t][i] = scale * mi_rng_normal(&r);
        for (int t = 0; t < c->P; t++)
            for (int i = 0; i < D; i++) {
                c->k[n][t][i] = scale * mi_rng_normal(&r);
                c->v[n][t][i] = mi_rng_normal(&r);
            }
    }
    c->gates.eta = make_gate(c, &r, p->eta, 'e', &c->eta[0][0][0]);
    c->gates.alpha = make_gate(c, &r, p->alpha, 'a', &c->alpha[0][0][0]);
    c->gates.mu = make_gate(c, &r, p->mu, 'm', &c->mu[0][0]);
    c->gates.delta = make_gate(c, &r, p->delta, 'd', &c->delta[0][0]);
    if (p->alpha.kind == MI_GATE_UNUSED)
        for (int n = 0; n < N; n++)
            for (int t = 0; t < c->P; t++)
                for (int i = 0; i < D; i++) c->alpha[n][t][i] = 1;
    if (p->key_is_one_minus_alpha) /* HGRN2: k_t = 1 − α_t */
        for (int n = 0; n < N; n++)
            for (int t = 0; t < c->P; t++)
                for (int i = 0; i < D; i++) c->k[n][t][i] = 1 - c->alpha[n][t][i];
    c->tq = mi_from_buffer(MI_F64, MI_SHAPE(N, T, D), c->q);
    double kb[N * P_MAX * D], vb[N * P_MAX * D];
    for (int n = 0; n < N; n++)
        for (int t = 0; t < c->P; t++)
            for (int i = 0; i < D; i++) {
                kb[(n * c->P + t) * D + i] = c->k[n][t][i];
                vb[(n * c->P + t) * D + i] = c->v[n][t][i];
            }
    c->tk = mi_from_buffer(MI_F64, MI_SHAPE(N, c->P, D), kb);
    c->tv = mi_from_buffer(MI_F64, MI_SHAPE(N, c->P, D), vb);
    /* initial memory: random (a zero start would hide W_0's terms) */
    if (!c->mlp) {
        for (int i = 0; i < D * D; i++) c->w0[0][i] = 0.3 * mi_rng_normal(&r);
        c->tw0[0] = mi_from_buffer(MI_F64, MI_SHAPE(D, D), c->w0[0]);
    } else if (strcmp(preset_config(p).retention, "kl") == 0) {
        /* Memora: logits of rows on the simplex, peaked so LN sees spread */
        for (int i = 0; i < 2 * D * H; i++) c->w0[i / (D * H)][i % (D * H)] = 2 * mi_rng_normal(&r);
    } else {
        for (int i = 0; i < D * H; i++) c->w0[0][i] = mi_rng_normal(&r) / sqrt((double)H);
        for (int i = 0; i < H * D; i++) c->w0[1][i] = mi_rng_normal(&r) / sqrt((double)D);
    }
    if (c->mlp) {
        c->tw0[0] = mi_from_buffer(MI_F64, MI_SHAPE(D, H), c->w0[0]);
        c->tw0[1] = mi_from_buffer(MI_F64, MI_SHAPE(H, D), c->w0[1]);
    }
}

/* Builds the preset's memory at chunk b; a component missing from this
 * build fails the test with its name. */
/* The chunked form run_layer uses (MI_FORM_MINIBATCH: the naive loop's rule). */
static int chunk_form = MI_FORM_MINIBATCH;

static void init_preset(mi_miras *m, const mi_preset *p, int chunk, bool closed_form)
{
    const mi_miras_config c_ = preset_config(p), *c = &c_;
    ck_assert_msg(mi_memory_find(c->memory), "preset %s: memory '%s' is not in this build "
                  "(its component is missing)", p->name, c->memory);
    ck_assert_msg(mi_bias_find(c->bias), "preset %s: attentional bias '%s' is not in this "
                  "build (its component is missing)", p->name, c->bias);
    ck_assert_msg(mi_retention_find(c->retention), "preset %s: retention '%s' is not in this "
                  "build (its component is missing)", p->name, c->retention);
    mi_miras_config cfg = *c;
    cfg.chunk = chunk;
    cfg.closed_form = closed_form;
    cfg.form = chunk_form;
    ck_assert_msg(mi_miras_init(m, &cfg) == 0, "preset %s: %s", p->name, mi_error());
}

/* closed_form false: the inner gradients by autodiff (mi_grad) */
static mi_tensor *run_layer(const kase *c, int chunk, bool closed_form)
{
    mi_miras m;
    init_preset(&m, c->p, chunk, closed_form);
    int nw, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    ck_assert_int_eq(m.memory->shapes(&m.config, D, D, &nw, ranks, shapes), 0);
    if (c->mlp) /* the layout the reference assumes (memory_mlp.c): W1 [dv,h], W2 [h,dk] */
        ck_assert_msg(nw == 2 && shapes[0][0] == D && shapes[0][1] == H && shapes[1][0] == H &&
                      shapes[1][1] == D, "preset %s: the mlp memory's weights are not "
                      "[W1 [dv,h], W2 [h,dk]] (the reference's layout)", c->p->name);
    mi_tensor *y = mi_miras_forward(&m, c->tq, c->tk, c->tv, &c->gates, c->tw0, NULL);
    ck_assert_msg(y != NULL, "preset %s: %s", c->p->name, mi_error());
    ck_assert_int_eq(y->rank, 3);
    ck_assert_int_eq(y->shape[1], T);
    return y;
}

static void expect_equal(const kase *c, mi_tensor *y, double want[N][T][D], const char *what,
                         double tol)
{
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++) {
                double got = mi_get(y, (n * T + t) * D + i), w = want[n][t][i];
                ck_assert_msg(fabs(got - w) <= tol * (1 + fabs(w)),
                              "preset %s (%s): y[%d,%d,%d] = %.15g, want %.15g", c->p->name,
                              what, n, t, i, got, w);
            }
}

/* ---------------------------------------------------------------- matrix presets:
 * the table's closed forms, M ∈ R^{D×D} (value rows, key columns). */
typedef double mat[D][D];

static void read_out(const mat M, const double *q, double *y)
{
    for (int i = 0; i < D; i++) {
        y[i] = 0;
        for (int j = 0; j < D; j++) y[i] += M[i][j] * q[j];
    }
}

static double dot(const double *a, const double *b)
{
    double s = 0;
    for (int i = 0; i < D; i++) s += a[i] * b[i];
    return s;
}

/* H = I − β k kᵀ */
static void householder(double beta, const double *k, mat Hm)
{
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) Hm[i][j] = (i == j) - beta * k[i] * k[j];
}

static void matmul(const mat A, const mat B, mat C)
{
    mat R;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            R[i][j] = 0;
            for (int l = 0; l < D; l++) R[i][j] += A[i][l] * B[l][j];
        }
    memcpy(C, R, sizeof R);
}

/* Hebbian presets as decayed attention sums (no recurrence):
 *   y_t = (Π_{j≤t} a_j) ⊙ W_0 q_t + Σ_{s≤t} (Π_{s<j≤t} a_j) ⊙ (q_tᵀ k_s) v_s
 * with a the kept fraction (per value channel; 1 for linear attention), or
 * with the decay on the key axis (HGRN2: M_t = M_{t-1} Diag(a_t) + v_t k_tᵀ)
 *   y_t = W_0 (Π_{j≤t} a_j ⊙ q_t) + Σ_{s≤t} (q_t ⊙ Π_{s<j≤t} a_j)ᵀ k_s v_s. */
static void closed_hebbian(const kase *c, double y[N][T][D])
{
    bool keys = preset_config(c->p).alpha_on_keys;
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++) {
                y[n][t][i] = 0;
                for (int l = 0; l < D; l++) { /* l: the channel a scales (value i, or key l) */
                    int ch = keys ? l : i;
                    double decay0 = 1;
                    for (int j = 0; j <= t; j++) decay0 *= c->alpha[n][j][ch];
                    y[n][t][i] += decay0 * c->w0[0][i * D + l] * c->q[n][t][l];
                }
                for (int s = 0; s <= t; s++) {
                    /* (Q Kᵀ ⊙ causal mask) V, decayed */
                    double qk = 0;
                    for (int l = 0; l < D; l++) {
                        double decay = 1;
                        for (int j = s + 1; j <= t; j++) decay *= c->alpha[n][j][keys ? l : i];
                        qk += decay * c->q[n][t][l] * c->k[n][s][l];
                    }
                    y[n][t][i] += qk * c->v[n][s][i];
                }
            }
}

/* The delta-rule presets, one token at a time as the table writes them. */
static void closed_delta(const kase *c, double y[N][T][D])
{
    const char *name = c->p->name;
    for (int n = 0; n < N; n++) {
        mat M;
        memcpy(M, c->w0[0], sizeof M);
        for (int t = 0; t < T; t++) {
            mat Mn, Hm;
            if (!strcmp(name, "deltanet") || !strcmp(name, "gated-deltanet") ||
                !strcmp(name, "rwkv7")) {
                /* M_t = M_{t-1} Diag(α_t) (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ (α ≡ 1:
                 * DeltaNet; α scalar per head: gated DeltaNet; per key channel:
                 * RWKV-7), or Diag(α_t) M_{t-1} (…) with α per value row */
                const double *k = c->k[n][t], *v = c->v[n][t];
                double beta = c->eta[n][t][0];
                bool keys = preset_config(c->p).alpha_on_keys;
                mat Md;
                for (int i = 0; i < D; i++)
                    for (int j = 0; j < D; j++) Md[i][j] = c->alpha[n][t][keys ? j : i] * M[i][j];
                householder(beta, k, Hm);
                matmul(Md, Hm, Mn);
                for (int i = 0; i < D; i++)
                    for (int j = 0; j < D; j++) Mn[i][j] += beta * v[i] * k[j];
            } else if (!strcmp(name, "ttt-linear")) {
                /* M_t = M_{t-1} − η_t ∇_M ½‖M k_t − v_t‖² = M_{t-1} − η_t (M k_t − v_t) k_tᵀ */
                const double *k = c->k[n][t], *v = c->v[n][t];
                double e[D];
                read_out(M, k, e);
                for (int i = 0; i < D; i++)
                    for (int j = 0; j < D; j++)
                        Mn[i][j] = M[i][j] - c->eta[n][t][i] * (e[i] - v[i]) * k[j];
            } else if (!strcmp(name, "longhorn")) {
                /* row i: M_i (I − ε_i k kᵀ) + ε_i v_i kᵀ, ε_i = β_i / (1 + β_i kᵀk) */
                const double *k = c->k[n][t], *v = c->v[n][t];
                for (int i = 0; i < D; i++) {
                    double beta = c->eta[n][t][i], eps = beta / (1 + beta * dot(k, k));
                    householder(eps, k, Hm);
                    for (int j = 0; j < D; j++) {
                        Mn[i][j] = eps * v[i] * k[j];
                        for (int l = 0; l < D; l++) Mn[i][j] += M[i][l] * Hm[l][j];
                    }
                }
            } else if (!strcmp(name, "deltaproduct")) {
                /* M_t = α_t M_{t-1} Π_{i=1..n} H_i + Σ_j β_j v_j k_jᵀ Π_{i=j+1..n} H_i,
                 * H_i = I − β_{t,i} k_{t,i} k_{t,i}ᵀ: the product of Householder factors */
                int s = c->steps, p0 = t * s;
                mat Hs[S_MAX], prod;
                for (int i = 0; i < s; i++) householder(c->eta[n][p0 + i][0], c->k[n][p0 + i], Hs[i]);
                memcpy(prod, Hs[0], sizeof prod);
                for (int i = 1; i < s; i++) matmul(prod, Hs[i], prod);
                matmul(M, prod, Mn);
                for (int a = 0; a < D; a++)
                    for (int b = 0; b < D; b++) Mn[a][b] *= c->alpha[n][p0][a];
                for (int j = 0; j < s; j++) {
                    mat term;
                    double beta = c->eta[n][p0 + j][0];
                    for (int a = 0; a < D; a++)
                        for (int b = 0; b < D; b++)
                            term[a][b] = beta * c->v[n][p0 + j][a] * c->k[n][p0 + j][b];
                    for (int i = j + 1; i < s; i++) matmul(term, Hs[i], term);
                    for (int a = 0; a < D; a++)
                        for (int b = 0; b < D; b++) Mn[a][b] += term[a][b];
                }
            } else {
                ck_abort_msg("no closed form for preset %s", name);
            }
            memcpy(M, Mn, sizeof M);
            read_out(M, c->q[n][t], y[n][t]);
        }
    }
}

/* The generic MIRAS rule for a matrix memory (MIRAS, eq:OGDupdate with a retention
 * gate α_t; at b = 1 decay_first is Table 1's Gated DeltaNet / RWKV-7 form
 * α_t W (I − η k kᵀ) + η v kᵀ, alpha_on_keys its GLA / HGRN2 Diag(α_t) rows, the
 * dot bias its Hebbian rows, implicit Longhorn's step), as a naive loop, with the chunk
 * rule: every position of a chunk takes its gradient at the state W' left by
 * the previous chunk (at ᾱ ⊙ W' with decay_first, ᾱ the decay since then);
 * for multistep at b = 1 each step is its own chunk. Per position:
 *   e = ∂ℓ/∂y at W_g k (dot: −v, l2: W_g k − v); η' = η / (1 + η‖k‖²) (implicit)
 *   W ← α ⊙ W − η' ⊙ e kᵀ (alpha_on_keys: W Diag(α) − η' ⊙ e kᵀ);
 *   y_t = W q_t after a token's last step. */
static void naive_matrix(const kase *c, int chunk, double y[N][T][D])
{
    const mi_miras_config cfg_ = preset_config(c->p), *cfg = &cfg_;
    bool dot_bias = !strcmp(cfg->bias, "dot"), implicit = !strcmp(cfg->algorithm, "implicit");
    int s = c->steps;
    for (int n = 0; n < N; n++) {
        mat W;
        memcpy(W, c->w0[0], sizeof W);
        int p = 0;
        while (p < c->P) {
            int len = chunk == 1 && s > 1 ? 1 : chunk * s;
            if (p + len > c->P) len = c->P - p;
            mat W0c;
            memcpy(W0c, W, sizeof W);
            double abar[D] = {1, 1, 1};
            for (int pp = p; pp < p + len; pp++) {
                const double *k = c->k[n][pp], *v = c->v[n][pp];
                double e[D];
                for (int i = 0; i < D; i++) abar[i] *= c->alpha[n][pp][i];
                for (int i = 0; i < D; i++) {
                    double wk = 0;
                    for (int j = 0; j < D; j++)
                        wk += (cfg->decay_first ? abar[cfg->alpha_on_keys ? j : i] : 1) *
                              W0c[i][j] * k[j];
                    e[i] = dot_bias ? -v[i] : wk - v[i];
                }
                for (int i = 0; i < D; i++) {
                    double eta = c->eta[n][pp][i];
                    if (implicit) eta = eta / (1 + eta * dot(k, k));
                    for (int j = 0; j < D; j++)
                        W[i][j] = c->alpha[n][pp][cfg->alpha_on_keys ? j : i] * W[i][j] -
                                  eta * e[i] * k[j];
                }
                if ((pp + 1) % s == 0) read_out(W, c->q[n][pp / s], y[n][pp / s]);
            }
            p += len;
        }
    }
}

/* ---------------------------------------------------------------- MLP presets:
 * M(x) = x + LN(W1 σ(W2 x)), σ = GELU (erf), LN without affine, eps 1e-5
 * (MIRAS "MIRAS's Variants"). W1 [D][H], W2 [H][D]. */
#define LN_EPS 1e-5

typedef struct mlp_w {
    double w1[D][H], w2[H][D];
} mlp_w;

typedef struct mlp_cache {
    double x[D], z[H], hdn[H], zhat[D], s, y[D];
} mlp_cache;

static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double gelu_prime(double x)
{
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

static void mlp_forward(const mlp_w *W, const double *x, mlp_cache *c)
{
    memcpy(c->x, x, sizeof c->x);
    for (int j = 0; j < H; j++) {
        c->z[j] = 0;
        for (int i = 0; i < D; i++) c->z[j] += W->w2[j][i] * x[i];
        c->hdn[j] = gelu(c->z[j]);
    }
    double o[D], mean = 0, var = 0;
    for (int i = 0; i < D; i++) {
        o[i] = 0;
        for (int j = 0; j < H; j++) o[i] += W->w1[i][j] * c->hdn[j];
        mean += o[i] / D;
    }
    for (int i = 0; i < D; i++) var += (o[i] - mean) * (o[i] - mean) / D;
    c->s = sqrt(var + LN_EPS);
    for (int i = 0; i < D; i++) {
        c->zhat[i] = (o[i] - mean) / c->s;
        c->y[i] = x[i] + c->zhat[i];
    }
}

/* ∂ℓ/∂W1, ∂ℓ/∂W2 from e = ∂ℓ/∂y, by hand:
 *   do = (e − mean(e) − ẑ mean(e ⊙ ẑ)) / s;  ∂W1 = do hdnᵀ;
 *   dz = σ'(z) ⊙ W1ᵀ do;  ∂W2 = dz xᵀ */
static void mlp_backward(const mlp_w *W, const mlp_cache *c, const double *e, mlp_w *g)
{
    double me = 0, mez = 0, d_o[D];
    for (int i = 0; i < D; i++) {
        me += e[i] / D;
        mez += e[i] * c->zhat[i] / D;
    }
    for (int i = 0; i < D; i++) d_o[i] = (e[i] - me - c->zhat[i] * mez) / c->s;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < H; j++) g->w1[i][j] = d_o[i] * c->hdn[j];
    for (int j = 0; j < H; j++) {
        double dz = 0;
        for (int i = 0; i < D; i++) dz += W->w1[i][j] * d_o[i];
        dz *= gelu_prime(c->z[j]);
        for (int i = 0; i < D; i++) g->w2[j][i] = dz * c->x[i];
    }
}

static double *entry(mlp_w *w, int which, int x) { return which == 0 ? &w->w1[0][0] + x : &w->w2[0][0] + x; }

/* The retention's read W = read(A) for one weight (D·H entries, `rows` rows):
 *   none, l2: W = A;  lq (Frobenius form): W = A / (‖A‖_F² + ε)^((q−2)/(2q));
 *   kl: W = c · Softmax_row(A) (A is log W, MIRAS eq:xmodel). */
static void read_weight(const mi_miras_config *cfg, const double *A, double *W, int rows)
{
    int cols = D * H / rows;
    if (!strcmp(cfg->retention, "lq")) {
        double ss = config_real(cfg, "lq_eps"), q = config_real(cfg, "q");
        for (int x = 0; x < D * H; x++) ss += A[x] * A[x];
        double scale = pow(ss, (q - 2) / (2 * q));
        for (int x = 0; x < D * H; x++) W[x] = A[x] / scale;
    } else if (!strcmp(cfg->retention, "kl")) {
        for (int i = 0; i < rows; i++) {
            double mx = -INFINITY, z = 0;
            for (int j = 0; j < cols; j++) mx = fmax(mx, A[i * cols + j]);
            for (int j = 0; j < cols; j++) z += exp(A[i * cols + j] - mx);
            for (int j = 0; j < cols; j++) W[i * cols + j] = cfg->kl_scale * exp(A[i * cols + j] - mx) / z;
        }
    } else {
        memcpy(W, A, sizeof(double) * D * H);
    }
}

static void read_all(const mi_miras_config *cfg, mlp_w *A, mlp_w *W)
{
    read_weight(cfg, &A->w1[0][0], &W->w1[0][0], D);
    read_weight(cfg, &A->w2[0][0], &W->w2[0][0], H);
}

/* ∂ℓ/∂y for the preset's attentional bias at y with target v, e = y − v:
 *   l2: e;
 *   lp (MIRAS eq:lp-attentional-bias): p Sign(e) ⊙ |e|^(p−1) with the remark's
 *     smooth |x| ≈ s(x) = √(x² + ε) and Sign(x) ≈ x / s(x), its derivative (the
 *     form bias_lp.c documents; tanh(a x) would be the derivative of no loss);
 *   yaad (MIRAS eq:huber-loss): e when ‖e‖ ≤ δ, else δ ∇ℓ1 = δ tanh(a e)
 *     (the smooth sign). */
static int yaad_tokens[2]; /* tokens the reference ran in the ℓ2 and the ℓ1 branch */

static void bias_error(const mi_miras_config *cfg, const double *y, const double *v,
                       double delta, double *e)
{
    double err[D], norm = 0;
    for (int i = 0; i < D; i++) {
        err[i] = y[i] - v[i];
        norm += err[i] * err[i];
    }
    norm = sqrt(norm);
    yaad_tokens[norm > delta]++;
    for (int i = 0; i < D; i++) {
        if (!strcmp(cfg->bias, "l2")) e[i] = err[i];
        else if (!strcmp(cfg->bias, "lp")) {
            double p = config_real(cfg, "p"), sabs = sqrt(err[i] * err[i] + config_real(cfg, "abs_eps"));
            e[i] = p * (err[i] / sabs) * pow(sabs, p - 1);
        }
        else if (!strcmp(cfg->bias, "yaad"))
            e[i] = norm <= delta ? err[i] : delta * tanh(config_real(cfg, "sign_sharpness") * err[i]);
        else ck_abort_msg("no reference for bias %s", cfg->bias);
    }
}

/* The per-token loop (read after write), one sequence at a time:
 *   W_{t-1} = read(A_{t-1});  G = ∇_W ℓ(M_W(k_t); v_t) at W_{t-1}
 *   S_t = μ_t S_{t-1} − η_t G (momentum; otherwise S_t = −η_t G)
 *   A_t = α_t A_{t-1} + S_t  (α ≡ 1 without retention)
 *   y_t = M_{read(A_t)}(q_t)
 * A_0 = W_0, except lq (Frobenius form), whose A_0 reads as W_0:
 * A_0 = W_0 (‖W_0‖_F² + ε)^(r/(2(1−r))), r = (q−2)/q, and kl, whose
 * state is log W and whose W_0 is given as logits (retention_kl.c):
 * the initial weights are c · Softmax_row(W_0), A_0 = log of them. */
static void reference_mlp(const kase *c, double y[N][T][D])
{
    const mi_miras_config cfg_ = preset_config(c->p), *cfg = &cfg_;
    bool kl = !strcmp(cfg->retention, "kl"), momentum = !strcmp(cfg->algorithm, "momentum");
    yaad_tokens[0] = yaad_tokens[1] = 0;
    for (int n = 0; n < N; n++) {
        mlp_w A, S, W, G;
        memset(&S, 0, sizeof S);
        memcpy(&A.w1[0][0], c->w0[0], sizeof A.w1);
        memcpy(&A.w2[0][0], c->w0[1], sizeof A.w2);
        if (kl) {
            mlp_w W0 = A;
            read_all(cfg, &W0, &A);
            for (int w = 0; w < 2; w++)
                for (int x = 0; x < D * H; x++) *entry(&A, w, x) = log(*entry(&A, w, x));
        }
        if (!strcmp(cfg->retention, "lq"))
            for (int w = 0; w < 2; w++) {
                double q = config_real(cfg, "q"), ss = config_real(cfg, "lq_eps"), r = (q - 2) / q;
                for (int x = 0; x < D * H; x++) ss += *entry(&A, w, x) * *entry(&A, w, x);
                for (int x = 0; x < D * H; x++) *entry(&A, w, x) *= pow(ss, r / (2 * (1 - r)));
            }
        for (int t = 0; t < T; t++) {
            mlp_cache fc;
            double e[D];
            read_all(cfg, &A, &W);
            mlp_forward(&W, c->k[n][t], &fc);
            bias_error(cfg, fc.y, c->v[n][t], c->delta[n][t], e);
            mlp_backward(&W, &fc, e, &G);
            double eta = c->eta[n][t][0], alpha = c->alpha[n][t][0], mu = c->mu[n][t];
            for (int w = 0; w < 2; w++)
                for (int x = 0; x < D * H; x++) {
                    double step = -eta * *entry(&G, w, x);
                    if (momentum) step = *entry(&S, w, x) = mu * *entry(&S, w, x) + step;
                    *entry(&A, w, x) = alpha * *entry(&A, w, x) + step;
                }
            read_all(cfg, &A, &W);
            mlp_forward(&W, c->q[n][t], &fc);
            memcpy(y[n][t], fc.y, sizeof fc.y);
        }
    }
}

/* ---------------------------------------------------------------- tests */
static const mi_preset *preset_checked(int i)
{
    const mi_preset *p = mi_preset_find(expected_names[i]);
    ck_assert_msg(p != NULL, "no preset named %s", expected_names[i]);
    return p;
}

START_TEST(names_unique_and_complete)
{
    int count = 0;
    while (mi_preset_at(count)) count++;
    ck_assert_int_ge(count, N_PRESETS); /* the MIRAS table's 16, then later models' */
    for (int i = 0; i < count; i++) {
        const mi_preset *p = mi_preset_at(i);
        ck_assert_ptr_nonnull(p->name);
        ck_assert_msg(p->update && *p->update, "preset %s has no update rule text", p->name);
        ck_assert_ptr_eq(mi_preset_find(p->name), p);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(p->name, mi_preset_at(j)->name) != 0, "preset name %s twice", p->name);
    }
    for (int i = 0; i < N_PRESETS; i++) preset_checked(i);
    ck_assert_ptr_null(mi_preset_find("nope"));
    ck_assert_ptr_null(mi_preset_find("DeltaNet"));
    ck_assert_ptr_null(mi_preset_find(""));
    ck_assert_ptr_null(mi_preset_find(NULL));
    ck_assert_ptr_null(mi_preset_at(-1));
    ck_assert_ptr_null(mi_preset_at(count));
}
END_TEST

/* Each gate is specified exactly when the components use it, a channel gate
 * only on a matrix memory, and the config is the default in every field the
 * preset does not choose (chunk 1: the exact recurrence). */
START_TEST(gate_specs_match_components)
{
    mi_miras_config def = mi_miras_config_default();
    for (int i = 0; i < N_PRESETS; i++) {
        const mi_preset *p = preset_checked(i);
        const mi_miras_config c_ = preset_config(p), *c = &c_;
        bool uses_alpha = strcmp(c->retention, "none") != 0;
        bool uses_mu = !strcmp(c->algorithm, "momentum");
        bool uses_delta = !strcmp(c->bias, "yaad") || !strcmp(c->bias, "huber") ||
                          !strcmp(c->bias, "huber-norm");
        ck_assert_msg(p->eta.kind != MI_GATE_UNUSED, "%s: eta unused", p->name);
        ck_assert_msg((p->alpha.kind != MI_GATE_UNUSED) == uses_alpha, "%s: alpha spec", p->name);
        ck_assert_msg((p->mu.kind != MI_GATE_UNUSED) == uses_mu, "%s: mu spec", p->name);
        ck_assert_msg((p->delta.kind != MI_GATE_UNUSED) == uses_delta, "%s: delta spec", p->name);
        const mi_gate_spec *g[4] = {&p->eta, &p->alpha, &p->mu, &p->delta};
        for (int j = 0; j < 4; j++) {
            if (g[j]->kind == MI_GATE_CHANNEL)
                ck_assert_msg(!strcmp(c->memory, "matrix") || !strcmp(c->memory, "vector"),
                              "%s: channel gate on a %s memory", p->name, c->memory);
            if (g[j]->kind != MI_GATE_UNUSED)
                ck_assert_msg(g[j]->value > 0 && (j == 3 || g[j]->value <= 1),
                              "%s: gate %d level %g", p->name, j, g[j]->value);
        }
        if (p->key_is_one_minus_alpha) ck_assert_int_eq(p->alpha.kind, MI_GATE_CHANNEL);
        ck_assert_int_eq(c->chunk, 1);
        ck_assert(c->closed_form);
        ck_assert_int_eq(c->mlp_depth, def.mlp_depth);
        ck_assert_int_eq(c->mlp_expansion, def.mlp_expansion);
        /* the bias's and the retention's own parameters: their defaults */
        mi_miras_config fresh = mi_miras_config_default();
        fresh.bias = c->bias;
        fresh.retention = c->retention;
        const mi_field *own[2] = {mi_bias_find(c->bias)->params,
                                  mi_retention_find(c->retention)->params};
        const int n_own[2] = {mi_bias_find(c->bias)->n_params,
                              mi_retention_find(c->retention)->n_params};
        char a[64], b[64];
        for (int x = 0; x < 2; x++)
            for (int k = 0; own[x] && k < n_own[x]; k++) {
                ck_assert(mi_miras_config_get(c, own[x][k].key, a, sizeof a) == 0 &&
                          mi_miras_config_get(&fresh, own[x][k].key, b, sizeof b) == 0);
                ck_assert_msg(!strcmp(a, b), "%s: %s = %s, its default %s", p->name,
                              own[x][k].key, a, b);
            }
        ck_assert((c->kl_scale == def.kl_scale || !strcmp(p->name, "memora")) &&
                  c->steps == def.steps);
    }
    /* Memora's simplex scale (chosen by training runs, presets.c) */
    ck_assert(preset_config(mi_preset_find("memora")).kl_scale == 16);
    /* Moneta is (p, q) = (3, 4) */
    const mi_preset *moneta = mi_preset_find("moneta");
    const mi_miras_config moneta_cfg = preset_config(moneta);
    ck_assert(config_real(&moneta_cfg, "p") == 3 && config_real(&moneta_cfg, "q") == 4);
    ck_assert(preset_config(mi_preset_find("gated-deltanet")).decay_first);
    ck_assert(preset_config(mi_preset_find("rwkv7")).decay_first);
    ck_assert(preset_config(mi_preset_find("deltaproduct")).decay_first);
    ck_assert_int_eq(preset_config(mi_preset_find("deltaproduct")).steps, 2);
}
END_TEST

/* The layer at chunk 1 == the preset's rule written out (loop over presets). */
START_TEST(layer_equals_closed_form)
{
    const mi_preset *p = preset_checked(_i);
    kase c;
    make_case(&c, p, 100 + (uint64_t)_i);
    double want[N][T][D];
    const char *name = p->name;
    if (c.mlp) reference_mlp(&c, want);
    else if (!strcmp(name, "linear-attention") || !strcmp(name, "retnet") ||
             !strcmp(name, "mamba2") || !strcmp(name, "gla") || !strcmp(name, "hgrn2"))
        closed_hebbian(&c, want);
    else closed_delta(&c, want);
    double tol = c.mlp ? 1e-11 : 1e-12;
    expect_equal(&c, run_layer(&c, 1, true), want, "closed form, chunk 1", tol);
    expect_equal(&c, run_layer(&c, 1, false), want, "autodiff inner gradients, chunk 1", 10 * tol);
    if (!strcmp(preset_config(p).bias, "yaad")) /* both branches of the switch were taken */
        ck_assert_msg(yaad_tokens[0] > 0 && yaad_tokens[1] > 0, "yaad: %d l2 and %d l1 tokens",
                      yaad_tokens[0], yaad_tokens[1]);
}
END_TEST

/* Matrix presets: the layer == the naive MIRAS loop at b = 1 (the per-token
 * loop, exact) and the mini-batch chunk rule (form=minibatch) at b = 2, 3
 * (T = 6: b = 3 divides it, and b = 4 leaves a short last chunk); with
 * form=auto, the delta-rule presets' exact chunkwise form at b = 2, 3, 4
 * == the preset's rule written out (the per-token closed form). */
START_TEST(matrix_layer_equals_naive_loop)
{
    const mi_preset *p = preset_checked(_i);
    ck_assert_str_eq(preset_config(p).memory, "matrix");
    kase c;
    make_case(&c, p, 200 + (uint64_t)_i);
    const int chunks[] = {1, 2, 3, 4};
    for (int b = 0; b < 4; b++) {
        double want[N][T][D];
        char what[32];
        naive_matrix(&c, chunks[b], want);
        snprintf(what, sizeof what, "naive loop, chunk %d", chunks[b]);
        expect_equal(&c, run_layer(&c, chunks[b], true), want, what, 1e-12);
    }
    bool delta = !strcmp(preset_config(p).bias, "l2") && strcmp(preset_config(p).algorithm, "momentum");
    if (!delta) return;
    double want[N][T][D];
    closed_delta(&c, want);
    chunk_form = MI_FORM_AUTO;
    for (int b = 1; b < 4; b++) {
        char what[40];
        snprintf(what, sizeof what, "exact form, chunk %d", chunks[b]);
        expect_equal(&c, run_layer(&c, chunks[b], true), want, what, 1e-12);
    }
    chunk_form = MI_FORM_MINIBATCH;
}
END_TEST

/* The layer at chunk 1 over T tokens == T calls of one token each, the
 * final state of one call the initial weights of the next. Only where the
 * final state is the whole state: the retention keeps W itself (none, l2)
 * and there is no momentum. */
START_TEST(chunk1_equals_one_token_at_a_time)
{
    const mi_preset *p = preset_checked(_i);
    const mi_miras_config cfg_ = preset_config(p), *cfg = &cfg_;
    if (strcmp(cfg->retention, "none") && strcmp(cfg->retention, "l2")) return;
    if (!strcmp(cfg->algorithm, "momentum")) return;
    kase c;
    make_case(&c, p, 300 + (uint64_t)_i);
    mi_tensor *y = run_layer(&c, 1, true);
    mi_miras m;
    init_preset(&m, p, 1, true);
    mi_tensor *w[2] = {c.tw0[0], c.tw0[1]};
    int nw = c.mlp ? 2 : 1, s = c.steps;
    for (int t = 0; t < T; t++) {
        mi_miras_gates g = c.gates;
        mi_tensor **gs[4] = {&g.eta, &g.alpha, &g.mu, &g.delta};
        for (int j = 0; j < 4; j++)
            if (*gs[j]) *gs[j] = mi_slice(*gs[j], 1, t * s, (t + 1) * s);
        mi_tensor *fs[2];
        mi_tensor *yt = mi_miras_forward(&m, mi_slice(c.tq, 1, t, t + 1),
                                         mi_slice(c.tk, 1, t * s, (t + 1) * s),
                                         mi_slice(c.tv, 1, t * s, (t + 1) * s), &g, w, fs);
        ck_assert_msg(yt != NULL, "%s: %s", p->name, mi_error());
        for (int n = 0; n < N; n++)
            for (int i = 0; i < D; i++)
                ck_assert_msg(mi_get(yt, n * D + i) == mi_get(y, (n * T + t) * D + i),
                              "%s: token %d differs: %.17g vs %.17g", p->name, t,
                              mi_get(yt, n * D + i), mi_get(y, (n * T + t) * D + i));
        for (int j = 0; j < nw; j++) w[j] = mi_squeeze(fs[j], 1);   /* [N, ...] */
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("presets");
    TCase *tc = tcase_slow("presets");
    tcase_add_test(tc, names_unique_and_complete);
    tcase_add_test(tc, gate_specs_match_components);
    /* every preset, matrix first (indices 0–10), then the MLP ones (11–15) */
    tcase_add_loop_test(tc, layer_equals_closed_form, 0, N_PRESETS);
    tcase_add_loop_test(tc, matrix_layer_equals_naive_loop, 0, 11);
    tcase_add_loop_test(tc, chunk1_equals_one_token_at_a_time, 0, N_PRESETS);
    suite_add_tcase(s, tc);
    return s;
}
