/* miras-bench quality: how well each model learns at a fixed budget with
 * fixed seeds (docs/bench.md "quality"). Every case is a real miras-train run,
 * one after another, in a child process:
 *
 *   miras-train <the suite's arguments> --model VARIANT [--set ...] --out DIR/<suite>-<variant>
 *
 * with its output in DIR/<suite>-<variant>/train.out; the result is the last
 * row of that run's log.csv, read by column name (val_loss, val_acc,
 * train_loss), and the case's wall time. A run that fails (NaN loss, out of
 * memory, a bad override) is a row with status "failed" and miras-train's
 * last line, never an abort. One JSON line per case, then a table per suite
 * and an SVG bar chart DIR/quality-<suite>.svg.
 *
 * This file runs the cases; the suites are in bench_quality_suites.c, what is
 * printed and drawn in bench_quality_report.c. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_quality.h"
#include "bench_quality_internal.h"
#include "common.h"

extern char **environ;

#define DEFAULT_OUT "runs/quality"

/* ================================================================ small helpers */
/* src into dst[n], cut short when it does not fit; whether it fit. */
static bool copy_str(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    bool fits = len < n;
    if (!fits) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return fits;
}

/* The argument vector of one run; the strings that are not the suite's
 * literals live in buf. */
#define MAX_ARGV 128
typedef struct cmdline {
    const char *argv[MAX_ARGV + 1];
    int argc;
    char buf[8192];
    size_t used;
    bool full;
} cmdline;

static void cmd_add(cmdline *c, const char *s)
{
    if (!s || c->argc == MAX_ARGV) {
        c->full = true;
        return;
    }
    c->argv[c->argc++] = s;
    c->argv[c->argc] = NULL;
}

static const char *cmd_keep(cmdline *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *cmd_keep(cmdline *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(c->buf + c->used, sizeof c->buf - c->used, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof c->buf - c->used) return c->full = true, NULL;
    const char *s = c->buf + c->used;
    c->used += (size_t)w + 1;
    return s;
}

/* Each word of a space-separated list, after `flag` when it is not NULL
 * (--set for each KEY=VALUE). */
static void cmd_words(cmdline *c, const char *flag, const char *list)
{
    const char *p = list;
    while (*p) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (len) {
            if (flag) cmd_add(c, flag);
            cmd_add(c, cmd_keep(c, "%.*s", (int)len, p));
        }
        p += len;
    }
}

/* The steps a suite's arguments ask for (miras-train's default: 1000). */
static int64_t suite_steps(const quality_suite *s)
{
    for (int i = 0; s->args[i] && s->args[i + 1]; i++)
        if (!strcmp(s->args[i], "--steps")) return strtoll(s->args[i + 1], NULL, 10);
    return 1000;
}

/* miras-train's command for case c: the suite's arguments (--steps and a
 * warmup that no longer fits replaced under --steps N), --data, --model
 * (the variant's mixer spec), the rules' arguments and --set, the user's --set, the
 * variant's own overrides (last, so they win), --threads, --out. */
static void build_command(cmdline *cmd, const quality_case *c, const char *train,
                          const char *data, const quality_opts *q)
{
    const quality_suite *s = c->suite;
    cmd_add(cmd, train);
    bool steps_seen = false;
    for (int i = 0; s->args[i]; i++) {
        const char *a = s->args[i], *prev = i ? s->args[i - 1] : "";
        if (q->steps && !strcmp(prev, "--steps")) {
            a = cmd_keep(cmd, "%lld", (long long)q->steps);
            steps_seen = true;
        } else if (q->seed && !strcmp(prev, "--seed")) {
            a = cmd_keep(cmd, "%lld", (long long)q->seed);
        } else if (q->steps && !strcmp(prev, "--warmup") && strtoll(a, NULL, 10) >= q->steps) {
            a = cmd_keep(cmd, "%lld", (long long)(q->steps / 10)); /* miras-train's own rule */
        }
        cmd_add(cmd, a);
    }
    if (q->steps && !steps_seen) {
        cmd_add(cmd, "--steps");
        cmd_add(cmd, cmd_keep(cmd, "%lld", (long long)q->steps));
    }
    if (data) cmd_add(cmd, "--data"), cmd_add(cmd, data);
    char spec[NAME_MAX_LEN], kv[NAME_MAX_LEN];
    cmd_add(cmd, "--model");
    cmd_add(cmd, cmd_keep(cmd, "%s", variant_spec(c->variant, spec, sizeof spec)));
    for (int r = 0; r < MAX_RULES && s->rules[r].match; r++) {
        if (!rule_matches(s->rules[r].match, c->variant)) continue;
        if (s->rules[r].args) cmd_words(cmd, NULL, s->rules[r].args);
        if (s->rules[r].set) cmd_words(cmd, "--set", s->rules[r].set);
    }
    if (variant_preset(c->variant))
        for (int i = 0; i < q->n_sets; i++) cmd_add(cmd, "--set"), cmd_add(cmd, q->sets[i]);
    for (const char *at = c->variant; next_override(&at, kv, sizeof kv);) /* last: they win */
        cmd_add(cmd, "--set"), cmd_add(cmd, cmd_keep(cmd, "%s", kv));
    if (q->threads) cmd_add(cmd, "--threads"), cmd_add(cmd, cmd_keep(cmd, "%d", q->threads));
    cmd_add(cmd, "--out");
    cmd_add(cmd, c->dir);
}

/* The argument vector as one shell line, each argument quoted when it needs it. */
static char *join_command(const cmdline *cmd)
{
    strbuf b = {0};
    for (int i = 0; i < cmd->argc; i++) {
        const char *a = cmd->argv[i];
        bool plain = a[0] && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_.,/:=+@%") == strlen(a);
        sb_printf(&b, "%s", i ? " " : "");
        if (plain) sb_printf(&b, "%s", a);
        else {
            sb_printf(&b, "'");
            for (const char *p = a; *p; p++)
                sb_printf(&b, *p == '\'' ? "'\\''" : "%c", *p);
            sb_printf(&b, "'");
        }
    }
    if (b.oom) free(b.s), b.s = NULL;
    return b.s;
}

/* Reads at most n - 1 bytes of path from offset (negative: that far from the
 * end) into buf; the bytes read. */
static size_t read_part(const char *path, long offset, char *buf, size_t n)
{
    buf[0] = '\0';
    char why[128];
    FILE *f = fopen_regular(path, why, sizeof why);
    if (!f) return 0;
    if (offset < 0 && fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        offset = size + offset > 0 ? size + offset : 0;
    }
    size_t got = fseek(f, offset, SEEK_SET) == 0 ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    fclose(f);
    return got;
}

/* From train.out: the parameter count its first line states
 * ("miras-train: titans, 12345 parameters, ..."), or -1. */
static int64_t params_from_output(const char *path)
{
    char head[4096];
    read_part(path, 0, head, sizeof head);
    head[strcspn(head, "\n")] = '\0';
    char *p = strstr(head, " parameters");
    if (!p) return -1;
    char *d = p;
    while (d > head && d[-1] >= '0' && d[-1] <= '9') d--;
    return d < p ? strtoll(d, NULL, 10) : -1;
}

/* From train.out: its last non-empty line (what a failed run said last). */
static void last_line(const char *path, char *out, size_t n)
{
    char tail[4096];
    size_t len = read_part(path, -(long)sizeof tail + 1, tail, sizeof tail);
    while (len && (tail[len - 1] == '\n' || tail[len - 1] == '\r' || tail[len - 1] == ' '))
        tail[--len] = '\0';
    char *line = strrchr(tail, '\n');
    line = line ? line + 1 : tail;
    /* a progress bar redrawn with '\r' on the same line: its last state */
    if (strrchr(line, '\r')) line = strrchr(line, '\r') + 1;
    copy_str(out, n, *line ? line : "(no output)");
}

/* The idx-th comma-separated field of a CSV line as a number (empty or
 * missing: NaN). */
static double csv_field(const char *line, int idx)
{
    for (int i = 0; i < idx; i++) {
        line = strchr(line, ',');
        if (!line) return NAN;
        line++;
    }
    size_t len = strcspn(line, ",\r\n");
    if (!len) return NAN;
    char num[64], *end;
    snprintf(num, sizeof num, "%.*s", (int)(len < 63 ? len : 63), line);
    double v = strtod(num, &end);
    return *end ? NAN : v;
}

/* The run's log.csv, by column name: train_loss of the last row, val_loss
 * and val_acc of the last row that has a validation; 0, or -1 with a message. */
static int read_log(quality_case *c, char *msg, size_t n)
{
    char path[PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/log.csv", c->dir);
    char why[128];
    FILE *f = fopen_regular(path, why, sizeof why);
    if (!f) return snprintf(msg, n, "no log.csv in the run's directory: %s", why), -1;
    char line[4096];
    int col_train = -1, col_vl = -1, col_va = -1;
    if (fgets(line, sizeof line, f)) {
        int idx = 0;
        for (char *save = NULL, *t = strtok_r(line, ",\r\n", &save); t;
             t = strtok_r(NULL, ",\r\n", &save), idx++) {
            if (!strcmp(t, "train_loss")) col_train = idx;
            else if (!strcmp(t, "val_loss")) col_vl = idx;
            else if (!strcmp(t, "val_acc")) col_va = idx;
        }
    }
    int rows = 0;
    while (col_vl >= 0 && fgets(line, sizeof line, f)) {
        if (line[0] == '\n' || line[0] == '\0') continue;
        rows++;
        if (col_train >= 0) c->train_loss = csv_field(line, col_train);
        double vl = csv_field(line, col_vl);
        if (!isnan(vl)) {
            c->val_loss = vl;
            c->val_acc = col_va >= 0 ? csv_field(line, col_va) : NAN;
        }
    }
    fclose(f);
    if (col_vl < 0) return snprintf(msg, n, "log.csv has no val_loss column"), -1;
    if (!rows) return snprintf(msg, n, "log.csv has no rows"), -1;
    if (!lower_is_better(c->suite->metric) && col_va < 0)
        return snprintf(msg, n, "log.csv has no val_acc column"), -1;
    if (!isfinite(metric_of(c)))
        return snprintf(msg, n, "log.csv: no finite %s in the last validation",
                        c->suite->metric), -1;
    return 0;
}

/* The model keys of miras-train's --set (the rest go to the mixer). */
static const char *const model_keys[] = {"vocab", "d_model", "layers", "heads", "mlp_hidden",
                                         "tie_embeddings", "norm_eps", "rope_base", "window"};

/* A metadata value as a number (true/false as 1/0); NaN when it is none. */
static double meta_number(const char *s)
{
    if (!strcmp(s, "true")) return 1;
    if (!strcmp(s, "false")) return 0;
    char *end;
    double v = strtod(s, &end);
    return *s && !*end ? v : NAN;
}

/* Whether the run's model got the variant's own overrides: its checkpoint's
 * lm.mixer_overrides ends up with KEY=VALUE for a mixer key (the last entry
 * for KEY, as the block applies them in order), lm.KEY equals VALUE for a
 * model key. Keeps lm.mixer_overrides in c->overrides. 0, or -1 with a message. */
static int check_overrides(quality_case *c, char *msg, size_t n)
{
    char path[PATH_LEN + 32], kv[NAME_MAX_LEN];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", c->dir);
    mi_scope *scope = mi_scope_new("quality-ckpt");
    mi_scope_enter(scope);
    int rc = 0;
    const mi_safetensors *st = mi_safetensors_load(path);
    const char *got = st ? mi_safetensors_meta(st, "lm.mixer_overrides") : NULL;
    if (!st) {
        rc = -1;
        snprintf(msg, n, "cannot read the run's checkpoint: %s", mi_error());
        mi_error_clear();
    } else {
        copy_str(c->overrides, sizeof c->overrides, got ? got : "");
    }
    for (const char *at = c->variant; rc == 0 && next_override(&at, kv, sizeof kv);) {
        size_t klen = strcspn(kv, "=");
        const char *want = kv + klen + 1, *have = NULL;
        char key[NAME_MAX_LEN + 8], last[NAME_MAX_LEN] = "";
        bool model = false;
        for (size_t i = 0; i < sizeof model_keys / sizeof *model_keys; i++)
            model |= strlen(model_keys[i]) == klen && !strncmp(kv, model_keys[i], klen);
        if (model) {
            snprintf(key, sizeof key, "lm.%.*s", (int)klen, kv);
            have = mi_safetensors_meta(st, key);
            if (have && (meta_number(have) == meta_number(want) || !strcmp(have, want))) continue;
        } else {
            /* the last comma-separated entry of lm.mixer_overrides that sets KEY */
            for (const char *e = c->overrides; *e;) {
                size_t len = strcspn(e, ",");
                if (len > klen && !strncmp(e, kv, klen) && e[klen] == '=')
                    snprintf(last, sizeof last, "%.*s", (int)(len - klen - 1), e + klen + 1);
                e += len + (e[len] == ',');
            }
            if (!strcmp(last, want)) continue;
            snprintf(key, sizeof key, "lm.mixer_overrides");
            have = c->overrides;
        }
        rc = -1;
        snprintf(msg, n, "the override %.200s did not reach the model: its checkpoint has %s = "
                 "'%.400s'", kv, key, have ? have : "(none)");
    }
    mi_scope_leave();
    mi_scope_free(scope);
    return rc;
}

/* User and system CPU seconds of the children waited for so far: a case's CPU
 * time is the difference around its run (cases run one at a time), which a
 * shared machine's load does not inflate as it does the wall time. */
static double children_cpu_s(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_CHILDREN, &u) != 0) return NAN;
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int quality_spawn(const char *exe, const char *const *argv, const char *out_path,
                  const char *err_path, int *status, double *wall_s, double *cpu_s, char *msg,
                  size_t n)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (err_path) posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC,
                                                   0666);
    else posix_spawn_file_actions_adddup2(&fa, 1, 2);
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s(), cpu0 = children_cpu_s();
    pid_t pid;
    int e = posix_spawn(&pid, exe, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) return snprintf(msg, n, "cannot start %.300s: %s", exe, strerror(e)), -1;
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {}
    *wall_s = now_s() - t0;
    *cpu_s = children_cpu_s() - cpu0;
    return 0;
}

/* Runs miras-train for case c (output to DIR/train.out) and reads its log. */
void quality_run_case(quality_case *c, const char *train, const char *data,
                      const quality_opts *q)
{
    char msg[1024], out_path[PATH_LEN + 16], log_path[PATH_LEN + 16];
    cmdline cmd = {.argc = 0};
    build_command(&cmd, c, train, data, q);
    c->command = join_command(&cmd);
    c->status = CASE_FAILED;
    if (cmd.full) {
        snprintf(c->message, sizeof c->message, "the command line is too long");
        return;
    }
    if (make_dir(c->dir, msg, sizeof msg) != 0) {
        copy_str(c->message, sizeof c->message, msg);
        return;
    }
    snprintf(out_path, sizeof out_path, "%s/train.out", c->dir);
    snprintf(log_path, sizeof log_path, "%s/log.csv", c->dir);
    remove(log_path); /* a failed run must not leave an old log to read */

    int status = 0;
    if (quality_spawn(train, cmd.argv, out_path, NULL, &status, &c->wall_s, &c->cpu_s, msg,
                      sizeof msg) != 0) {
        copy_str(c->message, sizeof c->message, msg);
        return;
    }
    c->params = params_from_output(out_path);
    char last[400];
    last_line(out_path, last, sizeof last);
    if (WIFSIGNALED(status)) {
        snprintf(c->message, sizeof c->message, "killed by signal %d (%s)%s: %s",
                 WTERMSIG(status), strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == 9 ? ", perhaps out of memory" : "", last);
        return;
    }
    if (WEXITSTATUS(status) != 0) {
        snprintf(c->message, sizeof c->message, "exit status %d: %s", WEXITSTATUS(status), last);
        return;
    }
    if (read_log(c, msg, sizeof msg) != 0 || check_overrides(c, msg, sizeof msg) != 0) {
        copy_str(c->message, sizeof c->message, msg);
        return;
    }
    c->status = CASE_OK;
}

/* ================================================================ the run */

/* Adds the suites of a comma list to out (aliases expanded, an alias may name
 * aliases; each suite once); the new count, or -1 with a message. */
static int add_suites(const char *list, int depth, const quality_suite **out, int count,
                      char *msg, size_t n)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && count >= 0;
         t = strtok_r(NULL, ",", &save)) {
        const char *alias = NULL;
        for (int a = 0; a < n_quality_aliases; a++)
            if (!strcmp(t, quality_aliases[a].name)) alias = quality_aliases[a].suites;
        if (alias && depth < 4) {
            count = add_suites(alias, depth + 1, out, count, msg, n);
            continue;
        }
        const quality_suite *s = NULL;
        for (int k = 0; k < n_quality_suites; k++)
            if (!strcmp(t, quality_suites[k].name)) s = &quality_suites[k];
        if (!s) {
            size_t used = (size_t)snprintf(msg, n, "unknown suite '%s'; known:", t);
            for (int k = 0; k < n_quality_suites && used < n; k++)
                used += (size_t)snprintf(msg + used, n - used, " %s", quality_suites[k].name);
            for (int a = 0; a < n_quality_aliases && used < n; a++)
                used += (size_t)snprintf(msg + used, n - used, " %s (%s)", quality_aliases[a].name,
                                         quality_aliases[a].suites);
            return -1;
        }
        bool seen = false;
        for (int k = 0; k < count; k++) seen |= out[k] == s;
        if (!seen) out[count++] = s;
    }
    return count;
}

/* The suites asked for (aliases expanded, each once); the count, or -1 with a message. */
static int select_suites(const quality_opts *q, const quality_suite **out, char *msg, size_t n)
{
    int count = 0;
    if (!q->n_suites) return add_suites(DEFAULT_SUITES, 0, out, 0, msg, n);
    for (int l = 0; l < q->n_suites && count >= 0; l++)
        count = add_suites(q->suites[l], 0, out, count, msg, n);
    return count;
}

/* miras-train: --train, else beside this executable. 0, 1 (not found next to
 * us: a runtime failure) or 2 (--train is not executable: a usage error). */
int quality_find_train(const quality_opts *q, char *buf, size_t n)
{
    if (q->train) {
        if (access(q->train, X_OK) != 0) {
            fprintf(stderr, "miras-bench: --train '%s': %s\n", q->train, strerror(errno));
            return 2;
        }
        snprintf(buf, n, "%s", q->train);
        return 0;
    }
    char dir[PATH_LEN];
    exe_dir(dir, sizeof dir);
    snprintf(buf, n, "%s/miras-train", dir[0] ? dir : ".");
    if (access(buf, X_OK) == 0) return 0;
    fprintf(stderr, "miras-bench: miras-train not found: looked for %s (beside this "
            "executable, from /proc/self/exe); give --train PATH\n", buf);
    return 1;
}

/* A directory name of variant v: characters other than [A-Za-z0-9._+=-] as '_'. */
static void case_dir(char *buf, size_t n, const char *out, const quality_suite *s, const char *v)
{
    int w = snprintf(buf, n, "%s/%s-", out, s->name);
    for (char *p = buf + (w > 0 && (size_t)w < n ? w : 0); *v && (size_t)(p - buf) + 1 < n; v++)
        *p++ = (strchr("._-+=", *v) || (*v >= '0' && *v <= '9') || (*v >= 'a' && *v <= 'z') ||
                (*v >= 'A' && *v <= 'Z')) ? *v : '_', *p = '\0';
}

/* A suite's points: DIR/quality-<suite>-points.{md,svg}, and the table on stdout. */
static void write_points(const quality_case *cases, int n, const quality_suite *su,
                         const char *out, bool json_only)
{
    char path[PATH_LEN + 64], msg[1024];
    size_t size = 0;
    char *doc = points_svg(cases, n, su, &size);
    snprintf(path, sizeof path, "%s/quality-%s-points.svg", out, su->name);
    if (!doc || write_atomic(path, doc, size, msg, sizeof msg) != 0)
        fprintf(stderr, "miras-bench: %s\n", doc ? msg : "out of memory for the chart");
    free(doc);
    doc = points_markdown(cases, n, su, &size);
    snprintf(path, sizeof path, "%s/quality-%s-points.md", out, su->name);
    if (!doc || write_atomic(path, doc, size, msg, sizeof msg) != 0)
        fprintf(stderr, "miras-bench: %s\n", doc ? msg : "out of memory for the table");
    if (doc && !json_only) /* the same table on stdout */
        printf("\nquality %s, per miras-eval point:\n%schart: %s/quality-%s-points.svg\n",
               su->name, doc, out, su->name);
    free(doc);
}

/* A table and a chart per suite: DIR/quality-<suite>.{md,svg}, and for the
 * suites with points their per-point table and chart. data_of[s]: the text
 * suite s ran on (NULL: none, or not known). */
static void report_suites(const quality_case *cases, int n, const quality_suite *const *chosen,
                          int n_suites, const char *const *data_of, const char *out,
                          bool json_only)
{
    char msg[1024];
    for (int s = 0; s < n_suites; s++) {
        const quality_suite *su = chosen[s];
        char svg_path[PATH_LEN + 64];
        const char *svg = NULL;
        bool ran = false;
        int64_t steps = 0;
        for (int i = 0; i < n; i++) {
            if (cases[i].suite != su) continue;
            ran |= cases[i].status != CASE_SKIPPED;
            steps = cases[i].steps;
        }
        if (ran) {
            size_t size = 0;
            char *doc = suite_svg(cases, n, su, steps, &size);
            snprintf(svg_path, sizeof svg_path, "%s/quality-%s.svg", out, su->name);
            if (doc && write_atomic(svg_path, doc, size, msg, sizeof msg) == 0) svg = svg_path;
            else fprintf(stderr, "miras-bench: %s\n", doc ? msg : "out of memory for the chart");
            free(doc);
        }
        const char *name = data_of[s] ? strrchr(data_of[s], '/') : NULL;
        const char *data_name = data_of[s] ? (name ? name + 1 : data_of[s]) : NULL;
        if (ran) {
            size_t size = 0;
            char *doc = suite_markdown(cases, n, su, data_name, &size), md_path[PATH_LEN + 64];
            snprintf(md_path, sizeof md_path, "%s/quality-%s.md", out, su->name);
            if (!doc || write_atomic(md_path, doc, size, msg, sizeof msg) != 0)
                fprintf(stderr, "miras-bench: %s\n", doc ? msg : "out of memory for the table");
            free(doc);
        }
        if (!json_only) print_suite_table(cases, n, su, data_name, svg);
        if (ran && su->eval) write_points(cases, n, su, out, json_only);
    }
}

/* --replot: the reports again from the JSON lines of earlier runs, no run. */
static int replot(const bench_opts *o, const quality_opts *q)
{
    char msg[1024];
    quality_case *cases = calloc(MAX_CASES, sizeof *cases);
    if (!cases) return fprintf(stderr, "miras-bench: out of memory\n"), 1;
    int n = quality_read_cases(q->replot, cases, MAX_CASES, msg, sizeof msg);
    const quality_suite *chosen[MAX_SUITES];
    const char *data_of[MAX_SUITES] = {NULL};
    int n_suites = 0;
    for (int s = 0; n > 0 && s < n_quality_suites; s++)
        for (int i = 0; i < n; i++)
            if (cases[i].suite == &quality_suites[s]) {
                chosen[n_suites++] = &quality_suites[s];
                break;
            }
    const char *out = q->out ? q->out : DEFAULT_OUT;
    int rc = 0;
    if (n < 0) fprintf(stderr, "miras-bench: --replot: %s\n", msg), rc = 1;
    else if (n == 0) fprintf(stderr, "miras-bench: --replot: no case in %s\n", q->replot), rc = 1;
    else if (make_dir(out, msg, sizeof msg) != 0)
        fprintf(stderr, "miras-bench: --out: %s\n", msg), rc = 1;
    else report_suites(cases, n, chosen, n_suites, data_of, out, o->json_only);
    for (int i = 0; i < n; i++) free(cases[i].command);
    free(cases);
    return rc;
}

int bench_quality(const bench_opts *o, const quality_opts *q)
{
    if (q->replot) return replot(o, q);
    char msg[2048];
    const quality_suite *chosen[MAX_SUITES];
    int n_suites = select_suites(q, chosen, msg, sizeof msg);
    if (n_suites < 0) {
        fprintf(stderr, "miras-bench: --suite: %s\n", msg);
        return 2;
    }
    static char variants[MAX_SUITES][MAX_VARIANTS][NAME_MAX_LEN];
    int n_variants[MAX_SUITES];
    for (int s = 0; s < n_suites; s++) {
        n_variants[s] = expand_variants(o->variants ? o->variants : chosen[s]->variants,
                                        variants[s], msg, sizeof msg);
        if (n_variants[s] < 0) {
            if (o->variants) fprintf(stderr, "miras-bench: --variants: %s\n", msg);
            else fprintf(stderr, "miras-bench: suite %s's default variants: %s\n",
                         chosen[s]->name, msg);
            return 2;
        }
    }
    for (int i = 0; i < q->n_sets; i++)
        if (!strchr(q->sets[i], '=') || q->sets[i][0] == '=' || strchr(q->sets[i], ' ')) {
            fprintf(stderr, "miras-bench: --set wants KEY=VALUE, got '%s'\n", q->sets[i]);
            return 2;
        }
    if (o->data && access(o->data, R_OK) != 0) {
        fprintf(stderr, "miras-bench: --data '%s': %s\n", o->data, strerror(errno));
        return 2;
    }
    char train[PATH_LEN + 32], eval_exe[PATH_LEN + 48];
    int found = quality_find_train(q, train, sizeof train);
    if (found) return found;
    /* miras-eval, for the suites that evaluate checkpoints: beside miras-train */
    snprintf(eval_exe, sizeof eval_exe, "%.*s/miras-eval",
             strrchr(train, '/') ? (int)(strrchr(train, '/') - train) : 1,
             strrchr(train, '/') ? train : ".");
    const char *out = q->out ? q->out : DEFAULT_OUT;
    if (make_dir(out, msg, sizeof msg) != 0) {
        fprintf(stderr, "miras-bench: --out: %s\n", msg);
        return 1;
    }

    /* every case, with its text or the reason its suite is skipped */
    quality_case *cases = calloc(MAX_CASES, sizeof *cases);
    static char data[MAX_SUITES][PATH_LEN];
    const char *data_of[MAX_SUITES] = {NULL};
    if (!cases) {
        fprintf(stderr, "miras-bench: out of memory\n");
        return 1;
    }
    int n = 0, to_run = 0;
    for (int s = 0; s < n_suites && n < MAX_CASES; s++) {
        const quality_suite *su = chosen[s];
        char skip[512] = "";
        data_of[s] = NULL;
        if (su->data && !strcmp(su->data, DATA_TEXT)) {
            data_of[s] = o->data ? o->data
                                 : find_checkout_file(TEXT_PATH, data[s], sizeof data[s]);
            if (!data_of[s])
                snprintf(skip, sizeof skip, TEXT_PATH " not found in the checkout holding this "
                         "executable nor in the working directory; give --data PATH");
        } else if (su->data) {
            data_of[s] = find_checkout_file(su->data, data[s], sizeof data[s]);
            if (!data_of[s])
                snprintf(skip, sizeof skip, "%s not found in the checkout holding this "
                         "executable nor in the working directory", su->data);
        }
        if (skip[0]) fprintf(stderr, "miras-bench: skipping suite %s: %s\n", su->name, skip);
        for (int v = 0; v < n_variants[s] && n < MAX_CASES; v++) {
            quality_case *c = &cases[n++];
            *c = (quality_case){.suite = su, .steps = q->steps ? q->steps : suite_steps(su),
                                .params = -1, .val_loss = NAN, .val_acc = NAN,
                                .train_loss = NAN, .wall_s = NAN, .eval_wall_s = NAN,
                                .cpu_s = NAN, .eval_cpu_s = NAN,
                                .floor = su->floor,
                                .status = skip[0] ? CASE_SKIPPED : CASE_OK};
            snprintf(c->variant, sizeof c->variant, "%s", variants[s][v]);
            case_dir(c->dir, sizeof c->dir, out, su, c->variant);
            for (int r = 0; r < MAX_RULES && su->rules[r].match; r++)
                if (su->rules[r].floor != 0 && rule_matches(su->rules[r].match, c->variant))
                    c->floor = su->rules[r].floor;
            if (skip[0]) snprintf(c->message, sizeof c->message, "%s", skip);
            else to_run++;
        }
    }

    /* one after another: [i/N] suite variant ... wall  metric */
    int done = 0, failed = 0, below = 0, skipped = 0;
    for (int s = 0, i = 0; s < n_suites; s++) {
        for (; i < n && cases[i].suite == chosen[s]; i++) {
            quality_case *c = &cases[i];
            if (c->status == CASE_SKIPPED) {
                skipped++;
                print_case_json_line(c);
                continue;
            }
            fprintf(stderr, "[%d/%d] %s %s ... ", ++done, to_run, c->suite->name, c->variant);
            fflush(stderr);
            quality_run_case(c, train, data_of[s], q);
            if (c->status == CASE_OK && c->suite->eval) run_case_eval(c, eval_exe, q->threads);
            if (c->status == CASE_OK) {
                const quality_case *base = baseline_of(cases, i + 1, c->suite);
                fprintf(stderr, c->wall_s < 10 ? "%.2f s (%.2f s CPU)  %s %.4f"
                                                : "%.1f s (%.1f s CPU)  %s %.4f", c->wall_s, c->cpu_s,
                        lower_is_better(c->suite->metric) ? "val_loss" : "acc", metric_of(c));
                if (base && base != c)
                    fprintf(stderr, " (%+.4f vs %s)", metric_of(c) - metric_of(base),
                            base->variant);
                fprintf(stderr, "%s\n", below_floor(c) ? "  BELOW FLOOR" : "");
            } else {
                fprintf(stderr, "FAILED: %s\n", c->message);
            }
            failed += c->status == CASE_FAILED;
            below += below_floor(c);
            print_case_json_line(c);
        }
    }

    report_suites(cases, n, chosen, n_suites, data_of, out, o->json_only);
    if (!o->json_only)
        printf("each case: one miras-train run (its output in <out>/<suite>-<variant>/train.out);"
               "\nthe metric is the last validation in its log.csv; wall = the run's own time (its CPU time beside it).\n");
    for (int i = 0; i < n; i++) free(cases[i].command);
    free(cases);
    /* a skipped case checked nothing: under --check it fails like a failed run */
    if (q->check && (failed || below || skipped)) {
        fprintf(stderr, "miras-bench: --check: %d case%s failed, %d skipped, %d below %s floor\n",
                failed, failed == 1 ? "" : "s", skipped, below, below == 1 ? "its" : "their");
        return 1;
    }
    return 0;
}

/* ================================================================ --help */

static const char *suite_arg(const quality_suite *s, const char *opt)
{
    for (int i = 0; s->args[i] && s->args[i + 1]; i++)
        if (!strcmp(s->args[i], opt)) return s->args[i + 1];
    return NULL;
}

void bench_quality_usage(FILE *f)
{
    fprintf(f, "quality (each case one miras-train run, one after another; docs/bench.md):\n"
               "  --suite A,B,..    suites, a comma list or repeated (default " DEFAULT_SUITES
               "):\n");
    int w = 11;
    for (int i = 0; i < n_quality_suites; i++)
        if ((int)strlen(quality_suites[i].name) > w) w = (int)strlen(quality_suites[i].name);
    for (int i = 0; i < n_quality_suites; i++) {
        const quality_suite *s = &quality_suites[i];
        const char *task = suite_arg(s, "--task"), *d = s->data, *kind = suite_arg(s, "--niah");
        const char *pairs = !strcmp(task ? task : "", "capacity") ? suite_arg(s, "--pairs") : NULL;
        fprintf(f, "    %-*s task %s%s%s%s%s%s, %s, %lld steps%s%s\n", w, s->name, task ? task : "lm",
                kind ? " " : "", kind ? kind : "", pairs ? " " : "", pairs ? pairs : "",
                pairs ? " pairs" : "", s->metric, (long long)suite_steps(s), d ? ", text " : "",
                !d ? "" : !strcmp(d, DATA_TEXT) ? TEXT_PATH : d);
    }
    for (int i = 0; i < n_quality_aliases; i++)
        fprintf(f, "    %-*s = %s\n", w, quality_aliases[i].name, quality_aliases[i].suites);
    fprintf(f,
        "  --quick           --suite quick: the test suite's subset (<= 3 minutes)\n"
        "  --variants A,B,.. variants in place of every suite's own list. A variant is a mixer\n"
        "                    spec -- a MIRAS preset, presets (every one), attention, swa[:W],\n"
        "                    samba:<preset>[:W], hope -- then optionally its own overrides,\n"
        "                    each +KEY=VALUE: moneta+p=2+q=4, titans+algorithm=gd,\n"
        "                    titans+memory=matrix; each becomes --set KEY=VALUE for that case\n"
        "                    (after the suite's and the user's, so it wins) and the run checks\n"
        "                    it reached the model (its checkpoint's lm.mixer_overrides)\n"
        "  --steps N         every suite's steps instead of its own (a --warmup >= N becomes "
        "N/10)\n"
        "  --replot F1,F2,.. no run: the tables and charts (into --out) from the JSON lines\n"
        "                    that earlier runs printed, one case per suite and variant (a\n"
        "                    later line replaces an earlier one)\n"
        "  --seed N          every suite's seed instead of its own (model initialisation and\n"
        "                    the task's streams; the floors hold for every seed)\n"
        "  --set KEY=VALUE   a --set for every MIRAS case (presets, samba:<preset>); "
        "repeatable\n"
        "  --data PATH       the text of the suites that take one (default: the checkout's\n"
        "                    " TEXT_PATH ", as train's; they are skipped without one)\n"
        "  --out DIR         runs in DIR/<suite>-<variant>/, per suite a chart\n"
        "                    DIR/quality-<suite>.svg and a Markdown table\n"
        "                    DIR/quality-<suite>.md (default " DEFAULT_OUT ")\n"
        "  --train PATH      the miras-train to run (default: the one beside this "
        "executable)\n"
        "  --check           exit status 1 when a case failed, was skipped (its suite's data\n"
        "                    not found) or is below its floor\n"
        "Output: one JSON line per case (suite, variant, command, steps, params, metric,\n"
        "val_loss, val_acc, train_loss, wall_s, cpu_s, mixer_overrides, status ok/failed/skipped,\n"
        "message, floor, ok, out), then a table per suite (delta to the baseline, floor, ok or\n"
        "BELOW FLOOR), its chart and its Markdown table. Exit status 0 (a failed run is a\n"
        "row); with --check 1 when a case failed, was skipped or is below its floor; 1 when\n"
        "miras-train is missing; 2 on bad arguments.\n");
}
