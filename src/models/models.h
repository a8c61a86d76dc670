/* miras models layer: a MIRAS memory is four choices (MIRAS §3, Table 1):
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
 *   value per head and token, or [N, T, dv] channel-wise (vector and matrix
 *   memories only). A gate the configuration does not use may be NULL.
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
    const char *bias;        /* "dot" | "l2" | "lp" | "huber" | "huber-norm" | "yaad" | "robust" */
    double p;                /* lp: the exponent (default 3) */
    double sign_sharpness;   /* lp/yaad: Sign(x) ≈ tanh(a·x), a (default 100) */
    double abs_eps;          /* lp: |x| ≈ √(x² + ε), ε (default 1e-6) */
    double robust_delta;     /* robust: the radius Δ of value shifts (default 0.1) */
    /* retention gate */
    const char *retention;   /* "none" | "l2" | "kl" | "lq" | "elastic" | "elastic-ftrl" | "bregman" */
    double q;                /* lq: the exponent (default 4) */
    int lq_form;             /* lq: MI_LQ_SPEC (default) or MI_LQ_PAPER, see ops.h */
    double kl_scale;         /* kl: the simplex scale c (default 1) */
    double l1_gamma;         /* elastic: the soft threshold γ (default 1e-3) */
    bool decay_first;        /* l2: take the gradient at α ⊙ W_{t-1} (gated DeltaNet, RWKV-7) */
    /* learning algorithm */
    const char *algorithm;   /* "gd" | "momentum" | "implicit" | "multistep" */
    int steps;               /* multistep: writes per read (default 2) */
    /* training form */
    int chunk;               /* b: tokens per chunk; 1 = the exact per-token recurrence */
    bool closed_form;        /* use a component's closed-form gradient when it has one */
} mi_miras_config;

/* A config with every default filled in (memory "matrix", bias "l2",
 * retention "l2", algorithm "gd", chunk 1, closed_form true). */
mi_miras_config mi_miras_config_default(void);
/* Sets one field from text, as on a command line: "memory=mlp", "p=3",
 * "memory.depth=3", "chunk=16". 0 or -1 with a message. */
int mi_miras_config_set(mi_miras_config *c, const char *assignment);

/* ---------------------------------------------------------------- components */
typedef struct mi_memory_kind mi_memory_kind;
typedef struct mi_bias_kind mi_bias_kind;
typedef struct mi_retention_kind mi_retention_kind;

struct mi_memory_kind {
    const char *name;
    const char *formula;
    /* Shapes of the weights for key dim dk and value dim dv (without [N, n]). */
    int (*shapes)(const mi_miras_config *c, int64_t dk, int64_t dv, int *n_weights, int *ranks,
                  int64_t (*shapes)[MI_MAX_RANK]);
    /* Initial weights (without [N, n]) in the current scope: a sensible
     * starting memory (e.g. zeros for a matrix, small random for an MLP). */
    int (*init)(const mi_miras_config *c, int64_t dk, int64_t dv, mi_rng *rng, mi_dtype dt,
                mi_tensor **w);
    /* y = M_W(x): W[i] [N, n_w, ...] with n_w = 1 or n; x [N, n, dk] → [N, n, dv]. */
    mi_tensor *(*forward)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x);
    /* Closed-form per-token gradients: given e = dℓ/dy [N, n, dv] at
     * y = M_W(x), writes g[i] = ∂ℓ_t/∂W[i] with shape [N, n, ...]. NULL when
     * the memory has none (the autodiff path is used). */
    int (*grad)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                mi_tensor **g);
    /* Whether channel-wise gates ([N, T, dv]) can scale this memory's weights. */
    bool channel_gates;
    /* Optional, for encoding objectives (a bias with .encoding): z = E_W(x),
     * the memory read the other way, x [N, n, dv] → [N, n, dk] (Lattice Eq. 6:
     * φ(S)ᵀ v), and its closed-form per-token gradients g[i] = ∂ℓ_t/∂W[i]
     * given e = dℓ/dz [N, n, dk] (encode_grad NULL: autodiff). */
    mi_tensor *(*encode)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x);
    int (*encode_grad)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                       mi_tensor **g);
};

struct mi_bias_kind {
    const char *name;
    const char *formula;
    /* ℓ_t per token, [N, n], from y, v [N, n, dv] and delta ([N, n] or [N, n, dv], or NULL). */
    mi_tensor *(*loss)(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta);
    /* e = dℓ_t/dy [N, n, dv] in closed form (NULL: autodiff only). */
    mi_tensor *(*error)(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta);
    bool needs_delta;
    /* An encoding objective ℓ(E_W(v_t); k_t) (Lattice Eq. 6 and 8): the memory
     * encodes the value and the result is compared with the key, so loss and
     * error above receive y = E_W(v_t) [N, n, dk] and k_t in place of v_t.
     * Needs a memory with encode. */
    bool encoding;
};

/* The retention gate keeps a state A from which the memory's weights are
 * read, W = read(A). Inside a chunk the state follows the linear recurrence
 * A_t = α_t ⊙ A_{t-1} + step_t; the non-linear part, if any, is the
 * boundary projection applied at the end of each chunk (after every token
 * when b = 1). */
struct mi_retention_kind {
    const char *name;
    const char *formula;
    mi_tensor *(*init)(const mi_miras_config *c, mi_tensor *w0);  /* A_0 from W_0 (NULL: A = W) */
    mi_tensor *(*read)(const mi_miras_config *c, mi_tensor *a);   /* W from A (NULL: W = A) */
    mi_tensor *(*boundary)(const mi_miras_config *c, mi_tensor *a);  /* NULL: none */
    bool uses_alpha;   /* false: α ≡ 1 (no forgetting) */
    bool lag_token;    /* the first token of each chunk runs alone (Memora, MIRAS §4.3) */
};

const mi_memory_kind *mi_memory_find(const char *name);
const mi_bias_kind *mi_bias_find(const char *name);
const mi_retention_kind *mi_retention_find(const char *name);
/* Enumeration for tools and tests; NULL past the end. */
const mi_memory_kind *mi_memory_at(int i);
const mi_bias_kind *mi_bias_at(int i);
const mi_retention_kind *mi_retention_at(int i);

/* ---------------------------------------------------------------- the memory */
typedef struct mi_miras {
    mi_miras_config config;
    const mi_memory_kind *memory;
    const mi_bias_kind *bias;
    const mi_retention_kind *retention;
    int algorithm;           /* MI_ALGO_* */
} mi_miras;

enum { MI_ALGO_GD, MI_ALGO_MOMENTUM, MI_ALGO_IMPLICIT, MI_ALGO_MULTISTEP };

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

/* ---------------------------------------------------------------- presets
 * A preset names the four components, the training form and how its gates
 * are parameterised (see presets.c for each one's update rule). */
typedef enum mi_gate_kind {
    MI_GATE_UNUSED = 0,
    MI_GATE_CONST,    /* a fixed value (e.g. η = 1 for linear attention) */
    MI_GATE_HEAD,     /* data-dependent, one value per head and token */
    MI_GATE_CHANNEL,  /* data-dependent, one value per channel */
} mi_gate_kind;

typedef struct mi_gate_spec {
    mi_gate_kind kind;
    double value;     /* CONST: the value; otherwise the initial level (see DESIGN §5) */
} mi_gate_spec;

typedef struct mi_preset {
    const char *name;
    const char *update;          /* the closed-form update rule, as in the papers */
    mi_miras_config config;
    mi_gate_spec eta, alpha, mu, delta;
    bool key_is_one_minus_alpha; /* HGRN2: k_t = 1 − α_t */
} mi_preset;

const mi_preset *mi_preset_find(const char *name);
const mi_preset *mi_preset_at(int i);

#endif
