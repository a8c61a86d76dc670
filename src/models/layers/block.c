/* The MIRAS layer block (MIRAS "Architecture Backbone and Fast Training";
 * Titans §4.4 and Gated DeltaNet §3.3, which it follows). For x [B, T, D]
 * (D = d_model), H heads of width hd, S writes per token (DeltaProduct's
 * multistep, else 1):
 *
 *   q_t = ℓ2norm(SiLU(conv(x W_q)))_t        W_q [D, H·hd]
 *   k_t = ℓ2norm(SiLU(conv(x W_k)))_t        W_k [D, S·H·hd]   (HGRN2: k_t = 1 − α_t)
 *   v_t = SiLU(conv(x W_v))_t                W_v [D, S·H·hd]
 *     (ℓ2-normalised per head like k when the bias is an encoding objective,
 *     Lattice Eq. 6 and 8: there v is the inner regression's input, so a
 *     step η v vᵀ is stable for η < 2/‖v‖², as I − η k kᵀ is for unit keys)
 *     conv: causal depthwise, kernel 4 (mi_conv1d_causal), the paper's "1D
 *     depthwise-separable convolution after each of the query, key and
 *     value projections"; ℓ2norm per head over hd (mi_l2_normalize)
 *   g_t = act((x_t D_g) U_g + b_g)           low rank D → r → H (HEAD) or H·hd (CHANNEL)
 *     η_t = η_max σ(·) ∈ (0, η_max)   α_t = 1 − α_max σ(·) (the kept fraction)
 *     μ_t = μ_max σ(·)    (the maxima are the specs' max, 1 unless set: a bounded
 *     inner rate, as Titans' θ_t = 0.1·σ(·), keeps the deep memories stable)
 *     δ_t = softplus(·) > 0     (MIRAS "Channel-wise Parameters", RWKV-7's low rank)
 *     α slopes:S: fixed per head, α_h = exp(−2^(−S(h+1)/H)) (Lightning Attention)
 *     alpha_zoh: α_t = exp(−η_t ⊙ exp(a)) from η, a learned (Mamba's Ā = exp(Δ A))
 *     alpha_both_sides (memory config): a channel-wise α of 2·hd entries (DFW)
 *     HGRN2: the key is 1 − α_t, so α's low-rank projection is its key
 *     projection and takes the key's causal conv before the bias:
 *     α_t = 1 − α_max σ(conv((x D_α) U_α)_t + b_α); the memory config's
 *     alpha_on_keys decays the key axis, M_{t-1} Diag(α_t), as HGRN2 does
 *   o   = mi_miras_forward(q, k, v, gates, W_0) over N = B·H sequences
 *   y   = (RMSNorm(o) ⊙ w_norm ⊙ SiLU(x W_g)) W_out
 *     per-head RMSNorm over hd with a learnable [hd] weight; the output gate
 *     is Gated DeltaNet's / Titans' SiLU(x W_g) (the paper's "normalized and
 *     gated with a linear layer"), not a blend with the input σ(·)y + (1 − σ(·))x:
 *     the block is a mixer whose output joins the residual stream outside it.
 *     Without out_gate (as HGRN2's output, RMSNorm(o) W_out; the lattice-dec
 *     preset) y = (RMSNorm(o) ⊙ w_norm) W_out and there is no W_g; with
 *     out_gate_sigmoid the gate is σ(x W_g) ∈ (0, 1), which at init scales
 *     the read by ~0.5 ± 0.2 where SiLU(x W_g) closes or flips channels.
 *
 * Layout. Head h of batch b is sequence n = b·H + h. With S > 1 the S keys,
 * values and gates of token t are positions t·S + s (what mi_miras_forward
 * takes for multistep); α is given at each token's first step and 1 at the
 * others (one decay per token, DeltaProduct).
 *
 * Initialisation, in this order from the rng: W_q, W_k, W_v ~ N(0, 1/D);
 * conv taps: the current token's 1, the earlier ones N(0, 0.1²) (near the
 * identity, so q, k, v start as their projections); per data-dependent gate
 * D_g ~ N(0, 1/D), U_g ~ N(0, 0.1²/r), b_g = act⁻¹(level) so the gate starts
 * at the level its spec gives (by default η 0.02, α 0.998) give or take
 * ~0.1 in logit; w_norm = 1; W_g ~ N(0, 1/D) (with out_gate);
 * W_out ~ N(0, out_scale²/(H·hd));
 * W_0: the memory's own init, once per head, stacked to [H, …] (a zero
 * W_0 under ℓq retention, where the normalisation has no derivative, is
 * replaced by N(0, 0.01²)). CONST gates are constants, not parameters; a
 * gate the components do not use gets no parameters whatever its spec. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components.h"

static const char *const gate_names[MI_BLOCK_GATES] = {"eta", "alpha", "mu", "delta"};

/* "0.5" keeps the kind (UNUSED becomes HEAD); "head:0.5", "channel:0.5", "const:1",
 * "slopes:8". */
static int gate_parse(const mi_field *f, void *obj, const char *text)
{
    static const struct { const char *prefix; mi_gate_kind kind; } kinds[] = {
        {"head:", MI_GATE_HEAD}, {"channel:", MI_GATE_CHANNEL}, {"const:", MI_GATE_CONST},
        {"slopes:", MI_GATE_SLOPES}};
    mi_gate_spec *g = (mi_gate_spec *)((char *)obj + f->offset);
    mi_gate_kind kind = g->kind == MI_GATE_UNUSED ? MI_GATE_HEAD : g->kind;
    const char *value = text;
    for (int i = 0; i < 4; i++)
        if (!strncmp(value, kinds[i].prefix, strlen(kinds[i].prefix))) {
            kind = kinds[i].kind;
            value += strlen(kinds[i].prefix);
        }
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end)
        return mi_error_set("'%s' is not a number", value), -1;
    *g = (mi_gate_spec){kind, v, g->max};
    return 0;
}

static int gate_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    static const char *const kind[] = {"unused:", "const:", "head:", "channel:", "slopes:"};
    const mi_gate_spec *g = (const mi_gate_spec *)((const char *)obj + f->offset);
    return mi_field_printf(f, buf, n, "%s%.17g", kind[g->kind], g->value);
}

/* true, false, silu (= true) or sigmoid: out_gate and out_gate_sigmoid */
static int out_gate_parse(const mi_field *f, void *obj, const char *text)
{
    (void)f;
    mi_miras_block_config *c = obj;
    bool sig = !strcmp(text, "sigmoid"), silu = !strcmp(text, "silu");
    bool on = sig || silu || !strcmp(text, "1") || !strcmp(text, "true");
    if (!on && strcmp(text, "0") && strcmp(text, "false"))
        return mi_error_set("'%s' is not true, false, silu or sigmoid", text), -1;
    c->out_gate = on;
    if (sig || silu) c->out_gate_sigmoid = sig;
    return 0;
}

static int out_gate_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    const mi_miras_block_config *c = obj;
    return mi_field_printf(f, buf, n, "%s",
                           !c->out_gate ? "false" : c->out_gate_sigmoid ? "sigmoid" : "silu");
}

#define GATE(key, member, doc) \
    MI_FIELD_CUSTOM_AT(mi_miras_block_config, key, member, NULL, gate_parse, gate_format, doc)
#define GATE_MAX(key, member, doc) \
    MI_FIELD_REAL_AT(mi_miras_block_config, key, member, NULL, 0, INFINITY, MI_FIELD_HI_OPEN, doc)
/* The block's keys (a mixer's overrides); the gates' defaults follow the
 * components (mi_miras_block_config_default). */
static const mi_field block_fields[] = {
    MI_FIELD_INT_AT(mi_miras_block_config, "gate_rank", gate_rank, "32", 1, 1 << 20,
                    "rank of the gate projections"),
    MI_FIELD_INT_AT(mi_miras_block_config, "conv_kernel", conv_kernel, "4", 1, 1 << 16,
                    "width of the causal depthwise convolutions"),
    MI_FIELD_REAL_AT(mi_miras_block_config, "qk_eps", qk_eps, "1e-6", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN, "the l2 normalisation of q and k"),
    MI_FIELD_CUSTOM_AT(mi_miras_block_config, "out_gate", out_gate, "true", out_gate_parse,
                       out_gate_format, "true (= silu: SiLU(x W_g)), sigmoid or false"),
    GATE("eta", eta, "the inner learning rate: LEVEL, head:LEVEL, channel:LEVEL or const:VALUE"),
    GATE("alpha", alpha, "the retention (decay) gate, as eta, or slopes:S (fixed per head, "
                         "exp(-2^(-S(h+1)/H)))"),
    GATE("mu", mu, "the momentum gate, as eta"),
    GATE("delta", delta, "the bias threshold gate, as eta"),
    MI_FIELD_BOOL_AT(mi_miras_block_config, "alpha_zoh", alpha_zoh, "false",
                     "alpha = exp(-eta exp(a)), a learned per head (alpha head) or per head and "
                     "channel (alpha channel): Mamba"),
    GATE_MAX("eta_max", eta.max, "eta = eta_max sigma(z) (0: 1)"),
    GATE_MAX("alpha_max", alpha.max, "alpha = 1 - alpha_max sigma(z) (0: 1)"),
    GATE_MAX("mu_max", mu.max, "mu = mu_max sigma(z) (0: 1)"),
};

const mi_field *mi_miras_block_config_fields(int *count)
{
    if (count) *count = MI_FIELDS_COUNT(block_fields);
    return block_fields;
}

mi_miras_block_config mi_miras_block_config_default(int64_t d_model, int64_t heads,
                                                    const mi_miras_config *miras)
{
    mi_miras_block_config c;
    memset(&c, 0, sizeof c);
    mi_fields_defaults(block_fields, MI_FIELDS_COUNT(block_fields), &c);  /* cannot fail */
    c.d_model = d_model, c.heads = heads, c.norm_eps = 1e-6, c.out_scale = 1;
    c.miras = miras ? *miras : mi_miras_config_default();
    c.eta = (mi_gate_spec){MI_GATE_HEAD, 0.02, 0};
    const mi_retention_kind *ret = mi_retention_find(c.miras.retention);
    const mi_bias_kind *bias = mi_bias_find(c.miras.bias);
    if (ret && ret->uses_alpha) c.alpha = (mi_gate_spec){MI_GATE_HEAD, 0.998, 0};
    const mi_algorithm_kind *alg = mi_algorithm_find(c.miras.algorithm);
    if (alg && alg->uses_mu)
        c.mu = (mi_gate_spec){MI_GATE_HEAD, 0.9, 0};
    if (bias && bias->needs_delta) c.delta = (mi_gate_spec){MI_GATE_HEAD, 1.0, 0};
    return c;
}

int mi_miras_block_config_preset(mi_miras_block_config *c, const char *preset)
{
    const char *name = preset ? preset : "(null)";
    const mi_preset *p = mi_preset_find(preset);
    if (!p) {
        char known[512] = "";
        size_t used = 0;
        for (int i = 0; mi_preset_at(i) && used < sizeof known; i++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                     mi_preset_at(i)->name);
        mi_error_set("miras block: unknown preset '%s' (known: %s)", name, known);
        return -1;
    }
    if (mi_preset_config(p, &c->miras) != 0) return -1;
    c->eta = p->eta;
    c->alpha = p->alpha;
    c->mu = p->mu;
    c->delta = p->delta;
    c->key_is_one_minus_alpha = p->key_is_one_minus_alpha;
    c->out_gate = !p->no_out_gate;
    c->out_gate_sigmoid = p->out_gate_sigmoid;
    c->alpha_zoh = p->alpha_zoh;
    /* Lattice reads one key entry per memory slot; in the block the keys are
     * head_dim wide, so the preset's memory gets m = head_dim slots. */
    const mi_memory_kind *mem = mi_memory_find(c->miras.memory);
    if (mem && mem->keys_are_slots && c->heads > 0)
        c->miras.slots = (int)(c->head_dim ? c->head_dim : c->d_model / c->heads);
    return 0;
}

/* ---------------------------------------------------------------- checks */

/* Which gates the components read: η always, α for a decay (or HGRN2's
 * key), μ for momentum, δ for a thresholded bias. */
static void gates_needed(const mi_miras *m, const mi_miras_block_config *c, bool *need)
{
    need[MI_BLOCK_ETA] = true;
    need[MI_BLOCK_ALPHA] = m->retention->uses_alpha || c->key_is_one_minus_alpha;
    need[MI_BLOCK_MU] = m->algorithm->uses_mu;
    need[MI_BLOCK_DELTA] = m->bias->needs_delta;
}

/* A gate's range: max·σ(z) (α: 1 − max·σ(z)); an unset max is 1. */
static double gate_max(mi_gate_spec s)
{
    return s.max > 0 ? s.max : 1;
}

static int check_gate(const mi_miras *m, int i, mi_gate_spec s)
{
    const char *g = gate_names[i];
    if (s.kind == MI_GATE_UNUSED) {
        mi_error_set("miras block: gate %s is needed by %s/%s/%s/%s but its spec is UNUSED", g,
                     m->memory->name, m->bias->name, m->retention->name, m->config.algorithm);
        return -1;
    }
    if (s.kind != MI_GATE_CONST && s.kind != MI_GATE_HEAD && s.kind != MI_GATE_CHANNEL &&
        s.kind != MI_GATE_SLOPES) {
        mi_error_set("miras block: gate %s has an unknown kind %d", g, (int)s.kind);
        return -1;
    }
    if (s.kind == MI_GATE_SLOPES) {
        if (i != MI_BLOCK_ALPHA)
            return mi_error_set("miras block: gate %s: slopes (a fixed decay per head) is a "
                                "kind of alpha only", g), -1;
        if (!(s.value > 0 && isfinite(s.value)) || s.max != 0)
            return mi_error_set("miras block: gate alpha: slopes needs a finite S > 0 and no "
                                "max, got %g (max %g)", s.value, s.max), -1;
        return 0;
    }
    if (s.kind == MI_GATE_CHANNEL && i != MI_BLOCK_DELTA && !m->memory->channel_gates) {
        mi_error_set("miras block: memory '%s' takes one %s per head: use HEAD, not CHANNEL",
                     m->memory->name, g);
        return -1;
    }
    if (s.kind == MI_GATE_CONST && s.max != 0)
        return mi_error_set("miras block: gate %s: a constant has no max (got %g)", g, s.max), -1;
    if (s.kind == MI_GATE_CONST) return isfinite(s.value) ? 0 : (mi_error_set("miras block: "
                                     "gate %s: constant %g is not finite", g, s.value), -1);
    double top = gate_max(s);
    if (!(s.max >= 0 && s.max <= 1) || (s.max > 0 && i == MI_BLOCK_DELTA))
        return mi_error_set("miras block: gate %s: max %g must be in (0, 1]%s", g, s.max,
                            i == MI_BLOCK_DELTA ? " and only eta, alpha, mu have one" : ""), -1;
    bool ok = i == MI_BLOCK_DELTA ? s.value > 0
            : i == MI_BLOCK_ALPHA ? s.value > 1 - top && s.value < 1
                                  : s.value > 0 && s.value < top;
    if (!ok) {
        char range[64];
        if (i == MI_BLOCK_DELTA) snprintf(range, sizeof range, "softplus: > 0");
        else if (i == MI_BLOCK_ALPHA) snprintf(range, sizeof range, "1 - %g sigmoid: in (%g, 1)", top, 1 - top);
        else snprintf(range, sizeof range, "%g sigmoid: in (0, %g)", top, top);
        mi_error_set("miras block: gate %s starts at %g, which its activation cannot reach "
                     "(%s)", g, s.value, range);
        return -1;
    }
    return 0;
}

static int check_config(const mi_miras_block_config *c, mi_dtype dt)
{
    if (dt != MI_F32 && dt != MI_F64)
        return mi_error_set("miras block: parameters must be f32 or f64, not %s",
                            mi_dtype_name(dt)), -1;
    if (c->d_model < 1 || c->heads < 1 || c->head_dim < 0)
        return mi_error_set("miras block: d_model and heads must be >= 1 and head_dim >= 0, got "
                            "%lld, %lld, %lld", (long long)c->d_model, (long long)c->heads,
                            (long long)c->head_dim), -1;
    if (c->head_dim == 0 && c->d_model % c->heads)
        return mi_error_set("miras block: heads (%lld) must divide d_model (%lld) when head_dim "
                            "is left to default to d_model / heads", (long long)c->heads,
                            (long long)c->d_model), -1;
    if (c->gate_rank < 1)
        return mi_error_set("miras block: gate_rank must be >= 1, got %d", c->gate_rank), -1;
    if (c->conv_kernel < 1)
        return mi_error_set("miras block: conv_kernel must be >= 1, got %d", c->conv_kernel), -1;
    if (!(c->qk_eps > 0) || !(c->norm_eps > 0) || !(c->out_scale >= 0))
        return mi_error_set("miras block: qk_eps and norm_eps must be > 0 and out_scale >= 0"), -1;
    return 0;
}

/* ---------------------------------------------------------------- parameters */

static mi_tensor *param(mi_miras_block *b, const char *name, mi_tensor *t)
{
    if (!t) return NULL;
    if (b->n_params >= MI_BLOCK_MAX_PARAMS) {
        mi_error_set("miras block: more than %d parameters", MI_BLOCK_MAX_PARAMS);
        return NULL;
    }
    t->name = name;
    mi_requires_grad(t, true);
    b->params[b->n_params++] = (mi_named_tensor){name, t};
    return t;
}

/* Causal depthwise conv weights [channels, K]: 1 at the current token (tap
 * K − 1), N(0, 0.1²) at the earlier ones. */
static mi_tensor *conv_init(mi_rng *rng, mi_dtype dt, int64_t channels, int k)
{
    mi_tensor *w = mi_randn(rng, dt, MI_SHAPE(channels, k), 0, 0.1);
    for (int64_t c = 0; w && c < channels; c++) mi_set(w, c * k + k - 1, 1.0);
    return w;
}

/* A channel-wise gate's entries per head: δ one per value channel, η, α, μ
 * one per row of each memory weight (the value channels for the vector and
 * matrix memories; W_1's, then W_2's, … rows for the MLP). */
static int64_t units(const mi_miras_block *b, int i)
{
    if (i == MI_BLOCK_ALPHA && b->miras.config.alpha_both_sides)
        return 2 * b->head_dim; /* DFW's dv + dk */
    return i == MI_BLOCK_DELTA ? b->head_dim : b->gate_units;
}

/* The pre-activation at which each gate's activation gives `level`. */
static double gate_bias_level(int i, mi_gate_spec s)
{
    double m = gate_max(s), level = s.value;
    switch (i) {
    case MI_BLOCK_ALPHA: return log((1 - level) / (m - (1 - level))); /* 1 − m σ(z) = level */
    case MI_BLOCK_DELTA: return log(expm1(level));                    /* softplus(z) = level */
    default: return log(level / (m - level));                         /* m σ(z) = level */
    }
}

/* W_0 for every head: the memory's init once per head, [H, …]. */
static int init_w0(mi_miras_block *b, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    static const char *const names[MI_MEMORY_MAX_WEIGHTS] = {
        "memory.w0.0", "memory.w0.1", "memory.w0.2", "memory.w0.3",
        "memory.w0.4", "memory.w0.5", "memory.w0.6", "memory.w0.7"};
    const mi_miras *m = &b->miras;
    int64_t H = b->config.heads, hd = b->head_dim;
    mi_scope *tmp = mi_scope_new("miras-block-init");
    if (!tmp) return mi_error_set("miras block: out of memory"), -1;
    mi_scope_enter(tmp);
    /* per_head[i·H + h]: weight i of head h */
    mi_tensor **per_head = mi_scope_alloc(tmp, sizeof(mi_tensor *) * (size_t)(H * b->n_w0));
    mi_tensor *w[MI_MEMORY_MAX_WEIGHTS];
    int rc = per_head ? 0 : (mi_error_set("miras block: out of memory"), -1);
    /* ℓq's read divides by ‖A‖: a zero weight starts small and random */
    bool lq = m->retention->rule == MI_RETENTION_RULE_LQ;
    for (int64_t h = 0; h < H && rc == 0; h++) {
        if (m->memory->init(&m->config, hd, hd, rng, dt, w) != 0) rc = -1;
        for (int i = 0; i < b->n_w0 && rc == 0; i++) {
            bool zero = true;
            for (int64_t e = 0; e < w[i]->numel && zero; e++) zero = mi_get(w[i], e) == 0;
            if (lq && zero) w[i] = mi_randn(rng, dt, w[i]->rank, w[i]->shape, 0, 0.01);
            /* kl: W_0 holds the logits of the simplex rows, W = c · softmax(W_0) */
            if (m->config.kl_init_sd > 0)
                w[i] = mi_randn(rng, dt, w[i]->rank, w[i]->shape, 0, m->config.kl_init_sd);
            if (!(per_head[i * H + h] = w[i])) rc = -1;
        }
    }
    mi_scope_leave();
    mi_scope_enter(scope);
    for (int i = 0; i < b->n_w0 && rc == 0; i++)
        if (!(b->w0[i] = param(b, names[i], mi_stack(per_head + i * H, (int)H, 0)))) rc = -1;
    mi_scope_leave();
    mi_scope_free(tmp);
    return rc;
}

int mi_miras_block_init(mi_miras_block *b, const mi_miras_block_config *c, mi_dtype dt,
                        mi_rng *rng, mi_scope *scope)
{
    if (!b || !c || !rng || !scope)
        return mi_error_set("miras block: NULL block, config, rng or scope"), -1;
    memset(b, 0, sizeof *b);
    if (check_config(c, dt) != 0) return -1;
    b->config = *c;
    if (mi_miras_init(&b->miras, &c->miras) != 0) return mi_error_prefix("miras block"), -1;
    const mi_miras *m = &b->miras;
    int64_t D = c->d_model, H = c->heads;
    int64_t hd = b->head_dim = c->head_dim ? c->head_dim : D / H;
    int S = b->steps = mi_miras_writes(m);
    if (c->key_is_one_minus_alpha && S > 1)
        return mi_error_set("miras block: key_is_one_minus_alpha (HGRN2) needs one write per "
                            "token, not multistep"), -1;
    int ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (m->memory->shapes(&m->config, hd, hd, &b->n_w0, ranks, shapes) != 0)
        return mi_error_prefix("miras block"), -1;
    /* a channel-wise η, α, μ has one entry per row of each memory weight */
    for (int i = 0; i < b->n_w0; i++) b->gate_units += shapes[i][0];
    bool need[MI_BLOCK_GATES];
    gates_needed(m, c, need);
    const mi_gate_spec *spec[MI_BLOCK_GATES] = {&c->eta, &c->alpha, &c->mu, &c->delta};
    for (int i = 0; i < MI_BLOCK_GATES; i++)
        if (need[i] && check_gate(m, i, *spec[i]) != 0) return -1;
    if (c->alpha_zoh && (!need[MI_BLOCK_ALPHA] || S > 1 || c->key_is_one_minus_alpha ||
                         !(c->eta.value > 0) ||
                         c->miras.alpha_both_sides ||
                         (c->alpha.kind != MI_GATE_HEAD && c->alpha.kind != MI_GATE_CHANNEL)))
        return mi_error_set("miras block: alpha_zoh (alpha = exp(-eta exp(a)), Mamba) needs a "
                            "retention gate with a decay, alpha HEAD or CHANNEL, eta > 0, one "
                            "write per token, no key_is_one_minus_alpha and no "
                            "alpha_both_sides"), -1;

    static const char *const names[MI_BLOCK_GATES][3] = {
        {"eta_down", "eta_up", "eta_bias"}, {"alpha_down", "alpha_up", "alpha_bias"},
        {"mu_down", "mu_up", "mu_bias"}, {"delta_down", "delta_up", "delta_bias"}};
    double sd = 1 / sqrt((double)D);
    int64_t inner = H * hd, r = c->gate_rank;
    int rc = 0;
    mi_scope_enter(scope);
    b->w_q = param(b, "q_proj", mi_randn(rng, dt, MI_SHAPE(D, inner), 0, sd));
    if (!c->key_is_one_minus_alpha)
        b->w_k = param(b, "k_proj", mi_randn(rng, dt, MI_SHAPE(D, S * inner), 0, sd));
    b->w_v = param(b, "v_proj", mi_randn(rng, dt, MI_SHAPE(D, S * inner), 0, sd));
    b->conv_q = param(b, "q_conv", conv_init(rng, dt, inner, c->conv_kernel));
    /* the key's conv; HGRN2's key is 1 − α, so it convolves α's projection
     * (none for a constant α) */
    int64_t k_width = !c->key_is_one_minus_alpha ? S * inner
                    : c->alpha.kind == MI_GATE_CONST || c->alpha.kind == MI_GATE_SLOPES ? 0
                    : H * (c->alpha.kind == MI_GATE_CHANNEL ? hd : 1);
    if (k_width) b->conv_k = param(b, "k_conv", conv_init(rng, dt, k_width, c->conv_kernel));
    b->conv_v = param(b, "v_conv", conv_init(rng, dt, S * inner, c->conv_kernel));
    if (!b->w_q || !b->w_v || !b->conv_q || !b->conv_v || (k_width && !b->conv_k) ||
        (!c->key_is_one_minus_alpha && !b->w_k))
        rc = -1;
    for (int i = 0; i < MI_BLOCK_GATES && rc == 0; i++) {
        mi_gate_spec s = *spec[i];
        if (!need[i] || s.kind == MI_GATE_CONST || s.kind == MI_GATE_SLOPES ||
            (i == MI_BLOCK_ALPHA && c->alpha_zoh))
            continue;
        int64_t width = (i == MI_BLOCK_ALPHA ? 1 : S) * H * (s.kind == MI_GATE_CHANNEL ? units(b, i) : 1);
        b->gate_down[i] = param(b, names[i][0], mi_randn(rng, dt, MI_SHAPE(D, r), 0, sd));
        b->gate_up[i] = param(b, names[i][1],
                              mi_randn(rng, dt, MI_SHAPE(r, width), 0, 0.1 / sqrt((double)r)));
        b->gate_bias[i] = param(b, names[i][2],
                                mi_full(dt, MI_SHAPE(width), gate_bias_level(i, s)));
        if (!b->gate_down[i] || !b->gate_up[i] || !b->gate_bias[i]) rc = -1;
    }
    if (rc == 0) {
        b->norm_weight = param(b, "out_norm", mi_ones(dt, MI_SHAPE(hd)));
        if (c->out_gate)
            b->w_gate = param(b, "gate_proj", mi_randn(rng, dt, MI_SHAPE(D, inner), 0, sd));
        b->w_out = param(b, "out_proj", mi_randn(rng, dt, MI_SHAPE(inner, D), 0,
                                                 c->out_scale / sqrt((double)inner)));
        if (!b->norm_weight || (c->out_gate && !b->w_gate) || !b->w_out) rc = -1;
    }
    /* Mamba's A = −exp(a) per head, or per head and channel d as S4D-real's −(d + 1)
     * (Mamba §3.6): a0 (d + 1) with exp(−η_0 a0) = α's level, η_0 η's */
    if (rc == 0 && c->alpha_zoh) {
        bool channel = c->alpha.kind == MI_GATE_CHANNEL;
        int64_t u = channel ? units(b, MI_BLOCK_ALPHA) : 1;
        double a0 = -log(c->alpha.value) / c->eta.value;
        mi_tensor *a = mi_zeros(dt, MI_SHAPE(H * u));
        for (int64_t e = 0; a && e < H * u; e++) mi_set(a, e, log(a0 * (double)(e % u + 1)));
        if (!(b->alpha_a_log = param(b, "alpha_a_log", a))) rc = -1;
    }
    /* Memora's learned simplex scale: s = 0, c = kl_scale at init */
    if (rc == 0 && c->miras.kl_scale_learn &&
        !(b->kl_scale_log = param(b, "memory.kl_scale", mi_zeros(dt, MI_SHAPE(H)))))
        rc = -1;
    mi_scope_leave();
    if (rc == 0) rc = init_w0(b, dt, rng, scope);
    return rc;
}

int mi_miras_block_init_preset(mi_miras_block *b, const char *preset, int64_t d_model,
                               int64_t heads, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    mi_miras_block_config c = mi_miras_block_config_default(d_model, heads, NULL);
    if (mi_miras_block_config_preset(&c, preset) != 0) return -1;
    return mi_miras_block_init(b, &c, dt, rng, scope);
}

const mi_named_tensor *mi_miras_block_params(const mi_miras_block *b, int *count)
{
    if (count) *count = b ? b->n_params : 0;
    return b ? b->params : NULL;
}

/* ---------------------------------------------------------------- forward */

/* [B, T, S·H·c] → [B·H, T·S, c] ([B·H, T·S] when !keep_c): position t·S + s
 * is step s of token t, sequence b·H + h is head h of batch b. */
static mi_tensor *to_heads(mi_tensor *t, int64_t B, int64_t T, int S, int64_t H, int64_t c,
                           bool keep_c)
{
    mi_tensor *r = mi_reshape(t, MI_SHAPE(B, T, S, H, c));
    r = mi_permute(r, (const int[]){0, 3, 1, 2, 4});
    return keep_c ? mi_reshape(r, MI_SHAPE(B * H, T * S, c)) : mi_reshape(r, MI_SHAPE(B * H, T * S));
}

/* SiLU(conv(x W)): a projection, its causal depthwise conv, the activation. */
static mi_tensor *branch(mi_tensor *x, mi_tensor *w, mi_tensor *conv, mi_tensor **tail)
{
    return mi_silu(mi_conv1d_causal_tail(mi_matmul(x, w), conv, tail));
}

/* One gate, [N, T·S_g] or channel-wise [N, T·S_g, units(b, i)]; tail: HGRN2's α conv state. */
static mi_tensor *gate(const mi_miras_block *b, int i, mi_gate_spec s, mi_tensor *x, int S_g,
                       mi_tensor **tail)
{
    int64_t B = x->shape[0], T = x->shape[1], H = b->config.heads;
    if (s.kind == MI_GATE_CONST) return mi_full(x->dtype, MI_SHAPE(B * H, T * S_g), s.value);
    if (s.kind == MI_GATE_SLOPES) {
        /* Lightning Attention's decay of head h: exp(−m_h), m_h = 2^(−S (h+1)/H)
         * (ALiBi's slopes for S = 8) */
        mi_tensor *a = mi_zeros(x->dtype, MI_SHAPE(B * H, T * S_g));
        for (int64_t e = 0; a && e < a->numel; e++)
            mi_set(a, e, exp(-exp2(-s.value * (double)(e / (T * S_g) % H + 1) / (double)H)));
        return a;
    }
    mi_tensor *lin = mi_matmul(mi_matmul(x, b->gate_down[i]), b->gate_up[i]);
    if (i == MI_BLOCK_ALPHA && b->config.key_is_one_minus_alpha) /* HGRN2: the key's conv */
        lin = mi_conv1d_causal_tail(lin, b->conv_k, tail);
    mi_tensor *pre = mi_add(lin, b->gate_bias[i]);
    double m = gate_max(s);
    mi_tensor *g;
    if (i == MI_BLOCK_DELTA) g = mi_softplus(pre);
    else if (i != MI_BLOCK_ALPHA) g = m == 1 ? mi_sigmoid(pre) : mi_mul_scalar(mi_sigmoid(pre), m);
    else if (m == 1) g = mi_sigmoid(mi_neg(pre));                    /* α = 1 − σ(z) = σ(−z) */
    else g = mi_add_scalar(mi_mul_scalar(mi_sigmoid(pre), -m), 1.0); /* α = 1 − m σ(z) */
    bool channel = s.kind == MI_GATE_CHANNEL;
    return to_heads(g, B, T, S_g, H, channel ? units(b, i) : 1, channel);
}

/* α per token [N, T(, hd)] → [N, T·S(, hd)]: α at each token's first step, 1 after. */
static mi_tensor *first_step_only(mi_tensor *a, int S)
{
    if (!a || S == 1) return a;
    mi_tensor *a1 = mi_unsqueeze(a, 2);
    if (!a1) return NULL;
    int64_t shape[MI_MAX_RANK];
    memcpy(shape, a1->shape, sizeof shape);
    shape[2] = S - 1;
    mi_tensor *cat = mi_concat((mi_tensor *[]){a1, mi_ones(a->dtype, a1->rank, shape)}, 2, 2);
    int64_t out[MI_MAX_RANK] = {a->shape[0], a->shape[1] * S, a->rank == 3 ? a->shape[2] : 0};
    return mi_reshape(cat, a->rank, out);
}

/* W_0 [H, …] → [B·H, …] (the same initial memory for every batch row). */
static int w0_batched(const mi_miras_block *b, int64_t B, mi_tensor **w0)
{
    for (int i = 0; i < b->n_w0; i++) {
        mi_tensor *w = b->w0[i];
        int64_t one[MI_MAX_RANK] = {1}, full[MI_MAX_RANK] = {B};
        int64_t flat[MI_MAX_RANK] = {B * b->config.heads};
        memcpy(one + 1, w->shape, sizeof(int64_t) * (size_t)w->rank);
        memcpy(full + 1, w->shape, sizeof(int64_t) * (size_t)w->rank);
        memcpy(flat + 1, w->shape + 1, sizeof(int64_t) * (size_t)(w->rank - 1));
        w0[i] = mi_reshape(mi_broadcast_to(mi_reshape(w, w->rank + 1, one), w->rank + 1, full),
                           w->rank, flat);
        if (!w0[i]) return -1;
    }
    return 0;
}

/* The memory the block runs for B sequences: its own, or with a learned
 * simplex scale a copy that carries c per sequence, c_{b·H+h} = kl_scale ·
 * exp(s_h) (retention/kl.c), in *local. */
static const mi_miras *memory_for(const mi_miras_block *b, int64_t B, mi_miras *local)
{
    if (!b->kl_scale_log) return &b->miras;
    int64_t H = b->config.heads;
    mi_tensor *c = mi_mul_scalar(mi_exp(b->kl_scale_log), b->miras.config.kl_scale);
    c = mi_reshape(mi_broadcast_to(mi_reshape(c, MI_SHAPE(1, H)), MI_SHAPE(B, H)),
                   MI_SHAPE(B * H));
    if (!c) return NULL;
    *local = b->miras;
    local->config.kl_scale_t = c;
    return local;
}

/* Mamba's zero-order hold (Mamba §2, "Discretization": Ā = exp(Δ A)) with
 * Δ = η and A = −exp(a): α_t = exp(−η_t ⊙ exp(a)), a [H·u] per head (u = 1) or
 * per head and channel, over the B·H sequences; channel-wise [N, T, u'] when η
 * or a is, else [N, T]. */
static mi_tensor *zoh_alpha(const mi_miras_block *b, mi_tensor *eta, int64_t B)
{
    int64_t H = b->config.heads, u = b->alpha_a_log->shape[0] / H;
    mi_tensor *rate = mi_reshape(mi_exp(b->alpha_a_log), MI_SHAPE(1, H, u));
    rate = mi_reshape(mi_broadcast_to(rate, MI_SHAPE(B, H, u)), MI_SHAPE(B * H, 1, u));
    mi_tensor *e = eta && eta->rank == 2 ? mi_unsqueeze(eta, -1) : eta;
    mi_tensor *a = mi_exp(mi_neg(mi_mul(e, rate)));
    return eta && eta->rank == 2 && u == 1 ? mi_squeeze(a, -1) : a;
}

/* The gates g[MI_BLOCK_ETA …] for x [B, T, D] (NULL: a gate not used);
 * tails[1]: HGRN2's α conv state, one token at a time. */
static int block_gates(const mi_miras_block *b, mi_tensor *x, mi_tensor **tails, mi_tensor **g)
{
    const mi_miras_block_config *c = &b->config;
    int S = b->steps;
    bool need[MI_BLOCK_GATES];
    gates_needed(&b->miras, c, need);
    const mi_gate_spec spec[MI_BLOCK_GATES] = {c->eta, c->alpha, c->mu, c->delta};
    for (int i = 0; i < MI_BLOCK_GATES; i++) {
        g[i] = NULL;
        if (!need[i] || (i == MI_BLOCK_ALPHA && c->alpha_zoh)) continue;
        g[i] = gate(b, i, spec[i], x, i == MI_BLOCK_ALPHA ? 1 : S, &tails[1]);
        if (i == MI_BLOCK_ALPHA) g[i] = first_step_only(g[i], S);
        if (!g[i]) return -1;
    }
    if (c->alpha_zoh && !(g[MI_BLOCK_ALPHA] = zoh_alpha(b, g[MI_BLOCK_ETA], x->shape[0])))
        return -1;
    return 0;
}

int mi_miras_block_gates(const mi_miras_block *b, mi_tensor *x, mi_tensor **out)
{
    if (!b || !x || !out) return mi_error_set("miras block: gates: NULL block, x or out"), -1;
    if (x->rank != 3 || x->shape[2] != b->config.d_model || x->dtype != b->w_q->dtype)
        return mi_error_set("miras block: gates: x must be %s [B, T, %lld]",
                            mi_dtype_name(b->w_q->dtype), (long long)b->config.d_model), -1;
    mi_tensor *tails[3] = {NULL};
    return block_gates(b, x, tails, out);
}

/* The block over x [B, T, D]; with a state, one token (T = 1) that
 * continues it. */
static mi_tensor *block_run(const mi_miras_block *b, mi_tensor *x, mi_miras_block_state *st)
{
    if (!b || !x) {
        mi_error_set("miras block: NULL block or input");
        return NULL;
    }
    const mi_miras_block_config *c = &b->config;
    if (x->rank != 3 || x->shape[2] != c->d_model || x->dtype != b->w_q->dtype) {
        char s[96];
        mi_error_set("miras block: x is %s %s; expected %s [B, T, %lld]",
                     mi_dtype_name(x->dtype), mi_shape_str(s, sizeof s, x->rank, x->shape),
                     mi_dtype_name(b->w_q->dtype), (long long)c->d_model);
        return NULL;
    }
    int64_t B = x->shape[0], T = x->shape[1], H = c->heads, hd = b->head_dim, N = B * H;
    int S = b->steps;
    mi_tensor *g[MI_BLOCK_GATES] = {NULL};
    mi_tensor **tails = st ? st->tails : (mi_tensor *[3]){NULL};
    if (block_gates(b, x, tails, g) != 0) return NULL;

    mi_tensor *q = mi_l2_normalize(
        to_heads(branch(x, b->w_q, b->conv_q, &tails[0]), B, T, 1, H, hd, true), c->qk_eps);
    mi_tensor *v = to_heads(branch(x, b->w_v, b->conv_v, &tails[2]), B, T, S, H, hd, true);
    if (b->miras.bias->encoding) v = mi_l2_normalize(v, c->qk_eps);
    mi_tensor *k;
    if (c->key_is_one_minus_alpha) {
        /* HGRN2: k_t = 1 − α_t (a per-head α is spread over the channels) */
        mi_tensor *a = g[MI_BLOCK_ALPHA]->rank == 2 ? mi_unsqueeze(g[MI_BLOCK_ALPHA], -1)
                                                     : g[MI_BLOCK_ALPHA];
        k = mi_broadcast_to(mi_add_scalar(mi_neg(a), 1.0), MI_SHAPE(N, T, hd));
    } else {
        k = mi_l2_normalize(
            to_heads(branch(x, b->w_k, b->conv_k, &tails[1]), B, T, S, H, hd, true), c->qk_eps);
    }

    mi_miras_gates gates = {.eta = g[MI_BLOCK_ETA], .alpha = g[MI_BLOCK_ALPHA],
                            .mu = g[MI_BLOCK_MU], .delta = g[MI_BLOCK_DELTA]};
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS], *o;                                 /* o [N, T, hd] */
    mi_miras local;
    const mi_miras *m = memory_for(b, B, &local);
    if (!m) o = NULL;
    else if (st) o = mi_miras_step(m, &st->memory, q, k, v, &gates);
    else if (w0_batched(b, B, w0) == 0) o = mi_miras_forward(m, q, k, v, &gates, w0, NULL);
    else o = NULL;

    /* per-head RMSNorm, heads back together, output gate, projection */
    o = mi_rms_norm_gain(o, b->norm_weight, c->norm_eps);
    o = mi_reshape(mi_permute(mi_reshape(o, MI_SHAPE(B, H, T, hd)), (const int[]){0, 2, 1, 3}),
                   MI_SHAPE(B, T, H * hd));
    if (c->out_gate) {
        mi_tensor *z = mi_matmul(x, b->w_gate);
        o = mi_mul(o, c->out_gate_sigmoid ? mi_sigmoid(z) : mi_silu(z));
    }
    mi_tensor *y = mi_matmul(o, b->w_out);
    if (!y) mi_error_prefix("miras block");
    return y;
}

mi_tensor *mi_miras_block_forward(const mi_miras_block *b, mi_tensor *x)
{
    return block_run(b, x, NULL);
}

int mi_miras_block_state_init(const mi_miras_block *b, mi_miras_block_state *st, int64_t batch)
{
    if (!b || !st || batch < 1)
        return mi_error_set("miras block: NULL block or state, or batch < 1"), -1;
    memset(st, 0, sizeof *st);
    const mi_miras_block_config *c = &b->config;
    int64_t inner = c->heads * b->head_dim, K = c->conv_kernel, S = b->steps;
    mi_dtype dt = b->w_q->dtype;
    if (K > 1) {
        st->tails[0] = mi_zeros(dt, MI_SHAPE(batch, K - 1, inner));
        if (b->conv_k) /* k's rows, or HGRN2's α projection's */
            st->tails[1] = mi_zeros(dt, MI_SHAPE(batch, K - 1, b->conv_k->shape[0]));
        st->tails[2] = mi_zeros(dt, MI_SHAPE(batch, K - 1, S * inner));
        if (!st->tails[0] || !st->tails[2] || (b->conv_k && !st->tails[1])) return -1;
    }
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];
    mi_miras local;
    const mi_miras *m = memory_for(b, batch, &local);
    if (!m || w0_batched(b, batch, w0) != 0) return -1;
    return mi_miras_state_init(m, &st->memory, w0, batch * c->heads, b->head_dim, b->head_dim,
                               dt);
}

mi_tensor *mi_miras_block_step(const mi_miras_block *b, mi_miras_block_state *st, mi_tensor *x)
{
    if (!st || !x || x->rank != 3 || x->shape[1] != 1) {
        mi_error_set("miras block: step: needs a state and x [B, 1, d_model]");
        return NULL;
    }
    return block_run(b, x, st);
}

int mi_miras_block_state_tensors(mi_miras_block_state *st, mi_tensor **slots[], int max)
{
    int n = 0, nw = st->memory.nw;
    if (max < 6 + 3 * nw) return mi_error_set("miras block: %d state slots needed", 6 + 3 * nw), -1;
    for (int i = 0; i < 3; i++) slots[n++] = &st->tails[i];
    for (int i = 0; i < nw; i++) {
        slots[n++] = &st->memory.a[i];
        slots[n++] = &st->memory.s[i];
        slots[n++] = &st->memory.a_grad[i];
    }
    slots[n++] = &st->memory.alpha_bar;
    slots[n++] = &st->memory.eta;
    slots[n++] = &st->memory.eta_grad;
    return n;
}
