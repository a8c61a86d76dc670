/* Installed as miras/optim/optim.h, for users: included by miras.h. */
/* miras optim layer: outer optimizers written with the framework's ops.
 *
 * Every update is a composition of registered ops (mi_mul, mi_add, mi_sqrt,
 * mi_matmul_t, …). With recording off (mi_optim_step, the normal case) the
 * result is copied into the parameter's storage and into state tensors that
 * live in the optimizer's own long-lived scope, so a step allocates nothing
 * permanent. With recording on, the functional form (mi_optim_step_functional,
 * mi_sgd_step_functional) returns new, recorded parameter tensors, so k steps
 * can be differentiated with respect to hyperparameters held as rank-0
 * tensors (learning rate, momentum, betas, weight decay): hypergradients.
 *
 * Nested Learning (§2.3) reads each optimizer as an associative
 * memory over gradients; its extensions (Eq. 20, 21–22, 23, 24, 28–29) are
 * kinds here like any other. The update equations and defaults of every kind
 * are tabled in docs/optimizers.md.
 *
 * Errors follow the framework: a failing call returns NULL or -1 and leaves a
 * message in mi_error() ("adamw: beta2 must be in [0, 1), got 1 (group 0)"). */
#ifndef MIRAS_OPTIM_H
#define MIRAS_OPTIM_H

#include "ops/ops.h"

/* ---------------------------------------------------------------- kinds */
typedef enum mi_optim_kind {
    MI_OPT_SGD = 0,              /* SGD, momentum, dampening, Nesterov (torch.optim.SGD) */
    MI_OPT_ADAM = 1,             /* Adam with L2 weight decay (torch.optim.Adam) */
    MI_OPT_ADAMW = 2,            /* AdamW, decoupled weight decay (torch.optim.AdamW) */
    MI_OPT_MUON = 3,             /* momentum + Newton–Schulz; AdamW for non-matrices */
    MI_OPT_PRECOND_MOMENTUM = 4, /* NL Eq. 20: momentum of a preconditioned gradient */
    MI_OPT_DELTA_MOMENTUM = 5,   /* NL Eq. 21–22: delta-rule momentum */
    MI_OPT_DEEP_MOMENTUM = 6,    /* NL Eq. 23 (DMGD), Eq. 24 with output = NEWTON_SCHULZ */
    MI_OPT_L2_GD = 7,            /* NL Eq. 28–29: ℓ2-regression gradient descent */
    MI_OPT_KIND_COUNT = 8
} mi_optim_kind;

const char *mi_optim_kind_name(mi_optim_kind kind); /* "sgd", "adamw", "deep_momentum", … */
/* The kind with that name; -1 with a message listing the names otherwise. */
int mi_optim_kind_from_name(const char *name);

/* Deep momentum's output non-linearity σ (Eq. 24). */
typedef enum mi_nl_output {
    MI_NL_OUT_IDENTITY = 0,      /* Eq. 23 */
    MI_NL_OUT_NEWTON_SCHULZ = 1, /* Eq. 24 with σ = Newton–Schulz (matrices; others identity) */
} mi_nl_output;

/* Which form of Eq. 22 (delta_momentum) and Eq. 23 (deep_momentum) a group
 * takes (nl_momentum.c and nl_deep.c write both out). */
typedef enum mi_nl_form {
    MI_NL_FORM_PAPER = 0,      /* the equations on the raw gradient (the default; Eq. 22's
                                  Gram matrix on the right of m: nl_momentum.c) */
    MI_NL_FORM_NORMALISED = 1, /* the earlier forms on ℓ2/rms-normalised gradients */
} mi_nl_form;

/* ---------------------------------------------------------------- hyperparameters
 * One struct for every kind; each kind reads the fields it documents and
 * mi_optim_defaults(kind) fills them with that kind's defaults. */
typedef struct mi_optim_hparams {
    double lr;           /* learning rate, ≥ 0 (scaled by mi_optim_set_lr_scale) */
    double weight_decay; /* ≥ 0; L2 (added to the gradient) except AdamW/Muon: decoupled */
    double momentum;     /* SGD μ; Muon β; Nested Learning α (the memory's retention) */
    double dampening;    /* SGD */
    bool nesterov;       /* SGD, Muon */
    double beta1, beta2; /* Adam/AdamW and Muon's AdamW fallback; β2: Eq. 20's average */
    double eps;          /* Adam denominators, Eq. 20's preconditioner, normalisations */
    /* Muon */
    int ns_steps;        /* Newton–Schulz iterations (5) */
    double aux_lr;       /* learning rate of the AdamW fallback for non-matrix parameters */
    bool adamw_only;     /* this group takes the AdamW fallback even for matrices */
    /* Nested Learning */
    bool precond;        /* P_i = diag(1/(√v_i + eps)) in Eq. 20 / 22 (else P_i = I) */
    double delta;        /* Eq. 22's strength β of ∇Lᵀ∇L; Eq. 28's strength β of x̂x̂ᵀ */
    int mem_hidden;      /* Eq. 23: width of the momentum memory's MLP (0 = linear memory) */
    double mem_lr;       /* Eq. 23: the MLP memory's inner learning rate η_φ (2; the
                            normalised form was tuned at 0.01) */
    mi_nl_output output; /* Eq. 23 (identity) or Eq. 24 (Newton–Schulz) */
    uint64_t seed;       /* Eq. 23: initial key projection of the MLP memory */
    mi_nl_form nl_form;  /* Eq. 22, 23: PAPER (default) or NORMALISED */
} mi_optim_hparams;

mi_optim_hparams mi_optim_defaults(mi_optim_kind kind);

/* ---------------------------------------------------------------- optimizer */
typedef struct mi_optim mi_optim;

/* A parameter group (torch's param_groups): its own hyperparameters, and an
 * optional weight-decay mask (decay[i] false: parameter i takes no weight
 * decay; NULL: all decay). Parameters must be float leaves; gradients are
 * read from param->grad (mi_backward fills it). */
typedef struct mi_param_group {
    mi_tensor *const *params;
    int n;
    mi_optim_hparams hp;
    const bool *decay;
} mi_param_group;

/* Validates every group (lr ≥ 0, betas in [0, 1), …) and copies the lists.
 * State is created lazily, on a parameter's first step, in the optimizer's
 * own scope. NULL with a message on bad arguments. */
mi_optim *mi_optim_new(mi_optim_kind kind, const mi_param_group *groups, int n_groups);
/* One group; hp NULL = mi_optim_defaults(kind). */
mi_optim *mi_optim_new_simple(mi_optim_kind kind, mi_tensor *const *params, int n,
                              const mi_optim_hparams *hp);
void mi_optim_free(mi_optim *o);

/* The rule "no decay on norms and biases": decay[i] = rank(params[i]) ≥ 2. */
void mi_decay_mask_matrices(mi_tensor *const *params, int n, bool *decay);

/* Updates every parameter that has a gradient, in place (recording is off
 * during the step). Temporaries live in a scratch scope of the optimizer,
 * reset after each parameter. 0 or -1. */
int mi_optim_step(mi_optim *o);
/* Zeroes param->grad of every parameter (mi_zero_grad). */
void mi_optim_zero_grad(mi_optim *o);

int mi_optim_kind_of(const mi_optim *o);
int mi_optim_group_count(const mi_optim *o);
int mi_optim_param_count(const mi_optim *o); /* over all groups, in group order */
mi_tensor *mi_optim_param(const mi_optim *o, int i);
/* The group's hyperparameters, editable between steps (checked again at the
 * next step); NULL when out of range. Fields that decide which state a
 * parameter keeps (adamw_only, precond, mem_hidden, nl_form) must not change once
 * the state exists. */
mi_optim_hparams *mi_optim_group_hparams(mi_optim *o, int group);
/* Effective lr = group lr × scale (what a schedule sets). */
int mi_optim_set_lr_scale(mi_optim *o, double scale);
double mi_optim_lr_scale(const mi_optim *o);
/* Steps taken (by the most-stepped parameter; per parameter below). */
int64_t mi_optim_steps(const mi_optim *o);
int64_t mi_optim_param_steps(const mi_optim *o, int i);
/* A state tensor of parameter i by name ("exp_avg", …); NULL if it has none. */
mi_tensor *mi_optim_state(const mi_optim *o, int i, const char *name);

/* ℓ2-regression GD (Eq. 28–29) needs the inputs x_t that parameter i (a
 * matrix W [out, in], y = W x) saw this step: x [in] or a batch [B, in]. They
 * are used by the next step only, then forgotten; parameters without inputs
 * take the plain GD step (Eq. 25). The tensor must outlive that step. */
int mi_optim_set_inputs(mi_optim *o, int i, mi_tensor *x);

/* ---------------------------------------------------------------- state I/O
 * The state is a list of named tensors "opt.<param>.<state>" (e.g.
 * "opt.3.exp_avg") plus metadata strings: "opt.kind", "opt.params",
 * "opt.step", "opt.lr_scale" and "opt.<param>.step"; it fits the safetensors
 * API of tensor.h, alone or merged with the model's tensors in one
 * checkpoint. Save → load → continue is bit-identical to an uninterrupted
 * run. */
typedef struct mi_optim_state_list {
    int count;
    mi_named_tensor *tensors; /* point at the live state: write them before the next step */
    mi_metadata metadata;
} mi_optim_state_list;

/* Fills *out; names, strings and arrays go to the current scope. 0 or -1. */
int mi_optim_state_export(const mi_optim *o, mi_optim_state_list *out);
/* Copies state from a loaded file (ignores entries not named "opt.…").
 * Fails, changing nothing, when the kind, parameter count, a name, a shape
 * or a dtype does not match this optimizer. 0 or -1. */
int mi_optim_state_import(mi_optim *o, const mi_safetensors *st);
/* Conveniences over mi_safetensors_save / mi_safetensors_load. */
int mi_optim_save(const mi_optim *o, const char *path);
int mi_optim_load(mi_optim *o, const char *path);

/* ---------------------------------------------------------------- differentiable steps
 * Hyperparameters as rank-0 tensors of the parameters' dtype; a NULL field
 * takes the group's double. A tensor lr is used as given (no group lr, no lr
 * scale; Muon's AdamW fallback takes it too, instead of aux_lr). Weight decay
 * still honours the decay masks. */
typedef struct mi_hp_tensors {
    mi_tensor *lr, *momentum, *beta1, *beta2, *weight_decay;
} mi_hp_tensors;

/* A copy of an optimizer's state (values and step counts) in the current
 * scope, advanced by functional steps and never written back. */
typedef struct mi_optim_fstate mi_optim_fstate;
mi_optim_fstate *mi_optim_fstate_new(const mi_optim *o);
/* new_params[i] = one step of the optimizer's rule from params[i] (any
 * tensor of the i-th parameter's shape, e.g. the previous functional step's
 * output) with gradient grads[i] (NULL: unchanged). With recording on the
 * outputs and fs's new state are recorded, in the current scope. 0 or -1. */
int mi_optim_step_functional(mi_optim *o, mi_optim_fstate *fs, mi_tensor *const *params,
                             mi_tensor *const *grads, const mi_hp_tensors *hpt,
                             mi_tensor **new_params);

/* torch.optim.SGD's step as a function: bufs[i] the momentum buffers (NULL
 * on the first step: buf = g), lr and momentum rank-0 tensors (momentum may
 * be NULL: plain SGD). Writes new_params[i] and, with momentum, new_bufs[i].
 * 0 or -1. */
int mi_sgd_step_functional(mi_tensor *const *params, mi_tensor *const *grads,
                           mi_tensor *const *bufs, int n, mi_tensor *lr, mi_tensor *momentum,
                           double dampening, double weight_decay, bool nesterov,
                           mi_tensor **new_params, mi_tensor **new_bufs);

/* ---------------------------------------------------------------- Newton–Schulz
 * The quintic iteration of Muon on the last two axes:
 *   X₀ = G / (‖G‖_F + 1e-7) (transposed when rows > cols),
 *   X_{k+1} = a X_k + (b A + c A²) X_k,  A = X_k X_kᵀ,
 *   (a, b, c) = (3.4445, −4.7750, 2.0315).
 * Five steps map every singular value σ of G with σ/‖G‖_F ≥ 0.01 into
 * [0.6818, 1.1344], the attracting band of φ(s) = a s + b s³ + c s⁵. */
#define MI_NS_A 3.4445
#define MI_NS_B (-4.7750)
#define MI_NS_C 2.0315
mi_tensor *mi_newton_schulz(mi_tensor *g, int steps);

/* ---------------------------------------------------------------- deep momentum's memory
 * The memory of deep_momentum's MI_NL_FORM_NORMALISED form, exposed for
 * checking (nl_deep.c documents both forms). For a gradient g
 * viewed as rows U [r, c] (c = its last dim), the memory of Eq. 23 is
 *   m(U) = M + ρ tanh(Û W1ᵀ) W2ᵀ,  ρ = rms(U), Û = U / (ρ + ε),
 * M of g's shape, W1 [h, c], W2 [c, h]; its MLP's inner objective is
 *   L̂(W1, W2) = (1/r) ⟨tanh(Û W1ᵀ) W2ᵀ, Û⟩. */
typedef struct mi_deep_memory {
    mi_tensor *m, *w1, *w2; /* m NULL = zeros; w1 = w2 = NULL: linear memory */
} mi_deep_memory;

mi_tensor *mi_deep_memory_objective(mi_tensor *w1, mi_tensor *w2, mi_tensor *g, double eps);
/* ∂L̂/∂W1 and ∂L̂/∂W2 in closed form (written with ops: differentiable). */
int mi_deep_memory_grad(mi_tensor *w1, mi_tensor *w2, mi_tensor *g, double eps, mi_tensor **dw1,
                        mi_tensor **dw2);
/* One update, M ← αM − g, W2 ← αW2 − η ∂L̂/∂W2, W1 ← W1 − η ∂L̂/∂W1, and
 * the read-out *delta = m_{i+1}(g) in g's shape. 0 or -1. */
int mi_deep_memory_update(const mi_deep_memory *mem, mi_tensor *g, double alpha, double mem_lr,
                          double eps, mi_deep_memory *out, mi_tensor **delta);

/* ---------------------------------------------------------------- schedules */
typedef enum mi_schedule_kind {
    MI_SCHED_CONSTANT = 0,
    MI_SCHED_WARMUP_COSINE = 1, /* linear warmup, then cosine down to a floor */
} mi_schedule_kind;

typedef struct mi_schedule {
    mi_schedule_kind kind;
    double lr;           /* peak (constant) learning rate */
    double min_lr;       /* the floor */
    int64_t warmup;      /* steps of linear warmup */
    int64_t total;       /* the step where the cosine reaches min_lr */
} mi_schedule;

/* The learning rate at step t (0-based):
 *   t < warmup:            lr · (t + 1) / warmup
 *   warmup ≤ t ≤ total:    min_lr + ½ (lr − min_lr) (1 + cos(π (t − warmup) / (total − warmup)))
 *   t > total:             min_lr
 * NaN with a message on a bad schedule (mi_schedule_check). */
double mi_schedule_lr(const mi_schedule *s, int64_t t);
int mi_schedule_check(const mi_schedule *s);
/* Sets o's lr scale to mi_schedule_lr(s, steps) / s->lr, for the next step. */
int mi_optim_apply_schedule(mi_optim *o, const mi_schedule *s);

/* ---------------------------------------------------------------- clipping, accumulation
 * torch.nn.utils.clip_grad_norm_: total = ‖(‖g_1‖, …, ‖g_n‖)‖₂ over the
 * parameters that have a gradient; if total > max_norm every gradient is
 * multiplied by max_norm / (total + 1e-6). Returns total (before clipping),
 * or a negative value with a message. */
double mi_clip_grad_norm(mi_tensor *const *params, int n, double max_norm);
double mi_optim_clip_grad_norm(mi_optim *o, double max_norm);
/* Global ℓ2 norm of the gradients without changing them. */
double mi_grad_norm(mi_tensor *const *params, int n);

/* Gradient accumulation over micro-batches: mi_backward sums into
 * param->grad, so run backward on each of k micro-batches, then scale the
 * sum by 1/k (this), then step. Equal to one step on the mean loss of the
 * whole batch when micro-batches have equal size. 0 or -1. */
int mi_grads_scale(mi_tensor *const *params, int n, double s);
int mi_optim_accumulated(mi_optim *o, int micro_batches);

#endif
