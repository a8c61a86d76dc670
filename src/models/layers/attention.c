/* The non-parametric baselines of MIRAS' tables (Transformer++, and SWA as
 * in Samba): multi-head causal softmax attention with rotary position
 * embeddings on q and k (Su et al., RoFormer; Llama), and its
 * sliding-window form. For x [B, T, D], H heads of width hd = D / H:
 *
 *   q_h = RoPE(x W_q)_h,  k_h = RoPE(x W_k)_h,  v_h = (x W_v)_h     [B, H, T, hd]
 *   o_h[t] = Σ_{s ∈ S(t)} softmax_s(q_h[t]·k_h[s] / √hd) v_h[s]
 *            S(t) = {0 … t} (causal), or {t − W + 1 … t} with a window W
 *   y   = concat_h(o_h) W_out
 *
 * RoPE (mi_rope): pairs (i, i + hd/2) of each head rotated by
 * t·base^(−2i/hd), positions counted from the start of the sequence. No
 * biases (Llama). Initialisation, in this order from the rng: W_q, W_k, W_v
 * ~ N(0, 1/D) (unit-variance projections of a unit-variance input), W_out ~
 * N(0, out_scale²/D) (the backbone passes GPT-2's 1/√(2·layers)). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_internal.h"
#include "models.h"

int mi_attention_layer_init(mi_attention_layer *a, int64_t d_model, int64_t heads,
                            int64_t window, double rope_base, double out_scale, mi_dtype dt,
                            mi_rng *rng, mi_scope *scope)
{
    if (!a || !rng || !scope) return mi_error_set("attention: NULL layer, rng or scope"), -1;
    memset(a, 0, sizeof *a);
    if (dt != MI_F32 && dt != MI_F64)
        return mi_error_set("attention: parameters must be f32 or f64, not %s",
                            mi_dtype_name(dt)), -1;
    if (d_model < 1 || heads < 1 || d_model % heads)
        return mi_error_set("attention: heads (%lld) must be >= 1 and divide d_model (%lld)",
                            (long long)heads, (long long)d_model), -1;
    int64_t hd = d_model / heads;
    if (hd % 2)
        return mi_error_set("attention: head_dim %lld (d_model %lld / heads %lld) must be even "
                            "for RoPE", (long long)hd, (long long)d_model, (long long)heads), -1;
    if (window < 0) return mi_error_set("attention: window must be >= 0, got %lld",
                                        (long long)window), -1;
    if (!(rope_base > 0) || isinf(rope_base) || !(out_scale >= 0))
        return mi_error_set("attention: rope_base must be finite and > 0 and out_scale >= 0"), -1;
    *a = (mi_attention_layer){.d_model = d_model, .heads = heads, .head_dim = hd,
                              .window = window, .rope_base = rope_base};
    double sd = 1 / sqrt((double)d_model);
    mi_scope_enter(scope);
    mi_tensor *w[4] = {
        mi_randn(rng, dt, MI_SHAPE(d_model, d_model), 0, sd),
        mi_randn(rng, dt, MI_SHAPE(d_model, d_model), 0, sd),
        mi_randn(rng, dt, MI_SHAPE(d_model, d_model), 0, sd),
        mi_randn(rng, dt, MI_SHAPE(d_model, d_model), 0, out_scale * sd),
    };
    mi_scope_leave();
    static const char *const names[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int i = 0; i < 4; i++) {
        if (!w[i]) return -1;
        w[i]->name = names[i];
        mi_requires_grad(w[i], true);
        a->params[i] = (mi_named_tensor){names[i], w[i]};
    }
    a->w_q = w[0], a->w_k = w[1], a->w_v = w[2], a->w_out = w[3];
    return 0;
}

/* [B, T, H·hd] → [B, T, H, hd]: a view */
static mi_tensor *heads(mi_tensor *t, int64_t B, int64_t T, int64_t H, int64_t hd)
{
    return mi_reshape(t, MI_SHAPE(B, T, H, hd));
}

mi_tensor *mi_attention_layer_forward(const mi_attention_layer *a, mi_tensor *x)
{
    if (!a || !x) {
        mi_error_set("attention: NULL layer or input");
        return NULL;
    }
    if (x->rank != 3 || x->shape[2] != a->d_model || x->dtype != a->w_q->dtype) {
        char s[96];
        mi_error_set("attention: x is %s %s; expected %s [B, T, %lld]", mi_dtype_name(x->dtype),
                     mi_shape_str(s, sizeof s, x->rank, x->shape), mi_dtype_name(a->w_q->dtype),
                     (long long)a->d_model);
        return NULL;
    }
    int64_t B = x->shape[0], T = x->shape[1], H = a->heads, hd = a->head_dim;
    mi_tensor *q = mi_rope_bthd(heads(mi_matmul(x, a->w_q), B, T, H, hd), a->rope_base, false);
    mi_tensor *k = mi_rope_bthd(heads(mi_matmul(x, a->w_k), B, T, H, hd), a->rope_base, false);
    mi_tensor *v = heads(mi_matmul(x, a->w_v), B, T, H, hd);
    mi_tensor *o = mi_attention_bthd(q, k, v, true, a->window);          /* [B, T, H, hd] */
    o = mi_reshape(o, MI_SHAPE(B, T, H * hd));
    mi_tensor *y = mi_matmul(o, a->w_out);
    if (!y) mi_error_prefix("attention");
    return y;
}

/* ---------------------------------------------------------------- one token at a time
 * The state is a KV cache: rows [B, H, n, hd] of keys (RoPE applied) and
 * values, written in place, so a step costs the dot products with the n
 * cached keys and nothing else that grows with the prefix. Full attention
 * keeps position p in row p and doubles n when it runs out (the cache is
 * copied log₂(tokens / ATT_CACHE_ROWS) times in all); a window W keeps
 * position p in row p mod W, a ring of W rows. Softmax attention sums over
 * its keys in any order, so the ring's order is no concern. */
#define ATT_CACHE_ROWS 32 /* the first allocation's rows (at most W) */

int mi_attention_state_init(const mi_attention_layer *a, mi_attention_state *st, int64_t batch,
                            mi_scope *scope)
{
    if (!a || !st || !scope || batch < 1)
        return mi_error_set("attention: state: NULL layer, state or scope, or batch < 1"), -1;
    *st = (mi_attention_state){.batch = batch, .scope = scope};
    int64_t h = a->head_dim / 2;
    st->inv_freq = mi_scope_alloc(scope, sizeof(double) * (size_t)h);
    if (!st->inv_freq) return mi_error_set("attention: state: out of memory"), -1;
    /* RoPE's frequencies base^(−2i/hd), computed as mi_rope computes them */
    for (int64_t i = 0; i < h; i++)
        st->inv_freq[i] = pow(a->rope_base, -2.0 * (double)i / (double)a->head_dim);
    return 0;
}

/* n rows (n > st->rows), the rows so far copied to the front of them. */
static int cache_resize(const mi_attention_layer *a, mi_attention_state *st, int64_t n)
{
    int64_t BH = st->batch * a->heads, hd = a->head_dim;
    mi_dtype dt = a->w_q->dtype;
    mi_scope_enter(st->scope);
    mi_tensor *k = mi_tensor_new(dt, MI_SHAPE(st->batch, a->heads, n, hd));
    mi_tensor *v = mi_tensor_new(dt, MI_SHAPE(st->batch, a->heads, n, hd));
    mi_scope_leave();
    if (!k || !v) return mi_error_set("attention: KV cache of %lld rows: out of memory",
                                      (long long)n), -1;
    size_t row = (size_t)hd * mi_dtype_size(dt), old = row * (size_t)st->rows;
    for (int64_t i = 0; i < BH && st->rows > 0; i++) {
        memcpy((char *)k->data + (size_t)i * row * (size_t)n,
               (const char *)st->k->data + (size_t)i * old, old);
        memcpy((char *)v->data + (size_t)i * row * (size_t)n,
               (const char *)st->v->data + (size_t)i * old, old);
    }
    st->k = k, st->v = v, st->rows = n;
    return 0;
}

/* Room for position st->t: the rows doubled (at most W with a window). */
static int cache_reserve(const mi_attention_layer *a, mi_attention_state *st)
{
    int64_t t = st->t, W = a->window;
    if (t < st->rows || (W > 0 && st->rows == W)) return 0;
    int64_t n = st->rows ? 2 * st->rows : ATT_CACHE_ROWS;
    if (W > 0 && n > W) n = W;
    return cache_resize(a, st, n > t ? n : t + 1);
}

int mi_attention_state_reserve(const mi_attention_layer *a, mi_attention_state *st,
                               int64_t tokens)
{
    if (!a || !st || !st->scope || tokens < 0)
        return mi_error_set("attention: reserve: NULL layer, a state without "
                            "mi_attention_state_init, or tokens < 0"), -1;
    int64_t n = a->window > 0 && tokens > a->window ? a->window : tokens;
    return n > st->rows ? cache_resize(a, st, n) : 0;
}

/* x [B, 1, H·hd] rotated to position t, as [B, H, 1, hd]: with h = hd/2 and
 * θ_i = t·base^(−2i/hd) (RoFormer, Su et al., §3.4.2, the form without a
 * rotation matrix, on the halves pairing of mi_rope), each head's halves
 *   y_i     = x_i cos θ_i − x_{i+h} sin θ_i
 *   y_{i+h} = x_{i+h} cos θ_i + x_i sin θ_i
 * are x ⊙ [cos; cos] + flip(x) ⊙ [−sin; sin] on the head seen as [2, h]
 * (flip swaps the halves). cs, sn: those [2, h] tables of position t. */
static mi_tensor *rope_new(mi_tensor *x, mi_tensor *cs, mi_tensor *sn, int64_t H, int64_t hd)
{
    int64_t B = x ? x->shape[0] : 0;
    mi_tensor *h2 = mi_reshape(x, MI_SHAPE(B, H, 2, hd / 2));
    mi_tensor *y = mi_add(mi_mul(h2, cs), mi_mul(mi_flip(h2, 2), sn));
    return mi_reshape(y, MI_SHAPE(B, H, 1, hd));
}

/* Writes row t's key and value into the cache ([B, H, 1, hd] each). */
static void cache_write(const mi_attention_layer *a, mi_attention_state *st, const mi_tensor *k,
                        const mi_tensor *v)
{
    int64_t r = a->window > 0 ? st->t % a->window : st->t, n = st->rows;
    size_t row = (size_t)a->head_dim * mi_dtype_size(k->dtype);
    for (int64_t i = 0; i < st->batch * a->heads; i++) {
        memcpy((char *)st->k->data + ((size_t)(i * n + r)) * row, (const char *)k->data + i * row,
               row);
        memcpy((char *)st->v->data + ((size_t)(i * n + r)) * row, (const char *)v->data + i * row,
               row);
    }
}

mi_tensor *mi_attention_layer_step(const mi_attention_layer *a, mi_attention_state *st,
                                   mi_tensor *x)
{
    if (!a || !st || !x || x->rank != 3 || x->shape[1] != 1 || x->shape[2] != a->d_model ||
        x->dtype != a->w_q->dtype) {
        mi_error_set("attention: step: needs a layer, a state and x [B, 1, %lld] of the layer's "
                     "dtype", a ? (long long)a->d_model : 0LL);
        return NULL;
    }
    if (!st->scope || x->shape[0] != st->batch) {
        mi_error_set("attention: step: the state is for %lld sequences (mi_attention_state_init)"
                     ", x has %lld", (long long)st->batch, (long long)x->shape[0]);
        return NULL;
    }
    int64_t B = x->shape[0], H = a->heads, hd = a->head_dim, h = hd / 2, t = st->t;
    mi_dtype dt = x->dtype;
    mi_tensor *cs = mi_tensor_new(dt, MI_SHAPE(2, h)), *sn = mi_tensor_new(dt, MI_SHAPE(2, h));
    if (!cs || !sn || cache_reserve(a, st) != 0) {
        mi_error_prefix("attention: step");
        return NULL;
    }
    for (int64_t i = 0; i < h; i++) { /* sin and cos of position t, once for q and k */
        double th = (double)t * st->inv_freq[i], c = cos(th), s = sin(th);
        mi_set(cs, i, c), mi_set(cs, h + i, c);
        mi_set(sn, i, -s), mi_set(sn, h + i, s);
    }
    mi_tensor *q = rope_new(mi_matmul(x, a->w_q), cs, sn, H, hd);
    mi_tensor *k = rope_new(mi_matmul(x, a->w_k), cs, sn, H, hd);
    mi_tensor *v = mi_reshape(mi_matmul(x, a->w_v), MI_SHAPE(B, H, 1, hd));
    if (!q || !k || !v) {
        mi_error_prefix("attention: step");
        return NULL;
    }
    cache_write(a, st, k, v);
    /* the query at position t reads rows 0 … min(t, n − 1): every cached key */
    mi_tensor *o = mi_attention_at(q, st->k, st->v, true, 0, t);
    mi_tensor *y = mi_matmul(mi_reshape(o, MI_SHAPE(B, 1, H * hd)), a->w_out);
    if (!y) mi_error_prefix("attention: step");
    else st->t++;
    return y;
}

/* ---------------------------------------------------------------- as mixers */

static int attention_state_reserve(const void *self, void *state, int64_t tokens)
{
    return mi_attention_state_reserve(self, state, tokens);
}

static mi_tensor *attention_forward(const void *self, mi_tensor *x)
{
    return mi_attention_layer_forward(self, x);
}

static const mi_named_tensor *attention_params(const void *self, int *count)
{
    if (count) *count = 4;
    return ((const mi_attention_layer *)self)->params;
}

static void *attention_state_new(const void *self, int64_t batch, mi_scope *scope)
{
    mi_attention_state *st = mi_scope_alloc(scope, sizeof *st);
    if (!st) return mi_error_set("out of memory"), NULL;
    return mi_attention_state_init(self, st, batch, scope) == 0 ? st : NULL;
}

static mi_tensor *attention_step(const void *self, void *state, mi_tensor *x)
{
    return mi_attention_layer_step(self, state, x);
}

/* The cache lives in the state's own scope, written in place: nothing for
 * the caller to carry from step to step. */
static int attention_state_tensors(void *state, mi_tensor **slots[], int max)
{
    (void)state, (void)slots, (void)max;
    return 0;
}

static int make(mi_mixer *out, const char *spec, int64_t window, const mi_mixer_options *o,
                mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    if (o->n_overrides > 0)
        return mi_error_set("takes no overrides (got '%s'); they are for MIRAS blocks",
                            o->overrides[0] ? o->overrides[0] : "(null)"), -1;
    mi_attention_layer *a = mi_scope_alloc(scope, sizeof *a);
    if (!a) return mi_error_set("out of memory"), -1;
    if (mi_attention_layer_init(a, o->d_model, o->heads, window, o->rope_base, o->out_scale, dt,
                                rng, scope) != 0)
        return -1;
    *out = (mi_mixer){.name = spec, .self = a, .forward = attention_forward,
                      .params = attention_params, .state_new = attention_state_new,
                      .step = attention_step, .state_tensors = attention_state_tensors,
                      .state_reserve = attention_state_reserve};
    return 0;
}

int mi_mixer_create_attention(mi_mixer *out, const char *spec, const char *arg,
                              const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng,
                              mi_scope *scope)
{
    if (arg) return mi_error_set("attention takes no ':' argument (use swa:W for a window)"), -1;
    return make(out, spec, 0, opt, dt, rng, scope);
}

int64_t mi_mixer_window_arg(const char *arg, int64_t fallback)
{
    if (!arg) {
        if (fallback < 1) return mi_error_set("window must be >= 1, got %lld",
                                              (long long)fallback), -1;
        return fallback;
    }
    char *end;
    errno = 0;
    long long w = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || w < 1)
        return mi_error_set("window '%s' is not a whole number >= 1", arg), -1;
    return w;
}

int mi_mixer_swa_arg(const char *arg)
{
    return mi_mixer_window_arg(arg, 64) < 1 ? -1 : 0;
}

int mi_mixer_create_swa(mi_mixer *out, const char *spec, const char *arg,
                        const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    int64_t w = mi_mixer_window_arg(arg, opt->window);
    return w < 1 ? -1 : make(out, spec, w, opt, dt, rng, scope);
}
