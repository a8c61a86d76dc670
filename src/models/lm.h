/* Installed as miras/models/lm.h, for users: included by miras.h (through models/models.h). */
/* miras language models: sequence mixers (the MIRAS block and the attention
 * baselines behind one interface) and the Llama-like backbone around them.
 * Included from models/models.h; the design follows the MIRAS paper's
 * "Architecture Backbone and Fast Training" / "Hybrid Models" (Samba, Ren et
 * al. 2024).
 *
 *   mixer.c          the mixer interface's factory: a table of kinds by name
 *   mixer_miras.c    a MIRAS preset as a mixer (the layer block of models.h)
 *   attention.c      causal softmax attention with RoPE, and its sliding-window form
 *   samba.c          the Samba-style hybrid: MIRAS block, then SWA
 *   lm.c             embeddings, N blocks, final norm, LM head, cross-entropy
 *   lm_config.c      the model configuration, text assignments, checkpoint metadata */
#ifndef MIRAS_LM_H
#define MIRAS_LM_H

#include "ops/ops.h"

/* ---------------------------------------------------------------- mixers
 * A mixer maps x [B, T, d_model] → [B, T, d_model], causally (output t
 * depends on inputs ≤ t only), in the current scope, recorded.
 *
 * residual_inside false (every kind but hybrids): the backbone calls
 * forward on RMSNorm(h) ⊙ g and adds the result to the residual stream h.
 * residual_inside true (samba): forward receives the residual stream h
 * itself and returns it updated; the mixer holds its own pre-norms and
 * residual additions (several sub-layers in one backbone block). */
typedef struct mi_mixer {
    const char *name;  /* the spec it was made from ("swa:64", "samba:titans", …) */
    void *self;
    mi_tensor *(*forward)(const void *self, mi_tensor *x);
    /* Its parameters as (name, tensor) pairs, names relative to the mixer
     * ("q_proj", "miras.q_proj", …), in a fixed order; *count set. */
    const mi_named_tensor *(*params)(const void *self, int *count);
    bool residual_inside;
    /* The recurrent form, one token at a time (NULL: the kind has none).
     * state_new makes the state of `batch` sequences: the struct in `scope`,
     * its first tensors in the current scope. step maps x [B, 1, d_model] to
     * the mixer's output at the next position (as forward would give it)
     * and advances the state, writing its new tensors in the current scope.
     * state_tensors lists where the state's tensor pointers live, so a
     * caller keeps them alive between steps (mi_lm_step copies them from
     * scope to scope); the count, or -1 when max is too small. A state
     * that grows with the tokens (attention's KV cache) lists nothing of
     * it: it keeps it in `scope` and writes it in place. */
    void *(*state_new)(const void *self, int64_t batch, mi_scope *scope);
    mi_tensor *(*step)(const void *self, void *state, mi_tensor *x);
    int (*state_tensors)(void *state, mi_tensor **slots[], int max);
    /* Optional (NULL: nothing grows): makes room for `tokens` tokens in all,
     * so a state that grows (a KV cache) allocates once. 0 or -1. */
    int (*state_reserve)(const void *self, void *state, int64_t tokens);
    /* The block's feed-forward, when the mixer brings its own (NULL: the
     * backbone's SwiGLU MLP). ffn receives the residual stream after the
     * mixer and returns it updated, holding its own pre-norms and residual
     * additions (HOPE's continuum memory system, Nested Learning §3);
     * ffn_params lists its parameters, named relative to the block
     * ("cms.0.w1"); ffn_step is its one-token form on the mixer's state
     * (NULL: none), after step has advanced it. */
    mi_tensor *(*ffn)(const void *self, mi_tensor *h);
    const mi_named_tensor *(*ffn_params)(const void *self, int *count);
    mi_tensor *(*ffn_step)(const void *self, void *state, mi_tensor *h);
} mi_mixer;

/* What every kind may read when it is made. */
typedef struct mi_mixer_options {
    int64_t d_model, heads;    /* head_dim = d_model / heads */
    int64_t window;            /* swa, samba: the window when the spec names none (64) */
    double rope_base;          /* attention, swa: RoPE's base (10000) */
    double out_scale;          /* output projections ~ N(0, out_scale² / fan_in) (1) */
    double norm_eps;           /* RMSNorms inside a mixer (samba's pre-norms) (1e-6) */
    /* MIRAS presets and samba's MIRAS part: "key=value" overrides, applied
     * in order on top of the preset (see mi_mixer_create); other kinds
     * reject overrides. */
    const char *const *overrides;
    int n_overrides;
} mi_mixer_options;

mi_mixer_options mi_mixer_options_default(int64_t d_model, int64_t heads);

/* Makes a mixer from its spec, its parameters in `scope` (dtype MI_F32 or
 * MI_F64, drawn from rng), the mixer's own state in `scope` too:
 *   <preset>               a MIRAS preset (mi_preset_at) as the layer block of models.h
 *   attention              causal softmax attention, RoPE on q and k
 *   swa | swa:<W>          sliding-window attention, each token sees itself and W − 1 before
 *   samba:<preset>[:<W>]   the hybrid: MIRAS block, then SWA, each a pre-norm residual sub-layer
 * Overrides of a MIRAS block: any mi_miras_config_set key ("bias=huber",
 * "memory.depth=3", "chunk=16"); the block's gate_rank, conv_kernel,
 * qk_eps; a gate's initial level "eta=0.5" (also alpha, mu, delta), or its
 * kind and level "eta=head:0.5", "alpha=channel:0.9", "eta=const:1".
 * Component overrides come first: a gate the new components need and the
 * preset left UNUSED gets mi_miras_block_config_default's spec; then the
 * block and gate keys apply. 0, or -1 with a message naming the spec. */
int mi_mixer_create(mi_mixer *out, const char *spec, const mi_mixer_options *opt, mi_dtype dt,
                    mi_rng *rng, mi_scope *scope);

/* The factory's table: one row per kind. A spec matches a row when it
 * equals the row's name (arg NULL) or starts with "name:" (arg = the rest).
 * Adding a kind is one row in mixer.c plus its create function (declared
 * in models/layers/mixer_internal.h, not installed). */
typedef int (*mi_mixer_create_fn)(mi_mixer *out, const char *spec, const char *arg,
                                  const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng,
                                  mi_scope *scope);
typedef struct mi_mixer_kind {
    const char *name;   /* NULL: the row of the MIRAS presets (matched by preset name) */
    const char *usage;  /* "swa[:W]" */
    mi_mixer_create_fn create;
    /* Whether the mixer these options make brings the block's feed-forward
     * (mi_mixer.ffn), known before it is made: 1, 0, or -1 with a message
     * (bad overrides). NULL: never. */
    int (*own_ffn)(const char *arg, const mi_mixer_options *opt);
    /* Whether arg (the text after "name:", NULL when there is none) is one this
     * kind takes: 0, or -1 with a message. NULL: the kind takes no argument. */
    int (*check_arg)(const char *arg);
    /* The field table of its overrides (mixer.KEY): HOPE's mi_hope_config_fields, the
     * presets' mi_miras_config_fields (their block and gate keys, which they also take, are
     * tables of their own). NULL: none. */
    const mi_field *(*fields)(int *count);
} mi_mixer_kind;
const mi_mixer_kind *mi_mixer_kind_at(int i); /* enumeration; NULL past the end */
/* Whether `key` is a top-level key of the field table of the kind a spec names (a MIRAS
 * preset's "chunk", HOPE's "memory_chunk"): 1 or 0; -1 with a message when no kind or
 * preset has the spec's name. */
int mi_mixer_has_key(const char *spec, const char *key);
/* Whether a spec names a mixer this library makes, without making it: 1; 0
 * when no kind or preset has its name (a message lists the known ones); -1
 * when a kind has the name but not the argument (a message says why). */
int mi_mixer_spec_check(const char *spec);
/* The kind's own_ffn for a spec: 1, 0, or -1 with a message (unknown spec). */
int mi_mixer_own_ffn(const char *spec, const mi_mixer_options *opt);
/* A window from a spec's argument ("64"), or `fallback` when arg is NULL:
 * a whole number >= 1, else -1 with a message. */
int64_t mi_mixer_window_arg(const char *arg, int64_t fallback);

/* ---------------------------------------------------------------- attention
 * Multi-head softmax attention (attention.c), x [B, T, D] →
 *   q, k, v = x W_q, x W_k, x W_v   per head [B, H, T, hd]
 *   q, k    = RoPE(q), RoPE(k)      (mi_rope: pairs (i, i + hd/2), position t from 0)
 *   o       = softmax(q kᵀ/√hd + mask) v, causal; window W > 0 also masks s ≤ t − W
 *   y       = concat_h(o) W_out */
typedef struct mi_attention_layer {
    int64_t d_model, heads, head_dim, window; /* window 0: full causal attention */
    double rope_base;
    mi_tensor *w_q, *w_k, *w_v;  /* [D, H·hd] */
    mi_tensor *w_out;            /* [H·hd, D] */
    mi_named_tensor params[4];   /* q_proj, k_proj, v_proj, out_proj */
} mi_attention_layer;

/* W_q, W_k, W_v ~ N(0, 1/D), W_out ~ N(0, out_scale²/D), in that order from
 * rng. head_dim = D / heads must be even (RoPE rotates pairs). 0 or -1. */
int mi_attention_layer_init(mi_attention_layer *a, int64_t d_model, int64_t heads,
                            int64_t window, double rope_base, double out_scale, mi_dtype dt,
                            mi_rng *rng, mi_scope *scope);
mi_tensor *mi_attention_layer_forward(const mi_attention_layer *a, mi_tensor *x);

/* One token at a time: a KV cache of the keys (RoPE applied) and values so
 * far, written in place. Full attention keeps position p in row p and
 * doubles its rows when they run out; a window W keeps a ring of W rows
 * (row p mod W): SWA's state has a constant size. A step costs O(rows) (the
 * dot products with the cached keys), RoPE at the new position only. The
 * cache is values: a step's output has no gradient path to it (as every
 * mixer's state between steps, mi_lm_step). */
typedef struct mi_attention_state {
    int64_t t;          /* tokens seen: the next token's RoPE position */
    int64_t batch;      /* B */
    int64_t rows;       /* rows of the cache per (b, h); 0 before the first token */
    mi_tensor *k, *v;   /* [B, H, rows, hd], NULL before the first token */
    double *inv_freq;   /* [hd/2]: RoPE's base^(−2i/hd) */
    mi_scope *scope;    /* holds the cache (and inv_freq); freed with it */
} mi_attention_state;
/* An empty state of `batch` sequences whose cache lives in `scope`. 0 or -1. */
int mi_attention_state_init(const mi_attention_layer *a, mi_attention_state *st, int64_t batch,
                            mi_scope *scope);
/* Rows for `tokens` tokens in all (at most W with a window), allocated now
 * instead of by doubling. 0 or -1. */
int mi_attention_state_reserve(const mi_attention_layer *a, mi_attention_state *st,
                               int64_t tokens);
/* x [B, 1, D] → [B, 1, D], the layer's output at position t; advances st. */
mi_tensor *mi_attention_layer_step(const mi_attention_layer *a, mi_attention_state *st,
                                   mi_tensor *x);

/* ---------------------------------------------------------------- the language model
 * lm.c, x_0 = E[tokens] and for each block l (Llama's macro architecture,
 * MIRAS "Architectural Backbone"):
 *   h   = x_l + mixer_l(RMSNorm(x_l) ⊙ g_l)              (residual_inside: h = mixer_l(x_l))
 *   x_l+1 = h + (SiLU(u W_gate) ⊙ (u W_up)) W_down,  u = RMSNorm(h) ⊙ g'_l
 *           (a mixer with its own feed-forward, mi_mixer.ffn: x_l+1 = ffn_l(h))
 *   logits = (RMSNorm(x_N) ⊙ g_f) Eᵀ  (tied) or … W_head (untied)
 * Loss: cross-entropy averaged over the targets ≠ MI_LM_IGNORE. */
#define MI_LM_IGNORE (-100)
#define MI_LM_TEXT 64           /* room for a mixer spec or one override, with its NUL */
#define MI_LM_MAX_OVERRIDES 16

typedef struct mi_lm_config {
    int64_t vocab;         /* 256: bytes */
    int64_t d_model;       /* 128 */
    int layers;            /* 4 */
    int64_t heads;         /* 4 */
    int64_t mlp_hidden;    /* SwiGLU hidden width; 0: 3·d_model (384 at d_model 128, BENCH) */
    bool tie_embeddings;   /* true: the LM head is Eᵀ */
    double norm_eps;       /* every RMSNorm (1e-6) */
    double rope_base;      /* attention and SWA (10000) */
    int64_t window;        /* SWA and samba when the spec names none (64) */
    char mixer[MI_LM_TEXT];                        /* a mixer spec ("gated-deltanet") */
    int n_overrides;                               /* MIRAS overrides, "key=value" */
    char overrides[MI_LM_MAX_OVERRIDES][MI_LM_TEXT];
} mi_lm_config;

mi_lm_config mi_lm_config_default(void);
/* Sets one field from text: "vocab=256", "d_model=128", "layers=4",
 * "heads=4", "mlp_hidden=384", "tie_embeddings=true", "norm_eps=1e-6",
 * "rope_base=10000", "window=64", "mixer=samba:titans"; "mixer.KEY=VALUE"
 * adds the override "KEY=VALUE" (replacing one with the same KEY). 0 or -1. */
int mi_lm_config_set(mi_lm_config *c, const char *assignment);
/* Range checks that need no mixer: sizes ≥ 1, heads dividing d_model, … */
int mi_lm_config_check(const mi_lm_config *c);
/* The model's keys (without "mixer."): name, default, range, doc. */
const mi_field *mi_lm_config_fields(int *count);
/* The config as the string map of a safetensors __metadata__: keys "lm.*"
 * (lm.format, lm.vocab, …, lm.mixer, lm.mixer_overrides: the overrides
 * joined by ','). Arrays and strings go to the current scope. 0 or -1. */
int mi_lm_config_to_metadata(const mi_lm_config *c, mi_metadata *out);
/* The reverse. Keys not starting "lm." are ignored (optimizer state, step,
 * …); every key to_metadata writes must be present, an unknown "lm.*" key
 * or a bad value is an error naming it. *c is changed only on success. */
int mi_lm_config_from_metadata(mi_lm_config *c, const mi_metadata *m);

typedef struct mi_lm_block {
    mi_mixer mixer;
    mi_tensor *mixer_norm;             /* [D], NULL when mixer.residual_inside */
    /* the SwiGLU MLP; all NULL when the mixer brings the feed-forward (mixer.ffn) */
    mi_tensor *mlp_norm;               /* [D] */
    mi_tensor *w_gate, *w_up, *w_down; /* [D, F], [D, F], [F, D] */
} mi_lm_block;

typedef struct mi_lm {
    mi_lm_config config;
    mi_dtype dtype;
    int64_t mlp_hidden;     /* resolved */
    mi_tensor *embeddings;  /* [V, D] */
    mi_lm_block *blocks;    /* config.layers of them, in the parameters' scope */
    mi_tensor *final_norm;  /* [D] */
    mi_tensor *lm_head;     /* [D, V]; NULL when tied */
    int n_params;
    mi_named_tensor *params;
    /* Recompute each block in the backward instead of keeping its
     * activations (mi_checkpoint): a training step keeps the blocks' inputs
     * and one block's activations at a time, and runs every block's forward
     * twice. The same gradients. Default false; set it after mi_lm_init. */
    bool checkpoint_blocks;
} mi_lm;

/* Checks the config, makes every block's mixer and the parameters in
 * `scope` (f32 or f64) from an rng seeded with `seed`; lm.c documents the
 * initialisation. 0, or -1 with a message. */
int mi_lm_init(mi_lm *lm, const mi_lm_config *cfg, mi_dtype dt, uint64_t seed, mi_scope *scope);
/* Every parameter by its full name ("embeddings.weight",
 * "blocks.0.mixer.q_proj", "blocks.0.mlp.w_gate", …), in a fixed order. */
const mi_named_tensor *mi_lm_params(const mi_lm *lm, int *count);
int64_t mi_lm_param_numel(const mi_lm *lm);
/* The parameters mi_lm_init makes outside the mixers and their norms (the
 * embeddings, every block's MLP and its norm unless the mixer brings the
 * feed-forward, the final norm, an untied head), from the config alone: a
 * lower bound of the model's size that a loader compares with the tensors a
 * file holds before it allocates any. -1 with a message when the config
 * does not check. */
int64_t mi_lm_backbone_numel(const mi_lm_config *cfg);
/* tokens [B, T] (i32 or i64, in [0, vocab)) → logits [B, T, vocab]. */
mi_tensor *mi_lm_forward(const mi_lm *lm, mi_tensor *tokens);
/* Mean cross-entropy of the next-token logits against targets [B, T]
 * (entries MI_LM_IGNORE do not count; all ignored gives 0): a scalar. */
mi_tensor *mi_lm_loss(const mi_lm *lm, mi_tensor *tokens, mi_tensor *targets);

/* ---------------------------------------------------------------- one token at a time
 * Generation with the recurrent form (lm_step.c): each mixer carries its
 * state (a MIRAS block its memory and conv inputs, attention its keys and
 * values), so a MIRAS model needs constant memory per token. The state lives
 * in two scopes of its own; every step copies it from one to the other and
 * resets the first, except attention's KV cache, written in place (a step of
 * full attention costs O(tokens so far), of SWA O(W)). mi_lm_step's logits equal mi_lm_forward's at the same
 * position (exactly the same math; see mi_miras_step for chunk sizes > 1). */
typedef struct mi_lm_state mi_lm_state;

/* The state before the first token of `batch` sequences; NULL with a
 * message when a mixer has no recurrent form. */
mi_lm_state *mi_lm_state_new(const mi_lm *lm, int64_t batch);
void mi_lm_state_free(mi_lm_state *s);
int64_t mi_lm_state_tokens(const mi_lm_state *s); /* tokens consumed so far */
size_t mi_lm_state_bytes(const mi_lm_state *s);   /* the state's storage, caches included */
/* Room for `tokens` tokens in all (the prompt and what will be generated):
 * a growing state (attention's KV cache) allocates it at once instead of
 * doubling on the way. Optional; 0 or -1. */
int mi_lm_state_reserve(const mi_lm *lm, mi_lm_state *s, int64_t tokens);
/* tokens [B] (i32/i64) → the next-token logits [B, vocab] in the current
 * scope; the state advances by one token. */
mi_tensor *mi_lm_step(const mi_lm *lm, mi_lm_state *s, mi_tensor *tokens);

#endif
