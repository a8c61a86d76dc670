/* miras-bench search: the MIRAS design space (docs/search.md).
 *
 * Candidates. Every memory × attentional bias × retention gate × learning
 * algorithm of the registry (mi_memory_at, …: built-ins and plugins alike),
 * times every combination of the --grid values, each as a quality variant
 *
 *   BASE+memory=M+bias=B+retention=R+algorithm=A[+KEY=V ...]
 *
 * on the base preset (--base, default titans: its gates and block; a gate the
 * new components need and the base leaves unused takes the block's default).
 * A combination is valid when the library builds its layer block (the check
 * mi_mixer_create makes: component kinds, their pairings, the gates they
 * need); the others are listed with the library's reason. The reference
 * presets (--presets) run as themselves beside them.
 *
 * Successive halving (Jamieson & Talwalkar 2016; Hyperband's inner loop), per
 * task: rung r trains every candidate still in for budget·ηʳ steps, seeds
 * fixed; the best ⌈n/η⌉ by the task's metric (mean over --seeds) go on,
 * ties broken by the candidate string. A trial that fails, diverges or passes
 * a cap is recorded with that status and never promoted nor run again. The
 * reference presets go on at every rung they finish, so the last rung
 * compares the survivors with them at equal budget.
 *
 * Trials. Each is a miras-train run (quality's runner, one thread) in a
 * worker process forked for it; --jobs N keeps N at once. Under an MPI
 * launcher (mpirun, srun: its rank and size from the environment, no MPI
 * call) rank R takes trials i ≡ R (mod size) of each rung, and a rung ends
 * when every key of the rung is in the JSON lines of DIR (a directory the
 * ranks share). Every rank then ranks the same lines the same way, so the
 * ranks agree on the next rung and the result equals --jobs 1's. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_quality.h"
#include "bench_quality_internal.h"
#include "bench_search.h"
#include "common.h"
#include "extend.h"

extern char **environ;

#define MAX_CANDIDATES 4096

typedef struct candidate {
    char name[SEARCH_NAME_LEN];
    bool preset;
} candidate;

/* ================================================================ the candidates */

typedef const char *(*kind_name_fn)(int i);
static const char *memory_name(int i) { const mi_memory_kind *k = mi_memory_at(i); return k ? k->name : NULL; }
static const char *bias_name(int i) { const mi_bias_kind *k = mi_bias_at(i); return k ? k->name : NULL; }
static const char *retention_name(int i) { const mi_retention_kind *k = mi_retention_at(i); return k ? k->name : NULL; }
static const char *algorithm_name(int i) { const mi_algorithm_kind *k = mi_algorithm_at(i); return k ? k->name : NULL; }

static const char *const axis_keys[4] = {"memory", "bias", "retention", "algorithm"};
static const kind_name_fn axis_names[4] = {memory_name, bias_name, retention_name, algorithm_name};

/* The names of axis a: the registry's, or the --memories … list (each checked
 * against the registry). Their count, or -1 with a message. */
static int axis_list(const search_opts *o, int a, char names[][64], int max, char *msg, size_t n)
{
    int count = 0;
    if (!o->axes[a]) {
        for (int i = 0; axis_names[a](i) && count < max; i++)
            snprintf(names[count++], 64, "%s", axis_names[a](i));
        return count;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", o->axes[a]);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        bool known = false;
        for (int i = 0; axis_names[a](i); i++) known |= !strcmp(axis_names[a](i), t);
        if (!known) {
            size_t used = (size_t)snprintf(msg, n, "%s: no %s named '%s'; known:", search_axis_options[a],
                                           axis_keys[a], t);
            for (int i = 0; axis_names[a](i) && used < n; i++)
                used += (size_t)snprintf(msg + used, n - used, " %s", axis_names[a](i));
            return -1;
        }
        if (count == max) return snprintf(msg, n, "%s: too many names", search_axis_options[a]), -1;
        snprintf(names[count++], 64, "%s", t);
    }
    return count ? count : (snprintf(msg, n, "%s: no name given", search_axis_options[a]), -1);
}

/* Whether the library builds the block of variant `overrides` (KEY=VALUE,
 * n of them) on preset base: the reason in why when it does not. */
static bool block_builds(const char *base, const char *const *overrides, int n_over, char *why,
                         size_t n)
{
    mi_scope *scope = mi_scope_new("search-check");
    if (!scope) return snprintf(why, n, "out of memory"), false;
    mi_scope_enter(scope);
    mi_mixer_options opt = mi_mixer_options_default(32, 2);
    opt.overrides = overrides;
    opt.n_overrides = n_over;
    mi_rng rng;
    mi_rng_seed(&rng, 1);
    mi_mixer mx;
    bool ok = mi_mixer_create(&mx, base, &opt, MI_F32, &rng, scope) == 0;
    if (!ok) snprintf(why, n, "%s", mi_error());
    for (char *p = why; !ok && *p; p++) /* one line of candidates.txt */
        if (*p == '\n' || *p == '\t') *p = ' ';
    mi_error_clear();
    mi_scope_leave();
    mi_scope_free(scope);
    return ok;
}

/* The --grid lists: KEY and its values. */
typedef struct grid {
    char key[64];
    char values[16][64];
    int n;
} grid;

static int parse_grids(const search_opts *o, grid *g, char *msg, size_t n)
{
    for (int i = 0; i < o->n_grids; i++) {
        const char *eq = strchr(o->grids[i], '=');
        if (!eq || eq == o->grids[i] || !eq[1] || (size_t)(eq - o->grids[i]) >= sizeof g[i].key)
            return snprintf(msg, n, "--grid wants KEY=V1,V2,..., got '%s'", o->grids[i]), -1;
        snprintf(g[i].key, sizeof g[i].key, "%.*s", (int)(eq - o->grids[i]), o->grids[i]);
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", eq + 1);
        g[i].n = 0;
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (g[i].n == 16) return snprintf(msg, n, "--grid %.64s: more than 16 values", g[i].key), -1;
            snprintf(g[i].values[g[i].n++], 64, "%s", t);
        }
        if (!g[i].n) return snprintf(msg, n, "--grid %.64s: no value", g[i].key), -1;
    }
    return 0;
}

/* Whether name is an entry of the comma list. */
static bool in_list(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n == len && !strncmp(p, name, len)) return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* Every candidate: the grid ones that build, then the reference presets.
 * The invalid ones go to `invalid` (one line each, with the reason). Their
 * count, or -1 with a message. */
static int enumerate(const search_opts *o, candidate *cands, int max, strbuf *invalid,
                     int *n_invalid, char *msg, size_t n)
{
    static char names[4][64][64];
    int counts[4];
    for (int a = 0; a < 4; a++)
        if ((counts[a] = axis_list(o, a, names[a], 64, msg, n)) < 0) return -1;
    grid grids[SEARCH_MAX_LIST];
    if (parse_grids(o, grids, msg, n) != 0) return -1;
    int count = 0;
    *n_invalid = 0;
    int total = counts[0] * counts[1] * counts[2] * counts[3];
    int grid_total = 1;
    for (int g = 0; g < o->n_grids; g++) grid_total *= grids[g].n;
    for (int i = 0; i < total * grid_total; i++) {
        int idx[4], rest = i / grid_total, gi = i % grid_total;
        for (int a = 3; a >= 0; a--) idx[a] = rest % counts[a], rest /= counts[a];
        char over[4 + SEARCH_MAX_LIST + SEARCH_MAX_LIST][96];
        const char *ov[4 + 2 * SEARCH_MAX_LIST];
        int n_ov = 0;
        for (int a = 0; a < 4; a++)
            snprintf(over[n_ov], sizeof over[0], "%s=%s", axis_keys[a], names[a][idx[a]]), n_ov++;
        for (int g = o->n_grids - 1, r = gi; g >= 0; g--) {
            snprintf(over[n_ov + g], sizeof over[0], "%s=%s", grids[g].key,
                     grids[g].values[r % grids[g].n]);
            r /= grids[g].n;
        }
        n_ov += o->n_grids;
        strbuf name = {0};
        sb_printf(&name, "%s", o->base);
        for (int k = 0; k < n_ov; k++) sb_printf(&name, "+%s", over[k]);
        for (int k = 0; k < n_ov + o->n_sets; k++) ov[k] = k < n_ov ? over[k] : o->sets[k - n_ov];
        char why[512];
        if (name.oom || name.len >= SEARCH_NAME_LEN) {
            free(name.s);
            return snprintf(msg, n, "a candidate's name is longer than %d characters",
                            SEARCH_NAME_LEN - 1), -1;
        }
        if (o->only && !in_list(o->only, name.s)) {
            free(name.s);
            continue;
        }
        if (!block_builds(o->base, ov, n_ov + o->n_sets, why, sizeof why)) {
            sb_printf(invalid, "%s\tinvalid: %s\n", name.s, why);
            (*n_invalid)++;
        } else if (count < max) {
            snprintf(cands[count].name, SEARCH_NAME_LEN, "%s", name.s);
            cands[count++].preset = false;
        } else {
            free(name.s);
            return snprintf(msg, n, "more than %d candidates", max), -1;
        }
        free(name.s);
    }
    for (const char *p = o->only ? o->only : ""; *p;) { /* every --only name is in the space */
        size_t len = strcspn(p, ",");
        bool found = false;
        for (int k = 0; k < count; k++)
            found |= strlen(cands[k].name) == len && !strncmp(cands[k].name, p, len);
        if (!found)
            return snprintf(msg, n, "--only: '%.*s' is not a valid candidate of this space "
                            "(--list shows them)", (int)len, p), -1;
        p += len + (p[len] == ',');
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", o->presets);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!mi_preset_find(t)) return snprintf(msg, n, "--presets: no MIRAS preset '%s'", t), -1;
        if (count == max) return snprintf(msg, n, "more than %d candidates", max), -1;
        snprintf(cands[count].name, SEARCH_NAME_LEN, "%s", t);
        cands[count++].preset = true;
    }
    return count;
}

/* ================================================================ one trial */

typedef struct search_ctx {
    const search_opts *o;
    const quality_suite *suite;
    const char *data;          /* the suite's text, or NULL */
    char train[4096 + 32];
    char file[4096 + 64];      /* this process's JSON-lines file */
    int rank, size;
} search_ctx;

static void trial_key(char *buf, size_t n, const char *task, int64_t steps, int64_t seed,
                      const char *cand)
{
    snprintf(buf, n, "%s|%lld|%lld|%s", task, (long long)steps, (long long)seed, cand);
}

/* DIR/<task>/s<steps>-seed<seed>/<candidate>, characters outside [A-Za-z0-9._+=-] as '_'. */
static void trial_dir(char *buf, size_t n, const char *out, const char *task, int64_t steps,
                      int64_t seed, const char *cand)
{
    int w = snprintf(buf, n, "%s/%s/s%lld-seed%lld/", out, task, (long long)steps, (long long)seed);
    char *p = buf + (w > 0 && (size_t)w < n ? w : 0);
    for (const char *v = cand; *v && (size_t)(p - buf) + 1 < n; v++)
        *p++ = (strchr("._-+=", *v) || (*v >= '0' && *v <= '9') || (*v >= 'a' && *v <= 'z') ||
                (*v >= 'A' && *v <= 'Z')) ? *v : '_';
    *p = '\0';
}

/* The status of a finished case: a NaN or infinite value is a divergence
 * (miras-train's "… is NaN at step …", or no finite metric in the log), a run
 * stopped at the CPU limit or past the RSS cap is over its cap. */
static trial_status classify(const quality_case *c, const search_opts *o, double rss_mb)
{
    if (o->max_rss_mb > 0 && rss_mb > o->max_rss_mb) return TRIAL_OVER_MEMORY;
    if (c->status == CASE_OK) return TRIAL_OK;
    if (o->max_seconds > 0 && (strstr(c->message, "signal 24") || c->cpu_s >= o->max_seconds))
        return TRIAL_OVER_TIME;
    if (strstr(c->message, "is NaN at step") || strstr(c->message, "Inf at step") ||
        strstr(c->message, "no finite"))
        return TRIAL_DIVERGED;
    /* out of address space under the cap: the allocation failed */
    if (o->max_rss_mb > 0 && (strstr(c->message, "out of memory") || strstr(c->message, "signal 9")))
        return TRIAL_OVER_MEMORY;
    return TRIAL_FAILED;
}

#if defined(__SANITIZE_ADDRESS__)
#define ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADDRESS_SANITIZER 1
#endif
#endif
#ifndef ADDRESS_SANITIZER
#define ADDRESS_SANITIZER 0
#endif

/* --out's lock (dir_lock), held by the search alone: a worker closes its copy, so
 * that a killed search's directory is free as soon as the search is gone. */
static int lock_fd = -1;

/* In the worker process: runs the trial, appends its line, exits. */
static _Noreturn void run_trial(const search_ctx *x, const candidate *c, int rung, int64_t steps,
                                int64_t seed)
{
    const search_opts *o = x->o;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed search takes its workers along */
    if (lock_fd >= 0) close(lock_fd);
    if (o->max_seconds > 0) {
        rlim_t s = (rlim_t)ceil(o->max_seconds);
        struct rlimit cpu = {s, s + 5};
        setrlimit(RLIMIT_CPU, &cpu);
    }
    if (o->max_rss_mb > 0 && !ADDRESS_SANITIZER) {
        /* a hard stop well past the cap; the cap itself is the RSS (an ASan build maps
           terabytes of shadow at start: there the RSS alone decides) */
        rlim_t bytes = (rlim_t)((2 * o->max_rss_mb + 1024) * 1048576.0);
        struct rlimit as = {bytes, bytes};
        setrlimit(RLIMIT_AS, &as);
    }
    quality_case qc = {.suite = x->suite, .steps = steps, .params = -1, .val_loss = NAN,
                       .val_acc = NAN, .train_loss = NAN, .wall_s = NAN, .eval_wall_s = NAN,
                       .cpu_s = NAN, .eval_cpu_s = NAN, .status = CASE_OK};
    snprintf(qc.variant, sizeof qc.variant, "%s", c->name);
    trial_dir(qc.dir, sizeof qc.dir, o->out, x->suite->name, steps, seed, c->name);
    quality_opts q = {.steps = steps, .seed = seed, .threads = 1};
    for (int i = 0; i < o->n_sets && i < QUALITY_MAX_OPTS; i++) q.sets[q.n_sets++] = o->sets[i];
    /* the run of a search killed earlier may still hold the directory (a miras-train
     * outlives its worker): wait for it to end (its lock, DIR/.lock) before starting,
     * as this run's output file would be cut under it; and again if it got there first */
    char lock_path[sizeof qc.dir + 8];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", qc.dir);
    for (int waited = 0; waited < 3600; waited++) {
        int fd = open(lock_path, O_RDONLY | O_CLOEXEC);
        bool held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        if (fd >= 0) close(fd);
        if (!held) break;
        if (waited % 60 == 0)
            fprintf(stderr, "  %s: waiting for an earlier run in its directory to end\n", c->name);
        pause_ms(1000);
    }
    quality_run_case(&qc, x->train, x->data, &q);
    for (int waited = 0; qc.status != CASE_OK && strstr(qc.message, "is in use by another run") &&
                         waited < 3600; waited++) {
        if (waited % 60 == 0)
            fprintf(stderr, "  %s: waiting for an earlier run in its directory to end\n", c->name);
        pause_ms(1000);
        free(qc.command);
        qc.command = NULL;
        qc.status = CASE_OK;
        qc.message[0] = '\0';
        quality_run_case(&qc, x->train, x->data, &q);
    }
    struct rusage u;
    double rss_mb = getrusage(RUSAGE_CHILDREN, &u) == 0 ? (double)u.ru_maxrss / 1024.0 : NAN;
    trial t = {.preset = c->preset, .rung = rung, .steps = steps, .seed = seed,
               .params = qc.params, .val_loss = qc.val_loss, .val_acc = qc.val_acc,
               .cpu_s = qc.cpu_s, .wall_s = qc.wall_s, .peak_rss_mb = rss_mb,
               .command = qc.command};
    trial_key(t.key, sizeof t.key, x->suite->name, steps, seed, c->name);
    snprintf(t.task, sizeof t.task, "%s", x->suite->name);
    snprintf(t.candidate, sizeof t.candidate, "%s", c->name);
    snprintf(t.metric, sizeof t.metric, "%s", x->suite->metric);
    t.status = classify(&qc, o, rss_mb);
    t.value = t.status == TRIAL_OK ? metric_of(&qc) : NAN;
    t.ms_per_step = 1000.0 * qc.cpu_s / (double)steps;
    if (t.status != TRIAL_OK)
        snprintf(t.message, sizeof t.message, "%s", qc.message[0] ? qc.message : "over its cap");
    char *line = trial_json(&t), msg[1024];
    int rc = line ? trial_append(x->file, line, msg, sizeof msg) : -1;
    if (rc != 0) fprintf(stderr, "miras-bench: %s\n", line ? msg : "out of memory");
    else if (t.status == TRIAL_OK)
        fprintf(stderr, "  %s s%lld seed %lld %s: %s %.4f, %.2f ms/step (CPU)\n", t.task,
                (long long)steps, (long long)seed, c->name, t.metric, t.value, t.ms_per_step);
    else
        fprintf(stderr, "  %s s%lld seed %lld %s: %s: %.160s\n", t.task, (long long)steps,
                (long long)seed, c->name, trial_status_names[t.status], t.message);
    free(line);
    free(qc.command);
    _exit(rc == 0 ? 0 : 1);
}

/* A worker that died without its line (killed, out of memory): the line
 * written for it, so that the rung can end. */
static void record_lost(const search_ctx *x, const candidate *c, int rung, int64_t steps,
                        int64_t seed, int status)
{
    trial t = {.preset = c->preset, .rung = rung, .steps = steps, .seed = seed, .params = -1,
               .status = TRIAL_FAILED, .value = NAN, .val_loss = NAN, .val_acc = NAN,
               .cpu_s = NAN, .wall_s = NAN, .ms_per_step = NAN, .peak_rss_mb = NAN};
    trial_key(t.key, sizeof t.key, x->suite->name, steps, seed, c->name);
    snprintf(t.task, sizeof t.task, "%s", x->suite->name);
    snprintf(t.candidate, sizeof t.candidate, "%s", c->name);
    snprintf(t.metric, sizeof t.metric, "%s", x->suite->metric);
    if (WIFSIGNALED(status))
        snprintf(t.message, sizeof t.message, "the trial's worker was killed by signal %d",
                 WTERMSIG(status));
    else
        snprintf(t.message, sizeof t.message, "the trial's worker exited with status %d",
                 WEXITSTATUS(status));
    char *line = trial_json(&t), msg[1024];
    if (!line || trial_append(x->file, line, msg, sizeof msg) != 0)
        fprintf(stderr, "miras-bench: %s\n", line ? msg : "out of memory");
    free(line);
}

/* ================================================================ a rung */

typedef struct pending {
    pid_t pid;
    int cand;
    int64_t seed;
} pending;

/* Runs this rank's trials of the rung that no line holds yet, --jobs at once. */
static int run_rung(const search_ctx *x, const candidate *cands, const int *in, int n_in,
                    const int64_t *seeds, int n_seeds, int rung, int64_t steps, const trial *done,
                    int n_done)
{
    int jobs = x->o->jobs, running = 0, started = 0, todo = 0;
    pending slots[64] = {{0}};
    char key[SEARCH_NAME_LEN + 96];
    for (int i = 0; i < n_in * n_seeds; i++) {
        trial_key(key, sizeof key, x->suite->name, steps, seeds[i % n_seeds],
                  cands[in[i / n_seeds]].name);
        todo += i % x->size == x->rank && !trials_find(done, n_done, key);
    }
    for (int i = 0; i < n_in * n_seeds || running > 0;) {
        if (i < n_in * n_seeds && running < jobs) {
            const candidate *c = &cands[in[i / n_seeds]];
            int64_t seed = seeds[i % n_seeds];
            trial_key(key, sizeof key, x->suite->name, steps, seed, c->name);
            bool mine = i % x->size == x->rank;
            i++;
            if (!mine || trials_find(done, n_done, key)) continue;
            fprintf(stderr, "[%s rung %d, %lld steps: %d/%d] %s seed %lld\n", x->suite->name, rung,
                    (long long)steps, ++started, todo, c->name, (long long)seed);
            fflush(stderr);
            pid_t pid = fork();
            if (pid < 0) return fprintf(stderr, "miras-bench: fork: %s\n", strerror(errno)), -1;
            if (pid == 0) run_trial(x, c, rung, steps, seed);
            for (int s = 0; s < jobs; s++)
                if (!slots[s].pid) { slots[s] = (pending){pid, (int)(c - cands), seed}; break; }
            running++;
            continue;
        }
        int status;
        pid_t pid = wait(&status);
        if (pid < 0) {
            if (errno == EINTR) continue;
            return fprintf(stderr, "miras-bench: wait: %s\n", strerror(errno)), -1;
        }
        for (int s = 0; s < jobs; s++) {
            if (slots[s].pid != pid) continue;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                record_lost(x, &cands[slots[s].cand], rung, steps, slots[s].seed, status);
            slots[s].pid = 0;
            running--;
        }
    }
    return 0;
}

/* Waits until every key of the rung is in DIR's lines (other ranks'
 * included); the lines, read again. */
static int rung_barrier(const search_ctx *x, const candidate *cands, const int *in, int n_in,
                        const int64_t *seeds, int n_seeds, int64_t steps, trial **ts, int *n_ts)
{
    char msg[1024], key[SEARCH_NAME_LEN + 96];
    for (int waited = 0;; waited++) {
        trials_free(*ts, *n_ts);
        *ts = NULL;
        *n_ts = trials_read(x->o->out, ts, msg, sizeof msg);
        if (*n_ts < 0) return fprintf(stderr, "miras-bench: %s\n", msg), *n_ts = 0, -1;
        int missing = 0;
        for (int i = 0; i < n_in * n_seeds; i++) {
            trial_key(key, sizeof key, x->suite->name, steps, seeds[i % n_seeds],
                      cands[in[i / n_seeds]].name);
            missing += !trials_find(*ts, *n_ts, key);
        }
        if (!missing) return 0;
        if (x->size == 1) /* every trial of ours wrote a line, or one was written for it */
            return fprintf(stderr, "miras-bench: %d trials of the rung have no line in %s\n",
                           missing, x->o->out), -1;
        if (waited % 600 == 0)
            fprintf(stderr, "miras-bench: rank %d waits for %d trials of the other ranks\n",
                    x->rank, missing);
        pause_ms(200);
    }
}

/* A candidate's score at a rung: the mean metric over the seeds, NaN when a
 * seed's trial is not ok; *loss the mean validation loss (an accuracy's
 * tie-break: early rungs of a recall task sit at chance, where the loss
 * still orders them). */
static double rung_score(const search_ctx *x, const candidate *c, const int64_t *seeds,
                         int n_seeds, int64_t steps, const trial *ts, int n_ts, double *loss)
{
    char key[SEARCH_NAME_LEN + 96];
    double sum = 0, loss_sum = 0;
    for (int s = 0; s < n_seeds; s++) {
        trial_key(key, sizeof key, x->suite->name, steps, seeds[s], c->name);
        const trial *t = trials_find(ts, n_ts, key);
        if (!t || t->status != TRIAL_OK) return *loss = NAN, NAN;
        sum += t->value, loss_sum += t->val_loss;
    }
    *loss = isfinite(loss_sum) ? loss_sum / n_seeds : INFINITY;
    return sum / n_seeds;
}

typedef struct ranked {
    int cand;
    double score, loss;
    const char *name;
    bool lower;
} ranked;

/* Better metric first; equal metrics by the lower validation loss, then by name. */
static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score) return (x->lower ? x->score < y->score : x->score > y->score) ? -1 : 1;
    if (x->loss != y->loss) return x->loss < y->loss ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* ================================================================ options */

static int64_t suite_arg_int(const quality_suite *s, const char *opt, int64_t dflt)
{
    for (int i = 0; s->args[i] && s->args[i + 1]; i++)
        if (!strcmp(s->args[i], opt)) return strtoll(s->args[i + 1], NULL, 10);
    return dflt;
}

static const quality_suite *find_suite(const char *name)
{
    for (int k = 0; k < n_quality_suites; k++)
        if (!strcmp(quality_suites[k].name, name)) return &quality_suites[k];
    return NULL;
}

/* rank and size from the launcher's environment (Open MPI, PMI, Slurm); then
 * the launcher's variables are dropped, so that the miras-train runs do not
 * take themselves for ranks of this job. */
static void launcher_rank(int *rank, int *size)
{
    const char *pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                              {"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}};
    *rank = 0, *size = 1;
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        const char *r = getenv(pairs[i][0]), *s = getenv(pairs[i][1]);
        if (r && s && atoi(s) >= 1 && atoi(r) >= 0 && atoi(r) < atoi(s)) {
            *rank = atoi(r), *size = atoi(s);
            break;
        }
    }
    for (bool again = true; again;) {
        again = false;
        for (char **e = environ; *e; e++)
            if (!strncmp(*e, "OMPI_", 5) || !strncmp(*e, "PMIX_", 5) || !strncmp(*e, "PMI_", 4)) {
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                unsetenv(name);
                again = true;
                break;
            }
    }
}

/* ================================================================ the search */

int bench_search_main(int argc, char **argv)
{
    search_opts o;
    int rc = search_parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc; /* -1: --help */
    char msg[2048];
    search_ctx x = {.o = &o};
    launcher_rank(&x.rank, &x.size);
    /* one thread per trial: the results do not depend on the machine's cores */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);

    /* the tasks */
    const quality_suite *tasks[SEARCH_MAX_LIST];
    int n_tasks = 0;
    char tbuf[1024];
    snprintf(tbuf, sizeof tbuf, "%s", o.tasks);
    for (char *save = NULL, *t = strtok_r(tbuf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const quality_suite *s = find_suite(t);
        if (!s) return search_usage_error("--suite: no quality suite '%s'%s (miras-bench --help lists them)", t, "");
        if (n_tasks == SEARCH_MAX_LIST) return search_usage_error("--suite: too many%s%s", "", "");
        tasks[n_tasks++] = s;
    }
    int64_t seeds_given[SEARCH_MAX_LIST];
    int n_seeds = 0;
    if (o.seeds) {
        char sbuf[512];
        snprintf(sbuf, sizeof sbuf, "%s", o.seeds);
        for (char *save = NULL, *t = strtok_r(sbuf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *end;
            long long s = strtoll(t, &end, 10);
            if (*end || s < 1 || n_seeds == SEARCH_MAX_LIST)
                return search_usage_error("--seeds wants positive integers, got '%s'%s", o.seeds, "");
            seeds_given[n_seeds++] = s;
        }
    }

    /* the candidates */
    candidate *cands = calloc(MAX_CANDIDATES, sizeof *cands);
    strbuf invalid = {0};
    int n_invalid = 0;
    if (!cands) return fprintf(stderr, "miras-bench: out of memory\n"), 1;
    int n_cands = enumerate(&o, cands, MAX_CANDIDATES, &invalid, &n_invalid, msg, sizeof msg);
    if (n_cands < 0) {
        free(cands), free(invalid.s);
        return search_usage_error("%s%s", msg, "");
    }
    int n_grid = 0;
    for (int i = 0; i < n_cands; i++) n_grid += !cands[i].preset;
    strbuf list = {0};
    sb_printf(&list, "# base %s: %d valid combinations, %d invalid, %d reference presets\n",
              o.base, n_grid, n_invalid, n_cands - n_grid);
    for (int i = 0; i < n_cands; i++)
        sb_printf(&list, "%s\t%s\n", cands[i].name, cands[i].preset ? "preset" : "valid");
    for (const char *p = invalid.s ? invalid.s : ""; *p;) {
        size_t len = strcspn(p, "\n");
        sb_printf(&list, "%.*s\n", (int)len, p);
        p += len + (p[len] == '\n');
    }
    /* candidates.txt: NAME<TAB>valid|preset, or NAME<TAB>invalid: the reason */
    strbuf file = {0};
    sb_printf(&file, "%s", list.s ? list.s : "");
    free(invalid.s);
    if (o.list) {
        /* the invalid lines say "invalid: <reason>" on stdout */
        fputs(list.s ? list.s : "", stdout);
        free(list.s), free(file.s), free(cands);
        return 0;
    }
    free(list.s);
    fprintf(stderr, "search: base %s, %d valid combinations (%d invalid: %s/candidates.txt), "
            "%d reference presets, %d task%s; rank %d of %d, %d job%s\n", o.base, n_grid,
            n_invalid, o.out, n_cands - n_grid, n_tasks, n_tasks == 1 ? "" : "s", x.rank, x.size,
            o.jobs, o.jobs == 1 ? "" : "s");
    if (make_dir(o.out, msg, sizeof msg) != 0) {
        free(file.s), free(cands);
        return fprintf(stderr, "miras-bench: --out: %s\n", msg), 1;
    }
    if (x.size == 1 && !o.report && (lock_fd = dir_lock(o.out, msg, sizeof msg)) < 0) {
        free(file.s), free(cands);
        return fprintf(stderr, "miras-bench: --out: %s\n", msg), 1;
    }
    /* the --set values are not in the trials' keys: a directory holds the trials of one
     * list of them (DIR/sets.txt), and a rerun with another is refused */
    {
        strbuf sets = {0};
        for (int i = 0; i < o.n_sets; i++) sb_printf(&sets, "%s\n", o.sets[i]);
        char path[4096 + 32], why[128], old_sets[4096] = "";
        snprintf(path, sizeof path, "%s/sets.txt", o.out);
        FILE *f = fopen_regular(path, why, sizeof why);
        bool had = f != NULL;
        if (f) {
            size_t got = fread(old_sets, 1, sizeof old_sets - 1, f);
            old_sets[got] = '\0';
            fclose(f);
        }
        const char *now = sets.s ? sets.s : "";
        if (had && strcmp(old_sets, now)) {
            free(sets.s), free(file.s), free(cands);
            return search_usage_error("--out %s holds trials of other --set values (its sets.txt); "
                               "give the same ones or another --out%s", o.out, "");
        }
        if (!had && x.rank == 0 && write_atomic(path, now, strlen(now), msg, sizeof msg) != 0)
            fprintf(stderr, "miras-bench: %s\n", msg);
        free(sets.s);
    }
    if (x.rank == 0) {
        char path[4096 + 32];
        snprintf(path, sizeof path, "%s/candidates.txt", o.out);
        if (write_atomic(path, file.s ? file.s : "", file.len, msg, sizeof msg) != 0)
            fprintf(stderr, "miras-bench: %s\n", msg);
    }
    free(file.s);
    if (x.size > 1) snprintf(x.file, sizeof x.file, "%s/trials.rank%d.jsonl", o.out, x.rank);
    else snprintf(x.file, sizeof x.file, "%s/trials.jsonl", o.out);
    {
        quality_opts q = {.train = o.train};
        if ((rc = quality_find_train(&q, x.train, sizeof x.train)) != 0) {
            free(cands);
            return rc;
        }
    }

    trial *ts = NULL;
    int n_ts = trials_read(o.out, &ts, msg, sizeof msg);
    if (n_ts < 0) {
        free(cands);
        return fprintf(stderr, "miras-bench: %s\n", msg), 1;
    }
    if (n_ts && !o.report)
        fprintf(stderr, "search: %d trials already in %s (not run again)\n", n_ts, o.out);
    search_task_report reports[SEARCH_MAX_LIST];
    int *in = malloc((size_t)n_cands * sizeof *in);
    ranked *rk = malloc((size_t)n_cands * sizeof *rk);
    rc = in && rk ? 0 : 1;
    for (int k = 0; k < n_tasks && rc == 0; k++) {
        const quality_suite *su = tasks[k];
        static char data_buf[4096];
        x.suite = su;
        x.data = NULL;
        if (su->data && !strcmp(su->data, DATA_TEXT))
            x.data = o.data ? o.data : find_checkout_file(TEXT_PATH, data_buf, sizeof data_buf);
        else if (su->data)
            x.data = find_checkout_file(su->data, data_buf, sizeof data_buf);
        if (su->data && !x.data) {
            fprintf(stderr, "miras-bench: task %s: its text was not found (give --data)\n",
                    su->name);
            rc = 1;
            break;
        }
        int64_t seeds[SEARCH_MAX_LIST];
        int ns = n_seeds;
        if (ns) memcpy(seeds, seeds_given, sizeof seeds);
        else seeds[0] = suite_arg_int(su, "--seed", 1), ns = 1;
        reports[k] = (search_task_report){.task = su->name, .metric = su->metric, .rungs = o.rungs};
        int n_in = n_cands;
        for (int i = 0; i < n_cands; i++) in[i] = i;
        bool lower = metric_lower_better(su->metric);
        for (int r = 0; r < o.rungs && n_in > 0; r++) {
            int64_t steps = o.budgets ? o.rung_steps[r] : llround((double)o.budget * pow(o.eta, r));
            reports[k].budgets[r] = steps;
            if (!o.report && (run_rung(&x, cands, in, n_in, seeds, ns, r, steps, ts, n_ts) != 0 ||
                              rung_barrier(&x, cands, in, n_in, seeds, ns, steps, &ts, &n_ts) != 0)) {
                rc = 1;
                break;
            }
            /* the next rung: the best ⌈grid/η⌉ that finished, and every preset that did */
            int n_rk = 0, n_grid_in = 0;
            for (int i = 0; i < n_in; i++) {
                const candidate *c = &cands[in[i]];
                n_grid_in += !c->preset;
                double loss, s = rung_score(&x, c, seeds, ns, steps, ts, n_ts, &loss);
                if (!c->preset && isfinite(s))
                    rk[n_rk++] = (ranked){in[i], s, loss, c->name, lower};
            }
            qsort(rk, (size_t)n_rk, sizeof *rk, by_score);
            int keep = (int)ceil(n_grid_in / o.eta), next = 0;
            if (keep > n_rk) keep = n_rk;
            int *nxt = malloc((size_t)n_cands * sizeof *nxt);
            if (!nxt) { rc = 1; break; }
            for (int i = 0; i < keep; i++) nxt[next++] = rk[i].cand;
            for (int i = 0; i < n_in; i++) {
                double loss;
                if (cands[in[i]].preset &&
                    isfinite(rung_score(&x, &cands[in[i]], seeds, ns, steps, ts, n_ts, &loss)))
                    nxt[next++] = in[i];
            }
            if (x.rank == 0 && r + 1 < o.rungs)
                fprintf(stderr, "search %s rung %d (%lld steps): %d of %d finished; %d go on\n",
                        su->name, r, (long long)steps, n_rk, n_grid_in, next);
            else if (x.rank == 0)
                fprintf(stderr, "search %s rung %d (%lld steps): %d of %d finished\n", su->name,
                        r, (long long)steps, n_rk, n_grid_in);
            memcpy(in, nxt, (size_t)next * sizeof *in);
            free(nxt);
            n_in = next;
        }
    }
    if (rc == 0 && x.rank == 0) {
        const char **names = malloc((size_t)n_cands * sizeof *names);
        if (!names) rc = 1;
        for (int i = 0; names && i < n_cands; i++) names[i] = cands[i].name;
        if (names && search_report(ts, n_ts, reports, n_tasks, names, n_cands, o.base, o.top,
                                   o.out, o.json_only) != 0)
            rc = 1;
        free(names);
    }
    trials_free(ts, n_ts);
    free(in), free(rk), free(cands);
    return rc;
}
