/* Run settings, task batches and checkpoints (ckpt.h). */
#include "ckpt.h"
#include "common.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *const task_names[4] = {"lm", "mqar", "niah", "capacity"};

int task_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, task_names[i])) return i;
    return -1;
}

bool task_has_accuracy(task_kind k) { return k != TASK_LM; }

run_config run_config_default(task_kind task)
{
    run_config rc = {
        .lm = mi_lm_config_default(), .task = task, .seq_len = 64, .batch = 16, .accum = 1,
        .steps = 1000,
        .warmup = 100, .cosine = true, .min_lr = 0.1, .clip = 1.0, .eval_every = 100,
        .eval_batches = 4, .log_every = 10, .optim = MI_OPT_ADAMW,
        .hp = mi_optim_defaults(MI_OPT_ADAMW), .seed = 1};
    strcpy(rc.niah, "passkey");
    if (task == TASK_MQAR) rc.lm.vocab = 8192, rc.pairs = 4;
    if (task == TASK_CAPACITY) rc.lm.vocab = 8192, rc.pairs = 16, rc.seq_len = 64;
    if (task == TASK_NIAH) rc.seq_len = 256;
    return rc;
}

uint64_t fnv1a(const uint8_t *p, int64_t n)
{
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
 * defaults depend on the task (run_config_default). */
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

#define RC run_config
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
_Static_assert(sizeof(task_kind) == sizeof(int), "the task enum is stored as an int");
_Static_assert(sizeof(mi_nl_output) == sizeof(int), "the output enum is stored as an int");
_Static_assert(sizeof(mi_nl_form) == sizeof(int), "the nl_form enum is stored as an int");
static const setting settings[] = {
    FREE(MI_FIELD_CHOICE_AT(RC, "train.task", task, NULL, task_choices, NULL)),
    {MI_FIELD_TEXT_AT(RC, "train.data", data, NULL, NULL), "--data", false, 0},
    WHOLE("train.data_size", NULL, data_size, 0, I64_MAX_D),
    FREE(UNRANGED(RC, MI_FIELD_U64, "train.data_hash", data_hash)),
    WHOLE("train.seq_len", "--seq-len", seq_len, 1, 1 << 24),
    {MI_FIELD_I64_AT(RC, "train.pairs", pairs, NULL, 1, 1 << 20, NULL), "--pairs", false,
     TASK_BIT(TASK_MQAR) | TASK_BIT(TASK_CAPACITY)},
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
    /* optional: absent, the run predates it and took the normalised forms (run_config_parse) */
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

bool run_config_knows(const char *name)
{
    for (int i = 0; i < N_SETTINGS; i++)
        if (settings[i].flag && !strcmp(name, settings[i].flag)) return true;
    return false;
}

int run_config_set(run_config *rc, const char *name, const char *text, char *msg, size_t n)
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
        snprintf(msg, n, "%s", mi_error());
        mi_error_clear();
        return -1;
    }
    return snprintf(msg, n, "%s: no such run setting", name), -1;
}

/* The accumulators of run_stats, one "train.*" key each; a checkpoint written
 * before the gradient-norm log has only the first two. */
typedef struct stat_key {
    const char *key;
    size_t offset;
    bool real;                /* a double (%.17g, round-trips), else an int64_t count */
} stat_key;
#define STAT(key, member, real) {key, offsetof(run_stats, member), real}
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

int run_config_metadata(const run_config *rc, int64_t step, const run_stats *stats,
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
static int run_stats_parse(ckpt *c, const mi_safetensors *st, char *msg, size_t n)
{
    run_stats *s = &c->stats;
    *s = (run_stats){0};
    int present = 0;
    for (int i = 0; i < N_STATS; i++) present += mi_safetensors_meta(st, stat_keys[i].key) != NULL;
    for (int i = 0; i < N_STATS; i++) {
        const char *text = mi_safetensors_meta(st, stat_keys[i].key);
        if (!text && (i < N_LOSS_STATS || present > N_LOSS_STATS))
            return snprintf(msg, n, "the metadata lacks '%s'", stat_keys[i].key), -1;
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
                return snprintf(msg, n, "%s: '%s' is not a finite number >= 0", stat_keys[i].key,
                                text), -1;
            return snprintf(msg, n, "%s: '%s' is not a whole number in [0, %lld] (train.step)",
                            stat_keys[i].key, text, (long long)c->step), -1;
        }
    }
    if (s->period_clipped > s->period_n || s->clipped > s->counted)
        return snprintf(msg, n, "train.period_clipped or train.clipped_steps: more "
                        "steps clipped than counted"), -1;
    return 0;
}

/* Whether key is a "train.*" key that run_config_metadata writes. */
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
static int run_config_parse(ckpt *c, const mi_safetensors *st, char *msg, size_t n)
{
    run_config *rc = &c->rc;
    int64_t *step = &c->step;
    const char *fmt = mi_safetensors_meta(st, "train.format");
    if (strcmp(fmt, "1")) return snprintf(msg, n, "train.format is '%s', not 1", fmt), -1;
    for (int i = 0; i < N_SETTINGS; i++) {
        const char *key = settings[i].f.key, *text = mi_safetensors_meta(st, key);
        if (!text && settings[i].optional) continue;
        if (!text) return snprintf(msg, n, "the metadata lacks '%s'", key), -1;
        if (run_config_set(rc, key, text, msg, n) != 0) return -1;
    }
    /* Eq. 22 and 23 took their normalised forms before train.opt.nl_form was written */
    if (!mi_safetensors_meta(st, "train.opt.nl_form")) rc->hp.nl_form = MI_NL_FORM_NORMALISED;
    if (rc->batch < 1 || rc->accum < 1 || rc->batch % rc->accum)
        return snprintf(msg, n, "train.batch (%lld) and train.accum (%lld): the batch must be a "
                        "positive multiple of accum", (long long)rc->batch,
                        (long long)rc->accum), -1;
    if (rc->warmup >= rc->steps)
        return snprintf(msg, n, "train.warmup (%lld) must be less than train.steps (%lld)",
                        (long long)rc->warmup, (long long)rc->steps), -1;
    const char *s = mi_safetensors_meta(st, "train.step");
    char *end;
    *step = s ? strtoll(s, &end, 10) : -1;
    if (!s || end == s || *end || *step < 0 || *step > rc->steps)
        return snprintf(msg, n, "train.step: '%s' is not a whole number in [0, %lld] (train.steps)",
                        s ? s : "(missing)", (long long)rc->steps), -1;
    /* where the task streams go on: written for the reader, and a value that
     * disagrees with the step says the file was edited or is not what it claims */
    const char *next = mi_safetensors_meta(st, "train.next_example");
    int64_t want;
    bool overflow = __builtin_mul_overflow(*step, rc->batch, &want);
    long long got = next ? strtoll(next, &end, 10) : -1;
    if (!next || end == next || *end || overflow || got != want)
        return snprintf(msg, n, "train.next_example: '%s' is not train.step · train.batch = "
                        "%lld · %lld = %lld", next ? next : "(missing)", (long long)*step,
                        (long long)rc->batch, (long long)want), -1;
    for (int i = 0; i < st->metadata.count; i++)
        if (!strncmp(st->metadata.keys[i], "train.", 6) && !run_key_known(st->metadata.keys[i]))
            return snprintf(msg, n, "unknown metadata key '%s'", st->metadata.keys[i]), -1;
    return run_stats_parse(c, st, msg, n);
}

/* ---------------------------------------------------------------- tasks */

int task_open(run_task *t, const run_config *rc, char *msg, size_t n)
{
    *t = (run_task){.rc = rc};
    bool text = rc->task == TASK_LM || (rc->task == TASK_NIAH && !strcmp(rc->niah, "text"));
    if (text) {
        if (!(t->text = mi_text_load(rc->data))) return snprintf(msg, n, "%s", mi_error()), -1;
        if (t->text->valid_begin < rc->seq_len + 1 ||
            t->text->size - t->text->valid_begin < rc->seq_len + 1)
            return snprintf(msg, n, "'%s' (%lld bytes) is too short for windows of %lld bytes: "
                            "both splits (90%% / 10%%) must hold seq-len + 1 bytes", rc->data,
                            (long long)t->text->size, (long long)rc->seq_len), -2;
    }
    int rc_check = 0;
    switch (rc->task) {
    case TASK_LM: break;
    case TASK_MQAR:
        t->mqar = mi_mqar_config_default();
        t->mqar.vocab = rc->lm.vocab, t->mqar.seq_len = rc->seq_len, t->mqar.pairs = rc->pairs;
        rc_check = mi_mqar_check(&t->mqar);
        break;
    case TASK_CAPACITY:
        t->capacity = (mi_capacity_config){.vocab = rc->lm.vocab, .pairs = rc->pairs};
        rc_check = mi_capacity_check(&t->capacity);
        break;
    case TASK_NIAH:
        t->niah = mi_niah_config_default();
        t->niah.length = rc->seq_len;
        t->niah.kind = !strcmp(rc->niah, "text") ? MI_NIAH_TEXT
                     : !strcmp(rc->niah, "passkey") ? MI_NIAH_PASSKEY : MI_NIAH_WORD;
        t->niah.uuid = !strcmp(rc->niah, "uuid");
        if (t->text) t->niah.text = t->text->data, t->niah.text_size = t->text->size;
        rc_check = mi_niah_check(&t->niah);
        break;
    }
    if (rc_check == 0 && rc->task == TASK_NIAH) { /* the length must hold needle and question */
        mi_scope *tmp = mi_scope_new("niah-check");
        mi_scope_enter(tmp);
        mi_niah_sample s;
        rc_check = mi_niah_example(&t->niah, rc->seed, MI_SPLIT_TRAIN, 0, &s);
        mi_scope_leave();
        mi_scope_free(tmp);
    }
    if (rc_check != 0) return snprintf(msg, n, "%s", mi_error()), -2;
    return 0;
}

/* NIAH: inputs = prompt ++ answer, padded with '\n' to prompt + NIAH_ANSWER_MAX
 * bytes; the targets are the answer's bytes, each on the position before it. */
static int niah_batch(const run_task *t, mi_split split, int64_t first, int64_t B, mi_tensor **in,
                      mi_tensor **tg)
{
    int64_t L = t->niah.length, T = L + NIAH_ANSWER_MAX;
    *in = mi_full(MI_I64, MI_SHAPE(B, T), '\n');
    *tg = mi_full(MI_I64, MI_SHAPE(B, T), MI_IGNORE_INDEX);
    if (!*in || !*tg) return -1;
    for (int64_t b = 0; b < B; b++) {
        mi_niah_sample s;
        if (mi_niah_example(&t->niah, t->rc->seed, split, first + b, &s) != 0) return -1;
        int64_t *x = (int64_t *)(*in)->data + b * T, *y = (int64_t *)(*tg)->data + b * T;
        memcpy(x, s.tokens->data, sizeof(int64_t) * (size_t)L);
        for (int64_t j = 0; s.answer[j] && j < NIAH_ANSWER_MAX; j++) {
            x[L + j] = (uint8_t)s.answer[j];
            y[L - 1 + j] = (uint8_t)s.answer[j];
        }
    }
    return 0;
}

int task_batch(const run_task *t, mi_split split, int64_t first, int64_t batch, mi_tensor **inputs,
               mi_tensor **targets)
{
    const run_config *rc = t->rc;
    switch (rc->task) {
    case TASK_LM:
        return mi_text_batch(t->text, rc->seq_len, rc->seed, split, first, batch, inputs, targets);
    case TASK_MQAR: return mi_mqar_batch(&t->mqar, rc->seed, split, first, batch, inputs, targets);
    case TASK_CAPACITY:
        return mi_capacity_batch(&t->capacity, rc->seed, split, first, batch, inputs, targets);
    case TASK_NIAH: return niah_batch(t, split, first, batch, inputs, targets);
    }
    return -1;
}

int evaluate_share(const mi_lm *lm, const run_task *t, int64_t batches, mi_scope *scratch,
                   int part, int parts, double sums[2])
{
    mi_scope *s = scratch ? scratch : mi_scope_new("eval");
    if (!s) return -1;
    bool was = mi_set_grad_enabled(false);
    double sum_loss = 0, sum_acc = 0;
    int rc = 0;
    int64_t micro = t->rc->batch / (t->rc->accum * parts), share = batches * t->rc->accum;
    for (int64_t b = part * share; b < (part + 1) * share && rc == 0; b++) {
        mi_scope_enter(s);
        mi_tensor *in, *tg;
        if (task_batch(t, MI_SPLIT_VALID, b * micro, micro, &in, &tg) != 0) rc = -1;
        mi_tensor *logits = rc ? NULL : mi_lm_forward(lm, in);
        if (logits) {
            int64_t N = tg->numel, V = lm->config.vocab;
            mi_tensor *l = mi_cross_entropy(mi_reshape(logits, MI_SHAPE(N, V)),
                                            mi_reshape(tg, MI_SHAPE(N)), MI_LM_IGNORE);
            if (l) sum_loss += mi_item(l);
            else rc = -1;
            if (rc == 0 && task_has_accuracy(t->rc->task)) {
                double a = mi_task_accuracy(logits, tg);
                if (a < 0) rc = -1;
                sum_acc += a;
            }
        } else rc = -1;
        mi_scope_leave();
        mi_scope_reset(s);
    }
    mi_set_grad_enabled(was);
    if (!scratch) mi_scope_free(s);
    sums[0] = sum_loss, sums[1] = sum_acc;
    return rc;
}

int evaluate(const mi_lm *lm, const run_task *t, int64_t batches, mi_scope *scratch,
             double *loss, double *acc)
{
    double sums[2];
    int rc = evaluate_share(lm, t, batches, scratch, 0, 1, sums);
    int64_t n = batches * t->rc->accum;
    *loss = sums[0] / (double)n;
    *acc = task_has_accuracy(t->rc->task) ? sums[1] / (double)n : NAN;
    return rc;
}

/* ---------------------------------------------------------------- checkpoints */

int ckpt_save(const char *path, const mi_lm *lm, const mi_optim *o, const run_config *rc,
              int64_t step, const run_stats *stats)
{
    mi_scope *s = mi_scope_new("checkpoint");
    mi_scope_enter(s);
    mi_metadata meta[2], all;
    mi_optim_state_list state;
    int n_params, rc_save = -1;
    const mi_named_tensor *params = mi_lm_params(lm, &n_params);
    if (mi_lm_config_to_metadata(&lm->config, &meta[0]) == 0 &&
        mi_optim_state_export(o, &state) == 0) {
        meta[1] = state.metadata;
        int n = n_params + state.count;
        mi_named_tensor *t = mi_scope_alloc(s, sizeof *t * (size_t)n);
        if (t && run_config_metadata(rc, step, stats, meta, 2, &all) == 0) {
            memcpy(t, params, sizeof *t * (size_t)n_params);
            memcpy(t + n_params, state.tensors, sizeof *t * (size_t)state.count);
            rc_save = mi_safetensors_save(path, t, n, &all);
        }
    }
    mi_scope_leave();
    mi_scope_free(s);
    return rc_save;
}

/* The sizes in lm.* against the tensors the file holds, before a model is
 * made: the parameters outside the mixers follow from the sizes alone, and a
 * file holding fewer elements than those cannot be this model's checkpoint
 * (inflated sizes would otherwise have mi_lm_init allocate for minutes, or
 * until memory runs out, before ckpt_restore found the tensors missing). */
static int sizes_fit_tensors(const ckpt *c, char *msg, size_t n)
{
    int64_t need = mi_lm_backbone_numel(&c->lm), have = 0;
    if (need < 0) return snprintf(msg, n, "checkpoint '%s': %s", c->path, mi_error()), -1;
    for (int i = 0; i < c->st->count; i++)
        if (strncmp(c->st->tensors[i].name, "opt.", 4) != 0)
            have += c->st->tensors[i].tensor->numel;
    if (need <= have) return 0;
    const mi_lm_config *m = &c->lm;
    return snprintf(msg, n, "checkpoint '%s' does not fit its metadata: lm.vocab %lld, "
                    "lm.d_model %lld, lm.layers %d and lm.mlp_hidden %lld make at least %lld "
                    "parameters, the file holds %lld", c->path, (long long)m->vocab,
                    (long long)m->d_model, m->layers, (long long)m->mlp_hidden, (long long)need,
                    (long long)have), -1;
}

int ckpt_load(ckpt *c, const char *path, char *msg, size_t n)
{
    *c = (ckpt){.path = path};
    if (!(c->st = mi_safetensors_load(path)))
        return snprintf(msg, n, "cannot load checkpoint '%s': %s", path, mi_error()), -1;
    char what[300];
    snprintf(what, sizeof what, "checkpoint '%s'", path);
    if (safetensors_check_finite(c->st, what, msg, n) != 0) return -1;
    if (mi_lm_config_from_metadata(&c->lm, &c->st->metadata) != 0)
        return snprintf(msg, n, "'%s' is not a miras language-model checkpoint: %s", path,
                        mi_error()), -1;
    if (sizes_fit_tensors(c, msg, n) != 0) return -1;
    if (mi_safetensors_meta(c->st, "train.format")) {
        char why[256];
        c->has_run = true;
        if (run_config_parse(c, c->st, why, sizeof why) != 0)
            return snprintf(msg, n, "checkpoint '%s' has bad run settings: %s", path, why), -1;
        c->rc.lm = c->lm;
    }
    return 0;
}

int ckpt_restore(const ckpt *c, mi_lm *lm, char *msg, size_t n)
{
    int count;
    const mi_named_tensor *p = mi_lm_params(lm, &count);
    char a[96], b[96];
    for (int i = 0; i < count; i++) {
        mi_tensor *t = mi_safetensors_get(c->st, p[i].name), *want = p[i].tensor;
        if (!t)
            return snprintf(msg, n, "checkpoint '%s' does not fit its model (%s): no tensor '%s'",
                            c->path, lm->config.mixer, p[i].name), -1;
        if (!mi_same_shape(t, want) || t->dtype != want->dtype)
            return snprintf(msg, n, "checkpoint '%s' does not fit its model (%s): '%s' is %s %s, "
                            "the model needs %s %s", c->path, lm->config.mixer, p[i].name,
                            mi_dtype_name(t->dtype), mi_shape_str(a, sizeof a, t->rank, t->shape),
                            mi_dtype_name(want->dtype),
                            mi_shape_str(b, sizeof b, want->rank, want->shape)), -1;
    }
    for (int i = 0; i < c->st->count; i++) {
        const char *name = c->st->tensors[i].name;
        bool known = !strncmp(name, "opt.", 4);
        for (int j = 0; j < count && !known; j++) known = !strcmp(name, p[j].name);
        if (!known)
            return snprintf(msg, n, "checkpoint '%s' does not fit its model (%s): unexpected "
                            "tensor '%s'", c->path, lm->config.mixer, name), -1;
    }
    for (int i = 0; i < count; i++)
        if (mi_tensor_copy_into(p[i].tensor, mi_safetensors_get(c->st, p[i].name)) != 0)
            return snprintf(msg, n, "%s", mi_error()), -1;
    return 0;
}

int ckpt_load_model(ckpt *c, mi_lm *lm, const char *path, mi_scope *scope, char *msg, size_t n)
{
    if (ckpt_load(c, path, msg, n) != 0) return -1;
    if (mi_lm_init(lm, &c->lm, MI_F32, 0, scope) != 0)
        return snprintf(msg, n, "checkpoint '%s': its model cannot be built: %s", path,
                        mi_error()), -1;
    return ckpt_restore(c, lm, msg, n);
}
