/* miras-bench search: the MIRAS design space (every memory × attentional bias
 * × retention gate × learning algorithm the registry holds, times optional
 * --grid values) trained by successive halving, resumable and spread over
 * processes or MPI ranks (docs/search.md). bench_search.c enumerates the
 * candidates, runs the trials and the rungs; bench_search_options.c parses the
 * options; bench_search_trials.c writes and reads the trials' JSON lines;
 * bench_search_report.c writes the table, the frontier charts and the top
 * configurations. */
#ifndef MIRAS_BENCH_SEARCH_H
#define MIRAS_BENCH_SEARCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SEARCH_MAX_LIST 32   /* --grid, --seeds, --presets, --suite entries */
#define SEARCH_NAME_LEN 256  /* a candidate's variant string */
#define SEARCH_MSG_LEN 512

typedef struct search_opts {
    const char *tasks;        /* --suite: quality suites, a comma list */
    const char *base;         /* --base: the preset whose gates and block the grid uses */
    const char *axes[4];      /* --memories, --biases, --retentions, --algorithms (NULL: all) */
    const char *grids[SEARCH_MAX_LIST]; /* --grid KEY=V1,V2,... */
    int n_grids;
    const char *sets[SEARCH_MAX_LIST];  /* --set KEY=VALUE, every candidate */
    int n_sets;
    const char *presets;      /* --presets: reference presets run at every rung ("" none) */
    const char *only;         /* --only: these candidates of the space alone (a comma list) */
    const char *seeds;        /* --seeds: a comma list (NULL: each suite's own seed) */
    int64_t budget;           /* --budget: rung 0's steps */
    const char *budgets;      /* --budgets: every rung's steps, in place of budget·eta^r */
    int64_t rung_steps[16];   /* --budgets parsed */
    int rungs;                /* --rungs */
    double eta;               /* --eta: keep the top 1/eta, budget times eta */
    int jobs;                 /* --jobs: trials at once on this process */
    double max_seconds;       /* --max-seconds: CPU seconds per trial (0: none) */
    double max_rss_mb;        /* --max-rss-mb: peak RSS per trial (0: none) */
    int top;                  /* --top: configurations listed per task */
    const char *out;          /* --out */
    const char *train;        /* --train */
    const char *data;         /* --data */
    bool list;                /* --list: the candidates (and the invalid ones), no run */
    bool report;              /* --report: the report from the lines there, no run */
    bool quick;               /* --quick: the test suite's small search */
    bool json_only;
} search_opts;

#define SEARCH_DEFAULT_OUT "runs/search"
#define SEARCH_DEFAULT_TASKS "mqar-hard,quick-lm"
#define SEARCH_DEFAULT_PRESETS "titans,moneta,yaad,memora,gated-deltanet"

/* The options of the four axes: --memories, --biases, --retentions, --algorithms
 * (bench_search_options.c). */
extern const char *const search_axis_options[4];
/* Parses search's options into o: 0, 2 after a message on stderr (bad arguments), or
 * -1 after --help. */
int search_parse_opts(int argc, char **argv, search_opts *o);
/* "miras-bench: search: <fmt with a, b> (see miras-bench --help)" on stderr; 2. */
int search_usage_error(const char *fmt, const char *a, const char *b);

/* `miras-bench search ...`: argv[0] is "search"; its own option parser. The
 * exit status: 0, 1 (a failure, no trial at all finished), 2 (bad arguments). */
int bench_search_main(int argc, char **argv);
/* search's part of miras-bench --help. */
void bench_search_usage(FILE *f);

/* ================================================================ trials
 * A trial is (task, candidate, steps, seed); its key is "task|steps|seed|candidate". */

typedef enum {
    TRIAL_OK,
    TRIAL_FAILED,      /* miras-train stopped with an error (the message says which) */
    TRIAL_DIVERGED,    /* a NaN or infinite loss, gradient norm or validation */
    TRIAL_OVER_TIME,   /* past --max-seconds of CPU */
    TRIAL_OVER_MEMORY, /* past --max-rss-mb */
    TRIAL_STATUSES
} trial_status;

extern const char *const trial_status_names[TRIAL_STATUSES];

typedef struct trial {
    char key[SEARCH_NAME_LEN + 96];
    char task[64];
    char candidate[SEARCH_NAME_LEN];
    bool preset;              /* a reference preset, not a grid candidate */
    int rung;
    int64_t steps, seed, params;
    trial_status status;
    char metric[16];          /* "val_acc" (higher is better) or "val_loss" */
    double value;             /* the metric (NaN unless ok) */
    double val_loss, val_acc, cpu_s, wall_s, ms_per_step, peak_rss_mb;
    char *command;            /* the miras-train command line (malloc'd) */
    char message[SEARCH_MSG_LEN];
} trial;

/* The trial's JSON line (with its '\n'), malloc'd; NULL when out of memory. */
char *trial_json(const trial *t);
/* Parses one JSON line into t (command malloc'd): 0, or -1 when the line is
 * not a whole trial object. */
int trial_parse(const char *line, trial *t);
/* Appends the line to path with one write() and fsync (a kill -9 leaves the
 * line whole or absent): 0, or -1 with a message. */
int trial_append(const char *path, const char *line, char *msg, size_t n);

/* Every trial in the JSON-lines files DIR/trials*.jsonl (a partial last line,
 * from a writer killed mid-write, is skipped; the first line of a key wins):
 * their count, *out malloc'd (free with trials_free), or -1 with a message. */
int trials_read(const char *dir, trial **out, char *msg, size_t n);
void trials_free(trial *t, int n);
/* The trial of key in ts (NULL: none). */
const trial *trials_find(const trial *ts, int n, const char *key);

/* Whether a lower metric is better. */
static inline bool metric_lower_better(const char *metric)
{
    return metric[0] != '\0' && metric[4] != 'a'; /* "val_loss" vs "val_acc" */
}

/* ================================================================ the report
 * (bench_search_report.c) */

typedef struct search_task_report {
    const char *task, *metric;
    int64_t budgets[16];      /* rung r's steps */
    int rungs;
} search_task_report;

/* The table (stdout and DIR/search.md), one chart DIR/search-<task>.svg per
 * task (quality against ms per step, the frontier of the last rung, the
 * presets named) and the top configurations with their commands. ts: every
 * trial of this search. 0, or -1 (a file could not be written: said on stderr). */
int search_report(const trial *ts, int n, const search_task_report *tasks, int n_tasks,
                  const char *const *candidates, int n_candidates, const char *base, int top,
                  const char *out, bool json_only);

#endif
