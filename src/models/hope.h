/* Installed as miras/models/hope.h, for users: included by miras.h (through models/models.h). */
/* Nested Learning: the continuum memory system (CMS, §3 Eq. 30–31)
 * and HOPE (§3 "HOPE": self-modifying Titans followed by a CMS), as layers with
 * the MIRAS block's API shape: config (defaults), init (dtype, rng, scope),
 * params (name/tensor pairs), forward x [B, T, d] → [B, T, d].
 *
 * Where the CMS runs (cms_place). Nested Learning §3 and Fig. 3 draw HOPE's
 * block as a Transformer's with the attention replaced by the self-modifying
 * Titans and the feed-forward replaced by the CMS ("the conventional
 * Transformer block is a special instance of this formulation, where k = 1"):
 * MI_HOPE_CMS_FFN, the default, keeps the CMS out of the mixer; the language
 * model runs it on the residual stream in place of its MLP (mi_hope_ffn_forward).
 * MI_HOPE_CMS_MIXER runs it inside the layer on the Titans output, and the
 * block keeps its own MLP beside it.
 *
 * Three files:
 *   nl_mlp.c  the 2-layer MLP memory both use, M(x) = [x +] W1 σ(W2 x), its
 *             accumulated GD step (the CMS) and its gradients' rank-one
 *             factors (HOPE's ℓ2-regression GD, Eq. 28), in ops;
 *   cms.c     the CMS: a chain of MLP blocks, block ℓ updated in context
 *             every C^(ℓ) tokens from its error accumulated over them;
 *   hope.c    HOPE: keys, values, queries, learning rates and retention
 *             produced by MLP memories that update themselves in context,
 *             a main memory read with the queries, then the CMS.
 * Every choice the paper leaves open is written next to the code that makes
 * it (the top comments of cms.c and hope.c list them). Everything is recorded
 * ops: the outer loop trains through every inner update. */
#ifndef MIRAS_HOPE_H
#define MIRAS_HOPE_H

#include "ops/ops.h"

/* ---------------------------------------------------------------- the MLP memory (nl_mlp.c)
 * Weights as [out, in] matrices acting on column vectors, the paper's
 * numbering: w1 the output layer [out, h], w2 the input layer [h, in]; either
 * shared ([out, h]) or one per sequence ([N, out, h]). x [N, n, in]. */

/* y = x + W1 gelu(W2 x) (residual; needs out == in) or W1 gelu(W2 x). */
mi_tensor *mi_nl_mlp_read(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x);
/* The same from the hidden activations s = gelu(W2 x) [N, n, h]: x + W1 s or W1 s. */
mi_tensor *mi_nl_mlp_read_hidden(mi_tensor *w1, mi_tensor *s, bool residual, mi_tensor *x);

/* The hidden layer's regulariser in the normalised step below: ‖s‖² + 1. At
 * unit-variance pre-activations ‖s‖² ≈ 0.43·h (14 at h = 32), so this
 * changes a live memory's step by a few percent; for a memory whose input
 * layer has been wiped (α ≈ 0, W2 ≈ 0, s ≈ 0) it bounds the step on W1 by
 * c‖e + W1 s‖/2 instead of c‖e + W1 s‖/(2√eps) (see nl_mlp.c). */
#define MI_NL_MLP_HIDDEN_EPS 1.0

/* The inner GD step of the memory on ℓ_t = ½‖M(x_t) − v_t‖², weighted by c_t
 * [N, n], summed over the n positions, every term at the given weights:
 *   D1 = Σ_t c_t e_t s_tᵀ/(‖s_t‖² + hidden_eps)   e_t = M(x_t) − v_t, s_t = gelu(a_t)
 *   D2 = Σ_t c_t δ_t x_tᵀ/(‖x_t‖² + eps)          a_t = W2 x_t, δ_t = gelu'(a_t) ⊙ W1ᵀ e_t
 * the divisions (normalised LMS) only with lms; w1_new, w2_new = W − D, [N, …].
 * eps guards the input x (unit-norm or RMS-normalised in HOPE and the CMS),
 * hidden_eps the hidden activations, which can vanish
 * (MI_NL_MLP_HIDDEN_EPS). */
int mi_nl_mlp_step(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x, mi_tensor *v,
                   mi_tensor *c, bool lms, double eps, double hidden_eps, mi_tensor **w1_new,
                   mi_tensor **w2_new);

/* A layer's gradient of ℓ_t as the outer product g_t û_tᵀ of its input
 * û_t = u_t/√(‖u_t‖² + eps) (‖û‖ < 1, so I − û ûᵀ is Eq. 28's contraction)
 * and g_t = (e_t or δ_t)·√(‖u_t‖² + eps), or with lms (normalised LMS, the
 * gradient over ‖u_t‖² + eps) (e_t or δ_t)/√(‖u_t‖² + eps). [N, n, out]
 * and [N, n, in]; f[0] is W1's (u = s, hidden_eps), f[1] W2's (u = x).
 * wu [N, n, out] is the layer's read at û, W û (W the weights the gradient
 * is taken at), where the read W u was at hand (NULL where not): the delta
 * rule that applies the steps needs it (hope.c), and from W u it is a
 * division, not another product with W. */
typedef struct mi_nl_mlp_factor {
    mi_tensor *g, *u, *wu;
} mi_nl_mlp_factor;
int mi_nl_mlp_factors(mi_tensor *w1, mi_tensor *w2, bool residual, mi_tensor *x, mi_tensor *v,
                      bool lms, double eps, double hidden_eps, mi_nl_mlp_factor f[2]);
/* The same from a read already taken at x: a = W2 x, s = gelu(a), m = W1 s
 * (NULL: f[0].wu is NULL), e = M(x) − v. */
int mi_nl_mlp_factors_at(mi_tensor *w1, mi_tensor *a, mi_tensor *s, mi_tensor *m, mi_tensor *e,
                         mi_tensor *x, bool lms, double eps, double hidden_eps,
                         mi_nl_mlp_factor f[2]);
/* One layer's factors from its gradient's left side g (e or δ, [N, n, out]),
 * its input u ([N, n, in]) and its read there W u ([N, n, out], or NULL),
 * with that layer's eps: the g, û and W û above. */
mi_nl_mlp_factor mi_nl_mlp_layer_factor(mi_tensor *g, mi_tensor *u, mi_tensor *wu, bool lms,
                                        double eps);

/* ---------------------------------------------------------------- continuum memory (cms.c) */
#define MI_CMS_MAX_BLOCKS 8

typedef struct mi_cms_config {
    int64_t d_model;
    int64_t hidden;                  /* each block's hidden width (0: 4·d_model) */
    int n_blocks;                    /* k, the number of blocks (levels), 1..MI_CMS_MAX_BLOCKS */
    int chunk[MI_CMS_MAX_BLOCKS];    /* C^(ℓ): block ℓ (applied ℓ-th) is updated after every
                                        position that is a multiple of C^(ℓ) (default 1, 4, 16) */
    double eta;                      /* the initial level of σ(·) in η_t^(ℓ) (0.02) */
    bool rate_mean;                  /* η_t^(ℓ) = σ(·)/C^(ℓ): a chunk's mean step, not Eq. 31's
                                        sum (false) */
    bool lms;                        /* each layer's term over its input's ‖u‖², normalised LMS
                                        (true; false: plain GD) */
    double norm_eps;                 /* the blocks' RMSNorm (default 1e-6) */
    bool composed;                   /* each level as recorded per-chunk ops (nl_mlp.c), which
                                        differentiate to any order, not the fused cms_scan op
                                        (first order only; false, the default) */
} mi_cms_config;

/* d_model, hidden 0 (4·d), 3 blocks with C = {1, 4, 16}, η 0.02 summed over a chunk
 * (Eq. 31), normalised LMS, eps 1e-6. */
mi_cms_config mi_cms_config_default(int64_t d_model);
/* Sets n_blocks and chunk[] from text such as "1,4,16"; -1 with a message
 * (empty, not a number, C < 1, more than MI_CMS_MAX_BLOCKS). */
int mi_cms_config_chunks(mi_cms_config *c, const char *list);
/* The CMS's keys (hidden, eta, rate, lms, norm_eps, composed). */
const mi_field *mi_cms_config_fields(int *count);

typedef struct mi_cms_level {
    mi_tensor *norm;       /* γ [d]: u = RMSNorm(h) ⊙ γ */
    mi_tensor *w1, *w2;    /* θ_0: the block's initial weights, W1 [d, hidden], W2 [hidden, d] */
    mi_tensor *value;      /* W_v [d, d]: the inner target v_t = u_t W_v */
    mi_tensor *eta_w;      /* [d, 1] and */
    mi_tensor *eta_bias;   /* [1]: η_t = σ(u_t w_η + b_η) / C */
} mi_cms_level;

#define MI_CMS_MAX_PARAMS (6 * MI_CMS_MAX_BLOCKS)

typedef struct mi_cms {
    mi_cms_config config;
    int64_t hidden;
    mi_cms_level level[MI_CMS_MAX_BLOCKS];
    int n_params;
    mi_named_tensor params[MI_CMS_MAX_PARAMS];
} mi_cms;

/* The effective weights every position used, for tests and inspection:
 * per block, w1 [B, T, d, hidden] and w2 [B, T, hidden, d] (position t holds
 * the weights block ℓ applied at t). */
typedef struct mi_cms_trace {
    int n_blocks;
    mi_tensor *w1[MI_CMS_MAX_BLOCKS], *w2[MI_CMS_MAX_BLOCKS];
} mi_cms_trace;

/* Checks the configuration and creates the parameters in `scope` (MI_F32 or
 * MI_F64), drawn deterministically from rng. 0, or -1 with a message. */
int mi_cms_init(mi_cms *c, const mi_cms_config *cfg, mi_dtype dt, mi_rng *rng, mi_scope *scope);
/* The parameters as (name, tensor) pairs, block by block ("cms.0.w1", …). */
const mi_named_tensor *mi_cms_params(const mi_cms *c, int *count);
/* x [B, T, d] → [B, T, d], the whole chain (each block residual: the output
 * carries x; use it as h ← CMS(h), not h + CMS(h)). In the current scope, recorded. */
mi_tensor *mi_cms_forward(const mi_cms *c, mi_tensor *x);
/* The same, also filling *trace (NULL: none). */
mi_tensor *mi_cms_forward_trace(const mi_cms *c, mi_tensor *x, mi_cms_trace *trace);

/* One token at a time (generation): the state of `batch` sequences, in
 * `scope` (its tensors are created by the steps in the current scope; list
 * them with mi_cms_state_tensors to keep them, as mi_lm_step does). A step
 * x [batch, 1, d] → [batch, 1, d] equals mi_cms_forward's output at that
 * position; its cost does not grow with the tokens read. NULL or -1 with a
 * message. */
typedef struct mi_cms_state mi_cms_state;
mi_cms_state *mi_cms_state_new(const mi_cms *c, int64_t batch, mi_scope *scope);
mi_tensor *mi_cms_step(const mi_cms *c, mi_cms_state *s, mi_tensor *x);
/* Where the state's tensors live: fills slots, returns how many (or -1). */
int mi_cms_state_tensors(mi_cms_state *s, mi_tensor **slots[], int max);

/* ---------------------------------------------------------------- HOPE (hope.c) */
/* The six memories of the self-modifying Titans (Nested Learning arXiv §8.1, Eq. 83–89). */
enum { MI_HOPE_K, MI_HOPE_V, MI_HOPE_Q, MI_HOPE_ETA, MI_HOPE_ALPHA, MI_HOPE_MEMORY,
       MI_HOPE_MEMORIES };

/* The memories' inner step (DGD), per weight matrix W with input u:
 *   MI_HOPE_EQ28  W(α I − û ûᵀ) − η ∇ℓ           Nested Learning (NeurIPS) Eq. 28, with
 *                                                 HOPE's retention α on the identity
 *   MI_HOPE_EQ88  W(α I − η û ûᵀ) − η ∇ℓ         its arXiv version's Eq. 88 */
enum { MI_HOPE_EQ28, MI_HOPE_EQ88 };

/* Where the CMS runs: the block's feed-forward, or inside the layer after the Titans part. */
enum { MI_HOPE_CMS_FFN, MI_HOPE_CMS_MIXER };

typedef struct mi_hope_config {
    int64_t d_model, heads;      /* head_dim = d_model / heads (heads must divide d_model) */
    int memory_expansion;        /* main memory per head: hidden = expansion · head_dim (4) */
    int component_expansion;     /* k, v, q, η, α memories: hidden = expansion · d_model (1) */
    int chunk;                   /* C of the k, v, q, η, α memories (1: the exact recurrence) */
    int memory_chunk;            /* C of the main memory (1) */
    bool adaptive_q;             /* q from a self-modifying memory (true) or q = x W_q */
    bool out_gate;               /* the output gate SiLU(x W_g) (true) or none, no W_g */
    int conv_kernel;             /* the causal depthwise conv on the input (4) */
    double eta, alpha;           /* initial levels of η_t and α_t (0.02, 0.998, as the MIRAS block) */
    double qk_eps, norm_eps;     /* ℓ2 normalisation of q, k; output RMSNorm (1e-6, 1e-6) */
    double out_scale;            /* W_out ~ N(0, out_scale² / d_model) (1) */
    int rule;                    /* the memories' inner step: MI_HOPE_EQ28 (default) or _EQ88 */
    bool lms;                    /* the gradient term over its input's ‖u‖² + eps (true) */
    mi_cms_config cms;           /* the CMS; n_blocks 0: none */
    int cms_place;               /* MI_HOPE_CMS_FFN (default) or MI_HOPE_CMS_MIXER */
    bool composed;               /* the memories as ops on the caller's tape (gradients of any
                                    order), not the fused component op and the batch's rows
                                    on the threads (false) */
    bool recompute;              /* the rows' loop run again in the backward, one layer's
                                    record at a time, not kept from the forward (false) */
} mi_hope_config;

/* The defaults above, with the CMS of mi_cms_config_default(d_model). */
mi_hope_config mi_hope_config_default(int64_t d_model, int64_t heads);
/* Sets one field from text, as on a command line: "chunk=16",
 * "memory_chunk=4", "memory_expansion=2", "component_expansion=1",
 * "adaptive_q=false", "out_gate=false", "conv_kernel=4", "eta=0.02", "alpha=0.998",
 * "qk_eps=1e-6", "norm_eps=1e-6", "out_scale=1", "cms=1,4,16" (the chunk
 * sizes) or "cms=none", "cms.hidden=256", "cms.eta=0.02", "rule=eq28|eq88",
 * "lms=true", "cms.rate=sum|mean", "cms.lms=true", "cms.composed=false",
 * "cms_place=ffn|mixer", "composed=false". Ranges are checked
 * by mi_hope_init. 0, or -1 with a message. */
int mi_hope_config_set(mi_hope_config *c, const char *assignment);
/* HOPE's keys, the CMS's as the group "cms." (name, default, range, doc). */
const mi_field *mi_hope_config_fields(int *count);

#define MI_HOPE_MAX_PARAMS (24 + MI_CMS_MAX_PARAMS)

typedef struct mi_hope {
    mi_hope_config config;
    int64_t head_dim;
    mi_tensor *conv;                        /* [d, K] */
    /* initial states M_□,0 (meta-learned): w1 the output layer, w2 the input
     * layer; the main memory's with [heads] in front; q's NULL when !adaptive_q */
    mi_tensor *w1[MI_HOPE_MEMORIES], *w2[MI_HOPE_MEMORIES];
    mi_tensor *w_q;                         /* [d, d] when !adaptive_q */
    mi_tensor *eta_bias, *alpha_bias;       /* [heads] */
    mi_tensor *norm_weight;                 /* [head_dim] */
    mi_tensor *w_gate, *w_out;              /* [d, d] */
    bool has_cms;                           /* a CMS, wherever it runs */
    mi_cms cms;
    int n_params;
    mi_named_tensor params[MI_HOPE_MAX_PARAMS];
} mi_hope;

int mi_hope_init(mi_hope *h, const mi_hope_config *c, mi_dtype dt, mi_rng *rng,
                 mi_scope *scope);
/* The layer's parameters in a fixed order, the CMS's ("cms.0.w1", …) last
 * when it runs inside the layer (MI_HOPE_CMS_MIXER). */
const mi_named_tensor *mi_hope_params(const mi_hope *h, int *count);
/* x [B, T, d] → [B, T, d] (a mixer: the caller adds the residual around it):
 * the self-modifying Titans, then the CMS when it runs inside the layer.
 * The component memories (k, v, q, η, α) run as one fused op, hope_scan
 * (ops/fused.h: their reads and steps over the sequence, its backward by
 * hand), the main memory as recorded ops over its chunks at the op's
 * outputs. Each sequence's memories are its own, so the batch's rows split
 * into one range a thread, each running the whole loop on its rows
 * (mi_scan_rows with the sequence as one token), its ops back to back with
 * its states in that core's cache. Each thread records its rows' loop in the
 * forward and its backward differentiates that record on the same thread
 * (MI_SCAN_RECORD: the loop runs once; every layer's record is held until
 * the step's scope is reset). With `recompute`, or inside a checkpointed
 * block (the LM's checkpoint_blocks, miras-train --recompute), the backward
 * runs the loop again instead, one layer's record at a time. One thread
 * (mi_threads) or one row records the loop on the caller's tape. First-order
 * gradients only, but with `composed`: every memory then runs as recorded
 * ops on the caller's tape, and gradients of any order flow (the CMS needs
 * cms.composed too). */
mi_tensor *mi_hope_forward(const mi_hope *h, mi_tensor *x);

/* One token at a time, as the CMS's (mi_cms_state_new): a step x [batch, 1, d] →
 * [batch, 1, d] equals mi_hope_forward's output at that position, at a cost
 * that does not grow with the tokens read (the CMS's state too with
 * cms_place=mixer; with ffn the block's feed-forward keeps its own). */
typedef struct mi_hope_state mi_hope_state;
mi_hope_state *mi_hope_state_new(const mi_hope *h, int64_t batch, mi_scope *scope);
mi_tensor *mi_hope_step(const mi_hope *h, mi_hope_state *s, mi_tensor *x);
int mi_hope_state_tensors(mi_hope_state *s, mi_tensor **slots[], int max);

/* Whether the CMS is the block's feed-forward: there is one and cms_place is ffn. */
bool mi_hope_has_ffn(const mi_hope *h);
/* The CMS as the block's feed-forward, on the residual stream h [B, T, d]:
 * each level is a pre-norm residual sub-layer, h ← h + MLP_ℓ(RMSNorm(h) ⊙ γ_ℓ)
 * (cms.c), so the result is the updated stream, not an increment. NULL with
 * a message when the CMS is not the feed-forward (mi_hope_has_ffn). */
mi_tensor *mi_hope_ffn_forward(const mi_hope *h, mi_tensor *x);
/* The feed-forward's parameters ("cms.0.norm", …); none (count 0) when the
 * CMS is not the feed-forward. */
const mi_named_tensor *mi_hope_ffn_params(const mi_hope *h, int *count);

#endif
