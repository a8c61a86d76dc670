/* The state of mi_miras_forward's pass over a sequence and the gate helpers
 * its parts share (recurrence.c, recurrence_factored.c). Internal to the
 * models layer. */
#ifndef MIRAS_RECURRENCE_RUN_H
#define MIRAS_RECURRENCE_RUN_H

#include "components.h"

typedef struct run {
    const mi_miras *m;
    const mi_miras_config *c;
    int nw;                                  /* number of weight tensors */
    mi_tensor *a[MI_MEMORY_MAX_WEIGHTS];     /* state after the last processed position, [N,1,...] */
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];     /* momentum, [N,1,...] */
    mi_tensor *eta;                          /* η of the last processed position, [N,1(,dv)]
                                                (NULL: none yet), for read and boundary */
    int64_t unit0[MI_MEMORY_MAX_WEIGHTS];    /* weight i's rows are entries [unit0[i], unit0[i]
                                                + units[i]) of a channel-wise gate */
    int64_t units[MI_MEMORY_MAX_WEIGHTS];
} run;

/* The part of a gate [N, n(, units)] that scales weight i: a channel-wise gate
 * of a memory of several weights is cut to weight i's rows. */
static inline mi_tensor *gate_part(const run *r, mi_tensor *g, int i)
{
    if (!g || g->rank != 3 || r->nw < 2) return g;
    return mi_slice(g, 2, r->unit0[i], r->unit0[i] + r->units[i]);
}

/* A gate [N, n] or [N, n, d] shaped to scale a weight [N, n', ...] of rank r:
 * [N, n, 1, …, 1] or [N, n, d, 1, …]. */
static inline mi_tensor *gate_like(mi_tensor *g, const mi_tensor *w)
{
    if (!g || !w) return NULL;
    int64_t shape[MI_MAX_RANK];
    for (int d = 0; d < w->rank; d++) shape[d] = d < g->rank ? g->shape[d] : 1;
    return mi_reshape(g, w->rank, shape);
}

/* Gate g's part for weight i shaped to scale w (gate_like). */
static inline mi_tensor *gate_of(const run *r, int i, mi_tensor *g, const mi_tensor *w)
{
    return gate_like(gate_part(r, g, i), w);
}

/* Weight i from the state A that a position with step size eta (a gate
 * [N, n(, units)], or NULL: none) wrote last. */
static inline mi_tensor *read_state(const run *r, int i, mi_tensor *a, mi_tensor *eta)
{
    return r->m->retention->read ? r->m->retention->read(r->c, a, gate_of(r, i, eta, a)) : a;
}

static inline bool has_boundary(const mi_retention_kind *ret)
{
    return ret->boundary || ret->boundary_split;
}

/* δ[i], x[i] [N, n, out / in]: the factors of the per-token gradients
 * ∂ℓ_t/∂W[i] = δ_i x_iᵀ of ℓ(M_W(k_t); v_t) at w, in closed form (the
 * memory's grad_factors and the bias's error). */
int inner_factors(const run *r, mi_tensor *const *w, mi_tensor *k, mi_tensor *v,
                  mi_tensor *delta, mi_tensor **dl, mi_tensor **x);

/* Positions [p0, p0 + n) of k, v and the gates (q: their tokens) as one
 * segment of the chunked rule (recurrence.c's header) from r's state, moved
 * to the segment's end; its outputs in *y (y NULL: no read). */
int run_chunk(run *r, mi_tensor *q, mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt,
              int64_t p0, int64_t n, mi_tensor **y);

/* Tokens [t0, t1) of q and their positions of k, v and the gates as the
 * chunked rule's segments (a lag token first, alone; at chunk 1 a multistep
 * token's steps one at a time), from r's state, moved to their end; the
 * tokens' outputs [N, t1 − t0, dv] in *y (y NULL: no read). */
int run_tokens(run *r, mi_tensor *q, mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt,
               int64_t t0, int64_t t1, mi_tensor **y);

/* The rank-one chunk form (recurrence_factored.c): whether it applies to a
 * chunk with these gates, and the chunk run through it from r's state (moved
 * to the chunk's end), its outputs in *y (y NULL: no read). */
bool factored_ok(const run *r, const mi_tensor *eta, const mi_tensor *alpha, const mi_tensor *mu);
int factored_chunk(run *r, mi_tensor *qc, mi_tensor *kc, mi_tensor *vc, mi_tensor *eta,
                   mi_tensor *alpha, mi_tensor *mu, mi_tensor *delta, int64_t n, mi_tensor **y);

#endif
