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

/* One group of --keys: a field table (NULL: a MIRAS preset's components). */
static void print_group(const char *title, const mi_field *(*fields)(int *), bool first)
{
    int n = 0;
    const mi_field *f = fields ? fields(&n) : NULL;
    size_t need = f ? mi_fields_describe(f, n, NULL, 0) : mi_miras_config_describe(NULL, 0);
    char *text = malloc(need + 1);
    if (!text) die("out of memory");
    if (f) mi_fields_describe(f, n, text, need + 1);
    else mi_miras_config_describe(text, need + 1);
    printf("%s%s:\n%s", first ? "" : "\n", title, text);
    free(text);
}

/* --keys: the field tables of the model, the MIRAS block and its components,
 * then every other mixer kind's that has keys of its own. */
static void print_keys(void)
{
    print_group("the model (--set KEY=VALUE; the mixer is --model)", mi_lm_config_fields, true);
    print_group("a MIRAS preset's block", mi_miras_block_config_fields, false);
    print_group("a MIRAS preset's components and training form (then each bias's own, once "
                "chosen)", NULL, false);
    for (int i = 0; mi_mixer_kind_at(i); i++) {
        const mi_mixer_kind *k = mi_mixer_kind_at(i);
        if (!k->name || !k->fields) continue; /* the presets': above */
        char title[96];
        snprintf(title, sizeof title, "%s (--model %s)", k->name, k->usage);
        print_group(title, k->fields, false);
    }
}

typedef struct options {
    mi_run_config rc;
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
    for (int i = 1; i < argc; i++)
        if (opt_is(argc, argv, &i, "--task", &v)) task = v;
    if (mi_task_from_name(task) < 0) die_usage("--task: %s", mi_error());
    mi_run_config *rc = &o->rc;
    *rc = mi_run_config_default(mi_task_from_name(task));
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
        else if (mi_run_config_knows(arg)) { /* the run settings a checkpoint also holds */
            opt_is(argc, argv, &i, arg, &v);
            if (mi_run_config_set(rc, arg, v) != 0) die_usage("%s", mi_error());
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
    if (opt_given(argc, argv, "--vocab") && (rc->task == MI_TASK_LM || rc->task == MI_TASK_NIAH))
        die_usage("--vocab: the %s task is byte-level (256)", mi_task_name(rc->task));
    if (opt_given(argc, argv, "--seq-len") && rc->task == MI_TASK_CAPACITY)
        die_usage("--seq-len: the capacity task's length is 4 · --pairs");
    if (rc->task == MI_TASK_CAPACITY) rc->seq_len = 4 * rc->pairs;
    bool text = rc->task == MI_TASK_LM || (rc->task == MI_TASK_NIAH && !strcmp(rc->niah, "text"));
    if (text && !rc->data[0]) die_usage("--task %s%s needs --data FILE", mi_task_name(rc->task),
                                        rc->task == MI_TASK_NIAH ? " --niah text" : "");
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

/* Where the run writes, and the last checkpoint it can fall back to. */
typedef struct outputs {
    char dir[4096], log[4200], svg[4200], ckpt[4200], title[256];
    const char *good;      /* the last good checkpoint (NULL: none yet) */
    int64_t good_step;
} outputs;

/* A run: what the loop in main reads and updates. */
typedef struct run {
    options o;
    mi_run_config *rc;     /* o.rc: the options', or the resumed checkpoint's */
    dist d;
    bool lead;             /* rank 0: it logs and checkpoints */
    char rank_name[64];
    mi_scope *keep, *work; /* the run's lifetime; one step's */
    mi_checkpoint_file resumed; /* --resume's checkpoint */
    int64_t step, stop;    /* steps done; the last step of this invocation */
    mi_run_stats st;       /* losses and gradient norms not yet logged */
    mi_run_task task;
    mi_lm lm;
    mi_tensor **params;    /* in the optimizer's order */
    mi_optim *opt;
    mi_schedule sched;
    outputs out;
    train_log log;
    progress bar;
    int64_t tokens;        /* per step, over all ranks */
} run;

/* A NaN or Inf: stop, naming the step and the last good checkpoint. */
static _Noreturn void stop_bad(run *r, const char *what, double value, int64_t step)
{
    progress_clear(&r->bar);
    const char *v = isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf";
    if (!r->out.good)
        die("%s is %s at step %lld; stopping (no checkpoint was saved yet; try a lower --lr)",
            what, v, (long long)step);
    die("%s is %s at step %lld; stopping. The last good checkpoint is %s (step %lld)", what, v,
        (long long)step, r->out.good, (long long)r->out.good_step);
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

/* FNV-1a of every parameter's bytes: equal on all ranks while they agree. */
static uint64_t params_hash(const mi_lm *lm)
{
    uint64_t h = 0;
    for (int i = 0; i < lm->n_params; i++) {
        const mi_tensor *t = lm->params[i].tensor;
        h = (h ^ mi_fnv1a(t->data, t->numel * (int64_t)mi_dtype_size(t->dtype))) *
            0x100000001b3ULL;
    }
    return h;
}

/* The settings that must agree between ranks (each parses its own command
 * line) and the initial parameters, as one checksum. */
static uint64_t run_hash(const mi_run_config *rc, const mi_lm *lm, int64_t step)
{
    double v[] = {(double)rc->batch, (double)rc->accum, (double)rc->seq_len, (double)rc->steps,
                  (double)rc->warmup, (double)rc->task, (double)rc->optim, rc->hp.lr,
                  rc->hp.weight_decay, rc->clip, rc->min_lr, (double)rc->cosine,
                  (double)rc->data_size, (double)rc->data_hash, (double)step};
    return mi_fnv1a(v, (int64_t)sizeof v) ^ params_hash(lm);
}

/* Every rank stops when the ranks' parameters differ (during the run, the
 * message names the step). */
static void check_ranks_agree(run *r, const char *what, bool name_step)
{
    char msg[1024];
    if (r->d.size > 1 && dist_check_same(&r->d, params_hash(&r->lm), what, msg, sizeof msg) != 0) {
        if (name_step) die("step %lld: %s", (long long)r->step, msg);
        die("%s", msg);
    }
}

/* mpirun: join the job; messages name their rank. */
static void start_ranks(run *r, int *argc, char ***argv)
{
    char msg[1024];
    r->d = (dist){.timeout = r->o.comm_timeout, .bucket_bytes = r->o.bucket_kb << 10};
    if (dist_init(&r->d, argc, argv, msg, sizeof msg) != 0) die("%s", msg);
    r->lead = r->d.rank == 0;
    if (r->d.size > 1) {
        snprintf(r->rank_name, sizeof r->rank_name, "miras-train[rank %d]", r->d.rank);
        tool_name = r->rank_name;
        dist_note_checkpoint(NULL, 0);
    }
}

/* --resume: the checkpoint's settings, with the few options a resumed run
 * may change; the step and the log's pending losses and norms. */
static void resume_settings(run *r)
{
    mi_run_config *rc = r->rc;
    mi_checkpoint_file *ck = &r->resumed;
    if (mi_checkpoint_load(ck, r->o.resume) != 0) die("%s", mi_error());
    if (!ck->has_run) die("'%s' holds a model but no training run to resume", r->o.resume);
    char data[sizeof rc->data];
    strcpy(data, rc->data);
    int64_t steps = rc->steps;
    *rc = ck->rc;
    if (data[0]) strcpy(rc->data, data);
    if (r->o.steps_given) rc->steps = steps;
    r->step = ck->step, r->st = ck->stats;
    if (!r->o.out) {
        snprintf(r->out.dir, sizeof r->out.dir, "%s", r->o.resume);
        r->o.out = dirname(r->out.dir);
    }
}

/* The task's text, checked against the one a resumed run trained on. */
static void open_task(run *r)
{
    mi_run_config *rc = r->rc;
    int opened = mi_run_task_open(&r->task, rc);
    if (opened == -2 && !r->o.resume) die_usage("%s", mi_error());
    if (opened != 0) die("%s", mi_error());
    const mi_text *text = r->task.text;
    if (!text) return;
    uint64_t h = mi_fnv1a(text->data, text->size);
    if (r->o.resume && (text->size != rc->data_size || h != rc->data_hash))
        die("'%s' is not the text this run trained on (%lld bytes, hash %016llx); give it with "
            "--data", rc->data, (long long)rc->data_size, (unsigned long long)rc->data_hash);
    rc->data_size = text->size, rc->data_hash = h;
}

/* A value a resumed run read from its checkpoint is a runtime failure; one
 * typed on this command line, a usage error. */
static _Noreturn void die_setting(const run *r, bool from_checkpoint)
{
    if (r->o.resume && from_checkpoint)
        die("checkpoint '%s' has bad run settings: %s", r->o.resume, mi_error());
    if (r->o.resume) die("%s", mi_error());
    die_usage("%s", mi_error());
}

/* The settings (or the checkpoint's), the task, the model, the optimizer and
 * its schedule. */
static void open_run(run *r)
{
    options *o = &r->o;
    mi_run_config *rc = r->rc = &o->rc;
    if (o->resume) resume_settings(r);
    if (!o->out) {
        snprintf(r->out.dir, sizeof r->out.dir, "runs/%s-%s", rc->lm.mixer,
                 mi_task_name(rc->task));
        o->out = r->out.dir;
    }
    if (rc->batch % (r->d.size * rc->accum)) {
        dist_finish(&r->d); /* every rank stops here alike */
        die_usage("--batch (%lld) must be a multiple of the ranks (%d) × --accum (%lld)",
                  (long long)rc->batch, r->d.size, (long long)rc->accum);
    }
    if (rc->steps <= r->step) die_usage("--steps (%lld): the run is already at step %lld",
                                        (long long)rc->steps, (long long)r->step);
    r->stop = o->stop_at && o->stop_at < rc->steps ? o->stop_at : rc->steps;
    if (o->threads) mi_set_threads(o->threads);
    open_task(r);
    if (mi_lm_init(&r->lm, &rc->lm, MI_F32, rc->seed, r->keep) != 0) die_setting(r, false);
    if (o->resume && mi_checkpoint_restore(&r->resumed, &r->lm) != 0) die("%s", mi_error());
    r->lm.checkpoint_blocks = o->recompute;
    r->params = mi_scope_alloc(r->keep, sizeof(mi_tensor *) * (size_t)r->lm.n_params);
    if (!r->params) die("out of memory");
    if (!(r->opt = mi_run_optimizer(&r->lm, rc, r->params))) die_setting(r, true);
    if (o->resume && mi_checkpoint_restore_optim(&r->resumed, r->opt) != 0)
        die("%s", mi_error());
    r->sched = mi_run_config_schedule(rc);
    if (mi_schedule_check(&r->sched) != 0) { /* --steps may be what made it bad */
        if (o->resume && !o->steps_given) die_setting(r, true);
        die_usage("%s", mi_error());
    }
    r->tokens = rc->batch * mi_run_config_tokens(rc);
}

/* The output directory (rank 0's): created, locked, cleared of a killed
 * save's temporary files; the log so far when resuming. */
static void open_outputs(run *r)
{
    char msg[1024];
    outputs *out = &r->out;
    const char *dir = r->o.out;
    if (r->lead && make_dir(dir, msg, sizeof msg) != 0) die("%s", msg);
    if (r->lead && dir_lock(dir, msg, sizeof msg) < 0) die("%s", msg);
    int stale = r->lead ? remove_stale_temps(dir, msg, sizeof msg) : 0;
    if (stale < 0) die("%s", msg);
    if (stale > 0) warning("removed %d stale temporary file%s in '%s' (a save that was killed)",
                           stale, stale > 1 ? "s" : "", dir);
    out->good = r->o.resume, out->good_step = r->step;
    snprintf(out->log, sizeof out->log, "%s/log.csv", dir);
    snprintf(out->svg, sizeof out->svg, "%s/loss.svg", dir);
    snprintf(out->ckpt, sizeof out->ckpt, "%s/ckpt.safetensors", dir);
    snprintf(out->title, sizeof out->title, "%s on %s, %lld parameters", r->rc->lm.mixer,
             mi_task_name(r->rc->task), (long long)mi_lm_param_numel(&r->lm));
    r->log = (train_log){.has_acc = mi_task_has_accuracy(r->rc->task)};
    if (r->lead && r->o.resume && log_read(&r->log, out->log, r->step, msg, sizeof msg) != 0)
        die("%s", msg);
    if (dist_check_same(&r->d, run_hash(r->rc, &r->lm, r->step),
                        "the run's settings and initial parameters (give every rank the same "
                        "options)", msg, sizeof msg) != 0)
        die("%s", msg);
    if (r->o.resume) dist_note_checkpoint(r->o.resume, r->step);
}

static void print_start(const run *r)
{
    const mi_run_config *rc = r->rc;
    if (!r->lead) return;
    if (r->d.active)
        printf("miras-train: %d rank%s (MPI), each forwarding %lld of the %lld sequences a step\n",
               r->d.size, r->d.size > 1 ? "s" : "", (long long)(rc->batch / r->d.size),
               (long long)rc->batch);
    printf("miras-train: %s, %lld parameters, task %s, %lld steps of %lld tokens, out %s\n",
           rc->lm.mixer, (long long)mi_lm_param_numel(&r->lm), mi_task_name(rc->task),
           (long long)rc->steps, (long long)r->tokens, r->o.out);
    if (r->o.resume) printf("resuming from %s at step %lld\n", r->o.resume, (long long)r->step);
    fflush(stdout);
}

/* What one step reports. */
typedef struct step_result {
    double loss, norm, lr;
} step_result;

/* One step: batch → loss → backward → clip → schedule → update. With --accum
 * the gradients of the micro-batches' mean losses / accum add up in the
 * parameters' .grad, and each micro-batch's scope is reset. Rank r takes
 * micro-batches r·accum … (r+1)·accum − 1 of the N·accum and the sums run
 * over the ranks in rank order (dist.h). */
static step_result train_step(run *r)
{
    const mi_run_config *rc = r->rc;
    char msg[1024];
    long long next = (long long)r->step + 1;
    mi_optim_zero_grad(r->opt);
    int64_t parts = r->d.size * rc->accum, micro = rc->batch / parts;
    step_result s = {0};
    for (int64_t a = 0; a < rc->accum; a++) {
        mi_scope_enter(r->work);
        mi_tensor *in, *tg, *loss = NULL;
        int64_t first = r->step * rc->batch + (r->d.rank * rc->accum + a) * micro;
        if (mi_run_task_batch(&r->task, MI_SPLIT_TRAIN, first, micro, &in, &tg) == 0)
            loss = mi_lm_loss(&r->lm, in, tg);
        mi_tensor *scaled = parts > 1 ? mi_mul_scalar(loss, 1.0 / (double)parts) : loss;
        if (!scaled || mi_backward(scaled) != 0) die("step %lld: %s", next, mi_error());
        s.loss += mi_item(loss) / (double)parts;
        mi_scope_leave();
        mi_scope_reset(r->work);
    }
    if (dist_sum_doubles(&r->d, &s.loss, 1, msg, sizeof msg) != 0 ||
        dist_sum_grads(&r->d, r->params, r->lm.n_params, msg, sizeof msg) != 0)
        die("step %lld: %s", next, msg);
    if (!isfinite(s.loss)) stop_bad(r, "the loss", s.loss, r->step + 1);
    mi_scope_enter(r->work);
    /* ‖g‖ = (Σ_i ‖g_i‖²)^½ over all parameters, before clipping */
    s.norm = rc->clip > 0 ? mi_optim_clip_grad_norm(r->opt, rc->clip)
                          : mi_grad_norm(r->params, r->lm.n_params);
    if (s.norm < 0) die("step %lld: %s", next, mi_error());
    if (!isfinite(s.norm)) stop_bad(r, "the gradient norm", s.norm, r->step + 1);
    mi_optim_apply_schedule(r->opt, &r->sched);
    s.lr = rc->hp.lr * mi_optim_lr_scale(r->opt);
    if (mi_optim_step(r->opt) != 0) die("step %lld: %s", next, mi_error());
    mi_scope_leave();
    mi_scope_reset(r->work);
    bool clipped = rc->clip > 0 && s.norm > rc->clip;
    mi_run_stats *st = &r->st;
    st->loss_sum += s.loss, st->loss_n++, st->norm_sum += s.norm, st->norm_n++;
    st->period_norm_sum += s.norm, st->period_n++, st->period_clipped += clipped;
    st->clipped += clipped, st->counted++;
    r->step++;
    return s;
}

/* The validation pass, shared by the ranks (each forwards its share of the
 * micro-batches, the sums run in rank order): val_loss and val_acc. */
static void validate(run *r, log_row *row)
{
    char msg[1024];
    double sums[2];
    int64_t batches = r->rc->eval_batches;
    if (mi_evaluate_share(&r->lm, &r->task, batches, r->work, r->d.rank, r->d.size, sums) != 0)
        die("validation at step %lld: %s", (long long)r->step, mi_error());
    if (dist_sum_doubles(&r->d, sums, 2, msg, sizeof msg) != 0)
        die("validation at step %lld: %s", (long long)r->step, msg);
    double n = (double)(batches * r->rc->accum * r->d.size);
    row->val_loss = sums[0] / n;
    row->val_acc = mi_task_has_accuracy(r->rc->task) ? sums[1] / n : NAN;
    if (!isfinite(row->val_loss)) stop_bad(r, "the validation loss", row->val_loss, r->step);
}

/* A log row (the means since the last one), with a validation pass when due,
 * and its line on stdout. */
static void log_step(run *r, bool eval, double lr)
{
    mi_run_stats *st = &r->st;
    log_row row = {r->step, lr, st->loss_sum / (double)st->loss_n,
                   st->norm_sum / (double)st->norm_n, NAN, NAN};
    st->loss_sum = 0, st->loss_n = 0, st->norm_sum = 0, st->norm_n = 0;
    if (eval) validate(r, &row);
    log_add(&r->log, row);
    char eta[32], acc[32] = "";
    progress_eta(&r->bar, r->step, eta, sizeof eta);
    if (!isnan(row.val_acc)) snprintf(acc, sizeof acc, "  acc %.3f", row.val_acc);
    progress_clear(&r->bar);
    check_ranks_agree(r, "the parameters' checksum (they diverged)", true);
    long long step = (long long)r->step, steps = (long long)r->rc->steps;
    if (r->lead && eval)
        printf("step %lld/%lld  loss %.4f  norm %.4f  val loss %.4f%s\n", step, steps,
               row.train_loss, row.grad_norm, row.val_loss, acc);
    else if (r->lead && !r->bar.tty)
        printf("step %lld/%lld  loss %.4f  norm %.4f  lr %.2e  %.0f tok/s  ETA %s\n", step, steps,
               row.train_loss, row.grad_norm, lr, progress_rate(&r->bar, r->step, r->tokens), eta);
}

/* At a validation: when most steps since the last one were clipped, say so
 * once, then start the next period. */
static void warn_if_mostly_clipped(run *r)
{
    mi_run_stats *st = &r->st;
    if (r->lead && 2 * st->period_clipped > st->period_n)
        warning("%lld of %lld steps since step %lld were clipped (grad norm mean %.3g > --clip "
                "%g); consider a lower --lr", (long long)st->period_clipped,
                (long long)st->period_n, (long long)(r->step - st->period_n),
                st->period_norm_sum / (double)st->period_n, r->rc->clip);
    st->period_norm_sum = 0, st->period_n = 0, st->period_clipped = 0;
}

/* The log and the plot, then the checkpoint, each written whole or not at
 * all: the log first, so a checkpoint never names a step its log lacks (a
 * resume drops the rows past its checkpoint's step). Rank 0 writes. */
static void save(run *r)
{
    outputs *out = &r->out;
    if (!params_finite(&r->lm)) stop_bad(r, "a parameter", NAN, r->step);
    if (!r->lead) {
        dist_note_checkpoint_pending(out->ckpt, r->step); /* rank 0 writes it */
        return;
    }
    char msg[1024];
    size_t n;
    char *csv = log_csv(&r->log, &n);
    int status = write_atomic(out->log, csv, n, msg, sizeof msg);
    free(csv);
    char *svg = status == 0 ? log_svg(&r->log, out->title, &n) : NULL;
    if (status == 0) status = write_atomic(out->svg, svg, n, msg, sizeof msg);
    free(svg);
    if (status != 0) die("%s", msg);
    if (mi_checkpoint_save(out->ckpt, &r->lm, r->opt, r->rc, r->step, &r->st) != 0)
        die("cannot save checkpoint '%s': %s", out->ckpt, mi_error());
    out->good = out->ckpt, out->good_step = r->step;
    dist_note_checkpoint(out->ckpt, r->step);
}

/* The last line (with the clipped steps of the whole run), the ranks'
 * agreement, and --save-every-rank's files. */
static void finish(run *r)
{
    const mi_run_config *rc = r->rc;
    const mi_run_stats *st = &r->st;
    progress_clear(&r->bar);
    char clip_note[160] = "", since[48] = "";
    if (st->counted < r->step) /* resumed from a checkpoint older than the count */
        snprintf(since, sizeof since, " since step %lld", (long long)(r->step - st->counted));
    if (rc->clip > 0)
        snprintf(clip_note, sizeof clip_note, "; %lld of %lld steps%s clipped (--clip %g)",
                 (long long)st->clipped, (long long)st->counted, since, rc->clip);
    double seconds = now_seconds() - r->bar.t0;
    if (r->lead)
        printf("%s at step %lld: %s, %s, %s (%.1f s)%s\n",
               r->step == rc->steps ? "done" : "stopped", (long long)r->step, r->out.ckpt,
               r->out.log, r->out.svg, seconds, clip_note);
    check_ranks_agree(r, "the final parameters' checksum (they diverged)", false);
    if (r->lead && r->d.size > 1)
        printf("%d ranks: parameters identical (checksum %016llx); summing gradients took "
               "%.2f s of %.2f s (%.1f%%) on rank 0\n", r->d.size,
               (unsigned long long)params_hash(&r->lm), r->d.comm_seconds, seconds,
               100 * r->d.comm_seconds / (seconds > 0 ? seconds : 1));
    if (!r->lead && r->o.save_every_rank) {
        snprintf(r->out.ckpt, sizeof r->out.ckpt, "%s/ckpt.rank%d.safetensors", r->o.out,
                 r->d.rank);
        if (mi_checkpoint_save(r->out.ckpt, &r->lm, r->opt, rc, r->step, st) != 0)
            die("cannot save checkpoint '%s': %s", r->out.ckpt, mi_error());
    }
    log_free(&r->log);
    mi_optim_free(r->opt);
    mi_scope_leave();
    mi_scope_free(r->work);
    mi_scope_free(r->keep);
    dist_finish(&r->d);
}

int main(int argc, char **argv)
{
    tool_start("miras-train");
    static run r; /* large (paths): not on the stack */
    parse(argc, argv, &r.o);
    start_ranks(&r, &argc, &argv);
    r.keep = mi_scope_new("run"), r.work = mi_scope_new("step");
    if (!r.keep || !r.work) die("out of memory");
    mi_scope_enter(r.keep);
    open_run(&r);     /* settings (or the checkpoint's), task, model, optimizer, schedule */
    open_outputs(&r); /* the directory, its lock, the log so far */
    print_start(&r);
    progress_start(&r.bar, r.step, r.stop);
    if (!r.lead) r.bar.tty = false;
    while (r.step < r.stop) {
        step_result s = train_step(&r);
        bool eval = r.step % r.rc->eval_every == 0 || r.step == r.rc->steps;
        if (r.step % r.rc->log_every == 0 || eval) log_step(&r, eval, s.lr);
        if (eval) warn_if_mostly_clipped(&r);
        if (eval || r.step == r.stop) save(&r);
        if (r.lead) progress_show(&r.bar, r.step, s.loss, s.norm, r.tokens);
    }
    finish(&r);
    return 0;
}
