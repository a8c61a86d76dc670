/* Installed as miras/models/components.h, for op and component authors: included by
 * miras/extend.h, not by miras.h. */
/* The component kinds of a MIRAS model (memory, attentional bias, retention
 * gate, learning algorithm): what a component file defines and the
 * recurrence calls, and the tables that hold them (components.c). For
 * authors of components (miras/extend.h); a user of the models needs only
 * models.h. */
#ifndef MIRAS_MODELS_COMPONENTS_H
#define MIRAS_MODELS_COMPONENTS_H

#include "models/models.h"
#include "tensor/fields.h"

/* A component's own parameters: a struct of the component's file, T, stored
 * in the config's block for its axis (mi_miras_config.bias_params or
 * retention_params), declared by a field table over T and read back by copying the block into a T:
 *
 *   typedef struct { double p, abs_eps; } lp_params;
 *   static const mi_field lp_fields[] = {
 *       MI_FIELD_REAL_AT(lp_params, "p", p, "3", 1, INFINITY, MI_FIELD_HI_OPEN, "the exponent"),
 *       …};
 *   const mi_bias_kind mi_bias_lp = {…, MI_PARAMS(lp_params, lp_fields)};
 *   … lp_params lp;
 *     memcpy(&lp, &c->bias_params, sizeof lp);
 *
 * The keys are set like the config's own once the component is chosen. */
#define MI_PARAMS(T, table)                                                                   \
    .params = (table), .n_params = MI_FIELDS_COUNT(table),                                   \
    .params_size = sizeof(T) + 0 * sizeof(char[sizeof(T) <= sizeof(mi_component_params) ? 1 : -1])

/* What a component computes, where a faster path than its own functions
 * exists for it: a promise, declared in the component's file, that its
 * functions compute this rule, so the recurrence may run the fused ops
 * (delta_scan, mlp_scan) or the exact chunk form in their place. OWN (0):
 * only the component's functions. A component registered with a rule is
 * taken at its word: it reaches the same paths a built-in with that rule does. */
typedef enum mi_memory_rule {
    MI_MEMORY_RULE_OWN = 0,
    MI_MEMORY_RULE_MATRIX, /* M_W(k) = W k, one weight W [dv, dk] (matrix): the delta
                              rule's memory (delta_scan, the exact chunk form, implicit
                              GD's closed form, alpha_on_keys) */
    MI_MEMORY_RULE_MLP,    /* M(x) = x + LN(W1 gelu(W2 x)) at config mlp_depth 2, the
                              weights as memory/mlp.c lays them out (mlp): mlp_scan's */
} mi_memory_rule;

typedef enum mi_bias_rule {
    MI_BIAS_RULE_OWN = 0,
    MI_BIAS_RULE_RESIDUAL, /* ℓ = ½‖y − v‖², e = y − v (l2): the delta rule */
    MI_BIAS_RULE_HEBBIAN,  /* ℓ = −⟨y, v⟩, e = −v (dot): the Hebbian write v kᵀ */
    MI_BIAS_RULE_YAAD,     /* Yaad's Huber-like error with keys sign_sharpness (yaad) */
    MI_BIAS_RULE_LP,       /* e = p s(e)^(p−2) ⊙ e, s = √(e² + ε), keys p, abs_eps (lp) */
} mi_bias_rule;

typedef enum mi_retention_rule {
    MI_RETENTION_RULE_OWN = 0,
    MI_RETENTION_RULE_DECAY, /* W = A, A_t = α_t A_{t−1} + step_t (α ≡ 1 without uses_alpha):
                                only scales the state (none, l2) */
    MI_RETENTION_RULE_LQ,    /* Moneta's W = A / ‖A‖^r with keys q, lq_form, lq_eps (lq);
                                the read divides by ‖A‖, so W_0 must not be zero */
    MI_RETENTION_RULE_KL,    /* W = c softmax(A) per row, A logits kept in the log domain
                                (kl): c is config kl_scale (kl_scale_learn, kl_scale_t)
                                and kl_init_sd draws W_0 as logits */
} mi_retention_rule;

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
    /* Whether channel-wise gates can scale this memory's weights: one entry per
     * output unit (row) of each weight, in the weights' order ([N, T, dv] for
     * the vector and matrix memories, [N, T, dv + (depth − 1)·h] for the MLP). */
    bool channel_gates;
    /* Optional, for encoding objectives (a bias with .encoding): z = E_W(x),
     * the memory read the other way, x [N, n, dv] → [N, n, dk] (Lattice Eq. 6:
     * φ(S)ᵀ v), and its closed-form per-token gradients g[i] = ∂ℓ_t/∂W[i]
     * given e = dℓ/dz [N, n, dk] (encode_grad NULL: autodiff). */
    mi_tensor *(*encode)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x);
    int (*encode_grad)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                       mi_tensor **g);
    /* Optional, for memories of matrices whose per-token gradients are rank
     * one, ∂ℓ_t/∂W[i] = δ_i,t x_i,tᵀ (W[i] [out, in]): grad_factors writes
     * delta[i] [N, n, out] and x[i] [N, n, in] in place of their outer
     * products, and forward_linear is forward with every weight's product
     * W[i] u given by lin(ctx, i, u) (u [N, n, in] → [N, n, out]). With both,
     * the chunked recurrence reads the chunk without a copy of W per token. */
    int (*grad_factors)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                        mi_tensor **delta, mi_tensor **xs);
    /* Optional, with grad_factors: the same factors for an error that is a
     * function of the read, e = err(ctx, M_W(x)), from one forward pass
     * where forward then grad_factors run two (the per-token rule reads and
     * differentiates every token). */
    int (*grad_factors_of)(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x,
                           mi_tensor *(*err)(void *ctx, mi_tensor *y), void *ctx,
                           mi_tensor **delta, mi_tensor **xs);
    mi_tensor *(*forward_linear)(const mi_miras_config *c,
                                 mi_tensor *(*lin)(void *ctx, int i, mi_tensor *u), void *ctx,
                                 mi_tensor *x);
    mi_memory_rule rule;
    /* Keys and queries are config slots wide (dk = m, lattice): a layer block
     * sets slots to its head dimension unless the user set it. */
    bool keys_are_slots;
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
    mi_bias_rule rule;
    /* its own parameters in config.bias_params (MI_PARAMS; none: NULL, 0) */
    const mi_field *params;
    int n_params;
    size_t params_size;
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
    /* W from A (read NULL: W = A) and the boundary projection (NULL: none).
     * Both take eta, the step size η of the position that wrote A last
     * (Longhorn's η/(1 + η‖k‖²) for implicit GD), shaped to scale A
     * ([N, n, 1, …] or channel-wise [N, n, dv, 1, …]), or NULL for a state
     * nothing was written to (A_0): the ℓ1 threshold λ η_t needs it. */
    mi_tensor *(*read)(const mi_miras_config *c, mi_tensor *a, mi_tensor *eta);
    mi_tensor *(*boundary)(const mi_miras_config *c, mi_tensor *a, mi_tensor *eta);
    /* When the read only scales each whole weight, W = s(‖A‖_F²)·A (NULL, or
     * false for this config: it does not): s from the squared Frobenius norm
     * [N, n, 1] of each token's state. A chunk then reads its tokens from the
     * gradients' rank-one factors without one copy of W per token. */
    bool (*read_is_scale)(const mi_miras_config *c);
    mi_tensor *(*read_scale)(const mi_miras_config *c, mi_tensor *sq_norm);
    /* For a write that is not linear in the state (the f-divergence gate,
     * W_t = W_{t-1} ⊙ g(…)): inside a segment of tokens that take their
     * gradients at one state A_0 (a chunk, or the lag token), the state is
     * A_t = ᾱ_t ⊙ A_0 + U_t, ᾱ_t = Π α since A_0 and U_t what the segment
     * wrote. read_split and boundary_split (both or neither) take the
     * carried part ᾱ_t ⊙ A_0 and A_t, and replace read and boundary there;
     * read still gives W from a state with nothing written (U = 0). */
    mi_tensor *(*read_split)(const mi_miras_config *c, mi_tensor *carried, mi_tensor *a);
    mi_tensor *(*boundary_split)(const mi_miras_config *c, mi_tensor *carried, mi_tensor *a);
    bool uses_alpha;   /* false: α ≡ 1 (no forgetting) */
    bool lag_token;    /* each chunk's first token runs alone (MIRAS "Parallelizable Training") */
    mi_retention_rule rule;
    /* its own parameters in config.retention_params (MI_PARAMS; none: NULL, 0) */
    const mi_field *params;
    int n_params;
    size_t params_size;
};

/* The learning algorithm (MIRAS §"MIRAS", the choice "Memory Algorithm"): how a write
 * turns the inner gradient ∇ℓ into a step on the state A,
 *   A_t = α_t A_{t−1} − η'_t ∇ℓ                      (gd; η' = rate(η, k))
 *   S_t = μ_t S_{t−1} − η_t ∇ℓ,  A_t = α_t A_{t−1} + S_t   (uses_mu: momentum)
 * and how many writes a token makes (multistep: config steps). */
struct mi_algorithm_kind {
    const char *name;
    const char *formula;
    bool uses_mu;     /* a momentum state and its gate μ */
    bool multistep;   /* config.steps writes per token, each a key-value pair */
    /* η' of the step from η [N, n(, D)] and the keys k [N, n, dk] (implicit
     * GD's η/(1 + η‖k‖²)); NULL: η itself */
    mi_tensor *(*rate)(mi_tensor *eta, mi_tensor *k);
    /* the components it needs, or NULL: a message when m's do not fit */
    const char *(*check)(const mi_miras *m);
    bool delta_rule;  /* on a matrix memory with the ℓ2 bias the write is the delta
                         rule with β = η' (its exact chunk form and fused scan); the
                         step itself is given by uses_mu, multistep and rate alone, so
                         rate NULL and one write per token is mlp_scan's gd (momentum
                         with uses_mu) */
    bool factored;    /* a chunk's writes from the gradients' rank-one factors */
};

/* The ℓ1 retentions' soft threshold S_τ(x) = sign(x) max(|x| − τ, 0), with τ
 * = l1_gamma · eta for MI_L1_SCALED (eta as read's; NULL: τ = 0) or l1_gamma
 * for MI_L1_CONSTANT (retention/l1.c). */
mi_tensor *mi_l1_prox(const mi_miras_config *c, mi_tensor *x, mi_tensor *eta);
/* The ℓ1 retentions' parameters, shared by l1, elastic and elastic-ftrl
 * (retention/l1.c): the weight λ (l1_gamma) and the threshold's form
 * (l1_threshold: MI_L1_SCALED, λ η_t, or MI_L1_CONSTANT, λ). */
typedef struct mi_l1_params {
    double gamma;
    int threshold;
} mi_l1_params;
extern const mi_field mi_l1_fields[2];
mi_l1_params mi_l1_params_of(const mi_miras_config *c);

/* ---------------------------------------------------------------- registration
 * A user's program adds its own components and presets by name; they are then
 * found wherever a built-in is (mi_miras_config_set's "bias=NAME", the layer
 * block's presets, the tools' --keys and --set). The built-ins go into the
 * same tables through the same checks, on the first use of a table.
 *
 * The kind (or preset) is not copied: it, its name and every string and
 * table it points to must stay valid until mi_registry_reset, as a static
 * const struct does. Names are unique within an axis (a bias and a
 * retention may share one, as l2 does). Each returns 0, or -1 with a message
 * (mi_error): no name, a name taken, a missing function (a memory needs
 * shapes, init and forward, a bias loss, and a rule its closed form), a
 * preset whose config does not parse; nothing is added on error.
 * The tables grow as needed (no fixed cap).
 *
 * Threads: registration, look-up and reset hold a lock, so they may be called
 * from any thread; but register before building models, and reset only when no
 * model or config made since the registration is used again (their kinds and
 * names would dangle). */
int mi_register_memory(const mi_memory_kind *kind);
int mi_register_bias(const mi_bias_kind *kind);
int mi_register_retention(const mi_retention_kind *kind);
int mi_register_algorithm(const mi_algorithm_kind *kind);
/* A preset: its name, its components as KEY=VALUE assignments (config, as the
 * built-ins' in presets.c: "memory=mlp bias=l2 retention=l2 algorithm=gd"),
 * its gates (an unset gate, MI_GATE_UNUSED, takes the layer block's default
 * for the components) and the block's options. The config must parse now:
 * register its components first. */
int mi_register_preset(const mi_preset *preset);
/* Drops every registration and frees the tables, then closes the plugins
 * (below); the built-ins, and the plugins of MIRAS_PLUGINS, come back at the
 * next use. For tests, and for a program that wants the memory back: until
 * then the tables stay reachable (LeakSanitizer does not count them). */
void mi_registry_reset(void);

/* ---------------------------------------------------------------- plugins
 * A plugin is a shared object that registers components for programs built
 * without them (the miras-* tools): it defines mi_plugin_init, which calls
 * the mi_register_* functions above and returns 0, or -1 with a message:
 *
 *   int mi_plugin_init(void) { return mi_register_bias(&my_bias); }
 *   cc -shared -fPIC my_bias.c -o libmy_bias.so $(pkg-config --cflags --libs miras)
 *
 * mi_plugin_load(path) opens it (dlopen: a path with a '/' is a file, a bare
 * name is searched as the dynamic linker does) and calls its mi_plugin_init;
 * an object already loaded is not initialised twice. 0, or -1 with a message
 * naming the path and the dynamic linker's reason (no file, a missing
 * symbol, no mi_plugin_init) or the init's own message; what a failed init
 * registered is dropped again and the object is closed.
 *
 * MIRAS_PLUGINS=a.so:b.so (':'-separated, loaded in order) is read at the
 * registry's first use (any mi_register_*, *_find, *_at, preset look-up), so
 * every program finds the plugins' components with no change of its own. A
 * look-up has no error to return: when a plugin of the list fails to load
 * there, the message ("miras: warning: MIRAS_PLUGINS: plugin 'a.so': cannot
 * load: …") goes to stderr and the registry goes on with what loaded. A
 * program that wants that failure as a value calls mi_plugin_load_env first
 * (the driver programs do, and exit 1 with the message): it reads the list
 * (once; later calls return the first outcome and message).
 *
 * The objects stay open until mi_registry_reset, which closes them after
 * dropping every registration that points into them. */
#define MI_PLUGIN_EXPORT __attribute__((visibility("default")))
MI_PLUGIN_EXPORT int mi_plugin_init(void);  /* defined by a plugin, not by the library */
int mi_plugin_load(const char *path);
int mi_plugin_load_env(void);

const mi_memory_kind *mi_memory_find(const char *name);
const mi_bias_kind *mi_bias_find(const char *name);
const mi_retention_kind *mi_retention_find(const char *name);
const mi_algorithm_kind *mi_algorithm_find(const char *name);
/* Enumeration for tools and tests; NULL past the end. */
const mi_memory_kind *mi_memory_at(int i);
const mi_bias_kind *mi_bias_at(int i);
const mi_retention_kind *mi_retention_at(int i);
const mi_algorithm_kind *mi_algorithm_at(int i);

#endif
