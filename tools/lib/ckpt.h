/* A training run's settings, its task's batches, and checkpoints: what
 * miras-train writes and miras-eval / miras-sample read.
 *
 * A checkpoint is one safetensors file:
 *   tensors   the model's parameters by name (mi_lm_params), then the
 *             optimizer's state "opt.<i>.<name>" (mi_optim_state_export)
 *   metadata  "lm.*"    the model configuration (mi_lm_config_to_metadata)
 *             "opt.*"   the optimizer's kind, step counts and lr scale
 *             "train.*" this file's run settings: task, sizes, schedule,
 *                       optimizer hyperparameters, seed, and the step.
 * Batches are drawn from counter-based streams (mi_task_rng: one stream per
 * example index), so the random state of a run is its seed and the next
 * example index, step · batch ("train.next_example"); nothing else is
 * random after initialisation. */
#ifndef MIRAS_TOOLS_CKPT_H
#define MIRAS_TOOLS_CKPT_H

#include "miras.h"

typedef enum task_kind { TASK_LM, TASK_MQAR, TASK_NIAH, TASK_CAPACITY } task_kind;
extern const char *const task_names[4]; /* "lm", "mqar", "niah", "capacity" */

#define NIAH_ANSWER_MAX 48 /* a NIAH training sequence is the prompt + this many bytes */

typedef struct run_config {
    mi_lm_config lm;
    task_kind task;
    char data[1024];          /* lm, niah text: the text file */
    int64_t data_size;        /* its size and FNV-1a hash, checked on resume */
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
} run_config;

/* Sets the run setting `name`, a miras-train option ("--seq-len") or its
 * checkpoint key ("train.seq_len"), from text: one table parses and
 * range-checks both, so a checkpoint's value passes the option's check.
 * 0, or -1 with "NAME: 'TEXT' is not a whole number in [LO, HI]" (or the
 * like) in msg. run_config_knows: whether `name` is such an option. */
int run_config_set(run_config *rc, const char *name, const char *text, char *msg, size_t n);
bool run_config_knows(const char *option);

/* The defaults of miras-train for a task (sizes, vocabulary, schedule). */
run_config run_config_default(task_kind task);
int task_from_name(const char *name); /* -1 if unknown */

/* What a run accumulates between log rows and validations; checkpoints carry
 * it, so a resumed run writes the same rows, warnings and summary. The
 * gradient norm is the global one before clipping (mi_clip_grad_norm). */
typedef struct run_stats {
    double loss_sum;          /* training losses since the last log row */
    int64_t loss_n;
    double norm_sum;          /* gradient norms since the last log row */
    int64_t norm_n;
    double period_norm_sum;   /* since the last validation: norms, steps, */
    int64_t period_n;         /* and those clipped (norm > --clip) */
    int64_t period_clipped;
    int64_t clipped, counted; /* the whole run: clipped steps of those counted */
} run_stats;

/* The run settings, step and log accumulators as "train.*" metadata, merged
 * after `extra` (the model's and optimizer's), in the current scope. 0 or -1. */
int run_config_metadata(const run_config *rc, int64_t step, const run_stats *stats,
                        const mi_metadata *extra, int n_extra, mi_metadata *out);

/* ---------------------------------------------------------------- tasks */
typedef struct run_task {
    const run_config *rc;
    mi_text *text;            /* lm, niah text */
    mi_mqar_config mqar;
    mi_capacity_config capacity;
    mi_niah_config niah;
} run_task;

/* Loads the text (into the current scope) and checks the task's sizes:
 * 0; -1 when the file cannot be read, -2 when the sizes do not fit the task
 * (a usage error), with a message in msg. */
int task_open(run_task *t, const run_config *rc, char *msg, size_t n);
/* Examples first … first+batch−1 of a split: i64 inputs and targets [B, T]. */
int task_batch(const run_task *t, mi_split split, int64_t first, int64_t batch, mi_tensor **inputs,
               mi_tensor **targets);
/* Whether the task is scored by recall accuracy (mqar, niah, capacity). */
bool task_has_accuracy(task_kind k);
/* FNV-1a (64 bit) of bytes. */
uint64_t fnv1a(const uint8_t *p, int64_t n);

/* Mean loss and recall accuracy (NaN for lm) over `batches` held-out batches
 * (examples 0 … batches·B − 1 of the validation split), without recording,
 * forwarding batch/accum sequences at a time (each micro-batch's mean weighs
 * the same). Each micro-batch runs in `scratch`, reset after it (NULL: a scope
 * of its own): a training loop passes its idle step scope, so validating
 * takes no memory beyond what a step already holds. */
int evaluate(const mi_lm *lm, const run_task *t, int64_t batches, mi_scope *scratch,
             double *loss, double *acc);
/* Part `part` of `parts` equal shares of the same validation pass (a rank's
 * share: micro-batches of batch/(accum·parts) sequences, contiguous by part):
 * the sums of the micro-batches' mean losses and accuracies in sums[0..1],
 * over batches·accum micro-batches. evaluate = share 0 of 1, divided. */
int evaluate_share(const mi_lm *lm, const run_task *t, int64_t batches, mi_scope *scratch,
                   int part, int parts, double sums[2]);

/* ---------------------------------------------------------------- checkpoints */
/* Parameters + optimizer state + metadata, written atomically (temp file +
 * rename), with the run's accumulators (so a resumed run writes the same
 * rows). 0 or -1 with the library's message. */
int ckpt_save(const char *path, const mi_lm *lm, const mi_optim *o, const run_config *rc,
              int64_t step, const run_stats *stats);

typedef struct ckpt {
    const char *path;
    mi_safetensors *st;       /* in the scope current at ckpt_load */
    mi_lm_config lm;
    bool has_run;             /* "train.*" present (miras-train wrote it) */
    run_config rc;
    int64_t step;
    run_stats stats;          /* all zero but the losses in checkpoints older than
                                 the gradient-norm log (their norms are not counted) */
} ckpt;

/* Loads and validates a checkpoint: a readable safetensors file with an LM
 * configuration (and, when present, run settings). -1 with a message. */
int ckpt_load(ckpt *c, const char *path, char *msg, size_t n);
/* Copies the parameters into lm (made from c->lm): every parameter present
 * with its shape and dtype, no unknown tensor. -1 with a message. */
int ckpt_restore(const ckpt *c, mi_lm *lm, char *msg, size_t n);
/* Both, and the model between them: what miras-eval and miras-sample do. */
int ckpt_load_model(ckpt *c, mi_lm *lm, const char *path, mi_scope *scope, char *msg, size_t n);

#endif
