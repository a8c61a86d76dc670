/* A run's configuration (train.h): the task names, the defaults, the one
 * field table of the "train.*" settings, and the metadata a checkpoint holds
 * for them, written and read back. */
#include "train_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const task_names[MI_TASK_COUNT] = {"lm", "mqar", "niah", "capacity"};

const char *mi_task_name(mi_task_kind k)
{
    return (unsigned)k < MI_TASK_COUNT ? task_names[k] : NULL;
}

int mi_task_from_name(const char *name)
{
    for (int i = 0; name && i < MI_TASK_COUNT; i++)
        if (!strcmp(name, task_names[i])) return i;
    return mi_error_set("'%s' is not lm, mqar, niah or capacity", name ? name : "(null)"), -1;
}

bool mi_task_has_accuracy(mi_task_kind k) { return k != MI_TASK_LM; }

int train_fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    mi_error_clear();
    mi_error_set("%s", buf);
    return -1;
}

mi_run_config mi_run_config_default(mi_task_kind task)
{
    mi_run_config rc = {
        .lm = mi_lm_config_default(), .task = task, .seq_len = 64, .batch = 16, .accum = 1,
        .steps = 1000,
        .warmup = 100, .cosine = true, .min_lr = 0.1, .clip = 1.0, .eval_every = 100,
        .eval_batches = 4, .log_every = 10, .optim = MI_OPT_ADAMW,
        .hp = mi_optim_defaults(MI_OPT_ADAMW), .seed = 1};
    strcpy(rc.niah, "passkey");
    if (task == MI_TASK_MQAR) rc.lm.vocab = 8192, rc.pairs = 4;
    if (task == MI_TASK_CAPACITY) rc.lm.vocab = 8192, rc.pairs = 16, rc.seq_len = 64;
    if (task == MI_TASK_NIAH) rc.seq_len = 256;
    return rc;
}

mi_schedule mi_run_config_schedule(const mi_run_config *rc)
{
    double floor = rc->cosine ? rc->min_lr * rc->hp.lr : rc->hp.lr; /* constant: no descent */
    return (mi_schedule){MI_SCHED_WARMUP_COSINE, rc->hp.lr, floor, rc->warmup, rc->steps};
}

int64_t mi_run_config_tokens(const mi_run_config *rc)
{
    if (rc->task != MI_TASK_NIAH) return rc->seq_len;
    mi_niah_config c = train_niah_config(rc);
    int64_t answer = mi_niah_answer_bytes(&c);
    return answer < 0 ? -1 : rc->seq_len + answer;
}

uint64_t mi_fnv1a(const void *bytes, int64_t n)
{
    const uint8_t *p = bytes;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* ---------------------------------------------------------------- metadata
 * Every run setting is one "train.*" key of the field table below (the
 * library's mi_field: type, member, range); reals are written with %.17g so
 * they round-trip exactly. A setting that miras-train also takes as an
 * option carries the option's name, so a value typed on the command line and
 * one read back from a checkpoint pass the same parser and range. The
 * defaults depend on the task (mi_run_config_default). */
typedef struct setting {
    mi_field f;               /* key "train.…", type, member, range */
    const char *flag;         /* the miras-train option (NULL: none) */
    bool optional;            /* absent from older checkpoints: keeps its default */
    unsigned tasks;           /* bits of the tasks that read it; 0: every task. A task that
                                 ignores it keeps 0 there, which is not range-checked */
} setting;

static const char *const task_choices[] = {"lm", "mqar", "niah", "capacity", NULL};
static const char *const niah_kinds[] = {"passkey", "word", "uuid", "text"};

/* --niah: one of the kinds, kept as text */
static int niah_parse(const mi_field *f, void *obj, const char *text)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(text, niah_kinds[i])) {
            strcpy((char *)obj + f->offset, text);
            return 0;
        }
    return mi_error_set("'%s' is not passkey, word, uuid or text", text), -1;
}

static int text_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    return mi_field_printf(f, buf, n, "%s", (const char *)obj + f->offset);
}

/* --optim and train.optim: an optimizer's name */
static int optim_parse(const mi_field *f, void *obj, const char *text)
{
    int k = mi_optim_kind_from_name(text);
    if (k < 0) return -1;
    *(mi_optim_kind *)((char *)obj + f->offset) = (mi_optim_kind)k;
    return 0;
}

static int optim_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    const char *name = mi_optim_kind_name(*(const mi_optim_kind *)((const char *)obj + f->offset));
    return mi_field_printf(f, buf, n, "%s", name ? name : "");
}

#define RC mi_run_config
#define TASK_BIT(k) (1u << (k))
#define BIG 9.007199254740992e15 /* steps: step · batch must not overflow */
#define I64_MAX_D 9.2233720368547748e18
#define WHOLE(key, flag, member, lo, hi) {MI_FIELD_I64_AT(RC, key, member, NULL, lo, hi, NULL), flag, false, 0}
#define REAL(key, flag, member, lo, hi) \
    {MI_FIELD_REAL_AT(RC, key, member, NULL, lo, hi, 0, NULL), flag, false, 0}
/* no range: the optimizer's hyperparameters, which mi_optim_new checks */
#define FREE(field_macro) {field_macro, NULL, false, 0}
#define UNRANGED(T, type, key, member) \
    {key, type, MI_FIELD_AT_(T, member), NULL, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL}
_Static_assert(sizeof(mi_task_kind) == sizeof(int), "the task enum is stored as an int");
_Static_assert(sizeof(mi_nl_output) == sizeof(int), "the output enum is stored as an int");
_Static_assert(sizeof(mi_nl_form) == sizeof(int), "the nl_form enum is stored as an int");
static const setting settings[] = {
    FREE(MI_FIELD_CHOICE_AT(RC, "train.task", task, NULL, task_choices, NULL)),
    {MI_FIELD_TEXT_AT(RC, "train.data", data, NULL, NULL), "--data", false, 0},
    WHOLE("train.data_size", NULL, data_size, 0, I64_MAX_D),
    FREE(UNRANGED(RC, MI_FIELD_U64, "train.data_hash", data_hash)),
    WHOLE("train.seq_len", "--seq-len", seq_len, 1, 1 << 24),
    {MI_FIELD_I64_AT(RC, "train.pairs", pairs, NULL, 1, 1 << 20, NULL), "--pairs", false,
     TASK_BIT(MI_TASK_MQAR) | TASK_BIT(MI_TASK_CAPACITY)},
    {MI_FIELD_CUSTOM_AT(RC, "train.niah", niah, NULL, niah_parse, text_format, NULL), "--niah",
     false, 0},
    WHOLE("train.batch", "--batch", batch, 1, 1 << 20),
    {MI_FIELD_I64_AT(RC, "train.accum", accum, NULL, 1, 1 << 20, NULL), "--accum", true, 0},
    WHOLE("train.steps", "--steps", steps, 1, BIG),
    WHOLE("train.warmup", "--warmup", warmup, 0, BIG),
    FREE(MI_FIELD_BOOL_AT(RC, "train.cosine", cosine, NULL, NULL)),
    REAL("train.min_lr", NULL, min_lr, 0, 1),
    REAL("train.clip", "--clip", clip, 0, INFINITY),
    WHOLE("train.eval_every", "--eval-every", eval_every, 1, I64_MAX_D),
    WHOLE("train.eval_batches", "--eval-batches", eval_batches, 1, 1 << 20),
    WHOLE("train.log_every", "--log-every", log_every, 1, I64_MAX_D),
    {MI_FIELD_U64_AT(RC, "train.seed", seed, NULL, 0, I64_MAX_D, NULL), "--seed", false, 0},
    FREE(MI_FIELD_CUSTOM_AT(RC, "train.optim", optim, NULL, optim_parse, optim_format, NULL)),
    REAL("train.opt.lr", "--lr", hp.lr, 0, INFINITY),
    REAL("train.opt.weight_decay", "--weight-decay", hp.weight_decay, 0, INFINITY),
    /* the optimizer's own hyperparameters: mi_optim_new checks them */
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.momentum", hp.momentum)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.dampening", hp.dampening)),
    FREE(MI_FIELD_BOOL_AT(RC, "train.opt.nesterov", hp.nesterov, NULL, NULL)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.beta1", hp.beta1)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.beta2", hp.beta2)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.eps", hp.eps)),
    FREE(UNRANGED(RC, MI_FIELD_INT, "train.opt.ns_steps", hp.ns_steps)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.aux_lr", hp.aux_lr)),
    FREE(MI_FIELD_BOOL_AT(RC, "train.opt.adamw_only", hp.adamw_only, NULL, NULL)),
    FREE(MI_FIELD_BOOL_AT(RC, "train.opt.precond", hp.precond, NULL, NULL)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.delta", hp.delta)),
    FREE(UNRANGED(RC, MI_FIELD_INT, "train.opt.mem_hidden", hp.mem_hidden)),
    FREE(UNRANGED(RC, MI_FIELD_REAL, "train.opt.mem_lr", hp.mem_lr)),
    /* enums: their names' values are their range, whichever optimizer reads them */
    FREE(MI_FIELD_INT_AT(RC, "train.opt.output", hp.output, NULL, MI_NL_OUT_IDENTITY,
                         MI_NL_OUT_NEWTON_SCHULZ, NULL)),
    FREE(UNRANGED(RC, MI_FIELD_U64, "train.opt.seed", hp.seed)),
    /* optional: absent, the run predates it and took the normalised forms (train_run_from_metadata) */
    {MI_FIELD_INT_AT(RC, "train.opt.nl_form", hp.nl_form, NULL, MI_NL_FORM_PAPER,
                     MI_NL_FORM_NORMALISED, NULL), NULL, true, 0},
};
#define N_SETTINGS ((int)(sizeof settings / sizeof settings[0]))

static char *scope_text(const char *s)
{
    char *t = mi_scope_alloc(mi_scope_current(), strlen(s) + 1);
    if (t) strcpy(t, s);
    return t;
}

bool mi_run_config_knows(const char *name)
{
    for (int i = 0; i < N_SETTINGS; i++)
        if (settings[i].flag && !strcmp(name, settings[i].flag)) return true;
    return false;
}

int mi_run_config_set(mi_run_config *rc, const char *name, const char *text)
{
    for (int i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        bool by_flag = s->flag && !strcmp(name, s->flag);
        if (!by_flag && strcmp(name, s->f.key)) continue;
        /* named as it was given; a checkpoint of a task that ignores the setting holds 0
         * there, which is not range-checked (any other value is) */
        mi_field f = s->f;
        f.key = name;
        if (!by_flag && s->tasks && !(s->tasks & TASK_BIT(rc->task)) && !strcmp(text, "0"))
            f.flags &= ~(unsigned)MI_FIELD_RANGED;
        mi_error_clear();
        if (mi_field_parse(&f, rc, NULL, text) == 0) return 0;
        return train_fail("%s", mi_error());
    }
    return train_fail("%s: no such run setting", name);
}

/* The accumulators of run_stats, one "train.*" key each; a checkpoint written
 * before the gradient-norm log has only the first two. */
typedef struct stat_key {
    const char *key;
    size_t offset;
    bool real;                /* a double (%.17g, round-trips), else an int64_t count */
} stat_key;
#define STAT(key, member, real) {key, offsetof(mi_run_stats, member), real}
static const stat_key stat_keys[] = {
    STAT("train.loss_sum", loss_sum, true), STAT("train.loss_count", loss_n, false),
    STAT("train.grad_norm_sum", norm_sum, true), STAT("train.grad_norm_count", norm_n, false),
    STAT("train.period_grad_norm_sum", period_norm_sum, true),
    STAT("train.period_steps", period_n, false),
    STAT("train.period_clipped", period_clipped, false),
    STAT("train.clipped_steps", clipped, false), STAT("train.counted_steps", counted, false),
};
#define N_STATS ((int)(sizeof stat_keys / sizeof stat_keys[0]))
#define N_LOSS_STATS 2 /* required; the others are all present or all absent */

int mi_run_config_metadata(const mi_run_config *rc, int64_t step, const mi_run_stats *stats,
                           const mi_metadata *extra, int n_extra, mi_metadata *out)
{
    int total = N_SETTINGS + N_STATS + 3;
    for (int i = 0; i < n_extra; i++) total += extra[i].count;
    const char **k = mi_scope_alloc(mi_scope_current(), sizeof(char *) * (size_t)total);
    const char **v = mi_scope_alloc(mi_scope_current(), sizeof(char *) * (size_t)total);
    if (!k || !v) return mi_error_set("checkpoint: out of memory"), -1;
    int m = 0;
    for (int i = 0; i < n_extra; i++)
        for (int j = 0; j < extra[i].count; j++, m++) {
            k[m] = extra[i].keys[j];
            v[m] = extra[i].values[j];
        }
    char buf[1100];
    k[m] = "train.format", v[m++] = "1";
    snprintf(buf, sizeof buf, "%" PRId64, step);
    k[m] = "train.step", v[m++] = scope_text(buf);
    snprintf(buf, sizeof buf, "%" PRId64, step * rc->batch);
    k[m] = "train.next_example", v[m++] = scope_text(buf);
    for (int i = 0; i < N_STATS; i++) {
        const void *p = (const char *)stats + stat_keys[i].offset;
        if (stat_keys[i].real) snprintf(buf, sizeof buf, "%.17g", *(const double *)p);
        else snprintf(buf, sizeof buf, "%" PRId64, *(const int64_t *)p);
        k[m] = stat_keys[i].key, v[m++] = scope_text(buf);
    }
    for (int i = 0; i < N_SETTINGS; i++) {
        if (mi_field_format(&settings[i].f, rc, buf, sizeof buf) != 0) return -1;
        k[m] = settings[i].f.key, v[m++] = scope_text(buf);
    }
    for (int i = 0; i < m; i++)
        if (!v[i]) return mi_error_set("checkpoint: out of memory"), -1;
    *out = (mi_metadata){.count = m, .keys = k, .values = v};
    return 0;
}

/* The accumulators back: sums finite and ≥ 0, counts in [0, step], clipped
 * steps no more than those counted. */
static int run_stats_parse(mi_checkpoint_file *c, const mi_safetensors *st)
{
    mi_run_stats *s = &c->stats;
    *s = (mi_run_stats){0};
    int present = 0;
    for (int i = 0; i < N_STATS; i++) present += mi_safetensors_meta(st, stat_keys[i].key) != NULL;
    for (int i = 0; i < N_STATS; i++) {
        const char *text = mi_safetensors_meta(st, stat_keys[i].key);
        if (!text && (i < N_LOSS_STATS || present > N_LOSS_STATS))
            return train_fail("the metadata lacks '%s'", stat_keys[i].key);
        if (!text) continue;
        void *p = (char *)s + stat_keys[i].offset;
        char *end;
        errno = 0;
        bool ok;
        if (stat_keys[i].real) {
            double v = strtod(text, &end);
            ok = isfinite(v) && v >= 0;
            *(double *)p = v;
        } else {
            long long v = strtoll(text, &end, 10);
            ok = v >= 0 && v <= c->step;
            *(int64_t *)p = v;
        }
        if (errno || end == text || *end || !ok) {
            if (stat_keys[i].real)
                return train_fail("%s: '%s' is not a finite number >= 0", stat_keys[i].key,
                                  text);
            return train_fail("%s: '%s' is not a whole number in [0, %lld] (train.step)",
                              stat_keys[i].key, text, (long long)c->step);
        }
    }
    if (s->period_clipped > s->period_n || s->clipped > s->counted)
        return train_fail("train.period_clipped or train.clipped_steps: more "
                          "steps clipped than counted");
    return 0;
}

/* Whether key is a "train.*" key that mi_run_config_metadata writes. */
static bool run_key_known(const char *key)
{
    if (!strcmp(key, "train.format") || !strcmp(key, "train.step") ||
        !strcmp(key, "train.next_example"))
        return true;
    for (int i = 0; i < N_STATS; i++)
        if (!strcmp(key, stat_keys[i].key)) return true;
    for (int i = 0; i < N_SETTINGS; i++)
        if (!strcmp(key, settings[i].f.key)) return true;
    return false;
}

/* The run settings back from a checkpoint's metadata. */
int train_run_from_metadata(mi_checkpoint_file *c, const mi_safetensors *st)
{
    mi_run_config *rc = &c->rc;
    int64_t *step = &c->step;
    const char *fmt = mi_safetensors_meta(st, "train.format");
    if (strcmp(fmt, "1")) return train_fail("train.format is '%s', not 1", fmt);
    for (int i = 0; i < N_SETTINGS; i++) {
        const char *key = settings[i].f.key, *text = mi_safetensors_meta(st, key);
        if (!text && settings[i].optional) continue;
        if (!text) return train_fail("the metadata lacks '%s'", key);
        if (mi_run_config_set(rc, key, text) != 0) return -1;
    }
    /* Eq. 22 and 23 took their normalised forms before train.opt.nl_form was written */
    if (!mi_safetensors_meta(st, "train.opt.nl_form")) rc->hp.nl_form = MI_NL_FORM_NORMALISED;
    if (rc->batch < 1 || rc->accum < 1 || rc->batch % rc->accum)
        return train_fail("train.batch (%lld) and train.accum (%lld): the batch must be a "
                          "positive multiple of accum", (long long)rc->batch,
                          (long long)rc->accum);
    if (rc->warmup >= rc->steps)
        return train_fail("train.warmup (%lld) must be less than train.steps (%lld)",
                          (long long)rc->warmup, (long long)rc->steps);
    const char *s = mi_safetensors_meta(st, "train.step");
    char *end;
    *step = s ? strtoll(s, &end, 10) : -1;
    if (!s || end == s || *end || *step < 0 || *step > rc->steps)
        return train_fail("train.step: '%s' is not a whole number in [0, %lld] (train.steps)",
                          s ? s : "(missing)", (long long)rc->steps);
    /* where the task streams go on: written for the reader, and a value that
     * disagrees with the step says the file was edited or is not what it claims */
    const char *next = mi_safetensors_meta(st, "train.next_example");
    int64_t want;
    bool overflow = __builtin_mul_overflow(*step, rc->batch, &want);
    long long got = next ? strtoll(next, &end, 10) : -1;
    if (!next || end == next || *end || overflow || got != want)
        return train_fail("train.next_example: '%s' is not train.step · train.batch = "
                          "%lld · %lld = %lld", next ? next : "(missing)", (long long)*step,
                          (long long)rc->batch, (long long)want);
    for (int i = 0; i < st->metadata.count; i++)
        if (!strncmp(st->metadata.keys[i], "train.", 6) && !run_key_known(st->metadata.keys[i]))
            return train_fail("unknown metadata key '%s'", st->metadata.keys[i]);
    return run_stats_parse(c, st);
}

