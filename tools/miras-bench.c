/* miras-bench: speed of the framework against the raw libraries, in the
 * configurations of BENCH.md. One JSON line per case, then a table with the
 * issue-3 targets marked met or missed.
 *
 *   miras-bench ops    matmul, batched matmul, row-wise ops, dispatch overhead
 *   miras-bench layer  one memory layer, forward + backward (q, k, v, gates, W_0)
 *   miras-bench train  one AdamW step of the byte-level language model
 *
 * Each case runs after a warm-up; a repetition times `inner` calls (enough
 * for ≈ 2 ms) and reports the time per call; median/min/max are over the
 * repetitions. The raw figures call OpenBLAS and oneDNN directly, in the same
 * run, so ratios are immune to the machine's drift between runs.
 *
 * layer and train cases take milliseconds to seconds: two warm-up calls,
 * then --reps repetitions of one call each until --budget-s; each case runs
 * in a child process of its own (see "layer and train: cases"). */
#include <cblas.h>
#include <dnnl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "miras.h"

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
} bench_opts;

/* ================================================================ timing */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef void (*body_fn)(void *ctx);

typedef struct timing {
    double median_ms, min_ms, max_ms; /* per call */
    int reps, inner;
} timing;

#define WARMUP_S 0.05     /* at least two calls and this long */
#define REP_TARGET_S 2e-3 /* one repetition lasts about this long */
#define CASE_BUDGET_S 6.0 /* a slow case stops after this, with ≥ 3 repetitions */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

static const time_policy ops_policy = {2, WARMUP_S, CASE_BUDGET_S, 3};

/* Times body(ctx); `per_body` calls of the measured thing happen per body. */
static timing time_body_with(body_fn body, void *ctx, int per_body, int reps,
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
    double start = now_s();
    for (r.reps = 0; r.reps < reps; r.reps++) {
        if (r.reps >= p->min_reps && now_s() - start > p->budget_s) break;
        double a = now_s();
        for (int i = 0; i < r.inner; i++) body(ctx);
        ms[r.reps] = (now_s() - a) * 1e3 / r.inner / per_body;
    }
    qsort(ms, (size_t)r.reps, sizeof *ms, cmp_double);
    r.min_ms = ms[0];
    r.max_ms = ms[r.reps - 1];
    r.median_ms = r.reps % 2 ? ms[r.reps / 2] : 0.5 * (ms[r.reps / 2 - 1] + ms[r.reps / 2]);
    free(ms);
    return r;
}

static timing time_body(body_fn body, void *ctx, int per_body, const bench_opts *o)
{
    return time_body_with(body, ctx, per_body, o->reps, &ops_policy);
}

/* ================================================================ results */

typedef struct result {
    char name[48];
    char config[320];
    int threads;
    timing t;
    double flops, bytes; /* per call; 0 where not meaningful */
    int raw;             /* framework cases: the raw case compared with, else -1 */
    long rss_kb;
    /* layer and train cases */
    double tokens;       /* tokens per call (B·T) */
    long est_rss_kb;     /* the estimate checked against --max-rss-gb; 0: none made */
    double loss;         /* train: the loss of the last step timed */
    bool failed;         /* an error, a crash: `note` says which */
    char note[640];      /* non-empty with failed, or when the case was skipped */
} result;

#define MAX_RESULTS 96
static result results[MAX_RESULTS];
static int n_results;

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

static int record(const char *name, const char *config, int threads, timing t, double flops,
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
static double ratio_of(const result *r)
{
    return r->raw >= 0 ? r->t.median_ms / results[r->raw].t.median_ms : NAN;
}

static void print_json(const result *r)
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

/* ================================================================ targets
 * Issue 3's goals, checked on the framework cases. */
typedef enum { T_NONE, T_RATIO, T_ABS_MS } target_kind;

typedef struct target {
    int result;
    target_kind kind;
    double limit;  /* T_RATIO: max framework/raw time; T_ABS_MS: max ms per call */
    int threads;   /* only judged at this thread count (0: any) */
    const char *text;
} target;

static target targets[MAX_RESULTS];
static int n_targets;

static void add_target(int res, target_kind kind, double limit, int threads, const char *text)
{
    if (n_targets < MAX_RESULTS)
        targets[n_targets++] = (target){res, kind, limit, threads, text};
}

static void fmt_time(char *buf, size_t n, double ms)
{
    if (ms < 1) snprintf(buf, n, "%.3g us", ms * 1e3);
    else snprintf(buf, n, "%.4g ms", ms);
}

static void fmt_rate(char *buf, size_t n, const result *r)
{
    if (r->bytes > 0) snprintf(buf, n, "%.1f GB/s", r->bytes / r->t.median_ms / 1e6);
    else if (r->flops > 1) snprintf(buf, n, "%.1f GF/s", r->flops / r->t.median_ms / 1e6);
    else snprintf(buf, n, "-");
}

/* One row per framework case: its figure, the raw case it is compared with
 * (the fastest raw library at the same thread count), the target. */
static void print_table(void)
{
    printf("\n%-21s %3s %9s %11s  %-20s %9s %11s %6s  %s\n", "case", "thr", "median", "rate",
           "raw", "median", "rate", "ratio", "issue-3 target");
    for (int k = 0; k < n_targets; k++) {
        const target *t = &targets[k];
        const result *r = &results[t->result];
        char med[24], rate[24], rmed[24] = "", rrate[24] = "", ratio[16] = "", verdict[96];
        fmt_time(med, sizeof med, r->t.median_ms);
        fmt_rate(rate, sizeof rate, r);
        if (r->raw >= 0) {
            fmt_time(rmed, sizeof rmed, results[r->raw].t.median_ms);
            fmt_rate(rrate, sizeof rrate, &results[r->raw]);
            snprintf(ratio, sizeof ratio, "%.2fx", ratio_of(r));
        }
        double v = t->kind == T_RATIO ? ratio_of(r) : r->t.median_ms;
        if (t->kind == T_NONE) snprintf(verdict, sizeof verdict, "%s", t->text);
        else
            snprintf(verdict, sizeof verdict, "%s: %s", t->text,
                     t->threads && t->threads != r->threads ? "n/a at this thread count"
                     : v <= t->limit                        ? "met"
                                                            : "MISSED");
        printf("%-21s %3d %9s %11s  %-20s %9s %11s %6s  %s\n", r->name, r->threads, med, rate,
               r->raw >= 0 ? results[r->raw].name : "", rmed, rrate, ratio, verdict);
    }
    printf("ratio = framework time / raw library time in the same run (lower is better); "
           "GF/s counts 2n^3 flops per n x n matmul.\n");
}

/* ================================================================ raw oneDNN
 * One primitive created once; the timed body is execute + wait only. */
static dnnl_engine_t engine;
static dnnl_stream_t stream;

typedef struct raw_prim {
    dnnl_primitive_t prim;
    int n_args;
    dnnl_exec_arg_t args[8];
} raw_prim;

static int dnnl_start(void)
{
    if (engine) return 0;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return -1;
    return dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success ? 0 : -1;
}

/* Builds the primitive of op descriptor `desc`; src, weights and dst use the
 * given buffers, any other argument it asks for (scratchpad, statistics)
 * gets memory of its own. */
static int raw_prim_make(raw_prim *rp, const_dnnl_op_desc_t desc, void *src, void *weights,
                         void *dst)
{
    memset(rp, 0, sizeof *rp);
    dnnl_primitive_desc_t pd;
    if (dnnl_start() != 0 || dnnl_primitive_desc_create(&pd, desc, NULL, engine, NULL))
        return -1;
    int rc = dnnl_primitive_create(&rp->prim, pd) == dnnl_success ? 0 : -1;
    static const int args[] = {DNNL_ARG_SRC,  DNNL_ARG_WEIGHTS,  DNNL_ARG_DST,
                               DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCRATCHPAD,
                               DNNL_ARG_WORKSPACE};
    for (size_t i = 0; rc == 0 && i < sizeof args / sizeof *args; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md,
                                                                    args[i]);
        if (!md || md->ndims == 0) continue;
        void *h = args[i] == DNNL_ARG_SRC ? src : args[i] == DNNL_ARG_WEIGHTS ? weights
                : args[i] == DNNL_ARG_DST ? dst : DNNL_MEMORY_ALLOCATE;
        dnnl_exec_arg_t *a = &rp->args[rp->n_args++];
        a->arg = args[i];
        if (dnnl_memory_create(&a->memory, md, engine, h) != dnnl_success) rc = -1;
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

static void raw_prim_free(raw_prim *rp)
{
    for (int i = 0; i < rp->n_args; i++) dnnl_memory_destroy(rp->args[i].memory);
    if (rp->prim) dnnl_primitive_destroy(rp->prim);
    memset(rp, 0, sizeof *rp);
}

static void raw_prim_body(void *c)
{
    raw_prim *rp = c;
    dnnl_primitive_execute(rp->prim, stream, rp->n_args, rp->args);
    dnnl_stream_wait(stream);
}

static dnnl_memory_desc_t plain_md(int nd, const int64_t *dims)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    dnnl_memory_desc_init_by_tag(&md, nd, d, dnnl_f32, nd == 2 ? dnnl_ab : dnnl_abc);
    return md;
}

/* [batch,] M×K · K×N matmul primitive (batch 0: 2-D). */
static int raw_matmul(raw_prim *rp, int64_t batch, int64_t n, float *A, float *B, float *C)
{
    int nd = batch ? 3 : 2;
    int64_t dims[3] = {batch, n, n};
    dnnl_memory_desc_t md = plain_md(nd, batch ? dims : dims + 1);
    dnnl_matmul_desc_t d;
    if (dnnl_matmul_desc_init(&d, &md, &md, NULL, &md) != dnnl_success) return -1;
    return raw_prim_make(rp, &d, A, B, C);
}

/* ================================================================ framework bodies */

typedef enum {
    FW_MATMUL, FW_SOFTMAX, FW_LAYER_NORM, FW_GELU, FW_TANH, FW_SIGMOID, FW_ADD1000
} fw_kind;

typedef struct fw_ctx {
    fw_kind kind;
    mi_scope *step;       /* outputs (and recorded nodes), reset per body */
    mi_tensor *a, *b;
} fw_ctx;

static void fw_body(void *c)
{
    fw_ctx *f = c;
    mi_scope_reset(f->step);
    switch (f->kind) {
    case FW_MATMUL: mi_matmul(f->a, f->b); break;
    case FW_SOFTMAX: mi_softmax(f->a, -1); break;
    case FW_LAYER_NORM: mi_layer_norm(f->a, 1e-5); break;
    case FW_GELU: mi_gelu(f->a); break;
    case FW_TANH: mi_tanh(f->a); break;
    case FW_SIGMOID: mi_sigmoid(f->a); break;
    case FW_ADD1000:
        for (int i = 0; i < 1000; i++) mi_add(f->a, f->b);
        break;
    }
}

/* Times f in its own step scope; returns the timing and which backend ran. */
static timing fw_time(fw_ctx *f, int per_body, const bench_opts *o, const char **backend)
{
    f->step = mi_scope_new("bench-step");
    mi_scope_enter(f->step);
    timing t = time_body(fw_body, f, per_body, o);
    *backend = mi_backend_name(mi_backend_last());
    mi_scope_leave();
    mi_scope_free(f->step);
    if (mi_error_pending()) {
        fprintf(stderr, "miras-bench: %s\n", mi_error());
        mi_error_clear();
    }
    return t;
}

/* ================================================================ ops: matmul */

typedef struct sgemm_ctx {
    int64_t n, batch; /* batch 0: one n×n product */
    const float *A, *B;
    float *C;
} sgemm_ctx;

static void sgemm_body(void *c)
{
    sgemm_ctx *s = c;
    int n = (int)s->n;
    if (!s->batch) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, s->A, n, s->B, n,
                    0.0f, s->C, n);
        return;
    }
    size_t mn = (size_t)n * (size_t)n;
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < s->batch; q++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, s->A + q * mn, n,
                    s->B + q * mn, n, 0.0f, s->C + q * mn, n);
}

/* OpenBLAS (pthreads) at `threads` threads, back to 1 afterwards. */
static int raw_sgemm(sgemm_ctx *s, int threads, const bench_opts *o, const char *label)
{
    openblas_set_num_threads(threads);
    timing t = time_body(sgemm_body, s, 1, o);
    openblas_set_num_threads(1);
    char name[48], cfg[200];
    snprintf(name, sizeof name, "%s.sgemm_%dt", label, threads);
    snprintf(cfg, sizeof cfg, "f32 %lldx%lld row-major, raw cblas_sgemm, OpenBLAS %d thread(s)",
             (long long)s->n, (long long)s->n, threads);
    double flops = 2.0 * (double)s->n * (double)s->n * (double)s->n;
    return record(name, cfg, threads, t, flops, 0);
}

static mi_tensor *filled(mi_rng *r, int rank, const int64_t *shape)
{
    return mi_randn(r, MI_F32, rank, shape, 0.0, 1.0);
}

typedef struct mm_case {
    int64_t n, batch;     /* batch 0: one n×n product */
    mi_tensor *a, *b, *c;
    double flops;         /* 2n³ per product */
    char label[32];
    const char *shape_txt;
} mm_case;

static int matmul_dnnl(const mm_case *m, const bench_opts *o)
{
    raw_prim rp;
    int k = -1;
    if (raw_matmul(&rp, m->batch, m->n, m->a->data, m->b->data, m->c->data) == 0) {
        timing t = time_body(raw_prim_body, &rp, 1, o);
        char name[48], cfg[200];
        snprintf(name, sizeof name, "%s.dnnl", m->label);
        snprintf(cfg, sizeof cfg, "%s n=%lld, raw oneDNN matmul primitive (created once; "
                 "execute+wait timed)", m->shape_txt, (long long)m->n);
        k = record(name, cfg, o->threads, t, m->flops, 0);
    } else {
        fprintf(stderr, "miras-bench: oneDNN matmul n=%lld unavailable\n", (long long)m->n);
    }
    raw_prim_free(&rp);
    return k;
}

static int matmul_framework(const mm_case *m, const bench_opts *o)
{
    fw_ctx f = {.kind = FW_MATMUL, .a = m->a, .b = m->b};
    const char *backend;
    bool was = mi_set_grad_enabled(false);
    timing t = fw_time(&f, 1, o, &backend);
    mi_set_grad_enabled(was);
    char name[48], cfg[200];
    snprintf(name, sizeof name, "%s.framework", m->label);
    snprintf(cfg, sizeof cfg, "%s n=%lld, mi_matmul, recording off, backend %s", m->shape_txt,
             (long long)m->n, backend);
    return record(name, cfg, o->threads, t, m->flops, 0);
}

/* Raw OpenBLAS: sgemm at 1, 2 (and T) threads, or for the batch an OpenMP
 * loop of 1-thread sgemm at T threads. Returns the case at T threads. */
static int matmul_blas(const mm_case *m, const bench_opts *o)
{
    sgemm_ctx s = {.n = m->n, .batch = m->batch, .A = m->a->data, .B = m->b->data,
                   .C = m->c->data};
    if (m->batch) {
        timing t = time_body(sgemm_body, &s, 1, o);
        char name[48], cfg[200];
        snprintf(name, sizeof name, "%s.sgemm_loop", m->label);
        snprintf(cfg, sizeof cfg, "%s, OpenMP loop over the batch of 1-thread cblas_sgemm",
                 m->shape_txt);
        return record(name, cfg, o->threads, t, m->flops, 0);
    }
    int counts[3] = {1, 2, o->threads}, n_counts = o->threads > 2 ? 3 : 2, at_t = -1;
    for (int i = 0; i < n_counts; i++) {
        int k = raw_sgemm(&s, counts[i], o, m->label);
        if (counts[i] == o->threads) at_t = k;
    }
    return at_t;
}

static int faster(int x, int y)
{
    if (x < 0 || y < 0) return x < 0 ? y : x;
    return results[y].t.median_ms < results[x].t.median_ms ? y : x;
}

/* One size: raw oneDNN, the framework, raw OpenBLAS. OpenBLAS's own threads
 * spin for a while after a multi-threaded call, so it runs last and the
 * next case waits for them to sleep. */
static void bench_matmul(int64_t n, int64_t batch, const bench_opts *o, mi_rng *rng)
{
    int64_t shape[3] = {batch, n, n};
    int rank = batch ? 3 : 2;
    const int64_t *sh = batch ? shape : shape + 1;
    mm_case m = {.n = n, .batch = batch, .a = filled(rng, rank, sh), .b = filled(rng, rank, sh),
                 .c = mi_zeros(MI_F32, rank, sh),
                 .flops = 2.0 * (double)n * (double)n * (double)n * (double)(batch ? batch : 1),
                 .shape_txt = batch ? "f32 64x(32x32 . 32x32)" : "f32 square"};
    if (batch) snprintf(m.label, sizeof m.label, "bmm_%lldx%lld", (long long)batch, (long long)n);
    else snprintf(m.label, sizeof m.label, "matmul_%lld", (long long)n);
    int first = n_results;
    int dnnl = matmul_dnnl(&m, o);
    int fw = matmul_framework(&m, o);
    int blas = matmul_blas(&m, o);
    results[fw].raw = faster(dnnl, blas);
    for (int i = first; i < n_results; i++) print_json(&results[i]);
    if (batch) add_target(fw, T_ABS_MS, 0.040, 2, "<= 40 us on 2 threads");
    else if (n >= 256) add_target(fw, T_RATIO, 1 / 0.9, 0, ">= 0.9x max(raw sgemm, raw oneDNN)");
    else add_target(fw, T_NONE, 0, 0, "none below n = 256");
    pause_ms(200);
}

/* ================================================================ ops: row-wise */

typedef struct rowwise_case {
    const char *label;
    fw_kind kind;
    dnnl_alg_kind_t alg; /* eltwise; 0: softmax or layer norm by kind */
} rowwise_case;

static int raw_rowwise(raw_prim *rp, const rowwise_case *rc, const dnnl_memory_desc_t *md,
                       void *x, void *y)
{
    if (rc->kind == FW_SOFTMAX) {
        dnnl_softmax_desc_t d;
        if (dnnl_softmax_forward_desc_init(&d, dnnl_forward_inference, md, 1)) return -1;
        return raw_prim_make(rp, &d, x, NULL, y);
    }
    if (rc->kind == FW_LAYER_NORM) {
        dnnl_layer_normalization_desc_t d;
        if (dnnl_layer_normalization_forward_desc_init(&d, dnnl_forward_inference, md, NULL,
                                                       1e-5f, dnnl_normalization_flags_none))
            return -1;
        return raw_prim_make(rp, &d, x, NULL, y);
    }
    dnnl_eltwise_desc_t d;
    if (dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, rc->alg, md, 0.0f, 0.0f))
        return -1;
    return raw_prim_make(rp, &d, x, NULL, y);
}

/* softmax / layer norm / gelu / tanh / sigmoid on 4096×128 f32: bytes =
 * one read and one write of the tensor (the least any kernel moves). */
static void bench_rowwise(const rowwise_case *rc, const bench_opts *o, mi_rng *rng)
{
    int64_t shape[2] = {4096, 128};
    mi_tensor *x = filled(rng, 2, shape), *y = mi_zeros(MI_F32, 2, shape);
    double bytes = 2.0 * (double)x->numel * sizeof(float);
    char name[48], cfg[200];
    int first = n_results, raw = -1;
    raw_prim rp;
    dnnl_memory_desc_t md = plain_md(2, shape);
    if (raw_rowwise(&rp, rc, &md, x->data, y->data) == 0) {
        timing t = time_body(raw_prim_body, &rp, 1, o);
        snprintf(name, sizeof name, "%s.dnnl", rc->label);
        snprintf(cfg, sizeof cfg, "f32 4096x128, raw oneDNN primitive, forward_inference "
                 "(created once; execute+wait timed)");
        raw = record(name, cfg, o->threads, t, 0, bytes);
    } else {
        fprintf(stderr, "miras-bench: oneDNN %s unavailable\n", rc->label);
    }
    raw_prim_free(&rp);

    fw_ctx f = {.kind = rc->kind, .a = x};
    const char *backend;
    bool was = mi_set_grad_enabled(false);
    timing t = fw_time(&f, 1, o, &backend);
    mi_set_grad_enabled(was);
    snprintf(name, sizeof name, "%s.framework", rc->label);
    snprintf(cfg, sizeof cfg, "f32 4096x128 (last axis), recording off, backend %s", backend);
    int fw = record(name, cfg, o->threads, t, 0, bytes);
    results[fw].raw = raw;
    for (int i = first; i < n_results; i++) print_json(&results[i]);
    add_target(fw, T_RATIO, 1.2, 0, "<= 1.2x the oneDNN primitive");
}

/* ================================================================ ops: dispatch
 * An add of two 1-element f32 tensors, 1000 per body, then a scope reset. */
static void bench_dispatch(bool recorded, const bench_opts *o)
{
    fw_ctx f = {.kind = FW_ADD1000, .a = mi_full(MI_F32, MI_SHAPE(1), 1.5),
                .b = mi_full(MI_F32, MI_SHAPE(1), 2.5)};
    mi_requires_grad(f.a, recorded);
    const char *backend;
    timing t = fw_time(&f, 1000, o, &backend);
    mi_requires_grad(f.a, false);
    char cfg[200];
    snprintf(cfg, sizeof cfg, "mi_add of two 1-element f32 tensors, %s, scope reset every "
             "1000 calls, backend %s", recorded ? "recorded (input requires grad)"
             : "not recorded (no input requires grad)", backend);
    int k = record(recorded ? "dispatch.recorded" : "dispatch.unrecorded", cfg, o->threads, t,
                   1, 0);
    print_json(&results[k]);
    add_target(k, T_ABS_MS, recorded ? 1e-3 : 0.3e-3, 0, recorded ? "<= 1 us" : "<= 0.3 us");
}

static int parse_count(const char *text, int *out)
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

#define LAYER_TRAIN_REPS 5        /* default --reps of layer and train */
#define LAYER_TRAIN_BUDGET_S 10.0 /* default --budget-s */
#define MAX_RSS_GB 16.0           /* default --max-rss-gb */

/* Two warm-up calls: the first grows the step scope block by block, the
 * reset after it merges them into one fresh block whose pages the second
 * call faults in; from the third call on a step asks the system for nothing. */
static time_policy step_policy(const bench_opts *o)
{
    return (time_policy){2, 0.0, o->budget_s, 1};
}

typedef void (*case_fn)(const void *ctx, result *out);

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
static void run_isolated(case_fn fn, const void *ctx, const bench_opts *o, result *out)
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

/* The error of a failed step, into the case's note (and the pending error
 * cleared). Running out of memory under the cap counts as over the memory
 * budget: a skip, not a failure. */
static void note_error(result *r, const char *what)
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
static long extrapolate_kb(long p1, long p2, double s1, double s2, double s)
{
    double slope = (double)(p2 - p1) / (s2 - s1);
    return (long)(1.05 * ((double)p2 + fmax(slope, 0.0) * (s - s2)));
}

static bool over_budget(result *r, long est_kb, const bench_opts *o, const char *from)
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

/* One JSON line per layer or train case: the timing and tokens/s, or
 * "skipped"/"error" with the reason. */
static void print_case_json(const result *r)
{
    printf("{\"name\":");
    json_string(r->name);
    printf(",\"config\":");
    json_string(r->config);
    printf(",\"threads\":%d,", r->threads);
    bool ran = !r->failed && !r->note[0];
    if (ran) {
        printf("\"median_ms\":%.6g,\"min_ms\":%.6g,\"max_ms\":%.6g,\"reps\":%d,\"inner\":%d,"
               "\"tokens\":%.0f,\"tokens_per_s\":%.6g,",
               r->t.median_ms, r->t.min_ms, r->t.max_ms, r->t.reps, r->t.inner, r->tokens,
               r->tokens / r->t.median_ms * 1e3);
        if (isfinite(r->loss)) printf("\"loss\":%.6g,", r->loss);
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

/* The table of layer or train cases from results[first] on. */
static void print_case_table(int first, const char *unit)
{
    printf("\n%-28s %3s %10s %10s %10s %11s %9s  %s\n", "case", "thr", "median", "min", "max",
           "tokens/s", "peak RSS", "");
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
        printf("%-28s %3d %10s %10s %10s %11.0f %9s  %s\n", r->name, r->threads, med, lo, hi,
               r->tokens / r->t.median_ms * 1e3, rss, note);
    }
    printf("median/min/max per %s over the timed repetitions after two warm-ups; tokens/s = "
           "B*T / median;\npeak RSS = getrusage of the case's own process (each case runs in a "
           "fresh child).\n", unit);
}

/* Splits a comma list into at most max names (pointers into buf). */
static int split_list(const char *list, char *buf, size_t n, const char **names, int max)
{
    snprintf(buf, n, "%s", list);
    int count = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (count == max) return -1;
        names[count++] = t;
    }
    return count;
}

/* ================================================================ layer
 * One memory layer, forward + backward (BENCH.md "layer"): N = B·H
 * sequences of T tokens, q, k, v [N, T, 32] already projected (q and k
 * unit-norm, as the layer block gives them), the gates the preset uses per
 * head and token near its initial levels, W_0 the memory's own init shared
 * by the sequences. Loss ⟨y, r⟩ for a fixed random r, so backward fills the
 * gradients of q, k, v, every data-dependent gate and W_0. */
#define LAYER_HEADS 4
#define LAYER_HEAD_DIM 32
#define LAYER_BATCH 4
#define LAYER_SEQ_LEN 512
#define LAYER_PER_TOKEN_MAX_T 64 /* chunk 1 at the default T: the slow reference */
#define LAYER_PROBE_T 32         /* probes at 32 and 64 tokens (rounded up to chunks) */

static const char layer_default_variants[] =
    "titans,moneta,yaad,memora,gated-deltanet,linear-attention";
static const char layer_default_chunks[] = "1,16,64";

typedef struct layer_case {
    const bench_opts *o;
    const mi_preset *preset;
    mi_miras_config config; /* the preset's, with chunk b */
    int64_t batch, T;
} layer_case;

typedef struct layer_state {
    mi_miras m;
    mi_tensor *q, *k, *v, *r;
    mi_miras_gates gates;
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];
    int n_leaves;
    mi_tensor *leaves[4 + 4 + MI_MEMORY_MAX_WEIGHTS];
    mi_scope *step;
    bool failed;
} layer_state;

static mi_tensor *layer_leaf(layer_state *s, mi_tensor *t)
{
    if (t) s->leaves[s->n_leaves++] = mi_requires_grad(t, true);
    return t;
}

/* A gate the components use, near the preset's level: σ(logit(level) + z)
 * for η, α, μ and level·e^z for δ, z ~ N(0, 0.5²). CONST gates are
 * constants (not differentiated), like the layer block's. */
static mi_tensor *layer_gate(layer_state *s, mi_rng *rng, mi_gate_spec g, bool is_delta,
                             int64_t N, int64_t P)
{
    int64_t shape[3] = {N, P, LAYER_HEAD_DIM};
    int rank = g.kind == MI_GATE_CHANNEL ? 3 : 2;
    if (g.kind == MI_GATE_CONST) return mi_full(MI_F32, rank, shape, g.value);
    mi_tensor *z = mi_randn(rng, MI_F32, rank, shape, 0.0, 0.5);
    return layer_leaf(s, is_delta ? mi_mul_scalar(mi_exp(z), g.value)
                                  : mi_sigmoid(mi_add_scalar(z, log(g.value / (1 - g.value)))));
}

/* The inputs of a T-token case, in the current scope. 0 or -1. */
static int layer_setup(layer_state *s, const layer_case *lc, int64_t T)
{
    memset(s, 0, sizeof *s);
    if (mi_miras_init(&s->m, &lc->config) != 0) return -1;
    const mi_miras *m = &s->m;
    int64_t N = lc->batch * LAYER_HEADS, dk = LAYER_HEAD_DIM, dv = LAYER_HEAD_DIM;
    int64_t P = T * (m->algorithm == MI_ALGO_MULTISTEP ? lc->config.steps : 1);
    mi_rng rng;
    mi_rng_seed(&rng, 7);
    bool was = mi_set_grad_enabled(false);
    s->q = layer_leaf(s, mi_l2_normalize(mi_randn(&rng, MI_F32, MI_SHAPE(N, T, dk), 0, 1), 1e-6));
    s->k = layer_leaf(s, mi_l2_normalize(mi_randn(&rng, MI_F32, MI_SHAPE(N, P, dk), 0, 1), 1e-6));
    s->v = layer_leaf(s, mi_randn(&rng, MI_F32, MI_SHAPE(N, P, dv), 0, 1));
    s->r = mi_randn(&rng, MI_F32, MI_SHAPE(N, T, dv), 0, 1);
    const mi_preset *p = lc->preset;
    s->gates.eta = layer_gate(s, &rng, p->eta, false, N, P);
    if (m->retention->uses_alpha) s->gates.alpha = layer_gate(s, &rng, p->alpha, false, N, P);
    if (m->algorithm == MI_ALGO_MOMENTUM) s->gates.mu = layer_gate(s, &rng, p->mu, false, N, P);
    if (m->bias->needs_delta) s->gates.delta = layer_gate(s, &rng, p->delta, true, N, P);
    int n_w = 0, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    int rc = m->memory->shapes(&lc->config, dk, dv, &n_w, ranks, shapes);
    if (rc == 0) rc = m->memory->init(&lc->config, dk, dv, &rng, MI_F32, s->w0);
    for (int i = 0; rc == 0 && i < n_w; i++) layer_leaf(s, s->w0[i]);
    mi_set_grad_enabled(was);
    return rc == 0 && !mi_error_pending() ? 0 : -1;
}

static void layer_body(void *ctx)
{
    layer_state *s = ctx;
    if (s->failed) return;
    mi_scope_reset(s->step);
    mi_scope_enter(s->step);
    mi_zero_grad(s->leaves, s->n_leaves);
    mi_tensor *y = mi_miras_forward(&s->m, s->q, s->k, s->v, &s->gates, s->w0, NULL);
    mi_tensor *loss = y ? mi_sum(mi_mul(y, s->r), MI_ALL, false) : NULL;
    if (!loss || mi_backward(loss) != 0) s->failed = true;
    mi_scope_leave();
}

/* Runs once at T tokens (a probe); the kB the step allocated, or -1. */
static long layer_probe(const layer_case *lc, int64_t T, mi_scope *scope, mi_scope *step,
                        result *out)
{
    layer_state s;
    mi_scope_reset(scope);
    mi_scope_enter(scope);
    int rc = layer_setup(&s, lc, T);
    mi_scope_leave();
    s.step = step;
    if (rc == 0) layer_body(&s);
    if (rc != 0 || s.failed) return note_error(out, "probe"), -1;
    return (long)(mi_scope_stats_get(step).bytes_used / 1024);
}

static void layer_child(const void *ctx, result *out)
{
    const layer_case *lc = ctx;
    const bench_opts *o = lc->o;
    mi_scope *inputs = mi_scope_new("bench-layer-inputs"), *step = mi_scope_new("bench-step");
    int64_t b = lc->config.chunk, T1 = b * ((LAYER_PROBE_T + b - 1) / b);
    if (lc->T >= 4 * T1) {
        long base = peak_rss_kb();
        long u1 = layer_probe(lc, T1, inputs, step, out);
        long u2 = u1 < 0 ? -1 : layer_probe(lc, 2 * T1, inputs, step, out);
        char from[96];
        snprintf(from, sizeof from, "from probes at T = %lld and %lld", (long long)T1,
                 (long long)(2 * T1));
        if (u2 < 0 || over_budget(out, base + extrapolate_kb(u1, u2, (double)T1,
                                                             2.0 * (double)T1, (double)lc->T),
                                  o, from))
            goto done;
    }
    layer_state s;
    mi_scope_reset(inputs);
    mi_scope_enter(inputs);
    int rc = layer_setup(&s, lc, lc->T);
    mi_scope_leave();
    if (rc != 0) {
        note_error(out, "setup");
        goto done;
    }
    s.step = step;
    time_policy pol = step_policy(o);
    out->t = time_body_with(layer_body, &s, 1, o->reps, &pol);
    if (s.failed) {
        note_error(out, "forward/backward");
        goto done;
    }
    for (int i = 0; i < s.n_leaves; i++)
        if (!s.leaves[i]->grad) {
            out->failed = true;
            snprintf(out->note, sizeof out->note, "input %d of %d got no gradient", i,
                     s.n_leaves);
        }
done:
    out->rss_kb = peak_rss_kb();
    mi_scope_free(step);
    mi_scope_free(inputs);
}

static void layer_config_text(char *buf, size_t n, const layer_case *lc)
{
    const mi_miras_config *c = &lc->config;
    const mi_preset *p = lc->preset;
    char mem[64];
    if (!strcmp(c->memory, "mlp"))
        snprintf(mem, sizeof mem, "mlp depth %d x%d residual+LN", c->mlp_depth,
                 c->mlp_expansion);
    else snprintf(mem, sizeof mem, "%s", c->memory);
    const mi_gate_spec *g[4] = {&p->eta, &p->alpha, &p->mu, &p->delta};
    static const char *const gname[4] = {"eta", "alpha", "mu", "delta"};
    char gates[96] = "";
    for (int i = 0; i < 4; i++) {
        if (g[i]->kind == MI_GATE_UNUSED) continue;
        size_t u = strlen(gates);
        snprintf(gates + u, sizeof gates - u, "%s%s %s", u ? ", " : "", gname[i],
                 g[i]->kind == MI_GATE_CONST ? "const" : g[i]->kind == MI_GATE_HEAD
                                                  ? "per head" : "per channel");
    }
    snprintf(buf, n, "B=%lld H=%d hd=%d T=%lld chunk=%d; memory %s, bias %s, retention %s, %s; "
             "gates %s; f32; forward+backward, grads of q,k,v, data-dependent gates, W0",
             (long long)lc->batch, LAYER_HEADS, LAYER_HEAD_DIM, (long long)lc->T, c->chunk, mem,
             c->bias, c->retention, c->algorithm, gates);
}

static int bench_layer(const bench_opts *o)
{
    char vbuf[512], cbuf[128];
    const char *variants[32], *chunk_txt[16];
    int nv = split_list(o->variants ? o->variants : layer_default_variants, vbuf, sizeof vbuf,
                        variants, 32);
    int nc = split_list(o->chunks ? o->chunks : layer_default_chunks, cbuf, sizeof cbuf,
                        chunk_txt, 16);
    int chunks[16];
    if (nv < 1 || nc < 1) {
        fprintf(stderr, "miras-bench: --variants and --chunks want 1 to 32 and 1 to 16 "
                        "comma-separated values\n");
        return 2;
    }
    for (int i = 0; i < nc; i++)
        if (parse_count(chunk_txt[i], &chunks[i]) != 0) {
            fprintf(stderr, "miras-bench: --chunks: '%s' is not a positive integer\n",
                    chunk_txt[i]);
            return 2;
        }
    for (int i = 0; i < nv; i++)
        if (!mi_preset_find(variants[i])) {
            fprintf(stderr, "miras-bench: layer: '%s' is not a MIRAS preset (", variants[i]);
            for (int k = 0; mi_preset_at(k); k++)
                fprintf(stderr, "%s%s", k ? ", " : "", mi_preset_at(k)->name);
            fprintf(stderr, ")\n");
            return 2;
        }
    int first = n_results, failed = 0;
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < nc; j++) {
            layer_case lc = {.o = o, .preset = mi_preset_find(variants[i]),
                             .batch = o->batch ? o->batch : LAYER_BATCH};
            lc.config = lc.preset->config;
            lc.config.chunk = chunks[j];
            if (!strcmp(lc.config.memory, "lattice")) lc.config.slots = LAYER_HEAD_DIM;
            lc.T = o->seq_len ? o->seq_len : LAYER_SEQ_LEN;
            /* the per-token recurrence is the slow reference: by default it
             * runs at T <= 64 (tokens/s still compare) */
            if (chunks[j] == 1 && !o->seq_len && lc.T > LAYER_PER_TOKEN_MAX_T)
                lc.T = LAYER_PER_TOKEN_MAX_T;
            if (n_results == MAX_RESULTS) break;
            result *r = &results[n_results++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "layer.%s.b%d", variants[i], chunks[j]);
            layer_config_text(r->config, sizeof r->config, &lc);
            r->threads = o->threads;
            r->raw = -1;
            r->loss = NAN;
            r->tokens = (double)(lc.batch * lc.T);
            run_isolated(layer_child, &lc, o, r);
            failed += r->failed;
            print_case_json(r);
        }
    if (!o->json_only) print_case_table(first, "forward+backward");
    return failed ? 1 : 0;
}

/* ================================================================ train
 * One optimizer step of the byte-level language model (BENCH.md "train"):
 * a batch of random windows of the text (mi_text_batch), forward, mean
 * cross-entropy, backward, AdamW (lr 1e-3, weight decay 0.1 on matrices).
 * The batch is drawn inside the timed step. */
#define TRAIN_BATCH 16
#define TRAIN_SEQ_LEN 256
#define TRAIN_CHUNK 16
#define TEXT_NAME "tinyshakespeare.txt"

static const char train_default_variants[] =
    "transformer,linear-attention,gated-deltanet,titans,moneta,yaad,memora,lattice,hope";

typedef struct train_case {
    const bench_opts *o;
    const char *spec;      /* the mixer spec */
    const char *data;      /* the text, or NULL: generated bytes */
    int64_t batch, T;
} train_case;

typedef struct train_state {
    mi_lm lm;
    mi_optim *opt;
    mi_text *text;
    int64_t batch, T, next;
    mi_scope *step;
    double loss;
    bool failed;
} train_state;

static void train_body(void *ctx)
{
    train_state *s = ctx;
    if (s->failed) return;
    mi_scope_reset(s->step);
    mi_scope_enter(s->step);
    mi_tensor *in, *tgt;
    mi_tensor *loss = NULL;
    if (mi_text_batch(s->text, s->T, 1, MI_SPLIT_TRAIN, s->next * s->batch, s->batch, &in,
                      &tgt) == 0)
        loss = mi_lm_loss(&s->lm, in, tgt);
    s->next++;
    mi_optim_zero_grad(s->opt);
    if (!loss || mi_backward(loss) != 0 || mi_optim_step(s->opt) != 0) s->failed = true;
    else s->loss = mi_item(loss);
    mi_scope_leave();
}

/* 1 MiB of bytes when the text is absent: printable ASCII and newlines. */
static mi_text *generated_text(void)
{
    enum { SIZE = 1 << 20 };
    uint8_t *b = malloc(SIZE);
    if (!b) return NULL;
    mi_rng rng;
    mi_rng_seed(&rng, 3);
    mi_tensor *u = mi_rand(&rng, MI_F32, MI_SHAPE(SIZE), 0, 1);
    for (int64_t i = 0; u && i < SIZE; i++) {
        double x = mi_get(u, i);
        b[i] = x < 0.02 ? '\n' : x < 0.17 ? ' ' : (uint8_t)('a' + (int)((x - 0.17) / 0.83 * 26));
    }
    mi_text *t = u ? mi_text_from_bytes(b, SIZE, "generated bytes") : NULL;
    free(b);
    return t;
}

static void train_child(const void *ctx, result *out)
{
    const train_case *tc = ctx;
    const bench_opts *o = tc->o;
    mi_scope *model = mi_scope_new("bench-train-model"), *step = mi_scope_new("bench-step");
    train_state s = {.step = step, .loss = NAN};
    mi_scope_enter(model);
    /* the mixer on its own first: a kind the factory lacks is a skip */
    mi_lm_config c = mi_lm_config_default();
    char set[MI_LM_TEXT + 8];
    snprintf(set, sizeof set, "mixer=%s", tc->spec);
    bool ok = mi_lm_config_set(&c, "vocab=256") == 0 && mi_lm_config_set(&c, "d_model=128") == 0
           && mi_lm_config_set(&c, "layers=4") == 0 && mi_lm_config_set(&c, "heads=4") == 0
           && mi_lm_config_set(&c, "mlp_hidden=384") == 0 && mi_lm_config_set(&c, set) == 0;
    if (ok && mi_preset_find(tc->spec)) {
        snprintf(set, sizeof set, "mixer.chunk=%d", TRAIN_CHUNK);
        ok = mi_lm_config_set(&c, set) == 0;
    }
    if (!ok) {
        note_error(out, "config");
        goto done;
    }
    mi_mixer_options mo = mi_mixer_options_default(c.d_model, c.heads);
    const char *ov[MI_LM_MAX_OVERRIDES];
    for (int i = 0; i < c.n_overrides; i++) ov[i] = c.overrides[i];
    mo.overrides = ov;
    mo.n_overrides = c.n_overrides;
    mi_rng rng;
    mi_rng_seed(&rng, 1);
    mi_mixer probe_mixer;
    mi_scope *tmp = mi_scope_new("bench-mixer-check");
    if (mi_mixer_create(&probe_mixer, tc->spec, &mo, MI_F32, &rng, tmp) != 0) {
        snprintf(out->note, sizeof out->note, "mixer not available: %s", mi_error());
        mi_error_clear();
        mi_scope_free(tmp);
        goto done;
    }
    mi_scope_free(tmp);
    if (mi_lm_init(&s.lm, &c, MI_F32, 1, model) != 0) {
        note_error(out, "model");
        goto done;
    }
    int n;
    const mi_named_tensor *named = mi_lm_params(&s.lm, &n);
    mi_tensor **params = mi_scope_alloc(model, sizeof *params * (size_t)n);
    bool *decay = mi_scope_alloc(model, sizeof *decay * (size_t)n);
    for (int i = 0; params && decay && i < n; i++) params[i] = named[i].tensor;
    if (!params || !decay) {
        note_error(out, "model");
        goto done;
    }
    mi_decay_mask_matrices(params, n, decay);
    mi_param_group g = {.params = params, .n = n, .hp = mi_optim_defaults(MI_OPT_ADAMW),
                        .decay = decay};
    g.hp.lr = 1e-3;
    g.hp.weight_decay = 0.1;
    s.text = tc->data ? mi_text_load(tc->data) : generated_text();
    if (!s.text || !(s.opt = mi_optim_new(MI_OPT_ADAMW, &g, 1))) {
        note_error(out, tc->data ? "data" : "optimizer");
        goto done;
    }
    /* probes: one step of one sequence at T1 and at T2 = 2 T1 tokens, T1 about
     * T/4 in whole chunks; the peak RSS is extrapolated in tokens (B·T) */
    int64_t T1 = TRAIN_CHUNK * ((tc->T / 4 + TRAIN_CHUNK - 1) / TRAIN_CHUNK);
    if (tc->batch * tc->T >= 8 * T1) {
        long base = peak_rss_kb(), u[2];
        s.batch = 1;
        for (int i = 0; i < 2; i++) {
            s.T = T1 << i;
            train_body(&s);
            u[i] = (long)(mi_scope_stats_get(step).bytes_used / 1024);
        }
        if (s.failed) {
            note_error(out, "probe step");
            goto done;
        }
        char from[96];
        snprintf(from, sizeof from, "from probe steps of 1 x %lld and 1 x %lld tokens",
                 (long long)T1, (long long)(2 * T1));
        if (over_budget(out, base + extrapolate_kb(u[0], u[1], (double)T1, 2.0 * (double)T1,
                                                   (double)(tc->batch * tc->T)), o, from))
            goto done;
    }
    s.T = tc->T;
    s.batch = tc->batch;
    time_policy pol = step_policy(o);
    out->t = time_body_with(train_body, &s, 1, o->reps, &pol);
    if (s.failed) note_error(out, "step");
    else if (!isfinite(s.loss)) {
        out->failed = true;
        snprintf(out->note, sizeof out->note, "the loss is not finite (%g)", s.loss);
    }
    out->loss = s.loss;
done:
    mi_scope_leave();
    out->rss_kb = peak_rss_kb();
    if (s.opt) mi_optim_free(s.opt);
    mi_scope_free(step);
    mi_scope_free(model);
}

/* The text: --data, else ../shared/data/tinyshakespeare.txt beside the
 * checkout the executable was built in (build/tools/miras-bench), else
 * shared/data/ inside it, else the same two relative to the working
 * directory. NULL: not found. */
static const char *find_text(char *buf, size_t n)
{
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"/../../../shared/data/" TEXT_NAME, "/../../shared/data/" TEXT_NAME};
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        for (int i = 0; i < 2; i++) {
            snprintf(buf, n, "%s%s", exe, rel[i]);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    const char *cwd_rel[] = {"../shared/data/" TEXT_NAME, "shared/data/" TEXT_NAME};
    for (int i = 0; i < 2; i++)
        if (access(cwd_rel[i], R_OK) == 0) return snprintf(buf, n, "%s", cwd_rel[i]), buf;
    return NULL;
}

static int bench_train(const bench_opts *o)
{
    char vbuf[512], path[4352];
    const char *variants[32];
    int nv = split_list(o->variants ? o->variants : train_default_variants, vbuf, sizeof vbuf,
                        variants, 32);
    if (nv < 1) {
        fprintf(stderr, "miras-bench: --variants wants 1 to 32 comma-separated names\n");
        return 2;
    }
    const char *data = o->data;
    if (data && access(data, R_OK) != 0) {
        fprintf(stderr, "miras-bench: --data '%s': %s\n", data, strerror(errno));
        return 2;
    }
    if (!data) data = find_text(path, sizeof path);
    char data_txt[160];
    if (data) {
        const char *base = strrchr(data, '/');
        snprintf(data_txt, sizeof data_txt, "data %.140s", base ? base + 1 : data);
    } else {
        snprintf(data_txt, sizeof data_txt, "data: generated bytes (" TEXT_NAME " not found; "
                 "--data PATH)");
        fprintf(stderr, "miras-bench: %s not found; training on generated bytes\n", TEXT_NAME);
    }
    int first = n_results, failed = 0;
    for (int i = 0; i < nv && n_results < MAX_RESULTS; i++) {
        /* BENCH.md's names: transformer is attention, lattice the decoding form */
        const char *spec = !strcmp(variants[i], "transformer") ? "attention"
                         : !strcmp(variants[i], "lattice")     ? "lattice-dec"
                                                               : variants[i];
        train_case tc = {.o = o, .spec = spec, .data = data,
                         .batch = o->batch ? o->batch : TRAIN_BATCH,
                         .T = o->seq_len ? o->seq_len : TRAIN_SEQ_LEN};
        result *r = &results[n_results++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "train.%s", variants[i]);
        char chunk[32] = "";
        if (mi_preset_find(spec)) snprintf(chunk, sizeof chunk, " chunk=%d", TRAIN_CHUNK);
        snprintf(r->config, sizeof r->config, "mixer %s%s; vocab 256 d_model 128 layers 4 "
                 "heads 4 SwiGLU 384; B=%lld T=%lld; AdamW lr 1e-3 wd 0.1; f32; %s",
                 spec, chunk, (long long)tc.batch, (long long)tc.T, data_txt);
        r->threads = o->threads;
        r->raw = -1;
        r->loss = NAN;
        r->tokens = (double)(tc.batch * tc.T);
        run_isolated(train_child, &tc, o, r);
        failed += r->failed;
        print_case_json(r);
    }
    if (!o->json_only) print_case_table(first, "optimizer step");
    return failed ? 1 : 0;
}

/* ================================================================ subcommands */

/* Starts OpenMP's and oneDNN's threads and lets the clock settle before the
 * first case: a raw 256³ matmul, untimed, for about half a second. */
static void spin_up(void)
{
    static float a[256 * 256], b[256 * 256], c[256 * 256];
    raw_prim rp;
    if (raw_matmul(&rp, 0, 256, a, b, c) == 0)
        for (double t0 = now_s(); now_s() - t0 < 0.5;) raw_prim_body(&rp);
    raw_prim_free(&rp);
}

static int bench_ops(const bench_opts *o)
{
    mi_scope *inputs = mi_scope_new("bench-inputs");
    mi_scope_enter(inputs);
    mi_rng rng;
    mi_rng_seed(&rng, 1);
    openblas_set_num_threads(1);
    spin_up();
    static const int64_t sizes[] = {64, 128, 256, 512, 1024};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) bench_matmul(sizes[i], 0, o, &rng);
    bench_matmul(32, 64, o, &rng);
    static const rowwise_case rows[] = {
        {"softmax", FW_SOFTMAX, 0},
        {"layer_norm", FW_LAYER_NORM, 0},
        {"gelu", FW_GELU, dnnl_eltwise_gelu_erf},
        {"tanh", FW_TANH, dnnl_eltwise_tanh},
        {"sigmoid", FW_SIGMOID, dnnl_eltwise_logistic},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) bench_rowwise(&rows[i], o, &rng);
    bench_dispatch(true, o);
    bench_dispatch(false, o);
    mi_scope_leave();
    mi_scope_free(inputs);
    if (!o->json_only) print_table();
    return 0;
}

typedef struct subcommand {
    const char *name, *help;
    int (*run)(const bench_opts *o);
    int default_reps;
} subcommand;

static const subcommand subcommands[] = {
    {"ops", "matmul 64..1024 and 64x(32x32), softmax/layer norm/gelu/tanh/sigmoid on "
            "4096x128,\n           dispatch overhead; framework against raw OpenBLAS and oneDNN",
     bench_ops, 20},
    {"layer", "one memory layer, forward + backward: B=4, H=4, head dim 32, T=512, chunk "
              "1/16/64;\n           titans, moneta, yaad, memora (MLP memory), gated-deltanet, "
              "linear-attention", bench_layer, LAYER_TRAIN_REPS},
    {"train", "one AdamW step of the byte-level LM: d_model 128, 4 layers, 4 heads, SwiGLU "
              "384,\n           B=16, T=256, chunk 16; transformer, linear-attention, "
              "gated-deltanet, titans,\n           moneta, yaad, memora, lattice, hope",
     bench_train, LAYER_TRAIN_REPS},
};
#define N_SUBCOMMANDS ((int)(sizeof subcommands / sizeof subcommands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: miras-bench SUBCOMMAND [options]\n"
               "subcommands:\n");
    for (int i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
    fprintf(f,
        "options:\n"
        "  --threads N       OpenMP threads for the framework and oneDNN (default: every "
        "core,\n                    whatever MIRAS_THREADS says)\n"
        "  --reps N          timed repetitions per case after the warm-up (default 20 for "
        "ops,\n                    %d for layer and train)\n"
        "  --json-only       only the JSON lines, no table\n"
        "layer and train:\n"
        "  --variants A,B,.. the variants to run (layer: any MIRAS preset; train: any mixer "
        "spec,\n                    plus transformer = attention and lattice = lattice-dec)\n"
        "  --seq-len T       tokens per sequence (default: layer 512, train 256)\n"
        "  --batch B         sequences per batch (default: layer 4, train 16)\n"
        "  --budget-s S      no new repetition of a case starts S seconds after its first "
        "(default\n                    %g); the two warm-up calls and one repetition always "
        "run\n"
        "  --max-rss-gb G    skip a case whose estimated peak RSS exceeds G GB (default %g): "
        "the\n                    step memory of two small probe runs (layer: T = 32 and 64, "
        "rounded\n                    up to whole chunks; train: one sequence of about T/4 "
        "and T/2\n                    tokens), extrapolated linearly, + 5 %%; each case runs "
        "in a child\n                    process whose address space is capped at 1.25 G + 0.5 "
        "GB (running\n                    out of memory under the cap is a skip too)\n"
        "layer only:\n"
        "  --chunks b1,b2,.. chunk sizes (default 1,16,64); chunk 1 (the per-token "
        "recurrence, the\n                    slow reference) runs at T = %d unless --seq-len "
        "is given\n"
        "train only:\n"
        "  --data PATH       the text (default: ../shared/data/" TEXT_NAME " next to the "
        "checkout\n                    holding this executable, or in the working directory; "
        "generated\n                    bytes when absent, said so in the config)\n"
        "Output: one JSON line per case, then a table. ops: name, config, threads, "
        "median/min/max\nms per call, GFLOP/s with the FLOP count assumed (matmul 2n^3) or "
        "GB/s, peak RSS, for\nframework cases the time ratio to the raw library case; the "
        "table marks the issue-3\ntargets met or missed. layer and train: median/min/max ms "
        "per forward+backward or\noptimizer step, tokens (B*T) and tokens/s, the case's own "
        "peak RSS (and the estimate\nit was checked against), train's last loss; a case not "
        "run has \"skipped\" or \"error\"\nwith the reason. Exit status 1 if a case failed, "
        "2 on bad arguments.\n",
        LAYER_TRAIN_REPS, LAYER_TRAIN_BUDGET_S, MAX_RSS_GB, LAYER_PER_TOKEN_MAX_T);
}

static int parse_positive(const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(v > 0) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o = {.threads = 0, .reps = 0, .budget_s = LAYER_TRAIN_BUDGET_S,
                    .max_rss_gb = MAX_RSS_GB};
    const subcommand *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n = 0;
        double x = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json-only") == 0) {
            o.json_only = true;
            continue;
        } else if (!v && a[0] == '-') {
            fprintf(stderr, "miras-bench: %s wants a value\n", a);
            return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--reps") || !strcmp(a, "--seq-len")
                   || !strcmp(a, "--batch")) {
            if (parse_count(v, &n) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive integer, got '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--threads")) o.threads = n;
            else if (!strcmp(a, "--reps")) o.reps = n;
            else if (!strcmp(a, "--seq-len")) o.seq_len = n;
            else o.batch = n;
        } else if (!strcmp(a, "--budget-s") || !strcmp(a, "--max-rss-gb")) {
            if (parse_positive(v, &x) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive number, got '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--budget-s")) o.budget_s = x;
            else o.max_rss_gb = x;
        } else if (!strcmp(a, "--variants")) {
            o.variants = v;
        } else if (!strcmp(a, "--chunks")) {
            o.chunks = v;
        } else if (!strcmp(a, "--data")) {
            o.data = v;
        } else if (!cmd && a[0] != '-') {
            for (int k = 0; k < N_SUBCOMMANDS; k++)
                if (strcmp(a, subcommands[k].name) == 0) cmd = &subcommands[k];
            if (!cmd) {
                fprintf(stderr, "miras-bench: unknown subcommand '%s'\n", a);
                usage(stderr);
                return 2;
            }
            continue;
        } else {
            fprintf(stderr, "miras-bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!cmd) {
        usage(stderr);
        return 2;
    }
    if (!o.reps) o.reps = cmd->default_reps;
    (void)mi_threads(); /* reads MIRAS_THREADS first, so --threads wins */
    mi_set_threads(o.threads);
    o.threads = mi_threads();
    return cmd->run(&o);
}
