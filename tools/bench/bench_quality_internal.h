/* miras-bench quality, shared by its two files: bench_quality.c (the suites,
 * running the cases) and bench_quality_report.c (what is printed and drawn). */
#ifndef MIRAS_BENCH_QUALITY_INTERNAL_H
#define MIRAS_BENCH_QUALITY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "miras.h"

#define MAX_SUITE_ARGS 40
#define MAX_SUITES 32
#define DATA_TEXT "@text"    /* a suite's data: --data, else data/tinyshakespeare.txt */
#define DEFAULT_SUITES "lm,mqar"
#define MAX_RULES 32

#define MAX_CASES 512
#define MAX_VARIANTS 64
#define NAME_MAX_LEN 256 /* search candidates: a preset and four components, more with --grid */
#define PATH_LEN 4096


typedef struct quality_rule {
    const char *match, *set;
    double floor;     /* 0: none */
    const char *args; /* more miras-train arguments, space-separated (e.g. "--accum 8") */
} quality_rule;

typedef struct quality_suite {
    const char *name;
    const char *args[MAX_SUITE_ARGS]; /* NULL-terminated */
    const char *metric;
    const char *data;
    const char *variants, *baseline;
    double floor;
    /* NULL, or miras-eval arguments (space-separated) run on each case's
     * checkpoint after training: --niah LEN,... or --mqar L:N,...; their
     * accuracies are the case's points (bench_quality_eval.c) */
    const char *eval;
    quality_rule rules[MAX_RULES];
} quality_suite;

/* Variants (bench_quality_variants.c): a mixer spec with its own +KEY=VALUE
 * overrides, e.g. "moneta+p=2". */
const char *variant_spec(const char *v, char *buf, size_t n);  /* the mixer spec, before any '+' */
bool next_override(const char **at, char *buf, size_t n);      /* the next KEY=VALUE at *at */
/* Whether v's overrides are well formed: after the spec each is +KEY=VALUE
 * with a value; else a message naming v. */
bool variant_overrides_valid(const char *v, char *msg, size_t n);
const mi_preset *variant_preset(const char *v);  /* its MIRAS preset (samba's too), or NULL */
bool rule_matches(const char *match, const char *v); /* a rule's match: v, @miras, @mlp or * */
/* The comma list expanded ("presets": every MIRAS preset), each variant checked:
 * the count, or -1 with a message. */
int expand_variants(const char *list, char (*names)[NAME_MAX_LEN], char *msg, size_t n);

/* The suites (bench_quality_suites.c), and the --suite names that stand for several. */
typedef struct quality_alias {
    const char *name, *suites;
} quality_alias;
extern const quality_suite quality_suites[];
extern const int n_quality_suites;
extern const quality_alias quality_aliases[];
extern const int n_quality_aliases;

static inline bool lower_is_better(const char *metric) { return strcmp(metric, "val_acc") != 0; }

typedef enum { CASE_OK, CASE_FAILED, CASE_SKIPPED } case_status;

#define MAX_POINTS 12 /* miras-eval accuracies of a case */

typedef struct quality_point {
    int64_t length, pairs; /* niah: the prompt's bytes (pairs 0); mqar: L and N */
    double accuracy;
} quality_point;

typedef struct quality_case {
    const quality_suite *suite;
    char variant[NAME_MAX_LEN];
    char dir[PATH_LEN];
    char *command;           /* the miras-train command line, shell-quoted */
    int64_t steps, params;   /* params: -1 when miras-train did not say */
    double val_loss, val_acc, train_loss, wall_s;
    double floor;            /* 0: none */
    case_status status;
    char message[512];       /* failed or skipped: why */
    char overrides[512];     /* the checkpoint's lm.mixer_overrides, as the model got them */
    quality_point points[MAX_POINTS]; /* suites with eval: miras-eval's, in its order */
    int n_points;
    double eval_wall_s;      /* miras-eval's wall time (NaN: not run) */
    double cpu_s, eval_cpu_s; /* user + system CPU seconds of the two runs (NaN: not run) */
} quality_case;

static inline double metric_of(const quality_case *c)
{
    return lower_is_better(c->suite->metric) ? c->val_loss : c->val_acc;
}

static inline bool below_floor(const quality_case *c)
{
    if (c->status != CASE_OK || c->floor == 0) return false;
    double m = metric_of(c);
    return lower_is_better(c->suite->metric) ? !(m <= c->floor) : !(m >= c->floor);
}

/* Runs exe with argv (argv[0] the program), stdin /dev/null, stdout into
 * out_path and stderr into err_path (NULL: with stdout), and waits: 0 with
 * its wait status in *status, the wall time in *wall_s and the child's CPU
 * time (user + system) in *cpu_s, or -1 when it could not start (msg says
 * why). */
int quality_spawn(const char *exe, const char *const *argv, const char *out_path,
                  const char *err_path, int *status, double *wall_s, double *cpu_s, char *msg,
                  size_t n);

/* Runs miras-train for case c (its suite, variant and dir set; q's steps, seed,
 * sets and threads as for quality) with its output in DIR/train.out, and reads
 * its log: c->status, metric, params, wall and CPU time, or the message of a
 * run that failed (bench_quality.c). Also miras-bench search's trial runner. */
struct quality_opts;
void quality_run_case(quality_case *c, const char *train, const char *data,
                      const struct quality_opts *q);
/* miras-train: q->train, else beside this executable: 0, 1 (not found beside
 * it) or 2 (--train is not executable), with a message on stderr. */
int quality_find_train(const struct quality_opts *q, char *buf, size_t n);

/* The cases in the JSON lines of files (a comma list), a later line of a
 * suite and variant replacing an earlier one: their count, or -1 with a
 * message naming the file and line (bench_quality_replot.c). */
int quality_read_cases(const char *files, quality_case *cases, int max, char *msg, size_t n);

/* Suites with eval (bench_quality_eval.c): miras-eval (eval_exe) on the case's
 * checkpoint, its JSON in DIR/eval.json, its points into c; a failure makes
 * the case failed with miras-eval's message. threads: --threads (0: none). */
void run_case_eval(quality_case *c, const char *eval_exe, int threads);
/* The points as a Markdown table (the file and stdout) and a line chart (SVG,
 * accuracy against the points, one line per variant) (bench_quality_eval.c). */
char *points_markdown(const quality_case *cases, int n, const quality_suite *s, size_t *size);
char *points_svg(const quality_case *cases, int n, const quality_suite *s, size_t *size);

/* s as a JSON string; bytes < 0x20 escaped, the rest (UTF-8 included) as is. */
void json_str(const char *s);
/* ,"key":v (null when v is not finite) */
void json_num(const char *key, double v);

/* One JSON line for a case. */
void print_case_json_line(const quality_case *c);
/* The case whose variant is the suite's baseline, or NULL. */
const quality_case *baseline_of(const quality_case *cases, int n, const quality_suite *s);
/* The table of a suite's cases on stdout (svg: its chart's path, said below it). */
void print_suite_table(const quality_case *cases, int n, const quality_suite *s,
                       const char *data_name, const char *svg);
/* The suite's table as Markdown, and its bar chart as SVG; malloc'd, *size set, NULL when
 * out of memory. */
char *suite_markdown(const quality_case *cases, int n, const quality_suite *s,
                     const char *data_name, size_t *size);
char *suite_svg(const quality_case *cases, int n, const quality_suite *s, int64_t steps,
                size_t *size);

#endif
