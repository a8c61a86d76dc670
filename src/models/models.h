/* Installed as miras/models/models.h, for users: included by miras.h. */
/* miras models layer: a MIRAS memory is four choices (the MIRAS paper's
 * §"MIRAS: Learning to Memorize with Robust and Expressive Memory" and its
 * Table 1, tab:memory-perspective-all):
 *
 *   memory architecture  M_W(x)            vector, matrix, k-layer MLP
 *   attentional bias     ℓ(M_W(k_t); v_t)  dot, l2, lp, huber, huber-norm, yaad, robust
 *   retention gate       how W_{t-1} is kept when the new step is written
 *   learning algorithm   gd, momentum, implicit (Longhorn), multistep (DeltaProduct)
 *
 * Each choice is a small named component (one file each); mi_miras_new()
 * assembles them by name. The recurrence (recurrence.c) is generic: the inner
 * gradient ∇_W ℓ comes from mi_grad(…, create_graph) for any memory written
 * with ops, or from a component's closed form; every step is made of
 * recorded ops, so the outer loop trains through the inner loop.
 *
 * Shapes. A layer runs N = batch × heads independent sequences:
 *   q, k [N, T, dk], v [N, T, dv], output y [N, T, dv].
 *   Gates per token: eta (inner learning rate), alpha (retention: the kept
 *   fraction), mu (momentum decay), delta (Huber threshold): [N, T] for one
 *   value per head and token, or channel-wise: [N, T, dv] for the vector and
 *   matrix memories (value channels, the rows of M), one entry per row of each
 *   weight for the MLP ([N, T, dv + (depth − 1)·h]: W_1's rows, then W_2's,
 *   …); δ channel-wise is always [N, T, dv]. A gate the configuration does
 *   not use may be NULL.
 *   Memory weights are lists of tensors. The state carried along the sequence
 *   has shape [N, n, ...] where n is 1 (one state for the chunk) or the
 *   number of tokens (one state per token); the initial weights W0 are given
 *   without the leading [N, n] (shared by all sequences, usually learnable
 *   parameters) or with [N] in front. */
#ifndef MIRAS_MODELS_H
#define MIRAS_MODELS_H

#include "ops/ops.h"

#define MI_MEMORY_MAX_WEIGHTS 8

/* ---------------------------------------------------------------- configuration */

/* A component's own parameters (ℓp's p, Yaad's sign sharpness, …): storage
 * that the component's field table reads and writes (components.h). They are
 * set by key like any other, "p=4", once the component is chosen ("bias=lp"
 * first); a component chosen without any has its defaults. */
typedef union mi_component_params {
    double real[8];
    int64_t whole[8];
} mi_component_params;
typedef struct mi_miras_config {
    /* memory architecture */
    const char *memory;      /* "vector" | "matrix" | "mlp" */
    int mlp_depth;           /* layers of the MLP memory (default 2) */
    int mlp_expansion;       /* hidden = expansion · dk (default 4) */
    int slots;               /* lattice: m, the number of memory slots; keys and queries
                                then have dk = m (default 64; the paper gives no m) */
    bool slot_norm;          /* lattice: φ, every slot read normalised (default true);
                                false gives Lattice Remark A.2's linear memory */
    /* attentional bias */
    const char *bias;        /* "dot" | "l2" | "lp" | "huber" | "huber-norm" | "yaad" | "robust" | …
                                (components.c) */
    mi_component_params bias_params; /* the bias's own (lp: p, abs_eps; yaad: sign_sharpness;
                                        robust: robust_delta, abs_eps), by key */
    const char *bias_params_for;     /* the bias whose parameters the block holds; another
                                        (a bias assigned in C): its defaults are taken */
    /* retention gate */
    const char *retention;   /* "none" | "l2" | "kl" | "f-div" | "lq" | "elastic" |
                                "elastic-ftrl" | "bregman" | … (components.c) */
    mi_component_params retention_params; /* the retention's own (lq: q, lq_form, lq_eps;
                                             f-div: f_div; l1, elastic, elastic-ftrl:
                                             l1_gamma, l1_threshold), by key */
    const char *retention_params_for;     /* as bias_params_for */
    double kl_scale;         /* kl, f-div: the simplex scale c (default 1) */
    bool kl_scale_learn;     /* kl: c is learned, one per head, c = kl_scale · exp(s) with s
                                an outer parameter starting at 0 (the layer block's
                                "memory.kl_scale"; default false: c = kl_scale) */
    double kl_init_sd;       /* kl: the layer block draws W_0 (the logits of the initial
                                rows) from N(0, kl_init_sd²); 0 (default): the memory's own
                                init, N(0, 1/fan_in) for the MLP */
    mi_tensor *kl_scale_t;   /* kl: the simplex scale of each sequence, [N] (NULL: kl_scale).
                                A run-time input, not configuration: no key, not in a
                                checkpoint's metadata. The layer block sets it per call
                                on a copy of its memory (kl_scale_learn): leave it NULL
                                there. A caller of mi_miras_forward may set its own c. */
    bool decay_first;        /* l2: take the gradient at α ⊙ W_{t-1} (gated DeltaNet, RWKV-7) */
    bool alpha_on_keys;      /* matrix: a channel-wise α decays the key axis, A_{t-1} Diag(α_t)
                                (HGRN2), not the value rows, Diag(α_t) A_{t-1} (default false) */
    bool alpha_both_sides;   /* matrix: a channel-wise α of dv + dk entries (β_t, α'_t) decays
                                both axes, (β_t α'_tᵀ) ⊙ A_{t-1} = Diag(β_t) A_{t-1} Diag(α'_t)
                                (DFW; default false) */
    int delta_write;         /* the delta rule's write (memory matrix, bias l2, retention none
                                or l2, gd/implicit/multistep): MI_DELTA_WRITE_BETA, below */
    /* learning algorithm */
    const char *algorithm;   /* "gd" | "momentum" | "implicit" | "multistep" */
    int steps;               /* multistep: writes per read (default 2) */
    /* training form */
    int chunk;               /* b: tokens per chunk; 1 = the exact per-token recurrence */
    bool closed_form;        /* use a component's closed-form gradient when it has one */
    bool materialize;        /* chunked: keep one W per token even where the memory's
                              * rank-one factors would avoid it; chunk 1: the composed
                              * per-token ops, not the fused delta_scan (default false;
                              * tests) */
    int form;                /* chunked: MI_FORM_AUTO (default), MI_FORM_EXACT or
                                MI_FORM_MINIBATCH, below */
    int scan;                /* a recurrence without a fused kernel: MI_SCAN_AUTO (default)
                                or MI_SCAN_COMPOSED, below */
} mi_miras_config;

/* The chunked training form (config key `form`), for chunk b > 1:
 *   MI_FORM_AUTO       the exact chunkwise form where the model has one, the
 *                      mini-batch rule elsewhere (default); where the state
 *                      is small (dk·dv ≤ 2304, e.g. heads of 32 or 48) the
 *                      exact form runs as the fused per-token scan, the same
 *                      recurrence (to rounding), faster there and with less
 *                      memory than chunks
 *   MI_FORM_EXACT      the exact chunkwise form, an error where the model has none
 *   MI_FORM_MINIBATCH  the mini-batch rule (MIRAS "Parallelizable Training"):
 *                      every token of a chunk takes its gradient at the
 *                      chunk's start state, a different model from b = 1
 * The exact form exists for the delta rule: memory matrix, bias l2,
 * retention none or l2 (scalar α, or channel-wise α on the value rows),
 * algorithm gd, implicit or multistep (DeltaNet, gated DeltaNet, RWKV-7 as
 * the MIRAS table writes it, Longhorn, DeltaProduct, TTT-linear). It equals
 * the b = 1 recurrence up to rounding. */
enum { MI_FORM_AUTO = 0, MI_FORM_EXACT = 1, MI_FORM_MINIBATCH = 2 };

/* How a recurrence that no fused kernel (delta_scan, mlp_scan) covers runs
 * (config key `scan`):
 *   MI_SCAN_AUTO      as the body of mi_scan, with no record per token or
 *                     chunk (default; first-order only). Chunk 1: the
 *                     per-token rule, the state kept every ⌈√T⌉ tokens and
 *                     each segment run again in the backward. Chunk b > 1,
 *                     where a chunk makes a state per token (neither the
 *                     rank-one form, the exact form nor mlp_scan takes it:
 *                     Memora with a learned scale, for instance) or
 *                     once the states the chunks start from come to 16 MiB
 *                     (the recorded chunks would keep several times that;
 *                     below, they are recorded): one chunk a body, the state
 *                     kept at every chunk's start and each chunk run again,
 *                     recorded, in the backward (a last chunk shorter than b
 *                     runs recorded)
 *   MI_SCAN_COMPOSED  the same ops recorded token by token or chunk by chunk
 *                     (differentiable twice; materialize=true runs them too)
 *   MI_SCAN_BODY      mi_scan as in auto, also for a combination a fused
 *                     kernel covers (to measure the kernel against it) and
 *                     for chunks of any size */
enum { MI_SCAN_AUTO = 0, MI_SCAN_COMPOSED = 1, MI_SCAN_BODY = 2 };

/* The delta rule's write (config key `delta_write`), with β the step (η, or
 * Longhorn's η / (1 + η‖k‖²)):
 *   MI_DELTA_WRITE_BETA  β scales the write too (default; DeltaNet's and Gated
 *                        DeltaNet's own form):
 *                          S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ
 *   MI_DELTA_WRITE_UNIT  the write unscaled, as the MIRAS paper's "RNNs with
 *                        Delta Rule" paragraph writes it:
 *                          S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + v_t k_tᵀ   (decay_first)
 *                          S_t = α_t S_{t−1} − β_t S_{t−1} k_t k_tᵀ + v_t k_tᵀ (otherwise)
 * Every path of the delta rule holds both (the fused scan, the exact chunkwise
 * form, the mini-batch rule, the composed per-token ops). */
enum { MI_DELTA_WRITE_BETA = 0, MI_DELTA_WRITE_UNIT = 1 };

/* The soft threshold of the ℓ1 retentions (l1, elastic, elastic-ftrl), with
 * λ = config l1_gamma:
 *   MI_L1_SCALED    τ_t = λ η_t, the step times the ℓ1 weight (Lattice, Eq. 17;
 *                   MIRAS eq:Elastic, γ = ζ/α): it vanishes with the step
 *   MI_L1_CONSTANT  τ = λ at every token, whatever the step */
enum { MI_L1_SCALED = 0, MI_L1_CONSTANT = 1 };

/* The g of the f-divergence retention (MIRAS eq:generalf-divergence), the
 * inverse of f' for the divergence D_f(W, W') = Σ W' f(W/W'):
 *   MI_F_DIV_EXP             g(u) = exp(u)            f(τ) = τ log τ (KL; retention kl)
 *   MI_F_DIV_INVERSE         g(u) = 1/(1 − u)         f(τ) = τ − 1 − log τ (reverse KL)
 *   MI_F_DIV_INVERSE_SQUARE  g(u) = 1/(1 − u/2)²      f(τ) = 2(√τ − 1)² (squared Hellinger) */
enum { MI_F_DIV_EXP = 0, MI_F_DIV_INVERSE = 1, MI_F_DIV_INVERSE_SQUARE = 2 };

/* A config with every default filled in (memory "matrix", bias "l2",
 * retention "l2", algorithm "gd", chunk 1, closed_form true). */
mi_miras_config mi_miras_config_default(void);
/* Sets one field from text, as on a command line: "memory=mlp", "p=3",
 * "memory.depth=3", "chunk=16". 0 or -1 with a message. */
int mi_miras_config_set(mi_miras_config *c, const char *assignment);
/* Its keys: name, type, default, range and a line of documentation each;
 * the components' own keys are in their kinds' tables (components.h). */
const mi_field *mi_miras_config_fields(int *count);
/* The value of KEY (a config key or the chosen components') as text that
 * mi_miras_config_set reads back: 0, or -1 with a message (unknown key,
 * buf too small). */
int mi_miras_config_get(const mi_miras_config *c, const char *key, char *buf, size_t n);
/* Every key as mi_fields_describe writes them, the config's first, then each
 * component's own under its name ("bias=lp:"); returns the length needed. */
size_t mi_miras_config_describe(char *buf, size_t size);

/* ---------------------------------------------------------------- components
 * The four axes of a MIRAS model, each a table of kinds; a config names them. */
typedef struct mi_memory_kind mi_memory_kind;
typedef struct mi_bias_kind mi_bias_kind;
typedef struct mi_retention_kind mi_retention_kind;
typedef struct mi_algorithm_kind mi_algorithm_kind;
typedef struct mi_miras mi_miras;

/* The kinds' definitions, the tables and what component authors call are in
 * models/components.h (included by miras/extend.h, for authors of components). */

/* ---------------------------------------------------------------- the memory */
struct mi_miras {
    mi_miras_config config;
    const mi_memory_kind *memory;
    const mi_bias_kind *bias;
    const mi_retention_kind *retention;
    const mi_algorithm_kind *algorithm;
};

/* Writes per token: config.steps for a multistep algorithm, else 1. */
int mi_miras_writes(const mi_miras *m);

/* Resolves the names and checks the combination; -1 with a message naming
 * what is wrong (unknown component, p < 1, q ≤ 1, chunk < 1, slots < 1, …). */
int mi_miras_init(mi_miras *m, const mi_miras_config *c);

typedef struct mi_miras_gates {
    mi_tensor *eta, *alpha, *mu, *delta;
} mi_miras_gates;

/* Runs the memory over the sequences: y_t = M_{W_t}(q_t), read after write.
 * w0: the initial weights (count from memory->shapes). For the multistep
 * algorithm k, v and the gates have steps·T positions and q has T. With
 * final_state non-NULL, the state after the last token is written there
 * (one tensor per weight, [N, 1, ...]). */
mi_tensor *mi_miras_forward(const mi_miras *m, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                            const mi_miras_gates *gates, mi_tensor *const *w0,
                            mi_tensor **final_state);

/* ---------------------------------------------------------------- one token at a time
 * The recurrent form of mi_miras_forward, for generation with a state of
 * constant size: the state after t tokens, and the step that writes token t
 * and reads y_t. It follows the chunked rule exactly (a chunk's tokens take
 * their gradients at the state the chunk started from, the boundary
 * projection at the chunk's end, Memora's lag token), so its outputs equal
 * mi_miras_forward's at every position of a sequence whose length is a
 * multiple of the chunk (the forward also projects after a partial last
 * chunk, which a stream cannot know is last). */
typedef struct mi_miras_state {
    int nw;
    int64_t tokens;                           /* tokens written */
    mi_tensor *a[MI_MEMORY_MAX_WEIGHTS];      /* the retention state A, [N, 1, ...] */
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];      /* momentum S (momentum only) */
    mi_tensor *a_grad[MI_MEMORY_MAX_WEIGHTS]; /* where this chunk takes its gradients */
    mi_tensor *alpha_bar;                     /* decay_first or read_split: Π α since then
                                                 (NULL: 1) */
    mi_tensor *eta;                           /* η of the last position written (NULL:
                                                 none yet), for read and boundary */
    mi_tensor *eta_grad;                      /* η of the last one before a_grad */
} mi_miras_state;

/* The state before the first token of N sequences with key and value widths
 * dk, dv, from W_0 as mi_miras_forward takes it; tensors in the current
 * scope. 0 or -1. */
int mi_miras_state_init(const mi_miras *m, mi_miras_state *st, mi_tensor *const *w0,
                        int64_t n_seq, int64_t dk, int64_t dv, mi_dtype dt);
/* One token: q [N, 1, dk], k [N, S, dk], v [N, S, dv], gates [N, S] or
 * [N, S, dv] (S = steps for multistep, else 1) → y [N, 1, dv]. The state's
 * tensors are replaced by new ones in the current scope (the caller keeps
 * them alive: mi_lm_step copies them between two scopes). */
mi_tensor *mi_miras_step(const mi_miras *m, mi_miras_state *st, mi_tensor *q, mi_tensor *k,
                         mi_tensor *v, const mi_miras_gates *gates);

/* ---------------------------------------------------------------- presets
 * A preset names the four components, the training form and how its gates
 * are parameterised (see presets.c for each one's update rule). */
typedef enum mi_gate_kind {
    MI_GATE_UNUSED = 0,
    MI_GATE_CONST,    /* a fixed value (e.g. η = 1 for linear attention) */
    MI_GATE_HEAD,     /* data-dependent, one value per head and token */
    MI_GATE_CHANNEL,  /* data-dependent, one value per channel */
    MI_GATE_SLOPES,   /* α only: fixed, one per head, α_h = exp(−2^(−value·(h+1)/H)) for head
                         h of H (Lightning Attention's decays, from ALiBi's slopes; value 8) */
} mi_gate_kind;

typedef struct mi_gate_spec {
    mi_gate_kind kind;
    double value;     /* CONST: the value; otherwise the initial level */
    double max;       /* the range of a data-dependent η or μ, max·σ(z), and of α's decay,
                       * α = 1 − max·σ(z); 0 means 1 (δ = softplus(z) has none) */
} mi_gate_spec;

typedef struct mi_preset {
    const char *name;
    const char *update;          /* the closed-form update rule, as in the papers */
    const char *config;          /* its components and their parameters, KEY=VALUE
                                    assignments to the defaults ("memory=mlp bias=lp") */
    mi_gate_spec eta, alpha, mu, delta;
    bool key_is_one_minus_alpha; /* HGRN2: k_t = 1 − α_t */
    bool no_out_gate;            /* no output gate, y = RMSNorm(o) W_out (lattice-dec) */
    bool out_gate_sigmoid;       /* the output gate is σ(x W_g), not SiLU(x W_g) (hgrn2) */
    bool alpha_zoh;              /* α_t = exp(−η_t ⊙ exp(a)) from η (Mamba's discretisation) */
} mi_preset;

const mi_preset *mi_preset_find(const char *name);
const mi_preset *mi_preset_at(int i);
/* The preset's config: the defaults with its assignments. 0, or -1 with a message. */
int mi_preset_config(const mi_preset *p, mi_miras_config *out);

/* ---------------------------------------------------------------- the layer block
 * The MIRAS layer of the papers (MIRAS "Architecture Backbone and Fast
 * Training"; Titans §4.4; Gated DeltaNet §3.3), block.c: x [B, T, d_model] →
 *
 *   q, k, v  = ℓ2norm(SiLU(conv4(x W_q))), ℓ2norm(SiLU(conv4(x W_k))), SiLU(conv4(x W_v))
 *              per head (ℓ2 over head_dim; conv4 a causal depthwise conv)
 *   gate g_t = act((x_t D_g) U_g + b_g)   low rank: d_model → rank → heads (HEAD)
 *              or heads·head_dim (CHANNEL); η, μ: sigmoid; α = 1 − sigmoid; δ: softplus
 *   o        = mi_miras_forward over N = B·heads sequences, W_0 learnable per head
 *   y        = (RMSNorm(o) ⊙ w_norm ⊙ SiLU(x W_g)) W_out
 *
 * Parameters live in the scope given to init, f32 or f64, requires_grad;
 * mi_miras_block_params lists them by name (for optimizers and checkpoints). */
#define MI_BLOCK_MAX_PARAMS 32

typedef struct mi_miras_block_config {
    int64_t d_model, heads;
    int64_t head_dim;      /* 0: d_model / heads (then heads must divide d_model) */
    int conv_kernel;       /* depthwise causal conv width (default 4) */
    int gate_rank;         /* rank of the gate projections (default 32) */
    double qk_eps;         /* ℓ2 normalisation of q, k: x / √(Σx² + eps) (default 1e-6) */
    double norm_eps;       /* output RMSNorm (default 1e-6) */
    double out_scale;      /* W_out ~ N(0, out_scale² / (heads·head_dim)) (default 1) */
    mi_miras_config miras; /* the memory: four components and the training form (chunk) */
    mi_gate_spec eta, alpha, mu, delta;  /* value: CONST's value, or the initial level */
    bool key_is_one_minus_alpha;         /* HGRN2: k_t = 1 − α_t */
    bool out_gate;         /* y = (RMSNorm(o) ⊙ SiLU(x W_g)) W_out; false: RMSNorm(o) W_out, no
                            * W_g, as HGRN2's output (default true; lattice-dec false) */
    bool out_gate_sigmoid; /* the gate is σ(x W_g) ∈ (0, 1), not SiLU(x W_g) (default false) */
    bool alpha_zoh;        /* α_t = exp(−η_t ⊙ exp(a)): Mamba's zero-order hold, A = −exp(a)
                            * learned per head (α HEAD) or per head and channel (α CHANNEL),
                            * no projection of its own; α's level is channel 0's at η's level
                            * (default false) */
} mi_miras_block_config;

/* Defaults for a block around `miras` (NULL: mi_miras_config_default()):
 * the gates the components use are data-dependent per head at the
 * levels η 0.02, α 0.998 (retention with a decay), μ 0.9 (momentum),
 * δ 1 (biases with a threshold); the others are UNUSED. */
mi_miras_block_config mi_miras_block_config_default(int64_t d_model, int64_t heads,
                                                    const mi_miras_config *miras);
/* The block's keys (gate_rank, conv_kernel, qk_eps, out_gate, alpha_zoh, the gates eta,
 * alpha, mu, delta and eta_max, alpha_max, mu_max): the overrides a mixer
 * takes beside its components'. */
const mi_field *mi_miras_block_config_fields(int *count);
/* Takes the memory config, gate specs, key_is_one_minus_alpha and out_gate from a
 * preset (mi_preset_find); -1 with a message if there is no such preset. */
int mi_miras_block_config_preset(mi_miras_block_config *c, const char *preset);

enum { MI_BLOCK_ETA, MI_BLOCK_ALPHA, MI_BLOCK_MU, MI_BLOCK_DELTA, MI_BLOCK_GATES };

typedef struct mi_miras_block {
    mi_miras_block_config config;
    mi_miras miras;
    int64_t head_dim;
    int steps;                             /* writes per token (multistep), else 1 */
    int64_t gate_units;                    /* entries of a channel-wise η, α, μ per head: the
                                              rows of all memory weights */
    mi_tensor *w_q, *w_k, *w_v;            /* [d_model, H·hd], k and v: [d_model, steps·H·hd] */
    mi_tensor *conv_q, *conv_k, *conv_v;   /* [channels, conv_kernel] */
    /* per gate (MI_BLOCK_ETA, …), NULL unless data-dependent: D [d_model, rank],
     * U [rank, width], b [width] */
    mi_tensor *gate_down[MI_BLOCK_GATES], *gate_up[MI_BLOCK_GATES], *gate_bias[MI_BLOCK_GATES];
    mi_tensor *norm_weight;                /* [head_dim] */
    mi_tensor *w_gate;                     /* [d_model, H·hd] */
    mi_tensor *w_out;                      /* [H·hd, d_model] */
    int n_w0;
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];  /* [heads, …memory->shapes…] */
    mi_tensor *kl_scale_log;               /* kl_scale_learn: s [heads], c = kl_scale · exp(s) */
    mi_tensor *alpha_a_log;                /* alpha_zoh: a [heads·(1 or head_dim)], A = −exp(a) */
    int n_params;
    mi_named_tensor params[MI_BLOCK_MAX_PARAMS];
} mi_miras_block;

/* Checks the configuration and creates the parameters in `scope` (dtype
 * MI_F32 or MI_F64), drawn deterministically from rng. 0, or -1 with a
 * message (heads not dividing d_model, rank < 1, a gate the components need
 * left UNUSED, …). */
int mi_miras_block_init(mi_miras_block *b, const mi_miras_block_config *c, mi_dtype dt,
                        mi_rng *rng, mi_scope *scope);
/* mi_miras_block_config_default + mi_miras_block_config_preset + init. */
int mi_miras_block_init_preset(mi_miras_block *b, const char *preset, int64_t d_model,
                               int64_t heads, mi_dtype dt, mi_rng *rng, mi_scope *scope);
/* The parameters as (name, tensor) pairs, in a fixed order; *count set. */
const mi_named_tensor *mi_miras_block_params(const mi_miras_block *b, int *count);
/* x [B, T, d_model] → [B, T, d_model], in the current scope, recorded. */
mi_tensor *mi_miras_block_forward(const mi_miras_block *b, mi_tensor *x);
/* The gates the block gives its memory for x [B, T, d_model] (recorded):
 * out[MI_BLOCK_ETA … MI_BLOCK_DELTA] [B·H, T·S] or channel-wise [B·H, T·S, units],
 * NULL for a gate the components do not use. 0, or -1 with a message. */
int mi_miras_block_gates(const mi_miras_block *b, mi_tensor *x, mi_tensor **out);

/* One token at a time (constant memory): the memory's state and the last
 * conv_kernel − 1 projected rows of q, k, v (the causal convs' inputs). */
typedef struct mi_miras_block_state {
    mi_tensor *tails[3];       /* q, k, v: [B, conv_kernel − 1, channels]; NULL if K = 1 */
    mi_miras_state memory;
} mi_miras_block_state;

/* The state before the first token of `batch` sequences, tensors in the
 * current scope. 0 or -1. */
int mi_miras_block_state_init(const mi_miras_block *b, mi_miras_block_state *st, int64_t batch);
/* x [B, 1, d_model] → [B, 1, d_model]: the block's output at the next
 * position, equal to mi_miras_block_forward's there (see mi_miras_step). */
mi_tensor *mi_miras_block_step(const mi_miras_block *b, mi_miras_block_state *st, mi_tensor *x);
/* Where the state's tensor pointers live (some may be NULL): *slots[i] are
 * what a caller keeps alive between steps. The count, or -1 if max is short. */
int mi_miras_block_state_tensors(mi_miras_block_state *st, mi_tensor **slots[], int max);

/* Mixers (the block above, attention baselines, hybrids) and the language model. */
#include "models/lm.h"

/* Nested Learning's continuum memory system and HOPE. */
#include "models/hope.h"

#endif
