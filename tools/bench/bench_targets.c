/* The engine's speed and memory targets, for miras-bench layer and train:
 * medians in ms and peak RSS on this machine kind (2 cores, 2 threads), at
 * the benchmarks' default sizes (layer B=4, T=512 for every chunk, the
 * per-token one included: --seq-len 512; train B=16, T=256). The OpenMP
 * waiting the run had decides whether many are met (docs/bench.md, "OpenMP
 * waiting"); the table's footer names it. They ask for 3-10x the same models in PyTorch 1.13 eager
 * and half its memory (set from PyTorch measured beside the framework in
 * one run). A case that ran at another size or thread count is
 * reported as not comparable. */
#include <string.h>

#include "bench_common.h"

typedef struct bench_target {
    const char *name;
    double ms;    /* 0: no time target */
    double rss_mb; /* 0: no memory target */
} bench_target;

static const bench_target targets[] = {
    {"layer.titans.b1", 220, 1024},     {"layer.titans.b16", 70, 0},
    {"layer.titans.b64", 40, 0},        {"layer.yaad.b1", 190, 0},
    {"layer.yaad.b16", 47, 0},          {"layer.moneta.b1", 260, 0},
    {"layer.moneta.b16", 90, 0},        {"layer.memora.b1", 220, 0},
    {"layer.memora.b16", 150, 0},       {"layer.gated-deltanet.b1", 30, 0},
    {"layer.gated-deltanet.b64", 8, 0}, {"layer.linear-attention.b1", 15, 0},
    {"layer.linear-attention.b64", 8, 0},
    {"train.transformer", 180, 450},    {"train.titans", 500, 1434},
    {"train.yaad", 450, 0},             {"train.gated-deltanet", 160, 550},
};

/* Targets relative to another case of the same run: name's median at most
 * `ratio` times vs's (Nested Learning's HOPE against the Titans it extends;
 * Memora's chunked layer against Titans'). */
typedef struct bench_relative {
    const char *name, *vs;
    double ratio;
} bench_relative;

static const bench_relative relatives[] = {
    {"train.hope", "train.titans", 3.0},
    {"layer.memora.b16", "layer.titans.b16", 1.5},
};

static const bench_target *target_of(const char *name)
{
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
        if (!strcmp(targets[i].name, name)) return &targets[i];
    return NULL;
}

static void print_one(const char *what, double got, double want, const char *unit)
{
    printf("  %s %.4g %s, target <= %.4g: %s (%.2fx)", what, got, unit, want,
           got <= want ? "met" : "missed", got / want);
}

void print_targets(int first)
{
    bool any = false;
    for (int i = first; i < n_results; i++) {
        const result *r = &results[i];
        const bench_target *t = target_of(r->name);
        if (!t || r->failed || r->note[0]) continue;
        if (!any) printf("\ntargets (2 threads, the default sizes; ratio = measured / target):\n");
        any = true;
        printf("%-28s", r->name);
        if (r->threads != 2 || !r->default_size) {
            printf("  not comparable: %d thread%s%s\n", r->threads, r->threads == 1 ? "" : "s",
                   r->default_size ? "" : ", not the default size");
            continue;
        }
        if (t->ms > 0) print_one("median", r->t.median_ms, t->ms, "ms");
        if (t->rss_mb > 0) print_one(" peak RSS", (double)r->rss_kb / 1024.0, t->rss_mb, "MB");
        printf("\n");
    }
}

static const result *ran_case(int first, const char *name)
{
    for (int i = first; i < n_results; i++)
        if (!strcmp(results[i].name, name))
            return results[i].failed || results[i].note[0] ? NULL : &results[i];
    return NULL;
}

/* a's median over b's; over as many rounds as both ran, the median of the
 * per-round ratios (*lo, *hi their range), else the medians' ratio. */
static double relative_ratio(const result *a, const result *b, double *lo, double *hi)
{
    int n = a->rounds < b->rounds ? a->rounds : b->rounds;
    if (n < 2) return *lo = *hi = a->t.median_ms / b->t.median_ms;
    double q[MAX_ROUNDS];
    for (int k = 0; k < n; k++) q[k] = a->round_ms[k] / b->round_ms[k];
    double med = median_of(q, n);
    *lo = q[0];
    *hi = q[n - 1];
    return med;
}

void print_relative_targets(int first)
{
    bool any = false;
    for (size_t i = 0; i < sizeof relatives / sizeof *relatives; i++) {
        const bench_relative *t = &relatives[i];
        const result *a = ran_case(first, t->name), *b = ran_case(first, t->vs);
        if (!a || !b) continue;
        if (!any) printf("\ntargets relative to another case of this run:\n");
        any = true;
        printf("%-28s", a->name);
        if (a->threads != b->threads || !a->default_size || !b->default_size) {
            printf("  not comparable: not both at the default size and one thread count\n");
            continue;
        }
        double lo, hi, q = relative_ratio(a, b, &lo, &hi);
        printf("  %.2fx %s", q, b->name);
        int n = a->rounds < b->rounds ? a->rounds : b->rounds;
        if (n > 1) printf(" (median of %d rounds' ratios, %.2f-%.2f)", n, lo, hi);
        printf(", target <= %gx: %s\n", t->ratio, q <= t->ratio ? "met" : "missed");
    }
}

void print_target_json(const result *r)
{
    const bench_target *t = target_of(r->name);
    if (!t || r->threads != 2 || !r->default_size) return;
    if (t->ms > 0)
        printf("\"target_ms\":%g,\"target_ms_ratio\":%.4g,", t->ms, r->t.median_ms / t->ms);
    if (t->rss_mb > 0)
        printf("\"target_rss_mb\":%g,\"target_rss_ratio\":%.4g,", t->rss_mb,
               (double)r->rss_kb / 1024.0 / t->rss_mb);
}
