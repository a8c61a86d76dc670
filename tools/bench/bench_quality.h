/* miras-bench quality (bench_quality.c): the options only it takes, which
 * miras-bench.c parses beside the shared ones (bench_opts: --threads,
 * --variants, --data, --json-only). */
#ifndef MIRAS_BENCH_QUALITY_H
#define MIRAS_BENCH_QUALITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_common.h"

#define QUALITY_MAX_OPTS 16 /* --suite and --set may each be given this often */

typedef struct quality_opts {
    const char *suites[QUALITY_MAX_OPTS]; /* --suite, each a comma list; none: lm,mqar */
    int n_suites;
    const char *sets[QUALITY_MAX_OPTS];   /* --set KEY=VALUE, for every MIRAS case */
    int n_sets;
    int64_t steps;      /* --steps: every suite's steps; 0: each suite's own */
    int64_t seed;       /* --seed: every suite's seed; 0: each suite's own */
    int threads;        /* --threads as given (passed to miras-train); 0: not given */
    const char *out;    /* --out; NULL: runs/quality */
    const char *train;  /* --train; NULL: miras-train beside this executable */
    bool check;         /* --check: exit 1 when a case failed or is below its floor */
    const char *replot; /* --replot FILE,...: the reports from earlier runs' JSON lines */
} quality_opts;

int bench_quality(const bench_opts *o, const quality_opts *q);
/* quality's part of miras-bench --help (its suites from the table). */
void bench_quality_usage(FILE *f);

#endif
