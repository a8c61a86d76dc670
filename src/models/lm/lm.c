/* The language model (MIRAS "Architectural Backbone": Llama's
 * macro architecture with the attention replaced by a mixer). For tokens
 * [B, T], D = d_model, F = mlp_hidden, V = vocab:
 *
 *   x_0     = E[tokens]                                        E [V, D]
 *   block l:
 *     h       = x_l + mixer_l(RMSNorm(x_l) ⊙ g_l)             pre-norm residual
 *               (a residual_inside mixer, samba: h = mixer_l(x_l), norms inside it)
 *     u       = RMSNorm(h) ⊙ g'_l
 *     x_{l+1} = h + (SiLU(u W_gate) ⊙ (u W_up)) W_down         SwiGLU (Shazeer 2020)
 *               or, when the mixer brings the feed-forward (mi_mixer.ffn),
 *     x_{l+1} = ffn_l(h)                                       its own pre-norms and
 *               residuals: HOPE's continuum memory system, which Nested Learning
 *               (§3, Fig. 3) puts in the MLP's place
 *   logits  = (RMSNorm(x_N) ⊙ g_f) Eᵀ    (tied)   or   … W_head [D, V]   (untied)
 *   loss    = mean over targets ≠ −100 of −log softmax(logits)[target]
 *
 * RMSNorm(x) = x / √(mean(x²) + norm_eps), weights g initialised to 1. No
 * biases anywhere (Llama).
 *
 * Initialisation, in this order from one rng seeded with `seed`:
 *   E          ~ N(0, 0.02²)                   (GPT-2; small logits at the start when tied)
 *   per block: the mixer's parameters (its own order and rule: block.c,
 *              attention.c, samba.c) with out_scale = 1/√(2·layers),
 *              then (unless the mixer brings the feed-forward, whose parameters
 *              it makes itself) W_gate, W_up ~ N(0, 1/D) and W_down ~ N(0, 1/(2·layers·F)):
 *              every projection back into the residual stream is scaled by
 *              1/√(2·layers), GPT-2's rule for 2 residual branches per block
 *              (a samba block's third branch is counted like the others)
 *   W_head     ~ N(0, 0.02²) when untied, so an untied model starts as close
 *              to uniform predictions (loss ≈ log V) as a tied one
 *   norm weights = 1 (not drawn).
 *
 * Parameters, in this order: embeddings.weight; for each block l:
 * blocks.l.mixer_norm.weight (absent for residual_inside mixers),
 * blocks.l.mixer.<the mixer's names>, blocks.l.mlp_norm.weight,
 * blocks.l.mlp.w_gate, blocks.l.mlp.w_up, blocks.l.mlp.w_down (or
 * blocks.l.<the feed-forward's names>: blocks.l.cms.0.norm, …);
 * final_norm.weight; lm_head.weight (untied only). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models.h"

static mi_tensor *leaf(mi_tensor *t)
{
    if (t) mi_requires_grad(t, true);
    return t;
}

static const char *name_in(mi_scope *s, const char *fmt, int l, const char *rest)
{
    char buf[256];
    snprintf(buf, sizeof buf, fmt, l, rest);
    char *n = mi_scope_alloc(s, strlen(buf) + 1);
    if (n) strcpy(n, buf);
    return n;
}

/* Fills lm->params with every parameter's full name (see the top). */
static int list_params(mi_lm *lm, mi_scope *scope)
{
    int total = 3 + lm->config.layers * 5;
    for (int l = 0; l < lm->config.layers; l++) {
        const mi_mixer *m = &lm->blocks[l].mixer;
        int n, nf = 0;
        m->params(m->self, &n);
        if (m->ffn) m->ffn_params(m->self, &nf);
        total += n + nf;
    }
    mi_named_tensor *p = lm->params = mi_scope_alloc(scope, sizeof *p * (size_t)total);
    if (!p) return mi_error_set("lm: out of memory"), -1;
    int k = 0;
    p[k++] = (mi_named_tensor){"embeddings.weight", lm->embeddings};
    for (int l = 0; l < lm->config.layers; l++) {
        const mi_lm_block *b = &lm->blocks[l];
        if (b->mixer_norm)
            p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.%s", l, "mixer_norm.weight"),
                                       b->mixer_norm};
        int n;
        const mi_named_tensor *mp = b->mixer.params(b->mixer.self, &n);
        for (int i = 0; i < n; i++)
            p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.mixer.%s", l, mp[i].name),
                                       mp[i].tensor};
        if (b->mixer.ffn) {
            const mi_named_tensor *fp = b->mixer.ffn_params(b->mixer.self, &n);
            for (int i = 0; i < n; i++)
                p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.%s", l, fp[i].name),
                                           fp[i].tensor};
            continue;
        }
        p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.%s", l, "mlp_norm.weight"),
                                   b->mlp_norm};
        p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.%s", l, "mlp.w_gate"), b->w_gate};
        p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.%s", l, "mlp.w_up"), b->w_up};
        p[k++] = (mi_named_tensor){name_in(scope, "blocks.%d.%s", l, "mlp.w_down"), b->w_down};
    }
    p[k++] = (mi_named_tensor){"final_norm.weight", lm->final_norm};
    if (lm->lm_head) p[k++] = (mi_named_tensor){"lm_head.weight", lm->lm_head};
    lm->n_params = k;
    for (int i = 0; i < k; i++) {
        if (!p[i].name) return mi_error_set("lm: out of memory"), -1;
        p[i].tensor->name = p[i].name;
    }
    return 0;
}

/* The options every block's mixer is made with; overrides points into buf. */
static mi_mixer_options mixer_options(const mi_lm_config *c, const char **buf)
{
    for (int i = 0; i < c->n_overrides; i++) buf[i] = c->overrides[i];
    mi_mixer_options opt = mi_mixer_options_default(c->d_model, c->heads);
    opt.window = c->window;
    opt.rope_base = c->rope_base;
    opt.out_scale = 1 / sqrt(2.0 * c->layers);
    opt.norm_eps = c->norm_eps;
    opt.overrides = buf;
    opt.n_overrides = c->n_overrides;
    return opt;
}

int mi_lm_init(mi_lm *lm, const mi_lm_config *cfg, mi_dtype dt, uint64_t seed, mi_scope *scope)
{
    if (!lm || !cfg || !scope) return mi_error_set("lm: NULL model, config or scope"), -1;
    memset(lm, 0, sizeof *lm);
    if (dt != MI_F32 && dt != MI_F64)
        return mi_error_set("lm: parameters must be f32 or f64, not %s", mi_dtype_name(dt)), -1;
    if (mi_lm_config_check(cfg) != 0) return -1;
    lm->config = *cfg;
    lm->dtype = dt;
    const mi_lm_config *c = &lm->config;
    int64_t D = c->d_model, V = c->vocab, F = lm->mlp_hidden = c->mlp_hidden ? c->mlp_hidden : 3 * D;
    double out_scale = 1 / sqrt(2.0 * c->layers);
    mi_rng rng;
    mi_rng_seed(&rng, seed);

    const char *overrides[MI_LM_MAX_OVERRIDES];
    mi_mixer_options opt = mixer_options(c, overrides);

    lm->blocks = mi_scope_alloc(scope, sizeof(mi_lm_block) * (size_t)c->layers);
    if (!lm->blocks) return mi_error_set("lm: out of memory"), -1;
    memset(lm->blocks, 0, sizeof(mi_lm_block) * (size_t)c->layers);

    mi_scope_enter(scope);
    int rc = (lm->embeddings = leaf(mi_randn(&rng, dt, MI_SHAPE(V, D), 0, 0.02))) ? 0 : -1;
    for (int l = 0; l < c->layers && rc == 0; l++) {
        mi_lm_block *b = &lm->blocks[l];
        if (mi_mixer_create(&b->mixer, c->mixer, &opt, dt, &rng, scope) != 0) {
            char who[32];
            snprintf(who, sizeof who, "lm: block %d", l);
            mi_error_prefix(who);
            rc = -1;
            break;
        }
        if (!b->mixer.residual_inside && !(b->mixer_norm = leaf(mi_ones(dt, MI_SHAPE(D)))))
            rc = -1;
        if (b->mixer.ffn && !b->mixer.ffn_params) {
            mi_error_set("lm: block %d: mixer '%s' brings a feed-forward without its parameters",
                         l, b->mixer.name);
            rc = -1;
        }
        if (b->mixer.ffn) continue;
        b->mlp_norm = leaf(mi_ones(dt, MI_SHAPE(D)));
        b->w_gate = leaf(mi_randn(&rng, dt, MI_SHAPE(D, F), 0, 1 / sqrt((double)D)));
        b->w_up = leaf(mi_randn(&rng, dt, MI_SHAPE(D, F), 0, 1 / sqrt((double)D)));
        b->w_down = leaf(mi_randn(&rng, dt, MI_SHAPE(F, D), 0, out_scale / sqrt((double)F)));
        if (!b->mlp_norm || !b->w_gate || !b->w_up || !b->w_down) rc = -1;
    }
    if (rc == 0 && !(lm->final_norm = leaf(mi_ones(dt, MI_SHAPE(D))))) rc = -1;
    if (rc == 0 && !c->tie_embeddings &&
        !(lm->lm_head = leaf(mi_randn(&rng, dt, MI_SHAPE(D, V), 0, 0.02))))
        rc = -1;
    mi_scope_leave();
    if (rc == 0) rc = list_params(lm, scope);
    if (rc != 0) mi_error_prefix("lm");
    return rc;
}

const mi_named_tensor *mi_lm_params(const mi_lm *lm, int *count)
{
    if (count) *count = lm ? lm->n_params : 0;
    return lm ? lm->params : NULL;
}

int64_t mi_lm_param_numel(const mi_lm *lm)
{
    int64_t n = 0;
    for (int i = 0; lm && i < lm->n_params; i++) n += lm->params[i].tensor->numel;
    return n;
}

int64_t mi_lm_backbone_numel(const mi_lm_config *c)
{
    /* the config's ranges keep every product below 2^49 */
    if (mi_lm_config_check(c) != 0) return -1;
    int64_t D = c->d_model, V = c->vocab, F = c->mlp_hidden ? c->mlp_hidden : 3 * D;
    const char *overrides[MI_LM_MAX_OVERRIDES];
    mi_mixer_options opt = mixer_options(c, overrides);
    int own = mi_mixer_own_ffn(c->mixer, &opt);
    if (own < 0) return mi_error_prefix("lm"), -1;
    int64_t block = own ? 0 : D + 3 * D * F; /* mlp_norm, w_gate, w_up, w_down */
    return V * D + c->layers * block + D + (c->tie_embeddings ? 0 : D * V);
}

static mi_tensor *rms(const mi_lm *lm, mi_tensor *x, mi_tensor *g)
{
    return mi_rms_norm_gain(x, g, lm->config.norm_eps);
}

static int check_tokens(const mi_lm *lm, const char *what, const mi_tensor *t)
{
    if (!t) return mi_error_set("lm: %s is NULL", what), -1;
    if (t->rank != 2 || (t->dtype != MI_I32 && t->dtype != MI_I64)) {
        char s[96];
        mi_error_set("lm: %s must be i32 or i64 [B, T], got %s %s", what, mi_dtype_name(t->dtype),
                     mi_shape_str(s, sizeof s, t->rank, t->shape));
        return -1;
    }
    return 0;
}

/* Block l: x + mixer(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)) or the mixer's ffn(x). */
static mi_tensor *block_forward(const mi_lm *lm, const mi_lm_block *b, mi_tensor *x)
{
    if (b->mixer.residual_inside) x = b->mixer.forward(b->mixer.self, x);
    else x = mi_add(x, b->mixer.forward(b->mixer.self, rms(lm, x, b->mixer_norm)));
    if (b->mixer.ffn) return x ? b->mixer.ffn(b->mixer.self, x) : NULL;
    mi_tensor *u = rms(lm, x, b->mlp_norm);
    mi_tensor *hidden = mi_swiglu(mi_matmul(u, b->w_gate), mi_matmul(u, b->w_up));
    return mi_add(x, mi_matmul(hidden, b->w_down));
}

typedef struct block_call {
    const mi_lm *lm;
    const mi_lm_block *block;
} block_call;

static mi_tensor *block_checkpointed(void *ctx, mi_tensor *const *in, int n_in)
{
    (void)n_in;
    const block_call *c = ctx;
    return block_forward(c->lm, c->block, in[0]);
}

mi_tensor *mi_lm_forward(const mi_lm *lm, mi_tensor *tokens)
{
    if (!lm || !lm->embeddings) {
        mi_error_set("lm: the model is NULL or not initialised");
        return NULL;
    }
    if (check_tokens(lm, "tokens", tokens) != 0) return NULL;
    mi_tensor *x = mi_embedding(lm->embeddings, tokens);            /* [B, T, D] */
    bool recompute = lm->checkpoint_blocks && mi_grad_enabled();
    for (int l = 0; l < lm->config.layers && x; l++) {
        block_call *call = recompute ? mi_scope_alloc(mi_scope_current(), sizeof *call) : NULL;
        if (!recompute) x = block_forward(lm, &lm->blocks[l], x);
        else if (call) {
            *call = (block_call){.lm = lm, .block = &lm->blocks[l]};
            x = mi_checkpoint(block_checkpointed, call, &x, 1);
        } else x = NULL;
    }
    x = rms(lm, x, lm->final_norm);
    mi_tensor *logits = lm->lm_head ? mi_matmul(x, lm->lm_head)
                                    : mi_matmul_t(x, lm->embeddings, false, true);
    if (!logits) mi_error_prefix("lm");
    return logits;
}

mi_tensor *mi_lm_loss(const mi_lm *lm, mi_tensor *tokens, mi_tensor *targets)
{
    if (!lm || !lm->embeddings) {
        mi_error_set("lm: the model is NULL or not initialised");
        return NULL;
    }
    if (check_tokens(lm, "targets", targets) != 0) return NULL;
    if (tokens && (tokens->rank != 2 || tokens->shape[0] != targets->shape[0] ||
                   tokens->shape[1] != targets->shape[1])) {
        char a[96], b[96];
        mi_error_set("lm: targets %s must have the shape of tokens %s",
                     mi_shape_str(a, sizeof a, targets->rank, targets->shape),
                     mi_shape_str(b, sizeof b, tokens->rank, tokens->shape));
        return NULL;
    }
    mi_tensor *logits = mi_lm_forward(lm, tokens);
    if (!logits) return NULL;
    int64_t N = targets->shape[0] * targets->shape[1], V = lm->config.vocab;
    mi_tensor *loss = mi_cross_entropy(mi_reshape(logits, MI_SHAPE(N, V)),
                                       mi_reshape(targets, MI_SHAPE(N)), MI_LM_IGNORE);
    if (!loss) mi_error_prefix("lm");
    return loss;
}
