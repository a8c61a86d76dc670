/* What the files of miras-bench share (bench_common.c): the options, the
 * timing loop, the results with their JSON lines and the layer/train
 * table, peak RSS, the child process and memory estimate of layer and
 * train cases; and the subcommands' entry points (bench_ops.c,
 * bench_layer.c, bench_train.c). */
#ifndef MIRAS_BENCH_COMMON_H
#define MIRAS_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extend.h"

typedef struct bench_opts {
    int threads;    /* the framework's and oneDNN's OpenMP threads */
    int reps;
    bool json_only;
    /* layer and train */
    const char *variants;  /* comma list; NULL: the subcommand's default */
    const char *chunks;    /* layer: comma list; NULL: 1,16,64 */
    int64_t seq_len, batch; /* 0: the subcommand's default */
    double budget_s;       /* no new repetition after this long */
    double max_rss_gb;     /* cases estimated above this are skipped */
    const char *data;      /* train: the text file */
    bool recompute;        /* train: recompute each block in the backward */
    int rounds;            /* layer, train: the case list run this many times over */
} bench_opts;

/* ================================================================ timing */

double now_s(void);
void pause_ms(int ms);

typedef void (*body_fn)(void *ctx);

typedef struct timing {
    double median_ms, min_ms, max_ms; /* per call */
    int reps, inner;
    /* per call over the timed repetitions, from getrusage (every thread):
     * minor page faults (pages touched for the first time), user and system
     * CPU time */
    double faults, user_ms, sys_ms;
} timing;

/* How a case is timed: ops cases are microseconds and take many warm-up
 * calls and repetitions; a layer or training step takes up to seconds, so it
 * gets two warm-up calls and a budget that may end it after one repetition
 * (step_policy). */
typedef struct time_policy {
    int warmup_calls;  /* at least this many warm-up calls … */
    double warmup_s;   /* … lasting at least this long together */
    double budget_s;   /* no new repetition starts after this long … */
    int min_reps;      /* … once this many are done */
} time_policy;

/* Times body(ctx); `per_body` calls of the measured thing happen per body. */
timing time_body_with(body_fn body, void *ctx, int per_body, int reps,
                      const time_policy *p);
/* time_body_with under the ops policy: --reps repetitions of ≈ 2 ms. */
timing time_body(body_fn body, void *ctx, int per_body, const bench_opts *o);

/* ================================================================ results */

#define MAX_ROUNDS 100 /* --rounds at most */

typedef struct result {
    char name[48];
    char config[512];
    int threads;
    timing t;
    double flops, bytes; /* per call; 0 where not meaningful */
    int raw;             /* framework cases: the raw case compared with, else -1 */
    long rss_kb;
    /* layer and train cases */
    double tokens;       /* tokens per call (B·T) */
    long est_rss_kb;     /* the estimate checked against --max-rss-gb; 0: none made */
    double loss;         /* train: the loss of the last step timed */
    bool default_size;   /* layer, train: run at the benchmark's default B and T */
    /* generate cases: the prompt read before the timed tokens (wall, user CPU),
     * the median over the repetitions of the process's CPU time per token,
     * and mi_lm_state_bytes after the last token */
    double prompt_tokens, prompt_ms, prompt_user_ms, cpu_ms_median;
    long state_kb;
    /* layer and train: each round's median, in run order (--rounds) */
    int rounds;
    double round_ms[MAX_ROUNDS];
    bool failed;         /* an error, a crash: `note` says which */
    char note[640];      /* non-empty with failed, or when the case was skipped */
} result;

#define MAX_RESULTS 96
extern result results[MAX_RESULTS];
extern int n_results;

long peak_rss_kb(void);
/* Appends a case to results; its index (when full: none added, the last). */
int record(const char *name, const char *config, int threads, timing t, double flops,
           double bytes);
/* The median of v[0..n) (n >= 1), which it sorts. */
double median_of(double *v, int n);
/* Framework median time / raw median time (> 1: the framework is slower). */
double ratio_of(const result *r);
/* One JSON line per ops case. */
void print_json(const result *r);
void fmt_time(char *buf, size_t n, double ms);
/* An integer in [1, 100000]; 0 or -1. */
int parse_count(const char *text, int *out);

/* ================================================================ layer and train: cases
 * Each case runs in a child process under a memory budget (bench_common.c). */

#define LAYER_TRAIN_REPS 5        /* default --reps of layer and train */
#define LAYER_TRAIN_BUDGET_S 10.0 /* default --budget-s */
#define MAX_RSS_GB 16.0           /* default --max-rss-gb */

time_policy step_policy(const bench_opts *o);

typedef void (*case_fn)(const void *ctx, result *out);

/* Runs fn(ctx, out) in a child; *out comes back through a pipe. */
void run_isolated(case_fn fn, const void *ctx, const bench_opts *o, result *out);
/* Runs the n cases results[first..first + n) (set up but not run; case i's
 * context at (const char *)ctxs + i·ctx_size) --rounds times over, round
 * after round, each run in a child of its own, and prints each case's JSON
 * line after its last round. With more than one round a case's median is
 * the median of its rounds' medians (min, max over every round). Returns
 * the number of cases that failed. */
int run_rounds(case_fn fn, const void *ctxs, size_t ctx_size, int first, int n,
               const bench_opts *o);
/* The error of a failed step, into the case's note (and the pending error cleared). */
void note_error(result *r, const char *what);
/* The kB a step of size s allocates, from probes of sizes s1 < s2, plus 5 %. */
long extrapolate_kb(long p1, long p2, double s1, double s2, double s);
/* Records the estimate; true (and the note says why) when it exceeds --max-rss-gb. */
bool over_budget(result *r, long est_kb, const bench_opts *o, const char *from);
/* One JSON line per layer or train case. */
void print_case_json(const result *r);
/* The table of layer or train cases from results[first] on, run `rounds` times over. */
void print_case_table(int first, const char *unit, int rounds);
/* "machine: <CPU model> (N CPUs); OpenBLAS core ..., oneDNN ISA ..., own kernels ...":
 * what the figures above were measured on. */
void print_machine(void);
/* The OpenMP waiting this run had, as libgomp read it at start-up:
 * "OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=(unset)". */
const char *omp_wait_text(void);
/* The cases from results[first] on that have a speed or memory target
 * (bench_targets.c): met or missed, and by how much. */
void print_targets(int first);
/* The targets relative to another case of the run (train.hope against
 * train.titans, ...) whose two cases ran, from results[first] on. */
void print_relative_targets(int first);
/* Its "target_ms", "target_ms_ratio", … JSON members (with a trailing comma), if any. */
void print_target_json(const result *r);
/* Splits a comma list into at most max names (pointers into buf). */
int split_list(const char *list, char *buf, size_t n, const char **names, int max);
/* The executable's directory ("" when /proc/self/exe cannot be read). */
void exe_dir(char *buf, size_t n);
/* A file of the checkout, path relative to its root: from the checkout the
 * executable was built in (build/tools/ -> ../../path), else from the working
 * directory. Its real path in buf; NULL: neither can be read (or buf is too
 * short). */
const char *find_checkout_file(const char *path, char *buf, size_t n);

/* ================================================================ variants
 * A train or quality variant names a mixer spec, what miras-train's --model
 * takes: a MIRAS preset, or a row of the mixer factory (attention, swa[:W],
 * samba:<preset>[:W], hope). */

/* The preset under a "samba:<preset>[:W]" spec; NULL when there is none. */
const mi_preset *samba_preset(const char *spec);
/* Whether spec v is well formed and known; else a message naming v and
 * every known spec, the subcommand's own names (`also`, may be NULL) first. */
bool mixer_spec_valid(const char *v, const char *also, char *msg, size_t n);
/* The --variants list (`given`, or `deflt` when NULL) split into at most max
 * names in buf, each a known mixer spec once `spec` (NULL: none) maps the
 * subcommand's own names (`also`) to one: their count, or -1 after a message
 * on stderr naming the subcommand `what` and the name that is wrong. */
int variant_list(const char *given, const char *deflt, const char *(*spec)(const char *),
                 const char *also, const char *what, char *buf, size_t n, const char **names,
                 int max);

/* ================================================================ subcommands
 * Constants of layer, train and quality that --help prints too. */
#define LAYER_PER_TOKEN_MAX_T 64 /* chunk 1 at the default T: the slow reference */
#define TEXT_NAME "tinyshakespeare.txt"
#define TEXT_PATH "data/" TEXT_NAME /* the default text, a file of the checkout */

int bench_ops(const bench_opts *o);   /* bench_ops.c */
int bench_layer(const bench_opts *o); /* bench_layer.c */
int bench_train(const bench_opts *o); /* bench_train.c */
int bench_generate(const bench_opts *o); /* bench_generate.c */

#endif
