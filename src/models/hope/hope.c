/* HOPE (Nested Learning, §3 "HOPE"): a self-referential Titans
 * whose keys, values, queries, learning rates and retention come from memories
 * that update themselves in context, with the ℓ2-regression GD of Eq. 28–29
 * as their inner optimizer, followed by the continuum memory system (cms.c).
 * The NeurIPS text gives only that summary and defers to the arXiv version
 * (its ref. [1]; read from a public copy of its §8.1–8.3):
 *
 *   k_t = M_{k,t−1}(x_t)   v_t = M_{v,t−1}(x_t)   q_t = M_{q,t−1}(x_t)                (Eq. 84, 79)
 *   η_t = M_{η,t−1}(x_t)   α_t = M_{α,t−1}(x_t)
 *   v̂_{□,t} = M_{□,t−1}(v_t)     "generating its own values", □ ∈ {k, v, q, η, α, memory} (Eq. 87)
 *   M_{□,t} = M_{□,t−1}(α_t I − η_t k_t k_tᵀ) − η_t ∇ℓ(M_{□,t−1}; k_t, v̂_{□,t}),
 *             ℓ(M; k, v) = ½‖M(k) − v‖²                                             (Eq. 88)
 *   o_t = M_{memory,t−1}(q_t)        y_t = CMS(o_t)                               (Eq. 94, 96)
 *   (with cms_place=ffn, the default, y_t = o_t here and the CMS is the block's
 *   feed-forward instead, on the residual stream: §3, Fig. 3; hope.h)
 *   M_□(·) = (·) + W_{□,1} σ(W_{□,2}(·)), initial states M_{□,0} meta-learned      (Eq. 89)
 *
 * and chunk-wise (arXiv §8.2, Eq. 90–91): every element of a chunk (k, v, q,
 * η, α, v̂, the read o and the gradients) is produced by the states left at
 * the end of the previous chunk, one batched evaluation per chunk.
 *
 * The forward, for x [B, T, d], H heads of width hd = d/H:
 *   x̂ = ℓ2norm(conv(x))                              causal depthwise, kernel 4
 *   per chunk, at the chunk-start states F_□:
 *     k, v, q = ℓ2norm_head(M_k(x̂)), ℓ2norm_head(M_v(x̂)), ℓ2norm_head(M_q(x̂))  (d → d)
 *     η = σ(M_η(x̂) + b_η), α = σ(M_α(x̂) + b_α)      (M_η, M_α: d → H, one per head)
 *     o = M_memory(q) per head                         (M_memory: hd → hd, one per head)
 *     each memory, with its key κ and target M_□(ν) (κ, ν = k̄, v̄ or k_h, v_h):
 *       per layer W with input u, û = u/√(‖u‖² + ε), token by token:
 *       P_□ ← P_□ (α_t I − β_t û ûᵀ) − η_t ∇ℓ_t(F_□)/(‖u‖² + ε)     β = 1 (Eq. 28) or η_t (Eq. 88)
 *     at a multiple of its chunk size: F_□ ← P_□
 *   y = (RMSNorm_head(o) ⊙ w_norm ⊙ SiLU(x W_g)) W_out, then y ← CMS(y) with cms_place=mixer
 *
 * Choices the papers leave open, and what this file does:
 * - "Self-modifying": each of the six memories generates its own regression
 *   target v̂_□ = M_□(v_t) from the shared value v_t, and is itself updated in
 *   context; so the maps that produce k, v, q, η and α (the layer's own
 *   projections and its own learning rate and retention) change with the
 *   context, by a rule (DGD) whose targets the memories choose themselves.
 *   In the inner step v̂ is a fixed target (min_M ℓ(M; k, v̂) with v̂ given);
 *   the outer gradient flows through everything, v̂ included.
 * - Queries: the NeurIPS text ("dynamically changing the key, value, and
 *   query projections") and arXiv Eq. 79/89 make q adaptive; arXiv Eq. 85's
 *   note calls q_t = x_t W_q "the only non-adaptive projection". adaptive_q
 *   (default true) picks; false gives q = x̂ W_q.
 * - Architectures: M_k, M_v, M_q are full-width residual MLPs d → h_c → d
 *   (they replace the projections, which mix all channels); M_η, M_α are
 *   MLPs d → h_c → H without residual (their output is one rate per head;
 *   "we are not forced to use the same architecture for all components");
 *   η = σ(· + b_η) and α = σ(· + b_α) keep both in (0, 1), b starting at
 *   the configured levels. The main memory is one residual MLP hd → h_m → hd
 *   per head, as Titans' multi-head memory. h_c = component_expansion · d
 *   (default 1: the state a sequence carries per component is 2d², what the
 *   projections it replaces hold), h_m = memory_expansion · hd (default 4).
 *   σ = GELU. No LayerNorm inside the memories (Eq. 89 has none).
 * - Heads: the component memories are shared by the heads, so their update
 *   takes the full key k̄ and target input v̄ and the head-mean of η and α;
 *   the main memory of head h takes k_h, v_h, q_h, η_h, α_h. With one head
 *   this is the paper's rule exactly.
 * - The inner rule (`rule`). The NeurIPS text's Eq. 28 is
 *   W_{t+1} = W_t (I − x_t x_tᵀ) − η_t ∇L: no rate on the erase, the gradient
 *   rate η. Here the erase takes û = u/√(‖u‖² + ε) (below), so it removes the
 *   fraction ‖u‖²/(‖u‖² + ε) of W's component along u: 1 to within ε = 1e-6
 *   for the unit-norm inputs of the layers that read a key, but for an output
 *   layer W1, whose input is the hidden activation s with ε = 1, it is
 *   ‖s‖²/(‖s‖² + 1) (≈ 0.93 at ‖s‖² ≈ 14, h = 32; near 0 for a wiped memory,
 *   s ≈ 0). The arXiv
 *   version's Eq. 88 puts η on the erase too, M(α_t I − η_t k kᵀ) − η_t ∇ℓ,
 *   and a retention α_t. rule=eq28 is Eq. 28 with HOPE's retention on the
 *   identity, M(α_t I − k kᵀ) − η_t ∇ℓ (α ≡ 1 gives Eq. 28 as printed);
 *   rule=eq88 is Eq. 88. Which is the default, and the runs that chose it,
 *   are in mi_hope_config_default.
 * - DGD on an MLP: the rule is taken, as an optimizer would, on every weight
 *   matrix with its own input: W2 (α I − β k̂ k̂ᵀ) on the layer that reads
 *   the key, W1 (α I − β ŝ ŝᵀ) on the output layer, û = u/√(‖u‖² + ε) the
 *   layer's input (‖û‖ < 1, so the factor is a contraction; ε = 1 for the
 *   hidden activations, MI_NL_MLP_HIDDEN_EPS), β = 1 or η. With lms (the
 *   default) each layer's gradient term is divided by ‖u‖² + ε (normalised
 *   LMS; for the unit keys a no-op), so the step stays stable as the hidden
 *   activations grow (nl_mlp.c) and bounded when they vanish after α_t ≈ 0
 *   has wiped the memory (without the +1 HOPE went to NaN on MQAR); lms=false
 *   keeps the plain gradient. α is the retention of the whole memory
 *   ("forget gate or weight decay").
 * - Unit-norm inputs everywhere: every input a memory is read or written at
 *   has norm 1: x̂, the per-head q, k and v, and for the component memories
 *   (shared by the heads) k̄ = [k_1 … k_H]/√H and v̄ = [v_1 … v_H]/√H. Reads
 *   (at x̂, v̄) and writes (at k̄) then see inputs of one scale, Eq. 88's
 *   I − η k kᵀ is a contraction, and the self-generated targets M_□(v̄) cannot
 *   feed back through v's scale. The values are normalised like the keys
 *   (Titans leaves v unnormalised), because here v is also an input: with raw
 *   v, M_v's targets M_v(M_v(x)) grew with M_v itself and the states
 *   diverged within ~50 tokens at d = 8 and the default levels.
 * - Chunking: chunk (for M_k, M_v, M_q, M_η, M_α) and memory_chunk (for
 *   M_memory): "two different values of chunk sizes, one for the update of
 *   M_memory and the other for all the other memories". Within a chunk the
 *   gradients (and k, v, q, η, α, v̂) are taken at the chunk-start state
 *   (Eq. 90) and the erase M_{t−1}(α_t I − β_t k kᵀ) at the running state
 *   (Eq. 91): per layer a delta rule with keys û_t and values from the
 *   gradients, computed exactly in the delta rule's WY chunk form (no
 *   per-token state; the fused component op, hope_scan, takes the same
 *   rule in a closed form of its own, ops/hope_scan.c). Summing the
 *   chunk's erase terms at one state instead (what this file did before)
 *   is not a contraction: with η near 1 a chunk of 8 correlated keys
 *   expanded the q memory 10⁶-fold. With chunk 1 this is the rule exactly.
 *   Eq. 90's state index C·⌈t/C⌉ is read as the end of the previous chunk
 *   (C·⌊(t−1)/C⌋ for 1-based t), which is what Eq. 86–87 give
 *   at C = 1 and what causality requires. Where the two chunk sizes differ the
 *   sequence is cut at every multiple of either; a memory whose chunk goes on
 *   keeps accumulating (P) and is read at its chunk-start state (F). The
 *   fused path (forward_rows_fused) needs no such cuts: the component
 *   memories depend on the input alone, so hope_scan runs them over the whole
 *   sequence first, and the main memory then reads its k, v, q, η, α.
 * - Read before write: o_t = M_{memory,t−1}(q_t) (Eq. 86, 94), and at chunk
 *   size C the read uses the state the previous chunk left (Eq. 90), unlike
 *   the MIRAS layer's read after write (recurrence.c). Token t reaches o_t
 *   through its own query only; its key/value pair is visible from the next
 *   chunk on.
 * - Normalisation and convolution ("removed for clarity"; "we normalize q and
 *   k with L2 normalization and also use local convolutions with window size
 *   of 4"): one causal depthwise conv of width 4 on the input, before the
 *   memories (they replace the projections the MIRAS block convolves after;
 *   convolving their outputs instead would tie each chunk to the previous
 *   chunk's generated values), then ℓ2-normalised; q, k (and v) ℓ2-normalised
 *   per head; the output is the MIRAS block's: per-head RMSNorm with a
 *   learnable gain, SiLU(x W_g) gate, W_out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "ops/fused.h"
#include "recurrence_delta.h"

/* ---------------------------------------------------------------- forward */

/* [B, n, H·c] → [B·H, n, c] (c = 1: [B·H, n]); sequence b·H + h is head h of batch b. */
static mi_tensor *to_heads(mi_tensor *t, int64_t H, int64_t c)
{
    int64_t B = t->shape[0], n = t->shape[1];
    mi_tensor *r = mi_permute(mi_reshape(t, MI_SHAPE(B, n, H, c)), (const int[]){0, 2, 1, 3});
    return c == 1 ? mi_reshape(r, MI_SHAPE(B * H, n)) : mi_reshape(r, MI_SHAPE(B * H, n, c));
}

/* [B·H, n, c] → [B, n, H·c] */
static mi_tensor *from_heads(mi_tensor *t, int64_t B, int64_t H)
{
    int64_t n = t->shape[1], c = t->shape[2];
    mi_tensor *r = mi_permute(mi_reshape(t, MI_SHAPE(B, H, n, c)), (const int[]){0, 2, 1, 3});
    return mi_reshape(r, MI_SHAPE(B, n, H * c));
}

/* A chunk's rates for its layers' steps: η, α [N, n] over the chunk, −η as
 * a column [N, n, 1] (Eq. 28's values −η g) and α's decays
 * (delta_wy_decays_of); the last two for a chunk of more than one token. */
typedef struct rates {
    mi_tensor *eta, *alpha, *neg_eta;
    delta_wy_decays dec;
} rates;

static int rates_of(rates *r, mi_tensor *eta, mi_tensor *alpha, int rule)
{
    *r = (rates){.eta = eta, .alpha = alpha};
    if (!eta || !alpha) return -1;
    if (alpha->shape[1] == 1) return 0;   /* one token: α W − …, neither */
    if (delta_wy_decays_of(alpha, false, &r->dec) != 0) return -1;
    return rule == MI_HOPE_EQ28 && !(r->neg_eta = mi_neg(mi_unsqueeze(eta, -1))) ? -1 : 0;
}

/* One layer W [out, in] or [N, out, in] over a segment, with the factors
 * g_t û_tᵀ of its gradients (nl_mlp.c), β_t = 1 (Eq. 28) or η_t (Eq. 88):
 *   W_t = W_{t−1}(α_t I − β_t û_t û_tᵀ) − η_t g_t û_tᵀ
 *       = α_t W_{t−1} − β_t (W_{t−1} û_t − v_t) û_tᵀ,   v_t = −(η_t/β_t) g_t,
 * a delta rule with keys û_t and values v_t. In a chunk the gradients are
 * taken at the chunk-start state F (arXiv Eq. 90) and the erase acts on the
 * running state (Eq. 91), exactly, in the delta rule's WY chunk form
 * (recurrence_delta.c): no per-token state is formed, and each factor
 * α I − β û ûᵀ (‖û‖ < 1, β ≤ 1) is a contraction however many a chunk has.
 * The chunk form's K Fᵀ (F û_t for every t) is f.wu, from the segments'
 * own reads of F. */
static mi_tensor *dgd_layer(mi_tensor *w, mi_nl_mlp_factor f, const rates *r, int rule)
{
    mi_tensor *eta = r->eta, *alpha = r->alpha;
    int64_t N = f.g->shape[0], n = f.g->shape[1], out = f.g->shape[2], in = f.u->shape[2];
    if (n == 1) {
        /* one token: α W − (β W û + η g) ûᵀ */
        mi_tensor *h = mi_reshape(eta, MI_SHAPE(N, 1, 1));
        mi_tensor *wu = f.wu ? f.wu : mi_matmul_t(f.u, w, false, true); /* (W û)ᵀ [N, 1, out] */
        if (rule == MI_HOPE_EQ88) wu = mi_mul(h, wu);
        mi_tensor *a = mi_reshape(alpha, MI_SHAPE(N, 1, 1));
        return mi_matmul_acc(mi_mul(a, w), mi_add(wu, mi_mul(h, f.g)), f.u, true, false, -1);
    }
    /* β = 1 (NULL) and v = −η g [N, n, out] (Eq. 28), or β = η and v = −g (Eq. 88) */
    mi_tensor *beta = rule == MI_HOPE_EQ28 ? NULL : eta;
    mi_tensor *value = rule == MI_HOPE_EQ28 ? mi_mul(r->neg_eta, f.g) : mi_neg(f.g);
    /* a shared state [out, in] stays [1, 1, out, in]: the chunk form's products and sums
       broadcast it over the sequences, so it is not copied N times */
    mi_tensor *st = mi_reshape(w, MI_SHAPE(w->rank == 3 ? N : 1, 1, out, in));
    if (!st || delta_chunk_wy(&st, NULL, f.u, value, beta, alpha, false, 1, f.wu, &r->dec, NULL))
        return NULL;
    return mi_reshape(st, MI_SHAPE(N, out, in));
}

/* One weight matrix of a memory in context: the state in force F ([out, in]
 * shared by the sequences, or [N, out, in]) and the steps it has taken in
 * its current chunk, not yet applied: per segment, the factors of its
 * gradient (taken at F), F's reads at their keys (F û, which the segment had
 * from its own reads: the chunk form needs them) and η, α. They are applied
 * at the chunk's end in one pass, so a chunk cut into segments by the other
 * chunk size (or into single tokens) still makes one copy of the state. */
enum { G, U, WU, ETA, ALPHA, PARTS };
typedef struct layer {
    mi_tensor *w;
    int64_t chunk;
    int n, cap;
    mi_tensor **part;   /* [PARTS][cap] */
} layer;

/* Takes a segment's step of one layer: f [M, n, out], [M, n, in] and
 * [M, n, out], eta and alpha [M, n]. */
static int defer(layer *l, mi_nl_mlp_factor f, mi_tensor *eta, mi_tensor *alpha)
{
    if (!f.g || !f.u || !f.wu || !eta || !alpha || l->n == l->cap) return -1;
    mi_tensor *parts[PARTS] = {f.g, f.u, f.wu, eta, alpha};
    for (int i = 0; i < PARTS; i++) l->part[i * l->cap + l->n] = parts[i];
    l->n++;
    return 0;
}

/* At a chunk's end, the rates of the last layer flushed and its segments' η
 * and α lists: the component layers take their steps with one η and α (the
 * head means), and so do the main memory's two, so each group forms its
 * rates once. One a chunk's end (a list is the flushed layer's own,
 * rewritten in the next chunk). */
typedef struct shared_rates {
    int n;
    mi_tensor *const *eta_list, *const *alpha_list;
    rates r;
} shared_rates;

static bool same_list(mi_tensor *const *a, mi_tensor *const *b, int n)
{
    return a && b && memcmp(a, b, sizeof(mi_tensor *) * (size_t)n) == 0;
}

static mi_tensor *concat_parts(mi_tensor *const *list, int n)
{
    return n == 1 ? list[0] : mi_concat(list, n, 1);
}

/* The chunk's end: F ← the state after every deferred step. */
static int flush(const mi_hope_config *c, layer *l, shared_rates *sr)
{
    mi_tensor *const *eta = l->part + ETA * l->cap, *const *alpha = l->part + ALPHA * l->cap;
    if (sr->n != l->n || !same_list(sr->eta_list, eta, l->n) ||
        !same_list(sr->alpha_list, alpha, l->n)) {
        sr->n = 0;
        if (rates_of(&sr->r, concat_parts(eta, l->n), concat_parts(alpha, l->n), c->rule) != 0)
            return -1;
        sr->n = l->n, sr->eta_list = eta, sr->alpha_list = alpha;
    }
    mi_tensor *g = concat_parts(l->part + G * l->cap, l->n),
              *u = concat_parts(l->part + U * l->cap, l->n),
              *wu = concat_parts(l->part + WU * l->cap, l->n);
    l->n = 0;
    if (!g || !u || !wu) return -1;
    l->w = dgd_layer(l->w, (mi_nl_mlp_factor){g, u, wu}, &sr->r, c->rule);
    return l->w ? 0 : -1;
}

/* The layers in context: the component memories' input layers (W2) as one
 * stacked state [n_comp·h_c, d] (they read the same x̂ and v̄ and are written
 * at the same key k̄ with the same η, α, so their rows run one delta rule:
 * one product per read and one chunk form per update, not one per memory),
 * each component's output layer (W1), then the main memory's W1 and W2. */
enum { STACK = 0 };
typedef struct run {
    const mi_hope *h;
    int64_t B, H, hc;
    int n_comp;
    int comp[MI_HOPE_MEMORY];         /* the component memories present, in order */
    layer layer[MI_HOPE_MEMORY + 3];  /* STACK, 1 + i: component i's W1, then the main memory's */
} run;

static bool residual_memory(int m) { return m != MI_HOPE_ETA && m != MI_HOPE_ALPHA; }

/* Component i's hidden units in the stacked layer's output [B, n, n_comp·h_c]. */
static mi_tensor *component(const run *r, mi_tensor *stacked, int i)
{
    return mi_slice(stacked, 2, i * r->hc, (i + 1) * r->hc);
}

/* Rows [i·n, (i + 1)·n) of t [M, m·n, c]: the i-th of the inputs a product took together. */
static mi_tensor *part(mi_tensor *t, int i, int64_t n)
{
    return mi_slice(t, 1, i * n, (i + 1) * n);
}

/* The components' steps at k̄ towards their own targets v̂_□ = M_□(v̄), every
 * gradient at the states in force: per component, e = M_□(k̄) − v̂_□ and its
 * output layer's factor; then the stacked input layer's, δ = σ'(a) ⊙ W1ᵀ e of
 * every component side by side, with the one key k̄. k̄ and v̄ go through
 * each layer as one product [k̄; v̄], so each state is read once. */
static int defer_components(run *r, mi_tensor *kbar, mi_tensor *vbar, mi_tensor *eta,
                            mi_tensor *alpha)
{
    const mi_hope_config *c = &r->h->config;
    layer *L = r->layer;
    int64_t n = kbar->shape[1];
    mi_tensor *kv = mi_concat((mi_tensor *[]){kbar, vbar}, 2, 1);      /* [B, 2n, d] */
    mi_tensor *a = mi_matmul_t(kv, L[STACK].w, false, true), *hid = mi_gelu(a);
    mi_tensor *ka = part(a, 0, n), *ks = part(hid, 0, n);
    mi_tensor *back[MI_HOPE_MEMORY];
    for (int i = 0; i < r->n_comp; i++) {
        mi_tensor *w1 = L[1 + i].w;
        mi_tensor *m = mi_matmul_t(component(r, hid, i), w1, false, true);  /* W1 s */
        mi_tensor *y = residual_memory(r->comp[i]) ? mi_add(kv, m) : m;
        mi_tensor *e = mi_sub(part(y, 0, n), part(y, 1, n));          /* M(k̄) − M(v̄) */
        if (defer(&L[1 + i], mi_nl_mlp_layer_factor(e, component(r, ks, i), part(m, 0, n),
                                                     c->lms, MI_NL_MLP_HIDDEN_EPS),
                  eta, alpha) != 0)
            return -1;
        back[i] = mi_matmul(e, w1);                                   /* W1ᵀ e */
    }
    mi_tensor *delta = mi_gelu_backward(ka, mi_concat(back, r->n_comp, 2));
    return defer(&L[STACK], mi_nl_mlp_layer_factor(delta, kbar, ka, c->lms, c->qk_eps), eta,
                 alpha);
}

/* The main memory, per head, at q, v and k as one product per layer: the
 * read o = M(q), the target v̂ = M(v), and at k its step's factors towards
 * v̂ (with update). Returns o. */
static mi_tensor *main_memory(run *r, mi_tensor *q, mi_tensor *v, mi_tensor *k, mi_tensor *eta,
                              mi_tensor *alpha, bool update)
{
    const mi_hope_config *c = &r->h->config;
    layer *mem = &r->layer[1 + r->n_comp];   /* its W1, W2 */
    if (!update) return mi_nl_mlp_read(mem[0].w, mem[1].w, true, q);
    int64_t n = q->shape[1];
    mi_tensor *x = mi_concat((mi_tensor *[]){q, v, k}, 3, 1);         /* [B·H, 3n, hd] */
    mi_tensor *a = mi_matmul_t(x, mem[1].w, false, true), *s = mi_gelu(a);
    mi_tensor *m = mi_matmul_t(s, mem[0].w, false, true), *y = mi_add(x, m); /* x + W1 s */
    mi_tensor *e = mi_sub(part(y, 2, n), part(y, 1, n));              /* M(k) − v̂ */
    mi_nl_mlp_factor f[2];
    mi_tensor *eta_h = to_heads(eta, r->H, 1), *alpha_h = to_heads(alpha, r->H, 1);
    if (mi_nl_mlp_factors_at(mem[0].w, part(a, 2, n), part(s, 2, n), part(m, 2, n), e, k,
                             c->lms, c->qk_eps, MI_NL_MLP_HIDDEN_EPS, f) != 0 ||
        defer(&mem[0], f[0], eta_h, alpha_h) != 0 || defer(&mem[1], f[1], eta_h, alpha_h) != 0)
        return NULL;
    return part(y, 0, n);
}

/* One segment [t0, t1) of x̂: generate k, v, q, η, α and read o with the
 * states in force; take every memory's steps unless the segment ends the
 * sequence. Returns o [B·H, n, hd]. */
static mi_tensor *segment(run *r, mi_tensor *xs, bool update)
{
    const mi_hope *h = r->h;
    const mi_hope_config *c = &h->config;
    int64_t H = r->H;
    layer *L = r->layer;
    mi_tensor *hid = mi_gelu(mi_matmul_t(xs, L[STACK].w, false, true));
    mi_tensor *read[MI_HOPE_MEMORY] = {0};
    for (int i = 0; i < r->n_comp; i++) {
        int m = r->comp[i];
        read[m] = mi_nl_mlp_read_hidden(L[1 + i].w, component(r, hid, i), residual_memory(m), xs);
    }
    mi_tensor *q_raw = c->adaptive_q ? read[MI_HOPE_Q] : mi_matmul(xs, h->w_q);
    mi_tensor *eta = mi_sigmoid(mi_add(read[MI_HOPE_ETA], h->eta_bias));
    mi_tensor *alpha = mi_sigmoid(mi_add(read[MI_HOPE_ALPHA], h->alpha_bias));
    mi_tensor *k = mi_l2_normalize(to_heads(read[MI_HOPE_K], H, h->head_dim), c->qk_eps);
    mi_tensor *v = mi_l2_normalize(to_heads(read[MI_HOPE_V], H, h->head_dim), c->qk_eps);
    mi_tensor *q = mi_l2_normalize(to_heads(q_raw, H, h->head_dim), c->qk_eps);
    if (!eta || !alpha || !v || !k || !q) return NULL;
    if (update) {
        /* the components: k̄ = [k_1 … k_H]/√H, v̄ likewise, head-mean η and α */
        mi_tensor *kbar = mi_mul_scalar(from_heads(k, r->B, H), 1 / sqrt((double)H));
        mi_tensor *vbar = mi_mul_scalar(from_heads(v, r->B, H), 1 / sqrt((double)H));
        if (defer_components(r, kbar, vbar, mi_mean(eta, -1, false), mi_mean(alpha, -1, false)))
            return NULL;
    }
    return main_memory(r, q, v, k, eta, alpha, update);   /* o [B·H, n, hd] */
}

static int64_t next_multiple(int64_t t, int64_t C) { return (t / C + 1) * C; }

/* The layers' states in force, from `state` (one per layer, in run order;
 * NULL or a NULL entry: the initial state), and room for `cap` segments'
 * steps per layer; 0 or -1. */
static int run_init(run *r, int64_t cap, mi_tensor *const *state)
{
    const mi_hope *h = r->h;
    const mi_hope_config *c = &h->config;
    mi_tensor *w2s[MI_HOPE_MEMORY];
    for (int m = MI_HOPE_K; m <= MI_HOPE_ALPHA; m++) {
        if (!h->w1[m]) continue;   /* q when it is a static projection */
        w2s[r->n_comp] = h->w2[m];
        r->layer[1 + r->n_comp].w = h->w1[m];
        r->comp[r->n_comp++] = m;
    }
    layer *mem = &r->layer[1 + r->n_comp];
    mem[0].chunk = mem[1].chunk = c->memory_chunk;
    for (int i = 0; i < r->n_comp + 3; i++) {
        layer *l = &r->layer[i];
        if (i <= r->n_comp) l->chunk = c->chunk;
        if (state && state[i]) {
            l->w = state[i];
        } else if (i == STACK) {
            l->w = mi_concat(w2s, r->n_comp, 0);                       /* [n_comp·h_c, d] */
        } else if (i > r->n_comp) {
            /* [H, out, in] → [B·H, out, in]: the same initial memory for every batch row */
            mi_tensor *w = i == r->n_comp + 1 ? h->w1[MI_HOPE_MEMORY] : h->w2[MI_HOPE_MEMORY];
            int64_t o = w->shape[1], in = w->shape[2];
            l->w = mi_reshape(mi_broadcast_to(mi_reshape(w, MI_SHAPE(1, r->H, o, in)),
                                              MI_SHAPE(r->B, r->H, o, in)),
                              MI_SHAPE(r->B * r->H, o, in));
        }
        if (!l->w) return -1;
        l->cap = (int)(l->chunk < cap ? l->chunk : cap);
        l->part = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * PARTS * (size_t)l->cap);
        if (!l->part) return mi_error_set("hope: out of memory"), -1;
    }
    return 0;
}

/* o [B·H, n, hd] → y = (RMSNorm_head(o) ⊙ w_norm ⊙ SiLU(x W_g)) W_out, [B, n, d]. */
static mi_tensor *output(const mi_hope *h, mi_tensor *o, mi_tensor *x)
{
    o = mi_rms_norm_gain(o, h->norm_weight, h->config.norm_eps);
    if (!o) return NULL;
    o = from_heads(o, x->shape[0], h->config.heads);
    if (h->w_gate) o = mi_mul(o, mi_silu(mi_matmul(x, h->w_gate)));
    return mi_matmul(o, h->w_out);
}

static int check_input(const mi_hope *h, mi_tensor *x, const char *what)
{
    int64_t d = h->config.d_model;
    if (x->rank == 3 && x->shape[2] == d && x->shape[1] >= 1 && x->dtype == h->conv->dtype)
        return 0;
    char s[96];
    return mi_error_set("hope: x is %s %s; expected %s [B, %s, %lld]", mi_dtype_name(x->dtype),
                        mi_shape_str(s, sizeof s, x->rank, x->shape),
                        mi_dtype_name(h->conv->dtype), what, (long long)d), -1;
}

/* The layer's forward before the CMS, x [N, T, d] → [N, T, d]: every op
 * acts on each sequence alone. Errors carry no prefix (the caller's). */
static mi_tensor *forward_rows(const mi_hope *h, mi_tensor *x)
{
    const mi_hope_config *c = &h->config;
    int64_t B = x->shape[0], T = x->shape[1];
    run r = {.h = h, .B = B, .H = c->heads, .hc = c->component_expansion * c->d_model};
    if (run_init(&r, T, NULL) != 0) return NULL;   /* ≤ C segments a chunk */
    mi_tensor *xt = mi_l2_normalize(mi_conv1d_causal(x, h->conv), c->qk_eps);  /* x̂ */
    mi_tensor **os = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)T);
    if (!xt || !os) return mi_error_set("out of memory"), NULL;
    int n_seg = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = next_multiple(t0, c->chunk), tm = next_multiple(t0, c->memory_chunk);
        if (tm < t1) t1 = tm;
        if (T < t1) t1 = T;
        if (!(os[n_seg++] = segment(&r, mi_slice(xt, 1, t0, t1), t1 < T))) return NULL;
        /* a layer whose chunk ends here applies the steps it took in it */
        shared_rates sr = {0};
        for (int i = 0; i < r.n_comp + 3 && t1 < T; i++)
            if (t1 % r.layer[i].chunk == 0 && flush(c, &r.layer[i], &sr) != 0) return NULL;
        t0 = t1;
    }
    return output(h, n_seg == 1 ? os[0] : mi_concat(os, n_seg, 1), x);
}

/* forward_rows with the component memories as one fused op, hope_scan
 * (ops/hope_scan.c: the same reads and steps, each chunk's step in closed
 * form, the backward by hand), and the main memory composed over its chunks
 * at the op's k, v, q, η and α. First-order gradients only. */
static mi_tensor *forward_rows_fused(const mi_hope *h, mi_tensor *x)
{
    const mi_hope_config *c = &h->config;
    int64_t B = x->shape[0], T = x->shape[1], d = c->d_model, H = c->heads, hd = h->head_dim;
    run r = {.h = h, .B = B, .H = H, .hc = c->component_expansion * d};
    if (run_init(&r, T, NULL) != 0) return NULL;
    mi_tensor *xt = mi_l2_normalize(mi_conv1d_causal(x, h->conv), c->qk_eps);  /* x̂ */
    /* the op's inputs: the stacked W2 (run_init's), the residual components'
       W1 [n_r, d, h], the gates' [2, H, h] and their biases [2, H] */
    mi_tensor *w1r[3], *w1g[2], *bias[2] = {mi_unsqueeze(h->eta_bias, 0),
                                           mi_unsqueeze(h->alpha_bias, 0)};
    int nr = 0;
    for (int i = 0; i < r.n_comp; i++) {
        int m = r.comp[i];
        if (residual_memory(m)) w1r[nr++] = mi_unsqueeze(h->w1[m], 0);
        else w1g[m == MI_HOPE_ALPHA] = mi_unsqueeze(h->w1[m], 0);
    }
    mi_tensor *y = mi_hope_scan(xt, r.layer[STACK].w, mi_concat(w1r, nr, 0),
                                mi_concat(w1g, 2, 0), mi_concat(bias, 2, 0), c->chunk,
                                c->rule == MI_HOPE_EQ88, c->lms, c->qk_eps, MI_NL_MLP_HIDDEN_EPS);
    mi_tensor *q = c->adaptive_q
                       ? to_heads(mi_slice(y, 2, 2 * d, 3 * d), H, hd)
                       : mi_l2_normalize(to_heads(mi_matmul(xt, h->w_q), H, hd), c->qk_eps);
    int64_t e0 = (int64_t)nr * d;
    mi_tensor *k = to_heads(mi_slice(y, 2, 0, d), H, hd);
    mi_tensor *v = to_heads(mi_slice(y, 2, d, 2 * d), H, hd);
    mi_tensor *eta = mi_slice(y, 2, e0, e0 + H), *alpha = mi_slice(y, 2, e0 + H, e0 + 2 * H);
    mi_tensor **os = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)T);
    if (!q || !k || !v || !eta || !alpha) return NULL;
    if (!os) return mi_error_set("out of memory"), NULL;
    int n_seg = 0;
    layer *mem = &r.layer[1 + r.n_comp];
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = next_multiple(t0, c->memory_chunk);
        if (T < t1) t1 = T;
        if (!(os[n_seg++] = main_memory(&r, mi_slice(q, 1, t0, t1), mi_slice(v, 1, t0, t1),
                                        mi_slice(k, 1, t0, t1), mi_slice(eta, 1, t0, t1),
                                        mi_slice(alpha, 1, t0, t1), t1 < T)))
            return NULL;
        shared_rates sr = {0};
        for (int i = 0; i < 2 && t1 < T; i++)
            if (flush(c, &mem[i], &sr) != 0) return NULL;
        t0 = t1;
    }
    return output(h, n_seg == 1 ? os[0] : mi_concat(os, n_seg, 1), x);
}

/* The layer's forward before the CMS on rows [N, T, d]: fused or composed. */
static mi_tensor *forward_memories(const mi_hope *h, mi_tensor *x)
{
    return h->config.composed ? forward_rows(h, x) : forward_rows_fused(h, x);
}

/* mi_scan_rows's body: its token is the rows' whole sequence. */
static int rows_body(void *ctx, mi_tensor *const *carry, mi_tensor *const *x,
                     mi_tensor **carry_out, mi_tensor **y)
{
    (void)carry, (void)carry_out;
    y[0] = forward_memories(ctx, x[0]);
    return y[0] ? 0 : -1;
}

mi_tensor *mi_hope_forward(const mi_hope *h, mi_tensor *x)
{
    if (!h || !x) return mi_error_set("hope: NULL hope or input"), NULL;
    if (check_input(h, x, "T") != 0) return NULL;
    const mi_hope_config *c = &h->config;
    int64_t B = x->shape[0], T = x->shape[1], d = c->d_model;
    mi_tensor *o = NULL;
    if (c->composed || B == 1 || mi_threads() == 1) {
        /* on the caller's tape: no rows to split */
        o = forward_memories(h, x);
    } else {
        /* [B, 1, T, d]: one token of T positions a row, each thread's rows
           recorded in the forward and differentiated on that thread (or, with
           recompute, run again there in the backward) */
        mi_tensor *x1 = mi_reshape(x, MI_SHAPE(B, 1, T, d)), *y = NULL;
        int segment = c->recompute ? 0 : MI_SCAN_RECORD;
        if (x1 && mi_scan_rows(rows_body, (void *)h, 0, NULL, 1, &x1, 1, segment, NULL, &y) == 0)
            o = mi_reshape(y, MI_SHAPE(B, T, d));
    }
    if (o && h->has_cms && c->cms_place == MI_HOPE_CMS_MIXER) o = mi_cms_forward(&h->cms, o);
    if (!o) mi_error_prefix("hope");
    return o;
}

/* ---------------------------------------------------------------- one token at a time */

/* The forward's loop one token at a time. Every token is a segment of its
 * own; a layer keeps the steps of its current chunk (its factors and rates,
 * [M, n, ·] with n < C) and applies them, as the forward does, when its
 * chunk ends. The cost of a token is one segment and, at a chunk's end, the
 * chunk's update: constant in the number of tokens read. */
#define LAYERS (MI_HOPE_MEMORY + 3)
struct mi_hope_state {
    int64_t batch, t;
    mi_tensor *tail;                  /* the conv's last K − 1 inputs [B, K − 1, d] */
    mi_tensor *w[LAYERS];             /* each layer's state in force (NULL: the initial one) */
    mi_tensor *part[LAYERS][PARTS];   /* its steps in the current chunk (NULL: none) */
    mi_cms_state *cms;                /* the CMS's, with cms_place=mixer */
};

mi_hope_state *mi_hope_state_new(const mi_hope *h, int64_t batch, mi_scope *scope)
{
    if (!h || !scope || batch < 1) return mi_error_set("hope: state: NULL hope or batch < 1"), NULL;
    mi_hope_state *s = mi_scope_alloc(scope, sizeof *s);
    if (!s) return mi_error_set("hope: state: out of memory"), NULL;
    memset(s, 0, sizeof *s);
    s->batch = batch;
    int64_t K = h->config.conv_kernel;
    if (K > 1) {
        mi_scope_enter(scope);
        s->tail = mi_zeros(h->conv->dtype, MI_SHAPE(batch, K - 1, h->config.d_model));
        mi_scope_leave();
        if (!s->tail) return mi_error_prefix("hope: state"), NULL;
    }
    if (h->has_cms && h->config.cms_place == MI_HOPE_CMS_MIXER &&
        !(s->cms = mi_cms_state_new(&h->cms, batch, scope)))
        return mi_error_prefix("hope: state"), NULL;
    return s;
}

/* Appends a token's steps to the chunk's, [M, n, ·] ++ [M, 1, ·]. */
static int keep_steps(mi_tensor *part[PARTS], const layer *l)
{
    for (int i = 0; i < PARTS; i++) {
        mi_tensor *step = l->part[i * l->cap];
        part[i] = part[i] ? mi_concat((mi_tensor *[]){part[i], step}, 2, 1) : step;
        if (!part[i]) return -1;
    }
    return 0;
}

mi_tensor *mi_hope_step(const mi_hope *h, mi_hope_state *s, mi_tensor *x)
{
    if (!h || !s || !x) return mi_error_set("hope: step: NULL hope, state or input"), NULL;
    if (check_input(h, x, "1") != 0 || x->shape[1] != 1 || x->shape[0] != s->batch) {
        char b[96];
        mi_error_set("hope: step: x is %s; expected [%lld, 1, %lld]",
                     mi_shape_str(b, sizeof b, x->rank, x->shape), (long long)s->batch,
                     (long long)h->config.d_model);
        return NULL;
    }
    const mi_hope_config *c = &h->config;
    run r = {.h = h, .B = s->batch, .H = c->heads, .hc = c->component_expansion * c->d_model};
    if (run_init(&r, 1, s->w) != 0) return mi_error_prefix("hope: step"), NULL;
    /* x̂_t = ℓ2norm(conv(x)_t): the conv over the K − 1 inputs before x_t and x_t */
    mi_tensor *xc = mi_conv1d_causal_tail(x, h->conv, &s->tail);
    mi_tensor *o = xc ? segment(&r, mi_l2_normalize(xc, c->qk_eps), true) : NULL;
    for (int i = 0; o && i < r.n_comp + 3; i++) {
        layer *l = &r.layer[i];
        if (keep_steps(s->part[i], l) != 0) return mi_error_prefix("hope: step"), NULL;
        if ((s->t + 1) % l->chunk == 0) {   /* the chunk ends: its steps, as flush applies them */
            rates rt;
            mi_tensor **p = s->part[i];
            l->w = rates_of(&rt, p[ETA], p[ALPHA], c->rule) != 0 ? NULL
                 : dgd_layer(l->w, (mi_nl_mlp_factor){p[G], p[U], p[WU]}, &rt, c->rule);
            memset(s->part[i], 0, sizeof s->part[i]);
            if (!l->w) return mi_error_prefix("hope: step"), NULL;
        }
        s->w[i] = l->w;
    }
    o = o ? output(h, o, x) : NULL;
    if (o && s->cms) o = mi_cms_step(&h->cms, s->cms, o);
    if (!o) return mi_error_prefix("hope: step"), NULL;
    s->t++;
    return o;
}

int mi_hope_state_tensors(mi_hope_state *s, mi_tensor **slots[], int max)
{
    int n = 0, need = 1 + LAYERS * (1 + PARTS);
    if (max < need) return mi_error_set("hope: state: %d slots needed", need), -1;
    slots[n++] = &s->tail;
    for (int i = 0; i < LAYERS; i++) {
        slots[n++] = &s->w[i];
        for (int p = 0; p < PARTS; p++) slots[n++] = &s->part[i][p];
    }
    if (!s->cms) return n;
    int m = mi_cms_state_tensors(s->cms, slots + n, max - n);
    return m < 0 ? mi_error_prefix("hope: state"), -1 : n + m;
}
