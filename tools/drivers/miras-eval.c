/* miras-eval: evaluates a checkpoint of miras-train: validation loss and bits
 * per byte on a text, MQAR accuracy at given (L, N), needle-in-a-haystack
 * exact match per prompt length (greedy answers), and a capacity curve. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void usage(void)
{
    printf(
"usage: miras-eval CKPT [options]\n"
"Evaluates a checkpoint written by miras-train. With no task option it\n"
"evaluates the task the checkpoint was trained on.\n"
"  --data FILE        validation loss (nats/byte) and bits per byte over the\n"
"                     last 10%% of FILE, consecutive windows of --seq-len bytes\n"
"  --seq-len N        window for --data (the checkpoint's)\n"
"  --max-windows N    at most N windows (all)\n"
"  --mqar L:N[,...]   MQAR accuracy at sequence length L with N pairs\n"
"  --niah LEN[,...]   needle in a haystack: exact match of the greedy answer up\n"
"                     to the needle's terminator '.', per prompt length in bytes\n"
"  --niah-show        print each needle's expected and generated answer\n"
"  --niah-kind KIND   passkey | word | uuid | text (needles in --data)  (passkey)\n"
"  --capacity N[,...] memory capacity: recall accuracy with N pairs\n"
"  --examples N       held-out examples per point (256; niah 16)\n"
"  --batch N          sequences per forward pass (16)\n"
"  --seed N           seed of the held-out streams (the checkpoint's)\n"
"  --threads N        (all cores)\n"
"  --json             one JSON object on stdout instead of text\n"
"  --help, --version\n"
"exit status: 0 done, 1 runtime failure (unreadable or mismatched checkpoint,\n"
"missing file), 2 usage error\n");
}

/* Where results go: stdout, or with --json a buffer printed at the end, so a
 * failure part way leaves no half-written JSON. */
static FILE *out;
static bool json;
static int n_out;  /* JSON: entries written in the current list */

static void json_string(const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(out, "\\u%04x", *s);
        else fputc(*s, out);
    }
    fputc('"', out);
}

/* A comma-separated list of whole numbers (or L:N pairs) for option opt. */
static int parse_list(const char *opt, const char *text, int64_t *a, int64_t *b, int max)
{
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (n == max) die_usage("%s: at most %d entries", opt, max);
        char *colon = strchr(item, ':');
        if (b && !colon) die_usage("%s: '%s' is not L:N", opt, item);
        if (colon) {
            if (!b) die_usage("%s: '%s' is not a whole number", opt, item);
            *colon = '\0';
            b[n] = parse_int(opt, colon + 1, 1, 1 << 20);
        }
        a[n++] = parse_int(opt, item, 1, 1 << 24);
    }
    if (n == 0) die_usage("%s: an empty list", opt);
    return n;
}

/* Loss over every window of the text's validation split. */
static void eval_text(const mi_lm *lm, const char *path, int64_t T, int64_t batch,
                      int64_t max_windows)
{
    mi_text *text = mi_text_load(path);
    if (!text) die("%s", mi_error());
    int64_t windows = mi_text_window_count(text, T, MI_SPLIT_VALID);
    if (max_windows && windows > max_windows) windows = max_windows;
    if (windows < 1) die("'%s': its validation split is shorter than one window of %lld + 1 "
                         "bytes", path, (long long)T);
    mi_scope *s = mi_scope_new("eval-text");
    bool was = mi_set_grad_enabled(false);
    double total = 0;
    for (int64_t w = 0; w < windows; w += batch) {
        int64_t B = windows - w < batch ? windows - w : batch;
        mi_scope_enter(s);
        mi_tensor *in, *tg, *loss = NULL;
        if (mi_text_windows(text, T, MI_SPLIT_VALID, w, B, &in, &tg) == 0)
            loss = mi_lm_loss(lm, in, tg);
        if (!loss) die("%s", mi_error());
        total += mi_item(loss) * (double)B;
        mi_scope_leave();
        mi_scope_reset(s);
    }
    mi_set_grad_enabled(was);
    mi_scope_free(s);
    double loss = total / (double)windows, bpb = loss / log(2.0);
    if (json) {
        fprintf(out, ",\"text\":{\"file\":");
        json_string(path);
        fprintf(out, ",\"seq_len\":%lld,\"windows\":%lld,\"bytes\":%lld,\"loss\":%.6f,"
               "\"bits_per_byte\":%.6f}", (long long)T, (long long)windows,
               (long long)(windows * T), loss, bpb);
    } else {
        fprintf(out, "text      %s: %lld windows of %lld bytes: loss %.4f nats/byte, "
                     "%.4f bits/byte\n",
               path, (long long)windows, (long long)T, loss, bpb);
    }
}

/* Recall accuracy (mqar, capacity) over held-out batches; rc holds the task. */
static void eval_recall(const mi_lm *lm, mi_run_config *rc, int64_t examples)
{
    mi_run_task t;
    int opened = mi_run_task_open(&t, rc);
    if (opened == -2) die_usage("%s", mi_error());
    if (opened != 0) die("%s", mi_error());
    if (rc->batch > examples) rc->batch = examples;
    int64_t batches = (examples + rc->batch - 1) / rc->batch;
    double loss, acc;
    if (mi_evaluate(lm, &t, batches, NULL, &loss, &acc) != 0) die("%s", mi_error());
    bool mqar = rc->task == MI_TASK_MQAR;
    if (json) {
        fprintf(out, "%s{\"seq_len\":%lld,\"pairs\":%lld,\"examples\":%lld,\"loss\":%.6f,"
               "\"accuracy\":%.6f}", n_out++ ? "," : "", (long long)rc->seq_len,
               (long long)rc->pairs, (long long)(batches * rc->batch), loss, acc);
    } else {
        fprintf(out, "%-9s L=%lld N=%lld: accuracy %.4f, loss %.4f (%lld examples)\n",
               mqar ? "mqar" : "capacity", (long long)rc->seq_len, (long long)rc->pairs, acc,
               loss, (long long)(batches * rc->batch));
    }
}

/* Needle in a haystack: the greedy continuation of each prompt, up to the
 * flavour's longest answer and its terminator, scored by exact match up to
 * the first terminator (the bytes after it are generated but never read). */
static void eval_niah(const mi_lm *lm, mi_run_config *rc, int64_t examples, bool show)
{
    mi_run_task t;
    int opened = mi_run_task_open(&t, rc);
    if (opened == -2) die_usage("%s", mi_error());
    if (opened != 0) die("%s", mi_error());
    int64_t L = rc->seq_len, n = mi_niah_answer_bytes(&t.niah), W = L + n, hits = 0;
    if (n < 0 || n > MI_NIAH_ANSWER_MAX) die("%s", mi_error());
    mi_scope *s = mi_scope_new("eval-niah");
    int64_t *seq = malloc(sizeof(int64_t) * (size_t)(rc->batch * W));
    mi_niah_sample *sample = malloc(sizeof *sample * (size_t)rc->batch);
    if (!s || !seq || !sample) die("out of memory");
    mi_sampler greedy = {0};
    for (int64_t e = 0; e < examples; e += rc->batch) {
        int64_t B = examples - e < rc->batch ? examples - e : rc->batch;
        mi_scope_enter(s);
        for (int64_t b = 0; b < B; b++) {
            if (mi_niah_example(&t.niah, rc->seed, MI_SPLIT_VALID, e + b, &sample[b]) != 0)
                die_usage("%s", mi_error());
            memcpy(seq + b * W, sample[b].tokens->data, sizeof(int64_t) * (size_t)L);
        }
        if (mi_generate(lm, seq, B, L, n, &greedy, NULL, NULL) != 0) die("%s", mi_error());
        for (int64_t b = 0; b < B; b++) {
            char got[MI_NIAH_ANSWER_MAX + 1];
            for (int64_t j = 0; j < n; j++) got[j] = (char)seq[b * W + L + j];
            bool hit = mi_niah_exact_match(&sample[b], got, (size_t)n);
            hits += hit;
            if (show && !json) { /* what was judged: up to the first terminator */
                fprintf(out, "  %s %lld: want %s%c, got ", hit ? "hit " : "miss",
                        (long long)(e + b), sample[b].answer, MI_NIAH_TERMINATOR);
                for (int64_t j = 0; j < n; j++) {
                    unsigned char c = (unsigned char)got[j];
                    fputc(c >= 0x20 && c < 0x7f ? c : '?', out);
                    if (c == MI_NIAH_TERMINATOR) break;
                }
                fputc('\n', out);
            }
        }
        mi_scope_leave();
        mi_scope_reset(s);
    }
    free(seq);
    free(sample);
    mi_scope_free(s);
    double acc = (double)hits / (double)examples;
    if (json)
        fprintf(out, "%s{\"kind\":\"%s\",\"length\":%lld,\"examples\":%lld,\"hits\":%lld,"
               "\"accuracy\":%.6f}", n_out++ ? "," : "", rc->niah, (long long)L,
               (long long)examples, (long long)hits, acc);
    else
        fprintf(out, "niah      %s, %lld bytes: %lld/%lld exact (%.4f)\n", rc->niah, (long long)L,
               (long long)hits, (long long)examples, acc);
}

int main(int argc, char **argv)
{
    tool_start("miras-eval");
    const char *path = NULL, *data = NULL, *v, *niah_kind = "passkey";
    int64_t mq_l[32], mq_n[32], niah[32], cap[32], seq_len = 0, max_windows = 0, examples = 0;
    int64_t batch = 16, seed = -1;
    int n_mq = 0, n_niah = 0, n_cap = 0;
    bool niah_show = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) usage(), exit(0);
        else if (!strcmp(arg, "--version")) printf("miras-eval %s\n", MIRAS_VERSION), exit(0);
        else if (opt_is(argc, argv, &i, "--json", NULL)) json = true;
        else if (opt_is(argc, argv, &i, "--niah-show", NULL)) niah_show = true;
        else if (opt_is(argc, argv, &i, "--data", &v)) data = v;
        else if (opt_is(argc, argv, &i, "--seq-len", &v)) seq_len = parse_int(arg, v, 1, 1 << 24);
        else if (opt_is(argc, argv, &i, "--max-windows", &v))
            max_windows = parse_int(arg, v, 1, INT64_MAX);
        else if (opt_is(argc, argv, &i, "--mqar", &v)) n_mq = parse_list(arg, v, mq_l, mq_n, 32);
        else if (opt_is(argc, argv, &i, "--niah", &v)) n_niah = parse_list(arg, v, niah, NULL, 32);
        else if (opt_is(argc, argv, &i, "--niah-kind", &v)) {
            if (strcmp(v, "passkey") && strcmp(v, "word") && strcmp(v, "uuid") && strcmp(v, "text"))
                die_usage("--niah-kind: '%s' is not passkey, word, uuid or text", v);
            niah_kind = v;
        } else if (opt_is(argc, argv, &i, "--capacity", &v))
            n_cap = parse_list(arg, v, cap, NULL, 32);
        else if (opt_is(argc, argv, &i, "--examples", &v)) examples = parse_int(arg, v, 1, 1 << 24);
        else if (opt_is(argc, argv, &i, "--batch", &v)) batch = parse_int(arg, v, 1, 1 << 20);
        else if (opt_is(argc, argv, &i, "--seed", &v)) seed = parse_int(arg, v, 0, INT64_MAX);
        else if (opt_is(argc, argv, &i, "--threads", &v))
            mi_set_threads((int)parse_int(arg, v, 1, 4096));
        else if (arg[0] == '-') die_usage("unknown option '%s'", arg);
        else if (path) die_usage("one checkpoint at a time ('%s' and '%s')", path, arg);
        else path = arg;
    }
    if (!path) die_usage("no checkpoint given");
    char *buffer = NULL;
    size_t buffer_size = 0;
    out = json ? open_memstream(&buffer, &buffer_size) : stdout;
    if (!out) die("out of memory");

    mi_scope *keep = mi_scope_new("model");
    mi_scope_enter(keep);
    mi_checkpoint_file ck;
    mi_lm lm;
    if (mi_checkpoint_load_model(&ck, &lm, path, keep) != 0) die("%s", mi_error());
    mi_run_config rc = ck.has_run ? ck.rc : mi_run_config_default(MI_TASK_LM);
    rc.lm = ck.lm, rc.batch = batch;
    if (seed >= 0) rc.seed = (uint64_t)seed;
    bool any = data || n_mq || n_niah || n_cap;
    if (!any && !ck.has_run)
        die_usage("'%s' holds no run settings: say what to evaluate (--data, --mqar, --niah, "
                  "--capacity)", path);
    if (!any) { /* the task it was trained on */
        if (rc.task == MI_TASK_LM) data = rc.data, seq_len = seq_len ? seq_len : rc.seq_len;
        if (rc.task == MI_TASK_MQAR) mq_l[0] = rc.seq_len, mq_n[0] = rc.pairs, n_mq = 1;
        if (rc.task == MI_TASK_CAPACITY) cap[0] = rc.pairs, n_cap = 1;
        if (rc.task == MI_TASK_NIAH) niah[0] = rc.seq_len, niah_kind = rc.niah, n_niah = 1;
    }
    if (json) {
        fprintf(out, "{\"checkpoint\":");
        json_string(path);
        fprintf(out, ",\"model\":");
        json_string(lm.config.mixer);
        fprintf(out, ",\"parameters\":%lld,\"step\":%lld", (long long)mi_lm_param_numel(&lm),
               (long long)ck.step);
    } else {
        fprintf(out, "checkpoint %s: %s, %lld parameters, step %lld\n", path, lm.config.mixer,
               (long long)mi_lm_param_numel(&lm), (long long)ck.step);
    }
    if ((data || n_niah) && lm.config.vocab != 256)
        die_usage("%s needs a byte-level model; '%s' has a vocabulary of %lld",
                  data ? "--data" : "--niah", path, (long long)lm.config.vocab);
    if (data) eval_text(&lm, data, seq_len ? seq_len : rc.seq_len, batch, max_windows);
    if (n_mq && json) fprintf(out, ",\"mqar\":["), n_out = 0;
    for (int i = 0; i < n_mq; i++) {
        mi_run_config r = rc;
        r.task = MI_TASK_MQAR, r.seq_len = mq_l[i], r.pairs = mq_n[i];
        eval_recall(&lm, &r, examples ? examples : 256);
    }
    if (n_mq && json) fprintf(out, "]");
    if (n_niah && json) fprintf(out, ",\"niah\":["), n_out = 0;
    for (int i = 0; i < n_niah; i++) {
        mi_run_config r = rc;
        r.task = MI_TASK_NIAH, r.seq_len = niah[i];
        snprintf(r.niah, sizeof r.niah, "%s", niah_kind);
        if (!strcmp(niah_kind, "text")) {
            if (!data && !rc.data[0]) die_usage("--niah-kind text needs --data FILE");
            if (data) snprintf(r.data, sizeof r.data, "%s", data);
        }
        eval_niah(&lm, &r, examples ? examples : 16, niah_show);
    }
    if (n_niah && json) fprintf(out, "]");
    if (n_cap && json) fprintf(out, ",\"capacity\":["), n_out = 0;
    for (int i = 0; i < n_cap; i++) {
        mi_run_config r = rc;
        r.task = MI_TASK_CAPACITY, r.pairs = cap[i], r.seq_len = 4 * cap[i];
        eval_recall(&lm, &r, examples ? examples : 256);
    }
    if (n_cap && json) fprintf(out, "]");
    if (json) {
        fprintf(out, "}\n");
        fclose(out);
        fwrite(buffer, 1, buffer_size, stdout);
        free(buffer);
    }
    mi_scope_leave();
    mi_scope_free(keep);
    return 0;
}
