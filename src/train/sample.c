/* Generation (train.h): a token from logits (greedy, temperature, top-k),
 * and continuations of prompts, by the recurrent form where a model has one. */
#include "train_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t mi_sample_token(const mi_tensor *logits, int64_t row, mi_sampler *s)
{
    int64_t V = logits->shape[logits->rank - 1], best = 0;
    double *x = malloc(sizeof(double) * (size_t)V);
    if (!x) return mi_error_set("sample: out of memory"), -1;
    for (int64_t v = 0; v < V; v++) {
        x[v] = mi_get(logits, row * V + v);
        if (x[v] > x[best]) best = v;
    }
    if (s->temperature <= 0) {
        free(x);
        return best;
    }
    /* top-k: keep the logits at least as large as the k-th largest */
    double cut = -INFINITY;
    if (s->top_k > 0 && s->top_k < V) {
        double *sorted = malloc(sizeof(double) * (size_t)V);
        if (!sorted) {
            free(x);
            return mi_error_set("sample: out of memory"), -1;
        }
        memcpy(sorted, x, sizeof(double) * (size_t)V);
        for (int64_t k = 0; k < s->top_k; k++) { /* partial selection: k passes */
            int64_t m = k;
            for (int64_t v = k + 1; v < V; v++)
                if (sorted[v] > sorted[m]) m = v;
            double t = sorted[k];
            sorted[k] = sorted[m], sorted[m] = t;
        }
        cut = sorted[s->top_k - 1];
        free(sorted);
    }
    /* p_v ∝ exp((x_v − x_max) / temperature) over the kept tokens (x_max is
     * read once: the loop overwrites x[best] on its way) */
    double total = 0, x_max = x[best];
    for (int64_t v = 0; v < V; v++) {
        x[v] = x[v] >= cut ? exp((x[v] - x_max) / s->temperature) : 0;
        total += x[v];
    }
    double u = mi_rng_uniform(&s->rng) * total;
    int64_t pick = best;
    for (int64_t v = 0; v < V; v++) {
        if (x[v] > 0) pick = v;
        if ((u -= x[v]) < 0) break;
    }
    free(x);
    return pick;
}

/* The fallback for a mixer without a recurrent form: the forward over the
 * whole sequence so far, once per new token. */
static int generate_by_forward(const mi_lm *lm, int64_t *seq, int64_t B, int64_t P, int64_t n,
                               mi_sampler *s, void (*on_token)(int64_t, int64_t, void *),
                               void *ctx)
{
    int64_t W = P + n;
    mi_scope *scope = mi_scope_new("generate");
    if (!scope) return mi_error_set("generate: out of memory"), -1;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        int64_t T = P + i;
        mi_scope_enter(scope);
        mi_tensor *tokens = mi_tensor_new(MI_I64, MI_SHAPE(B, T));
        if (tokens)
            for (int64_t b = 0; b < B; b++)
                memcpy((int64_t *)tokens->data + b * T, seq + b * W, sizeof(int64_t) * (size_t)T);
        mi_tensor *logits = mi_lm_forward(lm, tokens);
        if (!logits) rc = -1;
        for (int64_t b = 0; b < B && rc == 0; b++) {
            int64_t tok = mi_sample_token(logits, b * T + T - 1, s);
            if (tok < 0) {
                rc = -1;
                break;
            }
            seq[b * W + T] = tok;
            if (on_token) on_token(b, tok, ctx);
        }
        mi_scope_leave();
        mi_scope_reset(scope);
    }
    mi_scope_free(scope);
    return rc;
}

int mi_generate(const mi_lm *lm, int64_t *seq, int64_t B, int64_t P, int64_t n, mi_sampler *s,
             void (*on_token)(int64_t row, int64_t token, void *ctx), void *ctx)
{
    bool was = mi_set_grad_enabled(false);
    mi_lm_state *state = mi_lm_state_new(lm, B);
    if (!state) {
        mi_error_clear();
        int rc = generate_by_forward(lm, seq, B, P, n, s, on_token, ctx);
        mi_set_grad_enabled(was);
        return rc;
    }
    /* The recurrent form: read the prompt one token at a time, then feed
     * each new token back; the state keeps one size throughout. */
    int64_t W = P + n;
    mi_scope *scope[2] = {mi_scope_new("generate-a"), mi_scope_new("generate-b")};
    mi_tensor *logits = NULL;
    int rc = scope[0] && scope[1] ? 0 : -1;
    if (rc) mi_error_set("generate: out of memory");
    else rc = mi_lm_state_reserve(lm, state, W); /* a KV cache allocated once */
    for (int64_t t = 0; t < W - 1 && rc == 0; t++) {
        mi_scope *cur = scope[t % 2];  /* the logits of step t live until step t + 1 */
        mi_scope_reset(cur);
        mi_scope_enter(cur);
        if (t >= P) {
            for (int64_t b = 0; b < B; b++) {
                int64_t tok = mi_sample_token(logits, b, s);
                if (tok < 0) {
                    rc = -1;
                    break;
                }
                seq[b * W + t] = tok;
                if (on_token) on_token(b, tok, ctx);
            }
        }
        mi_tensor *tokens = mi_tensor_new(MI_I64, MI_SHAPE(B));
        if (tokens)
            for (int64_t b = 0; b < B; b++) ((int64_t *)tokens->data)[b] = seq[b * W + t];
        if (rc == 0 && !(logits = mi_lm_step(lm, state, tokens))) rc = -1;
        mi_scope_leave();
    }
    for (int64_t b = 0; b < B && rc == 0 && n > 0; b++) { /* the last token */
        int64_t tok = mi_sample_token(logits, b, s);
        if (tok < 0) {
            rc = -1;
            break;
        }
        seq[b * W + W - 1] = tok;
        if (on_token) on_token(b, tok, ctx);
    }
    if (scope[0]) mi_scope_free(scope[0]);
    if (scope[1]) mi_scope_free(scope[1]);
    mi_lm_state_free(state);
    mi_set_grad_enabled(was);
    return rc;
}
