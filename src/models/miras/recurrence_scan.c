/* The exact per-token rule (chunk 1) as the body of mi_scan, for a
 * combination of components that no fused kernel (delta_scan, mlp_scan)
 * covers: a registered component, a bias or retention outside the kernels'
 * rules, a deeper MLP memory, ... (and, at the end of this file, the chunked
 * rule with one chunk a body).
 *
 * Per token t the body runs the MIRAS recurrence of recurrence.c's header
 * (its per-token ops, miras_token: the MIRAS paper's online gradient
 * descent, eq:OGDupdate, with the retention gate's decay, then the read):
 *   (A_t, S_t, η_t), y_t = token(A_{t−1}, S_{t−1}, η_{t−1}; q_t, k_t, v_t, η_t, α_t, μ_t, δ_t)
 * carry = the memory's weights A (one per weight tensor), the momentum S
 * (momentum algorithms) and, for a retention with a read, η of the position
 * that wrote the state last (the ℓ1 retentions' threshold λ η reads it);
 * per-token inputs = q, k, v and the gates the components read. mi_scan keeps
 * no autograd record per token: it keeps ≈ √(2T) states and differentiates
 * one token at a time in its backward, so the layer holds O(√T) states and
 * one token's record instead of every token's record.
 *
 * Before the first token no position has written the state (η_0: none), so
 * with a read the first token runs outside the scan, recorded as the
 * composed path records it, and the scan takes the remaining T − 1 tokens
 * from the state it leaves. First-order gradients only (mi_scan's own
 * limit): scan=composed or materialize=true keeps the recorded ops. */
#include <string.h>

#include "recurrence_delta.h"
#include "recurrence_run.h"
#include "recurrence_scan.h"

enum { GATE_ETA, GATE_ALPHA, GATE_MU, GATE_DELTA, N_GATES };

typedef struct scan_ctx {
    mi_miras m; /* a copy: the backward runs the body after the caller's may be gone */
    int nw;
    bool momentum, eta_carried;
    bool has[N_GATES]; /* the gates among the per-token inputs, after q, k, v */
} scan_ctx;

/* The carry's layout: A[0..nw), then S[0..nw) with momentum, then η. */
static int n_carry(const scan_ctx *sc)
{
    return sc->nw * (sc->momentum ? 2 : 1) + (sc->eta_carried ? 1 : 0);
}

static scan_ctx scan_ctx_of(const mi_miras *m, int nw)
{
    return (scan_ctx){.m = *m, .nw = nw, .momentum = m->algorithm->uses_mu,
                      .eta_carried = m->retention->read != NULL,
                      .has = {true, m->retention->uses_alpha, m->algorithm->uses_mu,
                              m->bias->needs_delta}};
}

/* The carry c from the weights a, the momentum s and η (in that layout). */
static void pack_carry(const scan_ctx *sc, mi_tensor *const *a, mi_tensor *const *s,
                       mi_tensor *eta, mi_tensor **c)
{
    for (int i = 0; i < sc->nw; i++) {
        c[i] = a[i];
        if (sc->momentum) c[sc->nw + i] = s[i];
    }
    if (sc->eta_carried) c[n_carry(sc) - 1] = eta;
}

/* The weights, momentum and η of the carry c (NULL where it has none). */
static void unpack_carry(const scan_ctx *sc, mi_tensor *const *c, mi_tensor **a, mi_tensor **s,
                         mi_tensor **eta)
{
    for (int i = 0; i < sc->nw; i++) {
        a[i] = c[i];
        s[i] = sc->momentum ? c[sc->nw + i] : NULL;
    }
    *eta = sc->eta_carried ? c[n_carry(sc) - 1] : NULL;
}

/* The gates among a step's inputs x, after q, k, v. */
static mi_miras_gates gates_of(const scan_ctx *sc, mi_tensor *const *x)
{
    mi_tensor *gate[N_GATES] = {0};
    for (int g = 0, j = 3; g < N_GATES; g++)
        if (sc->has[g]) gate[g] = x[j++];
    return (mi_miras_gates){.eta = gate[GATE_ETA], .alpha = gate[GATE_ALPHA],
                            .mu = gate[GATE_MU], .delta = gate[GATE_DELTA]};
}

/* One token from the carry c (η NULL before the first token) and the token's
 * inputs x: q [N, dk], k [N, S, dk], v [N, S, dv], gates [N, S(, units)]. */
static int token(const scan_ctx *sc, mi_tensor *const *c, mi_tensor *eta_prev,
                 mi_tensor *const *x, mi_tensor **c_out, mi_tensor **y)
{
    mi_miras_state st = {.nw = sc->nw};
    mi_tensor *carried_eta;
    unpack_carry(sc, c, st.a, st.s, &carried_eta);
    st.eta = eta_prev;
    mi_miras_gates gt = gates_of(sc, x);
    /* a token mi_scan runs again for its carry alone needs no read */
    bool read = mi_scan_wants_ys();
    mi_tensor *yt = miras_token(&sc->m, &st, read ? mi_unsqueeze(x[0], 1) : NULL, x[1], x[2], &gt);
    if (!yt || (read && !(*y = mi_squeeze(yt, 1)))) return -1;
    pack_carry(sc, st.a, st.s, st.eta, c_out);
    return 0;
}

static int body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                mi_tensor **y)
{
    const scan_ctx *sc = ctx;
    return token(sc, c, sc->eta_carried ? c[n_carry(sc) - 1] : NULL, x, c_out, y);
}

bool miras_scan_applies(const mi_miras *m)
{
    const mi_miras_config *c = &m->config;
    return c->chunk == 1 && c->scan != MI_SCAN_COMPOSED && !c->materialize;
}

/* [N, S·T, …] as [N, T, S, …]: a token's S positions, the body's axis 1. */
static mi_tensor *by_token(mi_tensor *t, int64_t T)
{
    int64_t shape[MI_MAX_RANK];
    shape[0] = t->shape[0];
    shape[1] = T;
    shape[2] = t->shape[1] / T;
    memcpy(shape + 3, t->shape + 2, sizeof(int64_t) * (size_t)(t->rank - 2));
    return mi_reshape(t, t->rank + 1, shape);
}

/* Token t of xs [N, T, …] as [N, …]. */
static mi_tensor *at_token(mi_tensor *xs, int64_t t)
{
    return mi_squeeze(mi_slice(xs, 1, t, t + 1), 1);
}

/* The scan of the memories: each row of the carries and inputs is one
 * memory (a sequence's head), which the body never mixes with another, so
 * the rows run on the threads (mi_scan_rows) when every carry has them. A
 * tensor of the configuration with a value per sequence (kl's kl_scale_t)
 * is read whole by the body, so that the rows then stay together. */
static int scan_memories(const mi_miras *m, mi_scan_fn fn, void *ctx, int nc,
                         mi_tensor *const *carry, int n_xs, mi_tensor *const *xs, int segment,
                         mi_tensor **out, mi_tensor **y)
{
    bool rows = !m->config.kl_scale_t;
    for (int i = 0; i < nc; i++)
        rows &= carry[i]->rank >= 1 && carry[i]->shape[0] == xs[0]->shape[0];
    return (rows ? mi_scan_rows : mi_scan)(fn, ctx, nc, carry, n_xs, xs, 1, segment, out, y);
}

mi_tensor *miras_scan_forward(const mi_miras *m, int nw, mi_tensor **a, mi_tensor **s,
                              mi_tensor *q, mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt)
{
    /* the body's context lives until the backward: in the scope */
    scan_ctx *sc = mi_scope_alloc(mi_scope_current(), sizeof *sc);
    if (!sc) return NULL;
    *sc = scan_ctx_of(m, nw);
    int64_t T = q->shape[1];
    mi_tensor *gates[N_GATES] = {gt->eta, gt->alpha, gt->mu, gt->delta};
    mi_tensor *xs[3 + N_GATES] = {q, by_token(k, T), by_token(v, T)};
    int n_xs = 3;
    for (int g = 0; g < N_GATES; g++)
        if (sc->has[g] && !(xs[n_xs++] = by_token(gates[g], T))) return NULL;
    if (!xs[1] || !xs[2]) return NULL;
    int nc = n_carry(sc);
    mi_tensor *carry[2 * MI_MEMORY_MAX_WEIGHTS + 1], *out[2 * MI_MEMORY_MAX_WEIGHTS + 1];
    pack_carry(sc, a, s, NULL, carry);
    mi_tensor *y0 = NULL, *y = NULL;
    int64_t t0 = 0;
    if (sc->eta_carried) {
        /* the first token: no η has written the state yet */
        mi_tensor *x0[3 + N_GATES];
        for (int j = 0; j < n_xs; j++)
            if (!(x0[j] = at_token(xs[j], 0))) return NULL;
        if (token(sc, carry, NULL, x0, out, &y0) != 0) return NULL;
        memcpy(carry, out, sizeof(mi_tensor *) * (size_t)nc);
        if (!(y0 = mi_unsqueeze(y0, 1))) return NULL;
        for (int j = 0; T > 1 && j < n_xs; j++)
            if (!(xs[j] = mi_slice(xs[j], 1, 1, T))) return NULL;
        t0 = 1;
    }
    if (t0 < T) {
        if (scan_memories(m, body, sc, nc, carry, n_xs, xs, 0, out, &y) != 0) return NULL;
        memcpy(carry, out, sizeof(mi_tensor *) * (size_t)nc);
    }
    mi_tensor *eta_last;
    unpack_carry(sc, carry, a, s, &eta_last);
    if (!y0) return y;
    return y ? mi_concat((mi_tensor *[]){y0, y}, 2, 1) : y0;
}

/* ---------------------------------------------------------------- chunks
 * The chunked rule (b > 1, recurrence.c's header) the same way: the body is
 * one chunk, run_tokens over its b tokens (the mini-batch rule, the rank-one
 * form or the delta rule's exact form, whichever the chunk takes recorded),
 *   (A_c, S_c, η_c), y_c = chunk(A_{c−1}, S_{c−1}, η_{c−1}; q, k, v, gates of chunk c)
 * so the layer holds the states at the chunks' starts and one chunk's record,
 * not every chunk's record (each chunk's per-token states, the read's
 * intermediates). A chunk is already b tokens of work and T/b states are
 * few, so every chunk's start is kept (segments of one chunk): each chunk
 * runs twice, once in the forward and once recorded in the backward. A last
 * chunk of fewer than b tokens runs after the scan, recorded. */
typedef struct chunk_ctx {
    scan_ctx sc;
    run r;      /* the layout of the weights (units) and, per chunk, the state */
    int64_t b;  /* tokens per chunk */
} chunk_ctx;

static int chunk_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                      mi_tensor **y)
{
    const chunk_ctx *cc = ctx;
    const scan_ctx *sc = &cc->sc;
    run r = cc->r;
    r.m = &sc->m;
    r.c = &sc->m.config;
    unpack_carry(sc, c, r.a, r.s, &r.eta);
    mi_miras_gates gt = gates_of(sc, x);
    /* a chunk mi_scan runs again for its carry alone needs no read */
    if (run_tokens(&r, x[0], x[1], x[2], &gt, 0, cc->b, mi_scan_wants_ys() ? y : NULL) != 0)
        return -1;
    pack_carry(sc, r.a, r.s, r.eta, c_out);
    return 0;
}

bool miras_chunk_scan_applies(const run *r, int64_t tokens, const mi_miras_gates *gt)
{
    const mi_miras_config *c = r->c;
    const mi_miras *m = r->m;
    if (c->chunk <= 1 || tokens <= c->chunk || c->materialize || c->scan == MI_SCAN_COMPOSED)
        return false;
    if (c->scan == MI_SCAN_BODY) return true;
    /* auto: a chunk that neither the rank-one form nor the delta rule's exact
     * form takes makes a state per token, which its record would keep */
    mi_tensor *alpha = m->retention->uses_alpha ? gt->alpha : NULL;
    mi_tensor *mu = m->algorithm->uses_mu ? gt->mu : NULL;
    int exact = delta_exact_choose(m, alpha);
    if (exact < 0) mi_error_clear(); /* form=exact without one: run_chunk says so */
    if (exact == 0 && !factored_ok(r, gt->eta, alpha, mu)) return true;
    /* else the states the chunks start from, which the recorded chunks would
     * keep several times over (the state updates' intermediates) */
    double bytes = 0;
    for (int i = 0; i < r->nw; i++)
        bytes += (double)r->a[i]->numel * (double)mi_dtype_size(r->a[i]->dtype);
    if (r->m->algorithm->uses_mu) bytes *= 2;
    return bytes * (double)((tokens + c->chunk - 1) / c->chunk) >= MIRAS_CHUNK_SCAN_BYTES;
}

mi_tensor *miras_chunk_scan_forward(run *r, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                    const mi_miras_gates *gt)
{
    const mi_miras *m = r->m;
    chunk_ctx *cc = mi_scope_alloc(mi_scope_current(), sizeof *cc);
    if (!cc) return NULL;
    *cc = (chunk_ctx){.sc = scan_ctx_of(m, r->nw), .r = *r, .b = m->config.chunk};
    const scan_ctx *sc = &cc->sc;
    int64_t b = cc->b, tokens = q->shape[1], steps = mi_miras_writes(m);
    int64_t full = tokens / b * b, t0 = 0;
    mi_tensor *part[3] = {0};
    int n_part = 0;
    if (sc->eta_carried) {
        /* the first chunk: no η has written the state yet */
        if (run_tokens(r, q, k, v, gt, 0, b, &part[n_part++]) != 0) return NULL;
        t0 = b;
    }
    if (t0 < full) {
        int64_t n = (full - t0) / b;
        mi_tensor *gates[N_GATES] = {gt->eta, gt->alpha, gt->mu, gt->delta};
        mi_tensor *xs[3 + N_GATES] = {
            by_token(mi_slice(q, 1, t0, full), n),
            by_token(mi_slice(k, 1, t0 * steps, full * steps), n),
            by_token(mi_slice(v, 1, t0 * steps, full * steps), n)};
        int n_xs = 3;
        for (int g = 0; g < N_GATES; g++)
            if (sc->has[g] &&
                !(xs[n_xs++] = by_token(mi_slice(gates[g], 1, t0 * steps, full * steps), n)))
                return NULL;
        if (!xs[0] || !xs[1] || !xs[2]) return NULL;
        int nc = n_carry(sc);
        mi_tensor *carry[2 * MI_MEMORY_MAX_WEIGHTS + 1], *out[2 * MI_MEMORY_MAX_WEIGHTS + 1];
        pack_carry(sc, r->a, r->s, r->eta, carry);
        mi_tensor *y = NULL;
        if (scan_memories(m, chunk_body, cc, nc, carry, n_xs, xs, 1, out, &y) != 0) return NULL;
        unpack_carry(sc, out, r->a, r->s, &r->eta);
        /* [N, T/b, b, dv] → [N, T, dv] */
        int64_t shape[3] = {y->shape[0], y->shape[1] * y->shape[2], y->shape[3]};
        if (!(part[n_part++] = mi_reshape(y, 3, shape))) return NULL;
    }
    if (full < tokens && run_tokens(r, q, k, v, gt, full, tokens, &part[n_part++]) != 0)
        return NULL;
    return n_part == 1 ? part[0] : mi_concat(part, n_part, 1);
}
