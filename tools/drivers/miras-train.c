/* miras-train: trains a language model whose mixer is any MIRAS preset or
 * baseline, on a byte-level text or a synthetic recall task. Writes
 * DIR/log.csv, DIR/loss.svg and DIR/ckpt.safetensors; --resume continues a
 * run bit for bit. The loop is the usual one:
 *
 *   for each step: batch → loss → backward → clip → schedule → optimizer step
 *   every --log-every steps a log row, every --eval-every steps a validation
 *   pass and a checkpoint.
 *
 * As llm.c and nanoGPT do, it logs the global gradient norm before clipping
 * (the mean over each row's steps) and warns when --clip cuts most steps.
 *
 * Under mpirun (dist.h) it is data-parallel: --batch stays the global batch,
 * rank r forwards sequences r·B/N … (r+1)·B/N − 1 of each step's batch, the
 * gradients are summed over the ranks in rank order, and every rank takes
 * the same optimizer step; the ranks share the validation pass; rank 0 logs
 * and checkpoints. */
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"
#include "dist.h"

static void usage(void)
{
    printf(
"usage: miras-train [options]\n"
"Trains a language model on a task; shows progress, writes a CSV log, an SVG\n"
"plot and checkpoints in --out.\n"
"\n"
"model\n"
"  --model SPEC       a MIRAS preset (titans, yaad, moneta, gated-deltanet, ...),\n"
"                     attention, swa[:W] or samba:<preset>[:W]  (gated-deltanet)\n"
"  --set KEY=VALUE    an override, repeatable: components and training form of\n"
"                     the MIRAS block (bias=huber, memory.depth=3, chunk=16,\n"
"                     eta=0.05, ...) or a model key (window=32, mlp_hidden=64);\n"
"                     form=auto|exact|minibatch: with chunk > 1, the delta rule's\n"
"                     exact chunkwise form (auto: where it exists) or the\n"
"                     mini-batch rule\n"
"  --d-model N        width (128)          --layers N   blocks (4)\n"
"  --heads N          heads (4)\n"
"task\n"
"  --task NAME        lm | mqar | niah | capacity  (lm)\n"
"  --data FILE        lm, niah text: a text file (bytes; 90%% train, 10%% validation)\n"
"  --seq-len N        lm: window (64); mqar: L (64); niah: prompt bytes (256)\n"
"  --pairs N          mqar: key-value pairs (4); capacity: pairs (16), length 4N\n"
"  --vocab N          mqar, capacity: vocabulary (8192)\n"
"  --niah KIND        passkey | word | uuid | text (needles in --data)  (passkey)\n"
"training\n"
"  --steps N          total steps (1000)   --batch N   sequences per step (16)\n"
"  --accum N          gradient accumulation: each step forwards the batch as N\n"
"                     micro-batches of batch/N sequences and sums their gradients\n"
"                     (the same update, about 1/N of the activation memory) (1)\n"
"  --recompute        recompute each block in the backward instead of keeping\n"
"                     its activations (the same gradients; about one more\n"
"                     forward a step, a block's activations instead of all)\n"
"  --optim NAME       sgd adam adamw muon precond_momentum delta_momentum\n"
"                     deep_momentum l2_gd  (adamw)\n"
"  --lr X             peak learning rate (the optimizer's default: adamw 1e-3)\n"
"  --weight-decay X   (the optimizer's default; never on norms and gains)\n"
"  --schedule NAME    cosine (to 0.1 lr) | constant, both after a linear warmup\n"
"  --warmup N         warmup steps (min(100, steps/10))\n"
"  --clip X           clip the global gradient norm at X; 0: off (1)\n"
"  --seed N           initialisation and data (1)   --threads N (all cores)\n"
"  --eval-every N     validate and checkpoint every N steps (100)\n"
"  --eval-batches N   validation batches (4)   --log-every N   log rows (10)\n"
"output\n"
"  --out DIR          log.csv, loss.svg, ckpt.safetensors (runs/<model>-<task>);\n"
"                     one run at a time: DIR/.lock holds the running one's pid;\n"
"                     a killed save's NAME.tmp.PID files are removed at start\n"
"  --resume CKPT      continue that run bit for bit; only --steps, --stop-at,\n"
"                     --out, --data, --threads and the data-parallel options\n"
"                     may be given with it, under any number of ranks. Its\n"
"                     settings pass the options' checks: a value out of range\n"
"                     is a runtime failure, before --out is touched\n"
"  --stop-at N        stop (with a checkpoint) after step N, as if interrupted\n"
"  --keys             every --set key with its default, range and meaning\n"
"  --help, --version\n"
"data-parallel (mpirun -np N miras-train ...; docs/distributed.md)\n"
"                     --batch is the global batch: each rank forwards batch/N\n"
"                     sequences (as batch/(N*accum)-sequence micro-batches),\n"
"                     gradients are summed over the ranks in rank order, so N\n"
"                     ranks reproduce one process with --accum N bit for bit;\n"
"                     the ranks share validation; rank 0 logs and checkpoints\n"
"  --comm-timeout S   seconds a rank waits for the others before it stops (120)\n"
"  --bucket-kb N      gradient bytes per collective call, in KiB (4096)\n"
"  --save-every-rank  each rank R > 0 also writes its final state to\n"
"                     DIR/ckpt.rankR.safetensors (to check that ranks agree)\n"
"\n"
"log.csv: a row every --log-every steps with the columns\n"
"  step,lr,train_loss,grad_norm,val_loss,val_acc\n"
"lr is the row's last step's; train_loss and grad_norm are means over the steps\n"
"since the previous row, grad_norm the global gradient norm before clipping;\n"
"val_loss and val_acc (recall tasks) are filled at validations. Step lines show\n"
"the row's loss and norm, the bar on a terminal the last step's. When more than\n"
"half the steps since the previous validation were clipped (norm > --clip), one\n"
"warning on stderr says so and suggests a lower --lr; the last line counts the\n"
"clipped steps of the whole run.\n"
"exit status: 0 done, 1 runtime failure (unreadable file, NaN loss or gradient\n"
"norm, ...), 2 usage\n");
}

/* --keys: the field tables of the model, the MIRAS block and its components. */
static void print_keys(void)
{
    struct { const char *title; const mi_field *(*fields)(int *); } groups[] = {
        {"the model (--set KEY=VALUE; the mixer is --model)", mi_lm_config_fields},
        {"a MIRAS preset's block", mi_miras_block_config_fields},
        {"a MIRAS preset's components and training form (then each bias's own, once chosen)",
         NULL},
        {"hope (--model hope)", mi_hope_config_fields},
    };
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        int n = 0;
        const mi_field *f = groups[g].fields ? groups[g].fields(&n) : NULL;
        size_t need = f ? mi_fields_describe(f, n, NULL, 0) : mi_miras_config_describe(NULL, 0);
        char *text = malloc(need + 1);
        if (!text) die("out of memory");
        if (f) mi_fields_describe(f, n, text, need + 1);
        else mi_miras_config_describe(text, need + 1);
        printf("%s%s:\n%s", g ? "\n" : "", groups[g].title, text);
        free(text);
    }
}

typedef struct options {
    run_config rc;
    const char *out, *resume;
    int threads;
    int64_t stop_at;
    bool steps_given, save_every_rank, recompute;
    double comm_timeout;
    int64_t bucket_kb;
} options;

/* --set KEY=VALUE: a model key (but the mixer, which --model names), else a
 * MIRAS block override. */
static void set_override(mi_lm_config *c, const char *kv)
{
    char buf[2 * MI_LM_TEXT];
    int n;
    const mi_field *lm_fields = mi_lm_config_fields(&n);
    bool model_key = mi_fields_has_key(lm_fields, n, kv) && strncmp(kv, "mixer=", 6);
    snprintf(buf, sizeof buf, "%s%s", model_key ? "" : "mixer.", kv);
    if (mi_lm_config_set(c, buf) != 0) die_usage("--set %s: %s", kv, mi_error());
}

/* --d-model, --layers, --heads, --vocab: the model's field of that name
 * (--d-model is d_model), so the option and a checkpoint's lm.* value are
 * parsed and held to one range, the table's. */
static void set_model_size(mi_lm_config *c, const char *option, const char *text)
{
    char key[32];
    snprintf(key, sizeof key, "%s", option + 2);
    for (char *p = key; *p; p++)
        if (*p == '-') *p = '_';
    int n;
    const mi_field *lm_fields = mi_lm_config_fields(&n), *f = mi_fields_find(lm_fields, n, key);
    if (!f) die_usage("%s: no model field '%s'", option, key);
    mi_field named = *f;
    named.key = option;
    if (mi_field_parse(&named, c, NULL, text) != 0) die_usage("%s", mi_error());
}

static void parse(int argc, char **argv, options *o)
{
    const char *v, *task = "lm";
    char msg[512];
    for (int i = 1; i < argc; i++)
        if (opt_is(argc, argv, &i, "--task", &v)) task = v;
    if (task_from_name(task) < 0) die_usage("--task: '%s' is not lm, mqar, niah or capacity", task);
    run_config *rc = &o->rc;
    *rc = run_config_default(task_from_name(task));
    const char *allowed_on_resume[] = {"--steps", "--stop-at", "--out", "--data", "--threads",
                                       "--resume", "--comm-timeout", "--save-every-rank",
                                       "--bucket-kb", "--recompute"};
    const char *restricted = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool ok = false;
        for (int k = 0; k < 10; k++) ok |= !strcmp(arg, allowed_on_resume[k]);
        if (!ok && !restricted) restricted = arg;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) usage(), exit(0);
        else if (!strcmp(arg, "--keys")) print_keys(), exit(0);
        else if (!strcmp(arg, "--version")) printf("miras-train %s%s\n", MIRAS_VERSION,
                                                    dist_available() ? " (MPI)" : ""), exit(0);
        else if (opt_is(argc, argv, &i, "--task", &v)) continue;
        else if (run_config_knows(arg)) { /* the run settings a checkpoint also holds */
            opt_is(argc, argv, &i, arg, &v);
            if (run_config_set(rc, arg, v, msg, sizeof msg) != 0) die_usage("%s", msg);
        }
        else if (opt_is(argc, argv, &i, "--model", &v)) {
            if (strlen(v) >= MI_LM_TEXT) die_usage("--model: '%s' is too long", v);
            strcpy(rc->lm.mixer, v);
        } else if (opt_is(argc, argv, &i, "--set", &v)) set_override(&rc->lm, v);
        else if (opt_is(argc, argv, &i, "--d-model", &v)) set_model_size(&rc->lm, arg, v);
        else if (opt_is(argc, argv, &i, "--layers", &v)) set_model_size(&rc->lm, arg, v);
        else if (opt_is(argc, argv, &i, "--heads", &v)) set_model_size(&rc->lm, arg, v);
        else if (opt_is(argc, argv, &i, "--vocab", &v)) set_model_size(&rc->lm, arg, v);
        else if (opt_is(argc, argv, &i, "--optim", &v)) {
            int k = mi_optim_kind_from_name(v);
            if (k < 0) die_usage("--optim: %s", mi_error());
            rc->optim = (mi_optim_kind)k;
        } else if (opt_is(argc, argv, &i, "--schedule", &v)) {
            if (strcmp(v, "cosine") && strcmp(v, "constant"))
                die_usage("--schedule: '%s' is not cosine or constant", v);
            rc->cosine = !strcmp(v, "cosine");
        } else if (opt_is(argc, argv, &i, "--threads", &v))
            o->threads = (int)parse_int(arg, v, 1, 4096);
        else if (opt_is(argc, argv, &i, "--out", &v)) o->out = v;
        else if (opt_is(argc, argv, &i, "--resume", &v)) o->resume = v;
        else if (opt_is(argc, argv, &i, "--stop-at", &v))
            o->stop_at = parse_int(arg, v, 1, INT64_MAX);
        else if (opt_is(argc, argv, &i, "--comm-timeout", &v))
            o->comm_timeout = parse_real(arg, v, 0.001, 1e6);
        else if (opt_is(argc, argv, &i, "--save-every-rank", NULL)) o->save_every_rank = true;
        else if (opt_is(argc, argv, &i, "--recompute", NULL)) o->recompute = true;
        else if (opt_is(argc, argv, &i, "--bucket-kb", &v))
            o->bucket_kb = parse_int(arg, v, 1, 1 << 20);
        else die_usage("unknown option '%s'", arg);
    }
    o->steps_given = opt_given(argc, argv, "--steps");
    if (o->resume && restricted)
        die_usage("%s: a resumed run keeps its checkpoint's settings; only --steps, --stop-at, "
                  "--out, --data, --threads and the data-parallel options may be given with "
                  "--resume", restricted);
    if (o->resume) return;
    if (rc->batch % rc->accum)
        die_usage("--accum (%lld) must divide --batch (%lld)", (long long)rc->accum,
                  (long long)rc->batch);
    if (opt_given(argc, argv, "--vocab") && (rc->task == TASK_LM || rc->task == TASK_NIAH))
        die_usage("--vocab: the %s task is byte-level (256)", task_names[rc->task]);
    if (opt_given(argc, argv, "--seq-len") && rc->task == TASK_CAPACITY)
        die_usage("--seq-len: the capacity task's length is 4 · --pairs");
    if (rc->task == TASK_CAPACITY) rc->seq_len = 4 * rc->pairs;
    bool text = rc->task == TASK_LM || (rc->task == TASK_NIAH && !strcmp(rc->niah, "text"));
    if (text && !rc->data[0]) die_usage("--task %s%s needs --data FILE", task_names[rc->task],
                                        rc->task == TASK_NIAH ? " --niah text" : "");
    mi_optim_hparams d = mi_optim_defaults(rc->optim);
    if (!opt_given(argc, argv, "--lr")) rc->hp.lr = d.lr;
    if (!opt_given(argc, argv, "--weight-decay")) rc->hp.weight_decay = d.weight_decay;
    double lr = rc->hp.lr, wd = rc->hp.weight_decay;
    rc->hp = d, rc->hp.lr = lr, rc->hp.weight_decay = wd;
    if (!opt_given(argc, argv, "--warmup")) /* min(100, steps / 10) */
        rc->warmup = rc->steps / 10 < 100 ? rc->steps / 10 : 100;
    if (rc->warmup >= rc->steps) die_usage("--warmup (%lld) must be less than --steps (%lld)",
                                           (long long)rc->warmup, (long long)rc->steps);
}

/* The optimizer over lm's parameters: no weight decay on vectors (norms,
 * gains, biases); Muon orthogonalises the matrices inside the blocks and
 * takes its AdamW fallback for the embeddings and the head. */
static mi_optim *make_optimizer(const mi_lm *lm, const run_config *rc, bool *decay,
                                mi_tensor **params)
{
    int n;
    const mi_named_tensor *p = mi_lm_params(lm, &n);
    int inner = 0, outer = n;
    for (int i = 0; i < n; i++) {
        bool io = rc->optim == MI_OPT_MUON && (!strcmp(p[i].name, "embeddings.weight") ||
                                               !strcmp(p[i].name, "lm_head.weight"));
        params[io ? --outer : inner++] = p[i].tensor;
    }
    mi_decay_mask_matrices(params, n, decay);
    mi_param_group g[2] = {{params, inner, rc->hp, decay},
                           {params + inner, n - inner, rc->hp, decay + inner}};
    g[1].hp.adamw_only = true;
    return mi_optim_new(rc->optim, g, n - inner ? 2 : 1);
}

/* Where the run writes, and the last checkpoint it can fall back to. */
typedef struct outputs {
    char log[4200], svg[4200], ckpt[4200], title[256];
    const char *good;      /* the last good checkpoint (NULL: none yet) */
    int64_t good_step;
} outputs;

/* A NaN or Inf: stop, naming the step and the last good checkpoint. */
static _Noreturn void stop_bad(const char *what, double value, int64_t step, progress *bar,
                               const outputs *out)
{
    progress_clear(bar);
    const char *v = isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf";
    if (!out->good)
        die("%s is %s at step %lld; stopping (no checkpoint was saved yet; try a lower --lr)",
            what, v, (long long)step);
    die("%s is %s at step %lld; stopping. The last good checkpoint is %s (step %lld)", what, v,
        (long long)step, out->good, (long long)out->good_step);
}

static bool params_finite(const mi_lm *lm)
{
    for (int i = 0; i < lm->n_params; i++) {
        const mi_tensor *t = lm->params[i].tensor;
        for (int64_t j = 0; j < t->numel; j++)
            if (!isfinite(((const float *)t->data)[j])) return false;
    }
    return true;
}

/* The log and the plot, then the checkpoint, each written whole or not at
 * all: the log first, so a checkpoint never names a step its log lacks (a
 * resume drops the rows past its checkpoint's step). */
static void save(outputs *out, const mi_lm *lm, const mi_optim *opt, const run_config *rc,
                 int64_t step, const run_stats *stats, const train_log *log)
{
    char msg[1024];
    size_t n;
    char *csv = log_csv(log, &n);
    int rc_log = write_atomic(out->log, csv, n, msg, sizeof msg);
    free(csv);
    char *svg = log_svg(log, out->title, &n);
    if (rc_log == 0) rc_log = write_atomic(out->svg, svg, n, msg, sizeof msg);
    free(svg);
    if (rc_log != 0) die("%s", msg);
    if (ckpt_save(out->ckpt, lm, opt, rc, step, stats) != 0)
        die("cannot save checkpoint '%s': %s", out->ckpt, mi_error());
    out->good = out->ckpt, out->good_step = step;
    dist_note_checkpoint(out->ckpt, step);
}

/* FNV-1a of every parameter's bytes: equal on all ranks while they agree. */
static uint64_t params_hash(const mi_lm *lm)
{
    uint64_t h = 0;
    for (int i = 0; i < lm->n_params; i++) {
        const mi_tensor *t = lm->params[i].tensor;
        h = (h ^ fnv1a(t->data, t->numel * (int64_t)mi_dtype_size(t->dtype))) * 0x100000001b3ULL;
    }
    return h;
}

/* The settings that must agree between ranks (each parses its own command
 * line) and the initial parameters, as one checksum. */
static uint64_t run_hash(const run_config *rc, const mi_lm *lm, int64_t step)
{
    double v[] = {(double)rc->batch, (double)rc->accum, (double)rc->seq_len, (double)rc->steps,
                  (double)rc->warmup, (double)rc->task, (double)rc->optim, rc->hp.lr,
                  rc->hp.weight_decay, rc->clip, rc->min_lr, (double)rc->cosine,
                  (double)rc->data_size, (double)rc->data_hash, (double)step};
    return fnv1a((const uint8_t *)v, (int64_t)sizeof v) ^ params_hash(lm);
}

/* The validation pass, shared by the ranks (each forwards its share of the
 * micro-batches, the sums run in rank order): the row's val_loss and
 * val_acc on every rank. 0, or -1 with a message (the library's, or set). */
static int validate(dist *d, const mi_lm *lm, const run_task *t, mi_scope *work, log_row *r)
{
    char msg[512];
    double sums[2];
    if (evaluate_share(lm, t, t->rc->eval_batches, work, d->rank, d->size, sums) != 0) return -1;
    if (dist_sum_doubles(d, sums, 2, msg, sizeof msg) != 0) {
        mi_error_set("%s", msg);
        return -1;
    }
    double n = (double)(t->rc->eval_batches * t->rc->accum * d->size);
    r->val_loss = sums[0] / n;
    r->val_acc = task_has_accuracy(t->rc->task) ? sums[1] / n : NAN;
    return 0;
}

/* --resume: the checkpoint's settings, with the few options a resumed run
 * may change; the step and the log's pending losses and norms. */
static void resume_settings(options *o, ckpt *ck, int64_t *step, run_stats *stats, char *dirbuf,
                            size_t n)
{
    char msg[1024];
    run_config *rc = &o->rc;
    if (ckpt_load(ck, o->resume, msg, sizeof msg) != 0) die("%s", msg);
    if (!ck->has_run) die("'%s' holds a model but no training run to resume", o->resume);
    char data[sizeof rc->data];
    strcpy(data, rc->data);
    int64_t steps = rc->steps;
    *rc = ck->rc;
    if (data[0]) strcpy(rc->data, data);
    if (o->steps_given) rc->steps = steps;
    *step = ck->step, *stats = ck->stats;
    if (!o->out) snprintf(dirbuf, n, "%s", o->resume), o->out = dirname(dirbuf);
}

int main(int argc, char **argv)
{
    tool_name = "miras-train";
    options o = {.stop_at = 0};
    parse(argc, argv, &o);
    char msg[1024], dirbuf[4096], rank_name[64];
    dist d = {.timeout = o.comm_timeout, .bucket_bytes = o.bucket_kb << 10};
    if (dist_init(&d, &argc, &argv, msg, sizeof msg) != 0) die("%s", msg);
    bool lead = d.rank == 0; /* rank 0 logs and checkpoints */
    if (d.size > 1) { /* messages name their rank */
        snprintf(rank_name, sizeof rank_name, "miras-train[rank %d]", d.rank);
        tool_name = rank_name;
        dist_note_checkpoint(NULL, 0);
    }
    mi_scope *keep = mi_scope_new("run"), *work = mi_scope_new("step");
    mi_scope_enter(keep);
    run_config *rc = &o.rc;
    int64_t step = 0;               /* steps done */
    run_stats st = {0};             /* losses and gradient norms not yet logged */
    ckpt ck;
    if (o.resume) resume_settings(&o, &ck, &step, &st, dirbuf, sizeof dirbuf);
    if (!o.out) {
        snprintf(dirbuf, sizeof dirbuf, "runs/%s-%s", rc->lm.mixer, task_names[rc->task]);
        o.out = dirbuf;
    }
    if (rc->batch % (d.size * rc->accum)) {
        dist_finish(&d); /* every rank stops here alike */
        die_usage("--batch (%lld) must be a multiple of the ranks (%d) × --accum (%lld)",
                  (long long)rc->batch, d.size, (long long)rc->accum);
    }
    if (rc->steps <= step) die_usage("--steps (%lld): the run is already at step %lld",
                                     (long long)rc->steps, (long long)step);
    int64_t stop = o.stop_at && o.stop_at < rc->steps ? o.stop_at : rc->steps;
    if (o.threads) mi_set_threads(o.threads);

    /* the task's data, the model, the optimizer and its schedule */
    run_task t;
    int opened = task_open(&t, rc, msg, sizeof msg);
    if (opened == -2 && !o.resume) die_usage("%s", msg);
    if (opened != 0) die("%s", msg);
    if (t.text) {
        uint64_t h = fnv1a(t.text->data, t.text->size);
        if (o.resume && (t.text->size != rc->data_size || h != rc->data_hash))
            die("'%s' is not the text this run trained on (%lld bytes, hash %016llx); give it "
                "with --data", rc->data, (long long)rc->data_size,
                (unsigned long long)rc->data_hash);
        rc->data_size = t.text->size, rc->data_hash = h;
    }
    mi_lm lm;
    if (mi_lm_init(&lm, &rc->lm, MI_F32, rc->seed, keep) != 0) {
        if (o.resume) die("%s", mi_error());
        die_usage("%s", mi_error());
    }
    if (o.resume && ckpt_restore(&ck, &lm, msg, sizeof msg) != 0) die("%s", msg);
    lm.checkpoint_blocks = o.recompute;
    bool *decay = mi_scope_alloc(keep, sizeof(bool) * (size_t)lm.n_params);
    mi_tensor **params = mi_scope_alloc(keep, sizeof(mi_tensor *) * (size_t)lm.n_params);
    mi_optim *opt = make_optimizer(&lm, rc, decay, params);
    if (!opt && o.resume) die("checkpoint '%s' has bad run settings: %s", o.resume, mi_error());
    if (!opt) die_usage("%s", mi_error());
    if (o.resume && mi_optim_state_import(opt, ck.st) != 0)
        die("checkpoint '%s' does not fit its optimizer: %s", o.resume, mi_error());
    double floor = rc->cosine ? rc->min_lr * rc->hp.lr : rc->hp.lr; /* constant: no descent */
    mi_schedule sched = {MI_SCHED_WARMUP_COSINE, rc->hp.lr, floor, rc->warmup, rc->steps};
    if (mi_schedule_check(&sched) != 0) {
        if (o.resume && !o.steps_given)
            die("checkpoint '%s' has bad run settings: %s", o.resume, mi_error());
        die_usage("%s", mi_error());
    }

    /* the output directory and what goes in it (rank 0's) */
    if (lead && make_dir(o.out, msg, sizeof msg) != 0) die("%s", msg);
    if (lead && dir_lock(o.out, msg, sizeof msg) < 0) die("%s", msg);
    int stale = lead ? remove_stale_temps(o.out, msg, sizeof msg) : 0;
    if (stale < 0) die("%s", msg);
    if (stale > 0) warning("removed %d stale temporary file%s in '%s' (a save that was killed)",
                           stale, stale > 1 ? "s" : "", o.out);
    outputs out = {.good = o.resume, .good_step = step};
    snprintf(out.log, sizeof out.log, "%s/log.csv", o.out);
    snprintf(out.svg, sizeof out.svg, "%s/loss.svg", o.out);
    snprintf(out.ckpt, sizeof out.ckpt, "%s/ckpt.safetensors", o.out);
    snprintf(out.title, sizeof out.title, "%s on %s, %lld parameters", rc->lm.mixer,
             task_names[rc->task], (long long)mi_lm_param_numel(&lm));
    train_log log = {.has_acc = task_has_accuracy(rc->task)};
    if (lead && o.resume && log_read(&log, out.log, step, msg, sizeof msg) != 0) die("%s", msg);
    if (dist_check_same(&d, run_hash(rc, &lm, step),
                        "the run's settings and initial parameters (give every rank the same "
                        "options)", msg, sizeof msg) != 0)
        die("%s", msg);
    if (o.resume) dist_note_checkpoint(o.resume, step);

    int64_t T = rc->task == TASK_NIAH ? rc->seq_len + NIAH_ANSWER_MAX : rc->seq_len;
    int64_t tokens = rc->batch * T;
    if (lead && d.active)
        printf("miras-train: %d rank%s (MPI), each forwarding %lld of the %lld sequences a step\n",
               d.size, d.size > 1 ? "s" : "", (long long)(rc->batch / d.size),
               (long long)rc->batch);
    if (lead)
        printf("miras-train: %s, %lld parameters, task %s, %lld steps of %lld tokens, out %s\n",
               rc->lm.mixer, (long long)mi_lm_param_numel(&lm), task_names[rc->task],
               (long long)rc->steps, (long long)tokens, o.out);
    if (lead && o.resume) printf("resuming from %s at step %lld\n", o.resume, (long long)step);
    fflush(stdout);
    progress bar;
    progress_start(&bar, step, stop);
    if (!lead) bar.tty = false;
    while (step < stop) {
        /* one step: batch → loss → backward → clip → schedule → update; with
         * --accum the gradients of the micro-batches' mean losses / accum add
         * up in the parameters' .grad, and each micro-batch's scope is reset.
         * Rank r takes micro-batches r·accum … (r+1)·accum − 1 of the N·accum
         * and the sums run over the ranks in rank order (dist.h). */
        mi_optim_zero_grad(opt);
        int64_t parts = d.size * rc->accum, micro = rc->batch / parts;
        double value = 0;
        for (int64_t a = 0; a < rc->accum; a++) {
            mi_scope_enter(work);
            mi_tensor *in, *tg, *loss = NULL;
            int64_t first = step * rc->batch + (d.rank * rc->accum + a) * micro;
            if (task_batch(&t, MI_SPLIT_TRAIN, first, micro, &in, &tg) == 0)
                loss = mi_lm_loss(&lm, in, tg);
            mi_tensor *scaled = parts > 1 ? mi_mul_scalar(loss, 1.0 / (double)parts) : loss;
            if (!scaled || mi_backward(scaled) != 0)
                die("step %lld: %s", (long long)step + 1, mi_error());
            value += mi_item(loss) / (double)parts;
            mi_scope_leave();
            mi_scope_reset(work);
        }
        if (dist_sum_doubles(&d, &value, 1, msg, sizeof msg) != 0 ||
            dist_sum_grads(&d, params, lm.n_params, msg, sizeof msg) != 0)
            die("step %lld: %s", (long long)step + 1, msg);
        if (!isfinite(value)) stop_bad("the loss", value, step + 1, &bar, &out);
        mi_scope_enter(work);
        /* ‖g‖ = (Σ_i ‖g_i‖²)^½ over all parameters, before clipping */
        double norm = rc->clip > 0 ? mi_optim_clip_grad_norm(opt, rc->clip)
                                   : mi_grad_norm(params, lm.n_params);
        if (norm < 0) die("step %lld: %s", (long long)step + 1, mi_error());
        if (!isfinite(norm)) stop_bad("the gradient norm", norm, step + 1, &bar, &out);
        bool clipped = rc->clip > 0 && norm > rc->clip;
        mi_optim_apply_schedule(opt, &sched);
        double lr = rc->hp.lr * mi_optim_lr_scale(opt);
        if (mi_optim_step(opt) != 0) die("step %lld: %s", (long long)step + 1, mi_error());
        mi_scope_leave();
        mi_scope_reset(work);
        step++, st.loss_sum += value, st.loss_n++, st.norm_sum += norm, st.norm_n++;
        st.period_norm_sum += norm, st.period_n++, st.period_clipped += clipped;
        st.clipped += clipped, st.counted++;

        /* a log row, with a validation pass every eval_every steps */
        bool eval = step % rc->eval_every == 0 || step == rc->steps;
        if (step % rc->log_every == 0 || eval) {
            log_row r = {step, lr, st.loss_sum / (double)st.loss_n,
                         st.norm_sum / (double)st.norm_n, NAN, NAN};
            st.loss_sum = 0, st.loss_n = 0, st.norm_sum = 0, st.norm_n = 0;
            if (eval && validate(&d, &lm, &t, work, &r) != 0)
                die("validation at step %lld: %s", (long long)step, mi_error());
            if (eval && !isfinite(r.val_loss))
                stop_bad("the validation loss", r.val_loss, step, &bar, &out);
            log_add(&log, r);
            char eta[32], acc[32] = "";
            progress_eta(&bar, step, eta, sizeof eta);
            if (!isnan(r.val_acc)) snprintf(acc, sizeof acc, "  acc %.3f", r.val_acc);
            progress_clear(&bar);
            if (d.size > 1 && dist_check_same(&d, params_hash(&lm),
                                              "the parameters' checksum (they diverged)", msg,
                                              sizeof msg) != 0)
                die("step %lld: %s", (long long)step, msg);
            if (lead && eval)
                printf("step %lld/%lld  loss %.4f  norm %.4f  val loss %.4f%s\n", (long long)step,
                       (long long)rc->steps, r.train_loss, r.grad_norm, r.val_loss, acc);
            else if (lead && !bar.tty)
                printf("step %lld/%lld  loss %.4f  norm %.4f  lr %.2e  %.0f tok/s  ETA %s\n",
                       (long long)step, (long long)rc->steps, r.train_loss, r.grad_norm, lr,
                       progress_rate(&bar, step, tokens), eta);
        }
        if (eval) { /* most steps since the last validation clipped: say so, once */
            if (lead && 2 * st.period_clipped > st.period_n)
                warning("%lld of %lld steps since step %lld were clipped (grad norm mean %.3g > "
                        "--clip %g); consider a lower --lr", (long long)st.period_clipped,
                        (long long)st.period_n, (long long)(step - st.period_n),
                        st.period_norm_sum / (double)st.period_n, rc->clip);
            st.period_norm_sum = 0, st.period_n = 0, st.period_clipped = 0;
        }
        if (eval || step == stop) {
            if (!params_finite(&lm)) stop_bad("a parameter", NAN, step, &bar, &out);
            if (lead) save(&out, &lm, opt, rc, step, &st, &log);
            else dist_note_checkpoint_pending(out.ckpt, step); /* rank 0 writes it */
        }
        if (lead) progress_show(&bar, step, value, norm, tokens);
    }
    progress_clear(&bar);
    char clip_note[160] = "", since[48] = "";
    if (st.counted < step) /* resumed from a checkpoint older than the count */
        snprintf(since, sizeof since, " since step %lld", (long long)(step - st.counted));
    if (rc->clip > 0)
        snprintf(clip_note, sizeof clip_note, "; %lld of %lld steps%s clipped (--clip %g)",
                 (long long)st.clipped, (long long)st.counted, since, rc->clip);
    double seconds = now_seconds() - bar.t0;
    if (lead)
        printf("%s at step %lld: %s, %s, %s (%.1f s)%s\n", step == rc->steps ? "done" : "stopped",
               (long long)step, out.ckpt, out.log, out.svg, seconds, clip_note);
    if (d.size > 1 && dist_check_same(&d, params_hash(&lm),
                                      "the final parameters' checksum (they diverged)", msg,
                                      sizeof msg) != 0)
        die("%s", msg);
    if (lead && d.size > 1)
        printf("%d ranks: parameters identical (checksum %016llx); summing gradients took "
               "%.2f s of %.2f s (%.1f%%) on rank 0\n", d.size,
               (unsigned long long)params_hash(&lm), d.comm_seconds, seconds,
               100 * d.comm_seconds / (seconds > 0 ? seconds : 1));
    if (!lead && o.save_every_rank) {
        snprintf(out.ckpt, sizeof out.ckpt, "%s/ckpt.rank%d.safetensors", o.out, d.rank);
        if (ckpt_save(out.ckpt, &lm, opt, rc, step, &st) != 0)
            die("cannot save checkpoint '%s': %s", out.ckpt, mi_error());
    }
    log_free(&log);
    mi_optim_free(opt);
    mi_scope_leave();
    mi_scope_free(work);
    mi_scope_free(keep);
    dist_finish(&d);
    return 0;
}
