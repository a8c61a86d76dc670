/* miras-bench: speed of the framework against the raw libraries, in the
 * configurations of BENCH.md. One JSON line per case, then a table with the
 * issue-3 targets marked met or missed.
 *
 *   miras-bench ops    matmul, batched matmul, row-wise ops, dispatch overhead
 *
 * Each case runs after a warm-up; a repetition times `inner` calls (enough
 * for ≈ 2 ms) and reports the time per call; median/min/max are over the
 * repetitions. The raw figures call OpenBLAS and oneDNN directly, in the same
 * run, so ratios are immune to the machine's drift between runs. */
#include <cblas.h>
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "miras.h"

typedef struct bench_opts {
    int threads;    /* the framework's and oneDNN's OpenMP threads */
    int reps;
    bool json_only;
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

/* Times body(ctx); `per_body` calls of the measured thing happen per body. */
static timing time_body(body_fn body, void *ctx, int per_body, const bench_opts *o)
{
    double t0 = now_s(), fastest = INFINITY;
    for (int calls = 0; calls < 2 || now_s() - t0 < WARMUP_S; calls++) {
        double a = now_s();
        body(ctx);
        fastest = fmin(fastest, now_s() - a);
    }
    /* from the fastest warm-up call: a slow first call (page faults, a
     * descheduled thread) must not shrink every repetition to one call */
    timing r = {.inner = (int)fmin(1e6, fmax(1.0, ceil(REP_TARGET_S / fastest)))};
    double *ms = malloc(sizeof(double) * (size_t)o->reps);
    double start = now_s();
    for (r.reps = 0; r.reps < o->reps; r.reps++) {
        if (r.reps >= 3 && now_s() - start > CASE_BUDGET_S) break;
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

/* ================================================================ results */

typedef struct result {
    char name[48];
    char config[200];
    int threads;
    timing t;
    double flops, bytes; /* per call; 0 where not meaningful */
    int raw;             /* framework cases: the raw case compared with, else -1 */
    long rss_kb;
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
} subcommand;

/* `layer` and `train` (BENCH.md) join this table in later issues. */
static const subcommand subcommands[] = {
    {"ops", "matmul 64..1024 and 64x(32x32), softmax/layer norm/gelu/tanh/sigmoid on 4096x128, "
            "dispatch overhead; framework against raw OpenBLAS and oneDNN", bench_ops},
};
#define N_SUBCOMMANDS ((int)(sizeof subcommands / sizeof subcommands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: miras-bench SUBCOMMAND [--threads N] [--reps N] [--json-only]\n"
               "subcommands:\n");
    for (int i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
    fprintf(f, "options:\n"
               "  --threads N  OpenMP threads for the framework and oneDNN (default: every "
               "core,\n               whatever MIRAS_THREADS says)\n"
               "  --reps N     timed repetitions per case after a warm-up (default 20)\n"
               "  --json-only  only the JSON lines, no table\n"
               "Output: one JSON line per case (name, config, threads, median/min/max ms per "
               "call,\nGFLOP/s with the FLOP count assumed (matmul 2n^3) or GB/s, peak RSS, "
               "and for\nframework cases the time ratio to the raw library case), then a table "
               "with the\nissue-3 targets marked met or missed.\n");
}

static int parse_count(const char *text, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 1 || v > 100000) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o = {.threads = 0, .reps = 20};
    const subcommand *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json-only") == 0) {
            o.json_only = true;
        } else if ((strcmp(a, "--threads") == 0 || strcmp(a, "--reps") == 0) && i + 1 < argc) {
            if (parse_count(argv[i + 1], a[2] == 't' ? &o.threads : &o.reps) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive integer, got '%s'\n", a,
                        argv[i + 1]);
                return 2;
            }
            i++;
        } else if (!cmd && a[0] != '-') {
            for (int k = 0; k < N_SUBCOMMANDS; k++)
                if (strcmp(a, subcommands[k].name) == 0) cmd = &subcommands[k];
            if (!cmd) {
                fprintf(stderr, "miras-bench: unknown subcommand '%s'\n", a);
                usage(stderr);
                return 2;
            }
        } else {
            fprintf(stderr, "miras-bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!cmd) {
        usage(stderr);
        return 2;
    }
    (void)mi_threads(); /* reads MIRAS_THREADS first, so --threads wins */
    mi_set_threads(o.threads);
    o.threads = mi_threads();
    return cmd->run(&o);
}
