/* The language model one token at a time (lm.h, "one token at a time"):
 * the backbone of lm.c at T = 1, with every mixer's step in place of its
 * forward:
 *
 *   x     = E[token]                                        [B, 1, D]
 *   block l: h = x + mixer_l.step(RMSNorm(x) ⊙ g_l)   (residual_inside: h = mixer_l.step(x))
 *            x = h + SwiGLU(RMSNorm(h) ⊙ g'_l)   (or x = ffn_l.step(h): the mixer's feed-forward)
 *   logits = (RMSNorm(x) ⊙ g_f) Eᵀ  (or W_head)               [B, V]
 *
 * Keeping the state. A mixer's step leaves its new state tensors in the
 * current scope. After each token the state's tensors are copied into one of
 * two scopes owned by the state, and the other one is reset, so the memory
 * held is the state's size (twice), whatever the number of tokens. A state
 * that grows (attention's KV cache) is not listed among those tensors: it
 * lives in the meta scope and is written in place, never copied per token. */
#include <string.h>

#include "models.h"

#define MAX_SLOTS 2048

struct mi_lm_state {
    int64_t batch, tokens;
    void **mixer;                 /* each block's mixer state */
    int n_slots;
    mi_tensor **slots[MAX_SLOTS]; /* where every state tensor's pointer lives */
    mi_scope *meta;               /* the structs */
    mi_scope *store[2];           /* the tensors: store[cur] holds the live ones */
    int cur;
};

void mi_lm_state_free(mi_lm_state *s)
{
    if (!s) return;
    mi_scope_free(s->store[0]);
    mi_scope_free(s->store[1]);
    mi_scope *meta = s->meta;
    mi_scope_free(meta); /* s lives in meta */
}

mi_lm_state *mi_lm_state_new(const mi_lm *lm, int64_t batch)
{
    if (!lm || !lm->blocks || batch < 1) {
        mi_error_set("lm: state: NULL model or batch < 1");
        return NULL;
    }
    mi_scope *meta = mi_scope_new("lm-state");
    mi_lm_state *s = meta ? mi_scope_alloc(meta, sizeof *s) : NULL;
    if (!s) {
        mi_scope_free(meta);
        mi_error_set("lm: state: out of memory");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->meta = meta, s->batch = batch;
    s->store[0] = mi_scope_new("lm-state-a"), s->store[1] = mi_scope_new("lm-state-b");
    s->mixer = mi_scope_alloc(meta, sizeof(void *) * (size_t)lm->config.layers);
    int rc = s->store[0] && s->store[1] && s->mixer ? 0 : -1;
    mi_scope_enter(s->store[0]);
    for (int l = 0; l < lm->config.layers && rc == 0; l++) {
        const mi_mixer *m = &lm->blocks[l].mixer;
        if (!m->state_new || !m->step || !m->state_tensors || (m->ffn && !m->ffn_step)) {
            mi_error_set("lm: mixer '%s' has no recurrent form (generate with mi_lm_forward)",
                         m->name);
            rc = -1;
        } else if (!(s->mixer[l] = m->state_new(m->self, batch, meta))) {
            rc = -1;
        } else {
            int n = m->state_tensors(s->mixer[l], s->slots + s->n_slots, MAX_SLOTS - s->n_slots);
            if (n < 0) rc = -1;
            else s->n_slots += n;
        }
    }
    mi_scope_leave();
    if (rc != 0) {
        mi_error_prefix("lm: state");
        mi_lm_state_free(s);
        return NULL;
    }
    return s;
}

int64_t mi_lm_state_tokens(const mi_lm_state *s) { return s ? s->tokens : 0; }

size_t mi_lm_state_bytes(const mi_lm_state *s)
{
    return s ? mi_scope_stats_get(s->store[s->cur]).bytes_used +
                   mi_scope_stats_get(s->meta).bytes_used
             : 0;
}

int mi_lm_state_reserve(const mi_lm *lm, mi_lm_state *s, int64_t tokens)
{
    if (!lm || !s || tokens < 0)
        return mi_error_set("lm: state: reserve: NULL model or state, or tokens < 0"), -1;
    for (int l = 0; l < lm->config.layers; l++) {
        const mi_mixer *m = &lm->blocks[l].mixer;
        if (m->state_reserve && m->state_reserve(m->self, s->mixer[l], tokens) != 0) {
            mi_error_prefix("lm: state: reserve");
            return -1;
        }
    }
    return 0;
}

/* Copies the live state tensors into the other store and resets this one. A
 * tensor two slots share (a chunk's start state is also its current one)
 * is copied once. */
static int keep_state(mi_lm_state *s)
{
    mi_tensor *old[MAX_SLOTS];
    int rc = 0;
    mi_scope_enter(s->store[!s->cur]);
    for (int i = 0; i < s->n_slots && rc == 0; i++) {
        old[i] = *s->slots[i];
        if (!old[i]) continue;
        int j = 0;
        while (j < i && old[j] != old[i]) j++;
        *s->slots[i] = j < i ? *s->slots[j] : mi_detach(old[i]);
        if (!*s->slots[i]) rc = -1;
    }
    mi_scope_leave();
    mi_scope_reset(s->store[s->cur]);
    s->cur = !s->cur;
    return rc;
}

static mi_tensor *rms(const mi_lm *lm, mi_tensor *x, mi_tensor *g)
{
    return mi_rms_norm_gain(x, g, lm->config.norm_eps);
}

mi_tensor *mi_lm_step(const mi_lm *lm, mi_lm_state *s, mi_tensor *tokens)
{
    if (!lm || !s || !tokens) {
        mi_error_set("lm: step: NULL model, state or tokens");
        return NULL;
    }
    if (tokens->rank != 1 || tokens->shape[0] != s->batch ||
        (tokens->dtype != MI_I32 && tokens->dtype != MI_I64)) {
        char b[64];
        mi_error_set("lm: step: tokens must be i32/i64 [%lld], got %s %s", (long long)s->batch,
                     mi_dtype_name(tokens->dtype),
                     mi_shape_str(b, sizeof b, tokens->rank, tokens->shape));
        return NULL;
    }
    int64_t B = s->batch, V = lm->config.vocab;
    mi_tensor *x = mi_embedding(lm->embeddings, mi_reshape(tokens, MI_SHAPE(B, 1)));
    for (int l = 0; l < lm->config.layers && x; l++) {
        const mi_lm_block *b = &lm->blocks[l];
        const mi_mixer *m = &b->mixer;
        if (m->residual_inside) x = m->step(m->self, s->mixer[l], x);
        else x = mi_add(x, m->step(m->self, s->mixer[l], rms(lm, x, b->mixer_norm)));
        if (m->ffn) {
            x = x ? m->ffn_step(m->self, s->mixer[l], x) : NULL;
            continue;
        }
        mi_tensor *u = rms(lm, x, b->mlp_norm);
        mi_tensor *hidden = mi_swiglu(mi_matmul(u, b->w_gate), mi_matmul(u, b->w_up));
        x = mi_add(x, mi_matmul(hidden, b->w_down));
    }
    x = rms(lm, x, lm->final_norm);
    mi_tensor *logits = lm->lm_head ? mi_matmul(x, lm->lm_head)
                                    : mi_matmul_t(x, lm->embeddings, false, true);
    logits = mi_reshape(logits, MI_SHAPE(B, V));
    if (!logits || keep_state(s) != 0) {
        mi_error_prefix("lm: step");
        return NULL;
    }
    s->tokens++;
    return logits;
}
