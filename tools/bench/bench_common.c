/* miras-bench's shared machinery (bench_common.h): the timing loop, the
 * results with their JSON lines and the layer/train table, peak RSS, and
 * the child process and memory estimate every layer or train case runs
 * under. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

/* ================================================================ timing */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#define WARMUP_S 0.05     /* at least two calls and this long */
#define REP_TARGET_S 2e-3 /* one repetition lasts about this long */
#define CASE_BUDGET_S 6.0 /* a slow case stops after this, with ≥ 3 repetitions */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const time_policy ops_policy = {2, WARMUP_S, CASE_BUDGET_S, 3};

/* Times body(ctx); `per_body` calls of the measured thing happen per body. */
static double tv_ms(struct timeval b, struct timeval a)
{
    return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_usec - a.tv_usec) / 1e3;
}

timing time_body_with(body_fn body, void *ctx, int per_body, int reps,
                      const time_policy *p)
{
    double t0 = now_s(), fastest = INFINITY;
    for (int calls = 0; calls < p->warmup_calls || now_s() - t0 < p->warmup_s; calls++) {
        double a = now_s();
        body(ctx);
        fastest = fmin(fastest, now_s() - a);
    }
    /* from the fastest warm-up call: a slow first call (page faults, a
     * descheduled thread) must not shrink every repetition to one call */
    timing r = {.inner = (int)fmin(1e6, fmax(1.0, ceil(REP_TARGET_S / fastest)))};
    double *ms = malloc(sizeof(double) * (size_t)reps);
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    double start = now_s();
    for (r.reps = 0; r.reps < reps; r.reps++) {
        if (r.reps >= p->min_reps && now_s() - start > p->budget_s) break;
        double a = now_s();
        for (int i = 0; i < r.inner; i++) body(ctx);
        ms[r.reps] = (now_s() - a) * 1e3 / r.inner / per_body;
    }
    getrusage(RUSAGE_SELF, &u1);
    double calls = (double)r.reps * r.inner * per_body;
    r.faults = (double)(u1.ru_minflt - u0.ru_minflt) / calls;
    r.user_ms = tv_ms(u1.ru_utime, u0.ru_utime) / calls;
    r.sys_ms = tv_ms(u1.ru_stime, u0.ru_stime) / calls;
    r.median_ms = median_of(ms, r.reps);
    r.min_ms = ms[0];
    r.max_ms = ms[r.reps - 1];
    free(ms);
    return r;
}

timing time_body(body_fn body, void *ctx, int per_body, const bench_opts *o)
{
    return time_body_with(body, ctx, per_body, o->reps, &ops_policy);
}

/* ================================================================ results */

result results[MAX_RESULTS];
int n_results;

long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

int record(const char *name, const char *config, int threads, timing t, double flops,
           double bytes)
{
    if (n_results == MAX_RESULTS) return MAX_RESULTS - 1;
    result *r = &results[n_results];
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->config, sizeof r->config, "%s", config);
    r->threads = threads;
    r->t = t;
    r->flops = flops;
    r->bytes = bytes;
    r->raw = -1;
    r->rss_kb = peak_rss_kb();
    return n_results++;
}

/* Framework median time / raw median time (> 1: the framework is slower). */
double ratio_of(const result *r)
{
    return r->raw >= 0 ? r->t.median_ms / results[r->raw].t.median_ms : NAN;
}

void print_json(const result *r)
{
    printf("{\"name\":\"%s\",\"config\":\"%s\",\"threads\":%d,\"median_ms\":%.6g,"
           "\"min_ms\":%.6g,\"max_ms\":%.6g,\"reps\":%d,\"inner\":%d,",
           r->name, r->config, r->threads, r->t.median_ms, r->t.min_ms, r->t.max_ms, r->t.reps,
           r->t.inner);
    if (r->bytes > 0)
        printf("\"gbps\":%.4g,\"bytes\":%.0f,\"flops\":null,", r->bytes / r->t.median_ms / 1e6,
               r->bytes);
    else
        printf("\"gflops\":%.4g,\"flops\":%.0f,", r->flops / r->t.median_ms / 1e6, r->flops);
    printf("\"peak_rss_kb\":%ld", r->rss_kb);
    if (r->raw >= 0)
        printf(",\"raw\":\"%s\",\"ratio_to_raw\":%.4g", results[r->raw].name, ratio_of(r));
    printf("}\n");
    fflush(stdout);
}

void fmt_time(char *buf, size_t n, double ms)
{
    if (ms < 1) snprintf(buf, n, "%.3g us", ms * 1e3);
    else snprintf(buf, n, "%.4g ms", ms);
}

int parse_count(const char *text, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 1 || v > 100000) return -1;
    *out = (int)v;
    return 0;
}

/* ================================================================ layer and train: cases
 * Every layer or train case runs in a child process (fork): its peak RSS is
 * its own (getrusage in the child), a case that runs out of memory or
 * crashes is reported and the others still run, and the memory budget is
 * enforced before the real run: the child first runs the case twice at a
 * small size (probes), extrapolates what a step allocates in its scope
 * (mi_scope_stats, which tracks peak RSS within a few per cent: the step
 * scope holds every activation and gradient) linearly to the real size,
 * adds 5 % and the RSS before the probes, and skips the case if the estimate
 * exceeds --max-rss-gb. (The RSS of the probes themselves is no guide: a
 * scope reset merges its blocks into a new one while glibc may keep the
 * freed small blocks resident, so a second probe can show up to twice
 * what it needs.) As a safety net the child's address space is capped at
 * 1.25 x the budget + 0.5 GB (not under AddressSanitizer, which reserves
 * terabytes of shadow memory).
 * The parent starts no OpenMP threads of its own (libgomp does not survive
 * fork in a child of a process that used it). */

#if defined(__SANITIZE_ADDRESS__)
#define BENCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BENCH_ASAN 1
#endif
#endif


/* Two warm-up calls: the first grows the step scope block by block, the
 * reset after it merges them into one fresh block whose pages the second
 * call faults in; from the third call on a step asks the system for nothing. */
time_policy step_policy(const bench_opts *o)
{
    return (time_policy){2, 0.0, o->budget_s, 1};
}

/* In a case's child: its address-space cap in GB, 0 when none is set. */
static double memory_cap_gb;

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* Runs fn(ctx, out) in a child; *out comes back through a pipe. A child
 * that dies or exits without a result leaves out->failed set. */
void run_isolated(case_fn fn, const void *ctx, const bench_opts *o, result *out)
{
    int fd[2];
    fflush(stdout);
    fflush(stderr);
    if (pipe(fd) != 0) {
        out->failed = true;
        snprintf(out->note, sizeof out->note, "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        out->failed = true;
        snprintf(out->note, sizeof out->note, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
#ifndef BENCH_ASAN
        double cap = (o->max_rss_gb * 1.25 + 0.5) * 1073741824.0;
        struct rlimit rl = {.rlim_cur = (rlim_t)cap, .rlim_max = (rlim_t)cap};
        if (setrlimit(RLIMIT_AS, &rl) == 0) memory_cap_gb = cap / 1073741824.0;
#endif
        result r = *out;
        fn(ctx, &r);
        int rc = write_all(fd[1], &r, sizeof r) == 0 ? 0 : 1;
        close(fd[1]);
        _exit(rc); /* no atexit handlers, no stdio flush: the parent prints */
    }
    close(fd[1]);
    result r;
    size_t got = read_all(fd[0], &r, sizeof r);
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (got == sizeof r) {
        *out = r;
        return;
    }
    out->failed = true;
    if (WIFSIGNALED(status))
        snprintf(out->note, sizeof out->note, "the case's process died of signal %d (%s)%s",
                 WTERMSIG(status), strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGKILL ? ", perhaps out of memory" : "");
    else
        snprintf(out->note, sizeof out->note, "the case's process exited with status %d and "
                 "no result", WEXITSTATUS(status));
}

/* Round k's run r of a case into acc, the case's result so far. A round
 * that failed or was skipped ends the case's figures with its note. */
static void fold_round(result *acc, const result *r, int k)
{
    if (k == 0) {
        *acc = *r;
    } else if (!acc->failed && !acc->note[0]) {
        const timing *t = &r->t;
        if (r->failed || r->note[0]) {
            acc->failed = r->failed;
            snprintf(acc->note, sizeof acc->note, "round %d: %.600s", k + 1, r->note);
        }
        acc->t.min_ms = fmin(acc->t.min_ms, t->min_ms);
        acc->t.max_ms = fmax(acc->t.max_ms, t->max_ms);
        /* faults and CPU per step: the mean over the rounds' repetitions */
        double w = (double)acc->t.reps, n = w + t->reps;
        acc->t.faults = (acc->t.faults * w + t->faults * t->reps) / n;
        acc->t.user_ms = (acc->t.user_ms * w + t->user_ms * t->reps) / n;
        acc->t.sys_ms = (acc->t.sys_ms * w + t->sys_ms * t->reps) / n;
        acc->t.reps += t->reps;
        acc->rss_kb = acc->rss_kb > r->rss_kb ? acc->rss_kb : r->rss_kb;
        acc->est_rss_kb = acc->est_rss_kb > r->est_rss_kb ? acc->est_rss_kb : r->est_rss_kb;
        acc->loss = r->loss;
        acc->flops = r->flops;
    }
    if (!acc->failed && !acc->note[0] && acc->rounds < MAX_ROUNDS)
        acc->round_ms[acc->rounds++] = r->t.median_ms;
}

int run_rounds(case_fn fn, const void *ctxs, size_t ctx_size, int first, int n,
               const bench_opts *o)
{
    int rounds = o->rounds > 1 ? o->rounds : 1, failed = 0;
    result *setup = malloc(sizeof *setup * (size_t)(n > 0 ? n : 1));
    if (!setup) {
        fprintf(stderr, "miras-bench: out of memory\n");
        return n;
    }
    memcpy(setup, results + first, sizeof *setup * (size_t)n);
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < n; i++) {
            result r = setup[i], *acc = &results[first + i];
            if (k > 0 && (acc->failed || acc->note[0])) continue;
            run_isolated(fn, (const char *)ctxs + (size_t)i * ctx_size, o, &r);
            fold_round(acc, &r, k);
            if (k < rounds - 1 && !acc->failed && !acc->note[0]) continue;
            if (acc->rounds > 1) {
                double m[MAX_ROUNDS];
                memcpy(m, acc->round_ms, sizeof *m * (size_t)acc->rounds);
                acc->t.median_ms = median_of(m, acc->rounds);
            }
            failed += acc->failed;
            print_case_json(acc);
        }
    free(setup);
    return failed;
}

/* The error of a failed step, into the case's note (and the pending error
 * cleared). Running out of memory under the cap counts as over the memory
 * budget: a skip, not a failure. */
void note_error(result *r, const char *what)
{
    const char *e = mi_error_pending() ? mi_error() : "unknown error";
    if (memory_cap_gb > 0 && strstr(e, "out of memory")) {
        snprintf(r->note, sizeof r->note, "over the memory cap of %.2f GB (1.25 x --max-rss-gb "
                 "+ 0.5): %s: %s", memory_cap_gb, what, e);
    } else {
        r->failed = true;
        snprintf(r->note, sizeof r->note, "%s: %s", what, e);
    }
    mi_error_clear();
}

/* A linear extrapolation of the memory a step allocates (kB), from two
 * probes of sizes s1 < s2 to size s, plus 5 %. Against the real peaks of the
 * layer and train defaults and the MLP-memory LMs at batch 2, every case of
 * 5 GB and more came out between 7 % under (memora's LM) and 5 % over; the
 * small ones (< 2 GB) 20 to 250 MB under. The address-space cap catches
 * what the estimate misses. */
long extrapolate_kb(long p1, long p2, double s1, double s2, double s)
{
    double slope = (double)(p2 - p1) / (s2 - s1);
    return (long)(1.05 * ((double)p2 + fmax(slope, 0.0) * (s - s2)));
}

bool over_budget(result *r, long est_kb, const bench_opts *o, const char *from)
{
    r->est_rss_kb = est_kb;
    double gb = (double)est_kb / 1048576.0;
    if (gb <= o->max_rss_gb) return false;
    snprintf(r->note, sizeof r->note, "estimated peak RSS %.1f GB > --max-rss-gb %g, %s", gb,
             o->max_rss_gb, from);
    return true;
}

/* s as a JSON string. A note cut short by snprintf may end inside a UTF-8
 * sequence: an incomplete sequence becomes '?', so the line stays valid. */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0, k = 0;
        while (k < more && ((unsigned char)s[k + 1] & 0xC0) == 0x80) k++;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else if (c >= 0x80 && (k < more || more == 0)) putchar('?');
        else {
            fwrite(s, 1, (size_t)more + 1, stdout);
            s += more;
        }
    }
    putchar('"');
}

/* Between parallel regions a libgomp worker spins GOMP_SPINCOUNT times, then
 * sleeps (OMP_WAIT_POLICY=passive: at once); a sleeping worker costs a
 * wake-up at the next region, which on this machine kind doubles a MIRAS
 * training step (docs/bench.md), while a spinning one takes the core from
 * other work. Every layer and train line says which the run had. */
const char *omp_wait_text(void)
{
    static char text[160];
    const char *p = getenv("OMP_WAIT_POLICY"), *s = getenv("GOMP_SPINCOUNT");
    snprintf(text, sizeof text, "OMP_WAIT_POLICY=%.40s GOMP_SPINCOUNT=%.40s",
             p && *p ? p : "(unset)", s && *s ? s : "(unset)");
    return text;
}

/* One JSON line per layer or train case: the timing and tokens/s, or
 * "skipped"/"error" with the reason. */
void print_case_json(const result *r)
{
    printf("{\"name\":");
    json_string(r->name);
    printf(",\"config\":");
    json_string(r->config);
    printf(",\"threads\":%d,\"omp_wait\":", r->threads);
    json_string(omp_wait_text());
    printf(",");
    bool ran = !r->failed && !r->note[0];
    if (ran) {
        printf("\"median_ms\":%.6g,\"min_ms\":%.6g,\"max_ms\":%.6g,\"reps\":%d,\"inner\":%d,"
               "\"tokens\":%.0f,\"tokens_per_s\":%.6g,",
               r->t.median_ms, r->t.min_ms, r->t.max_ms, r->t.reps, r->t.inner, r->tokens,
               r->tokens / r->t.median_ms * 1e3);
        if (r->flops > 0)
            printf("\"gflop\":%.6g,\"gflops\":%.6g,", r->flops * 1e-9,
                   r->flops * 1e-9 / (r->t.median_ms * 1e-3));
        if (isfinite(r->loss)) printf("\"loss\":%.6g,", r->loss);
        if (r->prompt_tokens > 0)
            printf("\"prompt_tokens\":%.0f,\"prompt_ms\":%.6g,\"prompt_user_ms\":%.6g,"
                   "\"cpu_ms_per_token_median\":%.6g,\"state_kb\":%ld,", r->prompt_tokens,
                   r->prompt_ms, r->prompt_user_ms, r->cpu_ms_median, r->state_kb);
        if (r->rounds > 1) {
            printf("\"rounds\":%d,\"round_median_ms\":[", r->rounds);
            for (int k = 0; k < r->rounds; k++) printf("%s%.6g", k ? "," : "", r->round_ms[k]);
            printf("],");
        }
        printf("\"minor_faults_per_step\":%.6g,\"user_ms_per_step\":%.6g,"
               "\"sys_ms_per_step\":%.6g,",
               r->t.faults, r->t.user_ms, r->t.sys_ms);
        print_target_json(r);
    } else {
        printf("\"%s\":", r->failed ? "error" : "skipped");
        json_string(r->note);
        printf(",");
    }
    if (r->est_rss_kb > 0) printf("\"est_peak_rss_kb\":%ld,", r->est_rss_kb);
    printf("\"peak_rss_kb\":%ld}\n", r->rss_kb);
    fflush(stdout);
}

static void fmt_rss(char *buf, size_t n, long kb)
{
    if (kb <= 0) snprintf(buf, n, "-");
    else if (kb >= 1048576) snprintf(buf, n, "%.2f GB", (double)kb / 1048576.0);
    else snprintf(buf, n, "%.0f MB", (double)kb / 1024.0);
}

/* mi_fma_peak for a thread count, measured once per count. */
static double fma_peak(int threads)
{
    static double peak[64];
    if (threads < 1 || threads >= 64) return mi_fma_peak(threads);
    if (peak[threads] == 0) peak[threads] = mi_fma_peak(threads);
    return peak[threads];
}

/* The table of layer or train cases from results[first] on, run `rounds` times over. */
void print_case_table(int first, const char *unit, int rounds)
{
    printf("\n%-28s %3s %10s %10s %10s %11s %8s %5s %9s %8s %5s  %s\n", "case", "thr",
           "median", "min", "max", "tokens/s", "GFLOP/s", "peak", "peak RSS", "faults", "sys",
           "");
    int peak_threads[8], n_peaks = 0;
    for (int i = first; i < n_results; i++) {
        const result *r = &results[i];
        char rss[24];
        fmt_rss(rss, sizeof rss, r->rss_kb);
        if (r->failed || r->note[0]) {
            /* the table keeps a long reason to one line; the JSON has it all */
            printf("%-28s %3d %s%.160s%s%s\n", r->name, r->threads,
                   r->failed ? "FAILED: " : "skipped (", r->note,
                   strlen(r->note) > 160 ? "..." : "", r->failed ? "" : ")");
            continue;
        }
        char med[24], lo[24], hi[24], note[64] = "";
        fmt_time(med, sizeof med, r->t.median_ms);
        fmt_time(lo, sizeof lo, r->t.min_ms);
        fmt_time(hi, sizeof hi, r->t.max_ms);
        if (isfinite(r->loss)) snprintf(note, sizeof note, "loss %.3f", r->loss);
        if (r->t.reps < 3)
            snprintf(note + strlen(note), sizeof note - strlen(note), "%s%d rep%s", *note ? ", "
                     : "", r->t.reps, r->t.reps == 1 ? "" : "s");
        double cpu = r->t.user_ms + r->t.sys_ms;
        char gf[24] = "-", pk[24] = "-";
        if (r->flops > 0) {
            double gflops = r->flops * 1e-9 / (r->t.median_ms * 1e-3);
            snprintf(gf, sizeof gf, "%.2f", gflops);
            snprintf(pk, sizeof pk, "%.0f%%", 100 * gflops / fma_peak(r->threads));
            bool seen = false;
            for (int k = 0; k < n_peaks; k++) seen |= peak_threads[k] == r->threads;
            if (!seen && n_peaks < 8) peak_threads[n_peaks++] = r->threads;
        }
        printf("%-28s %3d %10s %10s %10s %11.0f %8s %5s %9s %8.0f %4.0f%%  %s\n", r->name,
               r->threads, med, lo, hi, r->tokens / r->t.median_ms * 1e3, gf, pk, rss,
               r->t.faults, cpu > 0 ? 100 * r->t.sys_ms / cpu : 0.0, note);
    }
    printf("median/min/max per %s over the timed repetitions after two warm-ups; tokens/s = "
           "B*T / median;\nGFLOP/s = the matrix products' floating-point operations of the last "
           "timed %s (mi_flops) / median;\npeak RSS = getrusage of the case's own process (each "
           "case runs in a fresh child); faults = minor page\nfaults per %s and sys = system "
           "share of the CPU time, over the timed repetitions; OpenMP waiting: %s.\n", unit, unit,
           unit, omp_wait_text());
    if (rounds > 1)
        printf("--rounds %d: the cases ran %d times over, one after another in each round, each "
               "run in a child\nof its own; median = the median of a case's rounds' medians, "
               "min/max over all its rounds.\n", rounds, rounds);
    for (int k = 0; k < n_peaks; k++)
        printf("peak = GFLOP/s / the f32 FMA peak on %d thread%s, %.1f GFLOP/s (mi_fma_peak: "
               "independent FMA chains in %s registers, measured now)\n", peak_threads[k],
               peak_threads[k] == 1 ? "" : "s", fma_peak(peak_threads[k]),
               mi_backend_isa(MI_BACKEND_OWN));
}

/* Splits a comma list into at most max names (pointers into buf). */
int split_list(const char *list, char *buf, size_t n, const char **names, int max)
{
    snprintf(buf, n, "%s", list);
    int count = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (count == max) return -1;
        names[count++] = t;
    }
    return count;
}

void exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    buf[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
    else buf[0] = '\0';
}

const char *find_checkout_file(const char *path, char *buf, size_t n)
{
    char dir[PATH_MAX], cand[2][PATH_MAX + 300];
    exe_dir(dir, sizeof dir);
    snprintf(cand[0], sizeof cand[0], "%s/../../%s", dir, path);
    snprintf(cand[1], sizeof cand[1], "%s", path);
    for (int i = dir[0] ? 0 : 1; i < 2; i++) {
        if (access(cand[i], R_OK) != 0) continue;
        char real[PATH_MAX];
        const char *found = realpath(cand[i], real) ? real : cand[i];
        if ((size_t)snprintf(buf, n, "%s", found) < n) return buf;
    }
    return NULL;
}

/* ================================================================ the machine */

void print_machine(void)
{
    char model[256] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            v += strspn(v, " \t");
            snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    if (f) fclose(f);
    printf("machine: %s (%ld CPUs online); OpenBLAS core %s, oneDNN ISA %s, own kernels %s\n",
           model, sysconf(_SC_NPROCESSORS_ONLN), mi_backend_isa(MI_BACKEND_BLAS),
           mi_backend_isa(MI_BACKEND_DNNL), mi_backend_isa(MI_BACKEND_OWN));
}

/* ================================================================ variants */

const mi_preset *samba_preset(const char *spec)
{
    if (strncmp(spec, "samba:", 6) != 0) return NULL;
    char name[96];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec + 6, ":+"), spec + 6);
    return mi_preset_find(name);
}

bool mixer_spec_valid(const char *v, const char *also, char *msg, size_t n)
{
    int known = mi_mixer_spec_check(v);
    if (known == 1) return true;
    if (known < 0) {
        snprintf(msg, n, "'%s': %s", v, mi_error());
        mi_error_clear();
        return false;
    }
    /* the library's message lists the mixer kinds and the presets */
    snprintf(msg, n, "unknown variant '%s'%s%s: %s", v, also ? "; also known: " : "",
             also ? also : "", mi_error());
    mi_error_clear();
    return false;
}

int variant_list(const char *given, const char *deflt, const char *(*spec)(const char *),
                 const char *also, const char *what, char *buf, size_t n, const char **names,
                 int max)
{
    int nv = split_list(given ? given : deflt, buf, n, names, max);
    if (nv < 1) {
        fprintf(stderr, "miras-bench: --variants wants 1 to %d comma-separated names\n", max);
        return -1;
    }
    /* a name nobody knows is a mistake, not a case to skip: say so before any run */
    for (int i = 0; i < nv; i++) {
        char msg[1024];
        if (!mixer_spec_valid(spec ? spec(names[i]) : names[i], also, msg, sizeof msg)) {
            fprintf(stderr, "miras-bench: %s: %s\n", what, msg);
            return -1;
        }
    }
    return nv;
}
