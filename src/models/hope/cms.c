/* The continuum memory system (Nested Learning, §3, Eq. 30–31): a
 * chain of k MLP blocks, block ℓ with its own update period C^(ℓ),
 *
 *   y_t = MLP^(f_k)(MLP^(f_{k−1})(… MLP^(f_1)(x_t)))                               (Eq. 30)
 *   θ^(ℓ)_{i+1} = θ^(ℓ)_i − Σ_{t=i−C^(ℓ)+1}^{i} η^(ℓ)_t ∇L^(ℓ)(θ^(ℓ)_t; x_t)  if i ≡ 0 (mod C^(ℓ))
 *               = θ^(ℓ)_i                                                  otherwise (Eq. 31)
 *
 * Block ℓ, on its input h_t (the previous block's output):
 *   u_t   = RMSNorm(h_t) ⊙ γ                   (a normalisation the paper leaves out
 *                                               "for the sake of clarity")
 *   out_t = h_t + W1 gelu(W2 u_t)              (the block: a pre-norm residual MLP)
 *   ℓ_t   = ½‖W1 gelu(W2 u_t) − u_t W_v‖²      (its inner objective)
 *   η_t   = σ(u_t w_η + b_η)                   (over C^(ℓ) with rate_mean)
 *   step:  W1 ← W1 − Σ η_t e_t s_tᵀ/(‖s_t‖² + 1),  W2 ← W2 − Σ η_t δ_t u_tᵀ/‖u_t‖²   (nl_mlp.c;
 *          e_t = W1 s_t − u_t W_v, s_t = gelu(W2 u_t), δ_t = gelu'(W2 u_t) ⊙ W1ᵀ e_t;
 *          the divisions with lms, the default)
 *
 * Choices the paper leaves open, and what this file does:
 * - The blocks. "MLP blocks" with a residual ("Notations": MLPs with residual
 *   connection): pre-norm h + W1 gelu(W2 RMSNorm(h) ⊙ γ), d → hidden → d, no
 *   biases, GELU (the MIRAS MLP memory's σ). With η = 0 (or every C^(ℓ) ≥ T) a
 *   block is exactly a Transformer's pre-norm FFN sublayer, which is the
 *   paper's remark that the Transformer block is the case k = 1.
 * - The order. Eq. 30 applies MLP^(f_1) first; levels are numbered from the
 *   fastest (§2.2: "the higher the level, the lower its frequency"), so the
 *   configured chunk[] is applied in its order and the default {1, 4, 16}
 *   puts the fastest block nearest the input. Any order can be configured.
 * - What is updated: W1 and W2 (θ^(ℓ)); γ, W_v, w_η, b_η are outer parameters
 *   only. θ^(ℓ) starts every sequence at θ^(ℓ)_0, an outer parameter (the
 *   slowest level: the outer loop). Each sequence of the batch has its own
 *   trajectory; nothing carries across sequences.
 * - The inner objective L^(ℓ) ("f(·) the error component of an arbitrary
 *   optimizer", not specified): ℓ2 regression of a learned view of the input,
 *   as TTT's reconstruction task: the block's own read, W1 gelu(W2 u_t), is
 *   fitted to v_t = u_t W_v. The key is the read's own input u_t, so what a
 *   block writes is exactly the map it applies. "Accumulated error" is the sum
 *   over the C^(ℓ) tokens since the last update of η_t ∇ℓ_t, every gradient at
 *   the weights in force (θ_t of Eq. 31, constant over the chunk: the weights
 *   the tokens were read with), i.e. the chunk's
 *   gradients in one batched evaluation: Eq. 31's sum over the C tokens
 *   i−C+1 … i (its lower limit i − C would count C + 1).
 * - The rate. Eq. 31 sums the chunk's C^(ℓ) terms η_t f(θ_t; x_t), and so
 *   does the default; rate_mean (`cms.rate=mean`) divides η by C^(ℓ), so
 *   the sum is the chunk's mean step and σ(·) means the same at every level.
 *   The rate is per token and data-dependent (Eq. 31 writes η_t^(ℓ)), b_η
 *   starting at the configured level. On HOPE's small MQAR (d 32, C =
 *   {1, 4, 16}) the sum learned faster than the mean (0.850 against 0.782 at
 *   step 500).
 * - The optimizer, f(·) in Eq. 31 ("the error component of an arbitrary
 *   optimizer"; "CMS requires simple learning rule but higher capacity",
 *   arXiv §8.3): normalised LMS by default, GD whose term on each layer is
 *   divided by its input's squared norm (+ norm_eps for u, + 1 for the hidden
 *   s, which can vanish: hope.h's MI_NL_MLP_HIDDEN_EPS), nl_mlp.c: GD on
 *   ½‖W u − v‖² needs η‖u‖² < 2 and ‖u‖² ≈ d here, so with the normalisation
 *   η ∈ (0, 1) is stable at any width and a step moves a layer's output by η
 *   times its error. lms = false (`cms.lms=false`) is plain GD, f = ∇L: in
 *   HOPE on the small MQAR it went to NaN by step 152 with either rate.
 * - When. Positions are counted from 1 as in the paper: after position i ≡ 0
 *   (mod C) the weights change, so position t reads θ after ⌊(t−1)/C⌋
 *   updates: a token is read with the weights its chunk started with (the
 *   update it contributes to is seen from the next chunk on; causal, and the
 *   chunk's read and gradient share one evaluation). In 0-based positions p
 *   (what the trace and the tests use) the weights change only at p ≡ 0 (mod
 *   C), p > 0. The last partial chunk makes no update (nothing would read it).
 * - How it runs. A level is one fused op, cms_scan (src/ops/cms_scan.c: the
 *   read and Eq. 31's step over the whole sequence, with a reverse-scan vjp
 *   that recomputes the weights from checkpoints), unless a trace is asked
 *   for or `composed` is set (`cms.composed=true`): then each chunk records
 *   mi_nl_mlp_read and mi_nl_mlp_step, as the loop below writes it, and the
 *   weights of every chunk stay on the tape. Both compute the same numbers
 *   (f64: to rounding, tests/test_cms_scan.c); only the composed form has
 *   gradients of gradients (create_graph).
 * - Initialisation: γ = 1; W2 ~ N(0, 1/d), W1 ~ N(0, 1/hidden), W_v ~ N(0, 1/d),
 *   w_η ~ N(0, 0.1²/d) (η_t starts within ~0.1 logit of its level),
 *   b_η = logit(eta), drawn in that order per block. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"

#define LEVEL_NAMES(l) \
    {"cms." #l ".norm", "cms." #l ".w1", "cms." #l ".w2", "cms." #l ".value", \
     "cms." #l ".eta_w", "cms." #l ".eta_bias"}
static const char *const level_names[MI_CMS_MAX_BLOCKS][6] = {
    LEVEL_NAMES(0), LEVEL_NAMES(1), LEVEL_NAMES(2), LEVEL_NAMES(3),
    LEVEL_NAMES(4), LEVEL_NAMES(5), LEVEL_NAMES(6), LEVEL_NAMES(7)};

/* cms.rate: "sum" (Eq. 31) or "mean" (rate_mean) */
static int rate_parse(const mi_field *f, void *obj, const char *text)
{
    if (strcmp(text, "sum") && strcmp(text, "mean"))
        return mi_error_set("'%s' is not sum or mean", text), -1;
    *(bool *)((char *)obj + f->offset) = !strcmp(text, "mean");
    return 0;
}

static int rate_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    return mi_field_printf(f, buf, n, "%s",
                           *(const bool *)((const char *)obj + f->offset) ? "mean" : "sum");
}

/* The CMS's keys (HOPE's "cms.KEY"); d_model and the levels' chunk sizes
 * are set by the caller (mi_cms_config_chunks). */
static const mi_field cms_fields[] = {
    MI_FIELD_I64_AT(mi_cms_config, "hidden", hidden, "0", 0, 1e9,
                    "each block's hidden width (0: 4 d_model)"),
    MI_FIELD_REAL_AT(mi_cms_config, "eta", eta, "0.02", 0, 1, MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN,
                     "the initial level of the rate sigma(.)"),
    MI_FIELD_CUSTOM_AT(mi_cms_config, "rate", rate_mean, "sum", rate_parse, rate_format,
                       "a chunk's steps summed (Eq. 31) or averaged: sum or mean"),
    MI_FIELD_BOOL_AT(mi_cms_config, "lms", lms, "true",
                     "each layer's term over its input's squared norm (false: plain GD)"),
    MI_FIELD_REAL_AT(mi_cms_config, "norm_eps", norm_eps, "1e-6", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN, "the blocks' RMSNorm epsilon"),
    MI_FIELD_BOOL_AT(mi_cms_config, "composed", composed, "false",
                     "each level as recorded per-chunk ops (any order) instead of cms_scan"),
};

const mi_field *mi_cms_config_fields(int *count)
{
    if (count) *count = MI_FIELDS_COUNT(cms_fields);
    return cms_fields;
}

mi_cms_config mi_cms_config_default(int64_t d_model)
{
    mi_cms_config c;
    memset(&c, 0, sizeof c);
    mi_fields_defaults(cms_fields, MI_FIELDS_COUNT(cms_fields), &c);  /* cannot fail */
    c.d_model = d_model, c.n_blocks = 3;
    c.chunk[0] = 1, c.chunk[1] = 4, c.chunk[2] = 16;
    return c;
}

int mi_cms_config_chunks(mi_cms_config *c, const char *list)
{
    if (!c || !list || !*list)
        return mi_error_set("cms: empty chunk list (expected e.g. \"1,4,16\")"), -1;
    int chunk[MI_CMS_MAX_BLOCKS], n = 0;
    const char *p = list;
    while (*p) {
        if (n == MI_CMS_MAX_BLOCKS)
            return mi_error_set("cms: more than %d chunk sizes in \"%s\"", MI_CMS_MAX_BLOCKS,
                                list), -1;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ','))
            return mi_error_set("cms: chunk list \"%s\": expected integers separated by commas",
                                list), -1;
        if (v < 1 || v > INT32_MAX)
            return mi_error_set("cms: chunk size C^(%d) = %ld in \"%s\" must be >= 1", n + 1, v,
                                list), -1;
        chunk[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return mi_error_set("cms: chunk list \"%s\" ends with a comma", list), -1;
    }
    c->n_blocks = n;
    memcpy(c->chunk, chunk, sizeof(int) * (size_t)n);
    return 0;
}

static int check_config(const mi_cms_config *c, mi_dtype dt)
{
    if (dt != MI_F32 && dt != MI_F64)
        return mi_error_set("cms: parameters must be f32 or f64, not %s", mi_dtype_name(dt)), -1;
    if (c->d_model < 1)
        return mi_error_set("cms: d_model must be >= 1, got %lld", (long long)c->d_model), -1;
    if (mi_fields_check(cms_fields, MI_FIELDS_COUNT(cms_fields), c, "cms") != 0) return -1;
    if (c->n_blocks < 1 || c->n_blocks > MI_CMS_MAX_BLOCKS)
        return mi_error_set("cms: n_blocks must be in [1, %d], got %d", MI_CMS_MAX_BLOCKS,
                            c->n_blocks), -1;
    for (int l = 0; l < c->n_blocks; l++)
        if (c->chunk[l] < 1)
            return mi_error_set("cms: chunk size C^(%d) = %d must be >= 1 (block %d updates "
                                "every C tokens)", l + 1, c->chunk[l], l + 1), -1;
    return 0;
}

static mi_tensor *param(mi_cms *c, const char *name, mi_tensor *t)
{
    if (!t) return NULL;
    t->name = name;
    mi_requires_grad(t, true);
    c->params[c->n_params++] = (mi_named_tensor){name, t};
    return t;
}

int mi_cms_init(mi_cms *c, const mi_cms_config *cfg, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    if (!c || !cfg || !rng || !scope)
        return mi_error_set("cms: NULL cms, config, rng or scope"), -1;
    memset(c, 0, sizeof *c);
    if (check_config(cfg, dt) != 0) return -1;
    c->config = *cfg;
    int64_t d = cfg->d_model, h = c->hidden = cfg->hidden ? cfg->hidden : 4 * d;
    int rc = 0;
    mi_scope_enter(scope);
    for (int l = 0; l < cfg->n_blocks && rc == 0; l++) {
        mi_cms_level *b = &c->level[l];
        const char *const *nm = level_names[l];
        b->norm = param(c, nm[0], mi_ones(dt, MI_SHAPE(d)));
        b->w2 = mi_randn(rng, dt, MI_SHAPE(h, d), 0, 1 / sqrt((double)d));
        b->w1 = param(c, nm[1], mi_randn(rng, dt, MI_SHAPE(d, h), 0, 1 / sqrt((double)h)));
        param(c, nm[2], b->w2);
        b->value = param(c, nm[3], mi_randn(rng, dt, MI_SHAPE(d, d), 0, 1 / sqrt((double)d)));
        b->eta_w = param(c, nm[4], mi_randn(rng, dt, MI_SHAPE(d, 1), 0, 0.1 / sqrt((double)d)));
        b->eta_bias = param(c, nm[5], mi_full(dt, MI_SHAPE(1), log(cfg->eta / (1 - cfg->eta))));
        if (!b->norm || !b->w1 || !b->w2 || !b->value || !b->eta_w || !b->eta_bias) rc = -1;
    }
    mi_scope_leave();
    return rc;
}

const mi_named_tensor *mi_cms_params(const mi_cms *c, int *count)
{
    if (count) *count = c ? c->n_params : 0;
    return c ? c->params : NULL;
}

/* A weight [out, in] or [B, out, in] as the weights of n positions, [B, n, out, in]. */
static mi_tensor *per_position(mi_tensor *w, int64_t B, int64_t n)
{
    int64_t out = w->shape[w->rank - 2], in = w->shape[w->rank - 1];
    mi_tensor *w4 = mi_reshape(w, MI_SHAPE(w->rank == 3 ? B : 1, 1, out, in));
    return mi_broadcast_to(w4, MI_SHAPE(B, n, out, in));
}

/* Block ℓ's read input, inner target and rate at every position of h [B, n, d]:
 * u = RMSNorm(h) ⊙ γ, v = u W_v [B, n, d], η = σ(u w_η + b_η) (/ C) [B, n]. */
static int level_inputs(const mi_cms *c, int l, mi_tensor *h, mi_tensor **u, mi_tensor **v,
                        mi_tensor **eta)
{
    const mi_cms_level *b = &c->level[l];
    *u = mi_rms_norm_gain(h, b->norm, c->config.norm_eps);
    *v = mi_matmul(*u, b->value);
    *eta = mi_squeeze(mi_sigmoid(mi_add(mi_matmul(*u, b->eta_w), b->eta_bias)), -1);
    if (c->config.rate_mean) *eta = mi_mul_scalar(*eta, 1 / (double)c->config.chunk[l]);
    return *u && *v && *eta ? 0 : -1;
}

/* One block over the whole sequence: h [B, T, d] → h + W1 gelu(W2 u), the
 * weights changing after every position that is a multiple of C. */
static mi_tensor *level_forward(const mi_cms *c, int l, mi_tensor *h, mi_cms_trace *trace)
{
    const mi_cms_level *b = &c->level[l];
    int64_t B = h->shape[0], T = h->shape[1], C = c->config.chunk[l];
    int64_t n_chunks = (T + C - 1) / C;
    mi_tensor *u, *v, *eta;
    if (level_inputs(c, l, h, &u, &v, &eta) != 0) return NULL;
    if (!trace && !c->config.composed)  /* the same loop as one op (cms_scan.c) */
        return mi_add(h, mi_cms_scan(u, v, eta, b->w1, b->w2, C, c->config.lms,
                                     c->config.norm_eps, MI_NL_MLP_HIDDEN_EPS));
    mi_scope *s = mi_scope_current();
    mi_tensor **ys = mi_scope_alloc(s, sizeof(mi_tensor *) * (size_t)n_chunks * 3);
    if (!ys) return mi_error_set("cms: out of memory"), NULL;
    mi_tensor **tw1 = ys + n_chunks, **tw2 = ys + 2 * n_chunks;
    mi_tensor *w1 = b->w1, *w2 = b->w2;   /* θ^(ℓ) in force */
    for (int64_t j = 0; j < n_chunks; j++) {
        int64_t t0 = j * C, t1 = t0 + C < T ? t0 + C : T;
        mi_tensor *uc = mi_slice(u, 1, t0, t1);
        if (!(ys[j] = mi_nl_mlp_read(w1, w2, false, uc))) return NULL;
        if (trace) {
            tw1[j] = per_position(w1, B, t1 - t0);
            tw2[j] = per_position(w2, B, t1 - t0);
        }
        if (t1 == T) break;  /* a full chunk ends before T: Eq. 31's update */
        if (mi_nl_mlp_step(w1, w2, false, uc, mi_slice(v, 1, t0, t1), mi_slice(eta, 1, t0, t1),
                           c->config.lms, c->config.norm_eps, MI_NL_MLP_HIDDEN_EPS, &w1, &w2) != 0)
            return NULL;
    }
    if (trace) {
        trace->w1[l] = n_chunks == 1 ? tw1[0] : mi_concat(tw1, (int)n_chunks, 1);
        trace->w2[l] = n_chunks == 1 ? tw2[0] : mi_concat(tw2, (int)n_chunks, 1);
    }
    mi_tensor *m = n_chunks == 1 ? ys[0] : mi_concat(ys, (int)n_chunks, 1);
    return mi_add(h, m);
}

/* x [B, T, d] with T = 1 (a step of a state of `batch` sequences) or any T >= 1 (batch 0). */
static int check_input(const mi_cms *c, mi_tensor *x, int64_t batch)
{
    int64_t d = c->config.d_model;
    if (x->rank == 3 && x->shape[2] == d && x->shape[1] >= 1 && x->dtype == c->level[0].w1->dtype &&
        (!batch || (x->shape[0] == batch && x->shape[1] == 1)))
        return 0;
    char s[96], want[64];
    if (batch) snprintf(want, sizeof want, "[%lld, 1, %lld]", (long long)batch, (long long)d);
    else snprintf(want, sizeof want, "[B, T, %lld] with T >= 1", (long long)d);
    return mi_error_set("cms: x is %s %s; expected %s %s", mi_dtype_name(x->dtype),
                        mi_shape_str(s, sizeof s, x->rank, x->shape),
                        mi_dtype_name(c->level[0].w1->dtype), want), -1;
}

mi_tensor *mi_cms_forward_trace(const mi_cms *c, mi_tensor *x, mi_cms_trace *trace)
{
    if (!c || !x) return mi_error_set("cms: NULL cms or input"), NULL;
    if (check_input(c, x, 0) != 0) return NULL;
    if (trace) {
        memset(trace, 0, sizeof *trace);
        trace->n_blocks = c->config.n_blocks;
    }
    mi_tensor *h = x;
    for (int l = 0; l < c->config.n_blocks && h; l++) h = level_forward(c, l, h, trace);
    if (!h) mi_error_prefix("cms");
    return h;
}

mi_tensor *mi_cms_forward(const mi_cms *c, mi_tensor *x)
{
    return mi_cms_forward_trace(c, x, NULL);
}

/* ---------------------------------------------------------------- one token at a time */

/* Each block reads with the weights in force and keeps its chunk's inputs,
 * targets and rates until the chunk ends; then Eq. 31's step, as the forward
 * takes it, from those weights. A token costs one read per block and, at a
 * chunk's end, that chunk's step: constant in the number of tokens read. */
struct mi_cms_state {
    int64_t batch, t;
    mi_tensor *w1[MI_CMS_MAX_BLOCKS], *w2[MI_CMS_MAX_BLOCKS];   /* θ in force (NULL: θ_0) */
    mi_tensor *u[MI_CMS_MAX_BLOCKS], *v[MI_CMS_MAX_BLOCKS];     /* the chunk's [B, n, d] */
    mi_tensor *eta[MI_CMS_MAX_BLOCKS];                          /* its rates [B, n] */
};

mi_cms_state *mi_cms_state_new(const mi_cms *c, int64_t batch, mi_scope *scope)
{
    if (!c || !scope || batch < 1) return mi_error_set("cms: state: NULL cms or batch < 1"), NULL;
    if (c->config.n_blocks < 1 || !c->level[0].w1)
        return mi_error_set("cms: state: needs an initialised CMS (mi_cms_init)"), NULL;
    mi_cms_state *s = mi_scope_alloc(scope, sizeof *s);
    if (!s) return mi_error_set("cms: state: out of memory"), NULL;
    memset(s, 0, sizeof *s);
    s->batch = batch;
    return s;
}

static mi_tensor *append(mi_tensor *chunk, mi_tensor *t)
{
    return chunk ? mi_concat((mi_tensor *[]){chunk, t}, 2, 1) : t;
}

mi_tensor *mi_cms_step(const mi_cms *c, mi_cms_state *s, mi_tensor *x)
{
    if (!c || !s || !x) return mi_error_set("cms: step: NULL cms, state or input"), NULL;
    if (check_input(c, x, s->batch) != 0) return mi_error_prefix("cms: step"), NULL;
    mi_tensor *h = x;
    for (int l = 0; l < c->config.n_blocks; l++) {
        const mi_cms_level *b = &c->level[l];
        mi_tensor *u, *v, *eta;
        if (level_inputs(c, l, h, &u, &v, &eta) != 0) return mi_error_prefix("cms: step"), NULL;
        mi_tensor *w1 = s->w1[l] ? s->w1[l] : b->w1, *w2 = s->w2[l] ? s->w2[l] : b->w2;
        h = mi_add(h, mi_nl_mlp_read(w1, w2, false, u));
        s->u[l] = append(s->u[l], u), s->v[l] = append(s->v[l], v);
        s->eta[l] = append(s->eta[l], eta);
        if (!h || !s->u[l] || !s->v[l] || !s->eta[l]) return mi_error_prefix("cms: step"), NULL;
        if ((s->t + 1) % c->config.chunk[l] == 0) {
            if (mi_nl_mlp_step(w1, w2, false, s->u[l], s->v[l], s->eta[l], c->config.lms,
                               c->config.norm_eps, MI_NL_MLP_HIDDEN_EPS, &w1, &w2) != 0)
                return mi_error_prefix("cms: step"), NULL;
            s->u[l] = s->v[l] = s->eta[l] = NULL;
        }
        s->w1[l] = w1, s->w2[l] = w2;
    }
    s->t++;
    return h;
}

int mi_cms_state_tensors(mi_cms_state *s, mi_tensor **slots[], int max)
{
    int n = 0;
    if (max < 5 * MI_CMS_MAX_BLOCKS)
        return mi_error_set("cms: state: %d slots needed", 5 * MI_CMS_MAX_BLOCKS), -1;
    for (int l = 0; l < MI_CMS_MAX_BLOCKS; l++) {
        slots[n++] = &s->w1[l], slots[n++] = &s->w2[l];
        slots[n++] = &s->u[l], slots[n++] = &s->v[l], slots[n++] = &s->eta[l];
    }
    return n;
}
