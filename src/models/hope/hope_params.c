/* HOPE's configuration (its field table: every key, default and range in
 * one place) and its parameters; the model, and the choices it makes where
 * the papers leave them open, are in hope.c.
 *
 * Initialisation, in this order from rng: conv taps (current 1, earlier
 * N(0, 0.1²)); for k, v, q: W2 ~ N(0, 1), W1 ~ N(0, 1/(h_c·d)) (or W_q ~
 * N(0, 1)); for η, α: W2 ~ N(0, 1), W1 ~ N(0, 0.1²/h_c) so η, α start
 * within ~0.1 logit of their levels (the block's: η 0.02, α 0.998); the main
 * memory: W2 ~ N(0, 1), W1 ~ N(0, 1/(h_m·hd)) per head; w_norm = 1;
 * W_g ~ N(0, 1/d), W_out ~ N(0, out_scale²/d); then the CMS (cms.c). The
 * inputs of the memories have unit norm, so W2 ~ N(0, 1) gives
 * unit-variance pre-activations and the residual branch W1 σ(·) starts at
 * norm ≈ 0.7, comparable to its input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"

static const char *const mem_names[MI_HOPE_MEMORIES][2] = {
    {"k_mem.w1", "k_mem.w2"}, {"v_mem.w1", "v_mem.w2"}, {"q_mem.w1", "q_mem.w2"},
    {"eta_mem.w1", "eta_mem.w2"}, {"alpha_mem.w1", "alpha_mem.w2"}, {"memory.w1", "memory.w2"}};

/* "cms": the levels' chunk sizes ("1,4,16") or none */
static int levels_parse(const mi_field *f, void *obj, const char *text)
{
    mi_cms_config *c = (mi_cms_config *)((char *)obj + f->offset);
    if (!strcmp(text, "none")) return c->n_blocks = 0, 0;
    return mi_cms_config_chunks(c, text);
}

static int levels_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    const mi_cms_config *c = (const mi_cms_config *)((const char *)obj + f->offset);
    size_t used = (size_t)snprintf(buf, n, "%s", c->n_blocks ? "" : "none");
    for (int l = 0; l < c->n_blocks && used < n; l++)
        used += (size_t)snprintf(buf + used, n - used, "%s%d", l ? "," : "", c->chunk[l]);
    return used >= n ? mi_error_set("%s: its text does not fit in %zu bytes", f->key, n), -1 : 0;
}

static const char *const rules[] = {"eq28", "eq88", NULL};  /* index = MI_HOPE_EQ* */
static const char *const places[] = {"ffn", "mixer", NULL}; /* index = MI_HOPE_CMS_* */
#define H mi_hope_config
#define OPEN (MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN)
/* HOPE's keys; the CMS's come from its own table as "cms.KEY". */
static const mi_field hope_fields[] = {
    MI_FIELD_INT_AT(H, "chunk", chunk, "1", 1, 1e9, "C of the k, v, q, eta, alpha memories"),
    MI_FIELD_INT_AT(H, "memory_chunk", memory_chunk, "1", 1, 1e9, "C of the main memory"),
    MI_FIELD_INT_AT(H, "memory_expansion", memory_expansion, "4", 1, 1024,
                    "main memory: hidden = expansion head_dim"),
    MI_FIELD_INT_AT(H, "component_expansion", component_expansion, "1", 1, 1024,
                    "k, v, q, eta, alpha memories: hidden = expansion d_model"),
    MI_FIELD_BOOL_AT(H, "adaptive_q", adaptive_q, "true", "q from a self-modifying memory"),
    MI_FIELD_BOOL_AT(H, "out_gate", out_gate, "true", "the output gate SiLU(x W_g)"),
    MI_FIELD_INT_AT(H, "conv_kernel", conv_kernel, "4", 1, 65536, "the input's causal conv"),
    MI_FIELD_REAL_AT(H, "eta", eta, "0.02", 0, 1, OPEN, "the initial level of eta_t"),
    MI_FIELD_REAL_AT(H, "alpha", alpha, "0.998", 0, 1, OPEN, "the initial level of alpha_t"),
    MI_FIELD_REAL_AT(H, "qk_eps", qk_eps, "1e-6", 0, INFINITY, OPEN, "q, k l2 normalisation"),
    MI_FIELD_REAL_AT(H, "norm_eps", norm_eps, "1e-6", 0, INFINITY, OPEN, "the output RMSNorm"),
    MI_FIELD_REAL_AT(H, "out_scale", out_scale, "1", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "W_out ~ N(0, out_scale^2 / d_model)"),
    MI_FIELD_CHOICE_AT(H, "rule", rule, "eq28", rules,
                       "the memories' step: Nested Learning Eq. 28 or arXiv Eq. 88"),
    MI_FIELD_BOOL_AT(H, "lms", lms, "true", "the gradient term over its input's squared norm"),
    MI_FIELD_CUSTOM_AT(H, "cms", cms, "1,4,16", levels_parse, levels_format,
                       "the CMS levels' chunk sizes, or none"),
    MI_FIELD_GROUP_AT(H, "cms", cms, mi_cms_config_fields, "the CMS"),
    MI_FIELD_CHOICE_AT(H, "cms_place", cms_place, "ffn", places,
                       "the CMS as the block's feed-forward (no MLP), or in the mixer"),
    MI_FIELD_BOOL_AT(H, "composed", composed, "false",
                     "the memories as recorded ops (any order), not fused and on the threads"),
    MI_FIELD_BOOL_AT(H, "recompute", recompute, "false",
                     "the rows' loop run again in the backward, not its record kept (memory)"),
};
#undef H
#define N_HOPE_FIELDS MI_FIELDS_COUNT(hope_fields)

const mi_field *mi_hope_config_fields(int *count)
{
    if (count) *count = N_HOPE_FIELDS;
    return hope_fields;
}

mi_hope_config mi_hope_config_default(int64_t d_model, int64_t heads)
{
    mi_hope_config c;
    memset(&c, 0, sizeof c);
    mi_fields_defaults(hope_fields, N_HOPE_FIELDS, &c);  /* the table's own defaults: cannot fail */
    c.d_model = d_model, c.heads = heads, c.cms.d_model = d_model;
    return c;
}

int mi_hope_config_set(mi_hope_config *c, const char *assignment)
{
    if (!c) return mi_error_set("hope: NULL config"), -1;
    return mi_fields_set(hope_fields, N_HOPE_FIELDS, c, "hope", assignment);
}

static int check_config(const mi_hope_config *c, mi_dtype dt)
{
    if (dt != MI_F32 && dt != MI_F64)
        return mi_error_set("hope: parameters must be f32 or f64, not %s", mi_dtype_name(dt)), -1;
    if (c->d_model < 1 || c->heads < 1)
        return mi_error_set("hope: d_model and heads must be >= 1, got %lld and %lld",
                            (long long)c->d_model, (long long)c->heads), -1;
    if (c->d_model % c->heads)
        return mi_error_set("hope: heads (%lld) must divide d_model (%lld)", (long long)c->heads,
                            (long long)c->d_model), -1;
    if (mi_fields_check(hope_fields, N_HOPE_FIELDS, c, "hope") != 0) return -1;
    return 0;
}

static mi_tensor *param(mi_hope *h, const char *name, mi_tensor *t)
{
    if (!t) return NULL;
    t->name = name;
    mi_requires_grad(t, true);
    h->params[h->n_params++] = (mi_named_tensor){name, t};
    return t;
}

static double logit(double p) { return log(p / (1 - p)); }

int mi_hope_init(mi_hope *h, const mi_hope_config *c, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    if (!h || !c || !rng || !scope)
        return mi_error_set("hope: NULL hope, config, rng or scope"), -1;
    memset(h, 0, sizeof *h);
    if (check_config(c, dt) != 0) return -1;
    h->config = *c;
    h->config.cms.d_model = c->d_model;  /* the CMS runs on the layer's width */
    int64_t d = c->d_model, H = c->heads, hd = h->head_dim = d / H;
    int64_t hc = c->component_expansion * d, hm = c->memory_expansion * hd;
    double sd = 1 / sqrt((double)d);   /* W_g, W_out on the residual stream */
    int rc = 0;
    mi_scope_enter(scope);
    mi_tensor *conv = mi_randn(rng, dt, MI_SHAPE(d, c->conv_kernel), 0, 0.1);
    for (int64_t i = 0; conv && i < d; i++)
        mi_set(conv, i * c->conv_kernel + c->conv_kernel - 1, 1);  /* the current token's tap */
    if (!(h->conv = param(h, "conv", conv))) rc = -1;
    for (int m = MI_HOPE_K; m <= MI_HOPE_ALPHA && rc == 0; m++) {
        if (m == MI_HOPE_Q && !c->adaptive_q) {
            if (!(h->w_q = param(h, "q_proj", mi_randn(rng, dt, MI_SHAPE(d, d), 0, 1)))) rc = -1;
            continue;
        }
        bool gate = m == MI_HOPE_ETA || m == MI_HOPE_ALPHA;
        int64_t out = gate ? H : d;
        mi_tensor *w2 = mi_randn(rng, dt, MI_SHAPE(hc, d), 0, 1);
        mi_tensor *w1 = mi_randn(rng, dt, MI_SHAPE(out, hc), 0,
                                 gate ? 0.1 / sqrt((double)hc) : 1 / sqrt((double)(hc * d)));
        h->w1[m] = param(h, mem_names[m][0], w1);
        h->w2[m] = param(h, mem_names[m][1], w2);
        if (!h->w1[m] || !h->w2[m]) rc = -1;
        if (m == MI_HOPE_ETA && rc == 0) {
            h->eta_bias = param(h, "eta_bias", mi_full(dt, MI_SHAPE(H), logit(c->eta)));
            rc = h->eta_bias ? 0 : -1;
        }
        if (m == MI_HOPE_ALPHA && rc == 0) {
            h->alpha_bias = param(h, "alpha_bias", mi_full(dt, MI_SHAPE(H), logit(c->alpha)));
            rc = h->alpha_bias ? 0 : -1;
        }
    }
    if (rc == 0) {
        mi_tensor *w2 = mi_randn(rng, dt, MI_SHAPE(H, hm, hd), 0, 1);
        mi_tensor *w1 = mi_randn(rng, dt, MI_SHAPE(H, hd, hm), 0, 1 / sqrt((double)(hm * hd)));
        h->w1[MI_HOPE_MEMORY] = param(h, mem_names[MI_HOPE_MEMORY][0], w1);
        h->w2[MI_HOPE_MEMORY] = param(h, mem_names[MI_HOPE_MEMORY][1], w2);
        h->norm_weight = param(h, "out_norm", mi_ones(dt, MI_SHAPE(hd)));
        if (c->out_gate)
            h->w_gate = param(h, "gate_proj", mi_randn(rng, dt, MI_SHAPE(d, d), 0, sd));
        h->w_out = param(h, "out_proj", mi_randn(rng, dt, MI_SHAPE(d, d), 0, c->out_scale * sd));
        if (!h->w1[MI_HOPE_MEMORY] || !h->w2[MI_HOPE_MEMORY] || !h->norm_weight ||
            (c->out_gate && !h->w_gate) || !h->w_out)
            rc = -1;
    }
    mi_scope_leave();
    if (rc == 0 && (h->has_cms = c->cms.n_blocks > 0)) {
        if (mi_cms_init(&h->cms, &h->config.cms, dt, rng, scope) != 0)
            return mi_error_prefix("hope"), -1;
        if (c->cms_place == MI_HOPE_CMS_FFN) return 0;  /* the block's: mi_hope_ffn_params */
        int n;
        const mi_named_tensor *p = mi_cms_params(&h->cms, &n);
        for (int i = 0; i < n; i++) h->params[h->n_params++] = p[i];
    }
    return rc;
}

const mi_named_tensor *mi_hope_params(const mi_hope *h, int *count)
{
    if (count) *count = h ? h->n_params : 0;
    return h ? h->params : NULL;
}

bool mi_hope_has_ffn(const mi_hope *h)
{
    return h && h->has_cms && h->config.cms_place == MI_HOPE_CMS_FFN;
}

const mi_named_tensor *mi_hope_ffn_params(const mi_hope *h, int *count)
{
    if (mi_hope_has_ffn(h)) return mi_cms_params(&h->cms, count);
    if (count) *count = 0;
    return NULL;
}

mi_tensor *mi_hope_ffn_forward(const mi_hope *h, mi_tensor *x)
{
    if (!mi_hope_has_ffn(h))
        return mi_error_set("hope: its CMS is not the block's feed-forward (cms=none or "
                            "cms_place=mixer)"), NULL;
    mi_tensor *y = mi_cms_forward(&h->cms, x);
    if (!y) mi_error_prefix("hope");
    return y;
}
