/* Installed as miras/train/train.h, for users: included by miras.h. */
/* The training machinery, for the authors of training programs: a run's
 * configuration, the tasks' batch streams, evaluation, checkpoints with
 * optimizer state and configuration, and generation. miras-train, miras-eval
 * and miras-sample are built on it, and so is examples/train_lm.c, the
 * shortest whole training program (text → model → AdamW → validation →
 * checkpoint → samples).
 *
 * Included by the umbrella header miras.h (installed as miras/train/train.h).
 * Layering: tensor ← autograd ← ops ← {models, optim} ← train ← tools; the
 * tasks (data) sit on tensor.
 *
 * Errors are values: a function returns 0, or -1 (some -2, said where) with
 * the message in mi_error(); nothing here aborts or prints.
 *
 * A checkpoint is one safetensors file:
 *   tensors   the model's parameters by name (mi_lm_params), then the
 *             optimizer's state "opt.<i>.<name>" (mi_optim_state_export)
 *   metadata  "lm.*"    the model configuration (mi_lm_config_to_metadata)
 *             "opt.*"   the optimizer's kind, step counts and lr scale
 *             "train.*" the run's settings (mi_run_config), its step and
 *                       its log accumulators (mi_run_stats).
 * It is written atomically (mi_write_atomic_parts: temp file, fsync, rename)
 * and every tensor carries a CRC-32C, checked on load. Batches are drawn from
 * counter-based streams (mi_task_rng: one stream per example index), so the
 * random state of a run is its seed and the next example index, step · batch
 * ("train.next_example"); nothing else is random after initialisation. */
#ifndef MIRAS_TRAIN_H
#define MIRAS_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tasks.h"
#include "models/lm.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

/* ---------------------------------------------------------------- the run configuration */
typedef enum mi_task_kind {
    MI_TASK_LM = 0,       /* byte-level language modelling on a text file */
    MI_TASK_MQAR = 1,     /* multi-query associative recall (Zoology) */
    MI_TASK_NIAH = 2,     /* single needle in a haystack */
    MI_TASK_CAPACITY = 3, /* memory capacity: N pairs, then all N queried */
} mi_task_kind;
#define MI_TASK_COUNT 4

/* "lm", "mqar", "niah", "capacity"; NULL out of range. */
const char *mi_task_name(mi_task_kind k);
/* The task of that name, or -1 with a message. */
int mi_task_from_name(const char *name);
/* Whether the task is scored by recall accuracy (mqar, niah, capacity). */
bool mi_task_has_accuracy(mi_task_kind k);

/* At most this many bytes follow a NIAH prompt in a training sequence (the
 * answer and its terminator: mi_niah_answer_bytes, 37 for a UUID). */
#define MI_NIAH_ANSWER_MAX 48

typedef struct mi_run_config {
    mi_lm_config lm;
    mi_task_kind task;
    char data[1024];          /* lm, niah text: the text file */
    int64_t data_size;        /* its size and FNV-1a hash (a resumed run checks them) */
    uint64_t data_hash;
    int64_t seq_len;          /* lm: window; mqar: L; niah: prompt bytes; capacity: 4·pairs */
    int64_t pairs;            /* mqar, capacity: N */
    char niah[16];            /* passkey | word | uuid | text */
    int64_t batch;
    int64_t accum;            /* micro-batches per step (gradient accumulation), divides batch */
    int64_t steps, warmup;    /* total steps; warmup steps */
    bool cosine;              /* warmup + cosine to min_lr·lr, else constant after warmup */
    double min_lr;            /* the cosine's floor, as a fraction of lr */
    double clip;              /* global gradient norm clip; 0: none */
    int64_t eval_every, eval_batches, log_every;
    mi_optim_kind optim;
    mi_optim_hparams hp;
    uint64_t seed;            /* model initialisation and the task streams */
} mi_run_config;

/* miras-train's defaults for a task: sizes, vocabulary (8192 for mqar and
 * capacity), schedule (1000 steps, 100 warmup, cosine to 0.1·lr), AdamW,
 * clip 1, seed 1. */
mi_run_config mi_run_config_default(mi_task_kind task);

/* Sets the run setting `name` — its checkpoint key ("train.seq_len") or the
 * miras-train option of the same meaning ("--seq-len") — from text: one
 * field table parses and range-checks both, so a checkpoint's value passes
 * the option's check. -1 with "NAME: 'TEXT' is not a whole number in
 * [LO, HI]" (or the like). mi_run_config_knows: whether `name` is such an
 * option. */
int mi_run_config_set(mi_run_config *rc, const char *name, const char *text);
bool mi_run_config_knows(const char *option);

/* The schedule the settings describe: linear warmup to hp.lr over warmup
 * steps, then cosine to min_lr·lr at steps (cosine) or constant. */
mi_schedule mi_run_config_schedule(const mi_run_config *rc);

/* The sequence length a batch of the task has (niah: prompt + the flavour's
 * longest answer and its terminator). */
int64_t mi_run_config_tokens(const mi_run_config *rc);

/* What a run accumulates between log rows and validations; checkpoints carry
 * it, so a resumed run writes the same rows, warnings and summary. The
 * gradient norm is the global one before clipping (mi_optim_clip_grad_norm). */
typedef struct mi_run_stats {
    double loss_sum;          /* training losses since the last log row */
    int64_t loss_n;
    double norm_sum;          /* gradient norms since the last log row */
    int64_t norm_n;
    double period_norm_sum;   /* since the last validation: norms, steps, */
    int64_t period_n;         /* and those clipped (norm > clip) */
    int64_t period_clipped;
    int64_t clipped, counted; /* the whole run: clipped steps of those counted */
} mi_run_stats;

/* The settings, step and accumulators as "train.*" metadata after `extra`
 * (the model's and optimizer's), allocated in the current scope. */
int mi_run_config_metadata(const mi_run_config *rc, int64_t step, const mi_run_stats *stats,
                           const mi_metadata *extra, int n_extra, mi_metadata *out);

/* FNV-1a (64 bit) of bytes: the text's fingerprint in a checkpoint. */
uint64_t mi_fnv1a(const void *bytes, int64_t n);

/* ---------------------------------------------------------------- the tasks' batches */
typedef struct mi_run_task {
    const mi_run_config *rc;  /* kept by pointer: it must outlive the task */
    mi_text *text;            /* lm, niah text (in the scope current at mi_run_task_open) */
    mi_mqar_config mqar;
    mi_capacity_config capacity;
    mi_niah_config niah;
} mi_run_task;

/* Loads the text (into the current scope) and checks the task's sizes: 0;
 * -1 when the file cannot be read, -2 when the sizes do not fit the task
 * (the caller's usage error). */
int mi_run_task_open(mi_run_task *t, const mi_run_config *rc);
/* Examples first … first+batch−1 of a split: i64 inputs and targets [B, T]
 * (T = mi_run_config_tokens), in the current scope. NIAH packs prompt ++
 * answer ++ terminator, padded with '\n', the targets being the answer's
 * bytes and the terminator, each on the position before it (the others
 * ignored). */
int mi_run_task_batch(const mi_run_task *t, mi_split split, int64_t first, int64_t batch,
                      mi_tensor **inputs, mi_tensor **targets);

/* ---------------------------------------------------------------- evaluation */
/* Mean loss and recall accuracy (NaN for lm) over `batches` held-out batches
 * (examples 0 … batches·B − 1 of the validation split), without recording,
 * forwarding batch/accum sequences at a time (each micro-batch's mean weighs
 * the same). Each micro-batch runs in `scratch`, reset after it (NULL: a scope
 * of its own): a training loop passes its idle step scope, so validating
 * takes no memory beyond what a step already holds. */
int mi_evaluate(const mi_lm *lm, const mi_run_task *t, int64_t batches, mi_scope *scratch,
                double *loss, double *acc);
/* Part `part` of `parts` equal shares of the same pass (a data-parallel
 * rank's share: micro-batches of batch/(accum·parts) sequences, contiguous
 * by part): the sums of the micro-batches' mean losses and accuracies in
 * sums[0..1], over batches·accum micro-batches. mi_evaluate = share 0 of 1,
 * divided. */
int mi_evaluate_share(const mi_lm *lm, const mi_run_task *t, int64_t batches, mi_scope *scratch,
                      int part, int parts, double sums[2]);

/* ---------------------------------------------------------------- checkpoints */
/* Parameters + optimizer state + metadata (model, optimizer, run settings,
 * step, accumulators; stats NULL: zeros), written atomically. */
int mi_checkpoint_save(const char *path, const mi_lm *lm, const mi_optim *o,
                       const mi_run_config *rc, int64_t step, const mi_run_stats *stats);

typedef struct mi_checkpoint_file {
    const char *path;
    mi_safetensors *st;       /* in the scope current at mi_checkpoint_load */
    mi_lm_config lm;
    bool has_run;             /* "train.*" present (a training run wrote it) */
    mi_run_config rc;         /* its settings (rc.lm = lm), when has_run */
    int64_t step;
    mi_run_stats stats;       /* all zero but the losses in checkpoints older than
                                 the gradient-norm log (their norms are not counted) */
} mi_checkpoint_file;

/* Loads and validates a checkpoint: a readable safetensors file of finite
 * numbers with an LM configuration (and, when present, run settings). */
int mi_checkpoint_load(mi_checkpoint_file *c, const char *path);
/* Copies the parameters into lm (made from c->lm): every parameter present
 * with its shape and dtype, no unknown tensor. */
int mi_checkpoint_restore(const mi_checkpoint_file *c, mi_lm *lm);
/* The optimizer's state back into o (made with the run's settings). */
int mi_checkpoint_restore_optim(const mi_checkpoint_file *c, mi_optim *o);
/* Load, build the model (f32, in scope), restore: what an evaluator does. */
int mi_checkpoint_load_model(mi_checkpoint_file *c, mi_lm *lm, const char *path,
                             mi_scope *scope);

/* 0 when every floating-point tensor of the file holds only finite numbers;
 * otherwise -1 with a message naming `what` (the file), the tensor, the
 * first bad entry and its index. */
int mi_safetensors_check_finite(const mi_safetensors *st, const char *what);

/* ---------------------------------------------------------------- the optimizer of a run */
/* The run's optimizer over lm's parameters: no weight decay on vectors
 * (norms, gains, biases); Muon orthogonalises the matrices inside the blocks
 * and takes its AdamW fallback for the embeddings and the head. The
 * parameters in the optimizer's order go to params (NULL: not wanted; else
 * lm->n_params entries). The masks live in the current scope. */
mi_optim *mi_run_optimizer(const mi_lm *lm, const mi_run_config *rc, mi_tensor **params);

/* ---------------------------------------------------------------- generation */
typedef struct mi_sampler {
    double temperature;  /* 0: greedy (the first maximum) */
    int64_t top_k;       /* 0: the whole vocabulary */
    mi_rng rng;
} mi_sampler;

/* A token from one row of logits (f32 or f64, V entries): softmax(logits /
 * temperature) over the top_k largest, drawn with one uniform from rng.
 * -1 with a message when out of memory. */
int64_t mi_sample_token(const mi_tensor *logits, int64_t row, mi_sampler *s);

/* Continues B sequences: seq is i64 [B, P + n] row-major with the first P
 * tokens of each row given; writes the n next ones. It runs the model's
 * recurrent form (mi_lm_step) where it has one, else the whole forward once
 * per token. on_token (may be NULL) sees each new token as it is made. */
int mi_generate(const mi_lm *lm, int64_t *seq, int64_t B, int64_t P, int64_t n, mi_sampler *s,
                void (*on_token)(int64_t row, int64_t token, void *ctx), void *ctx);

#endif
