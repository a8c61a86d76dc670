/* miras-bench ops: matmul, batched matmul, row-wise ops and dispatch
 * overhead, the framework against raw OpenBLAS and oneDNN in the same run,
 * with the speed targets marked met or missed in the table. */
#include <cblas.h>
#include <dnnl.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_common.h"

/* ================================================================ targets
 * The speed goals for the framework's kernels, checked on its cases. */
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
           "raw", "median", "rate", "ratio", "target");
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

int bench_ops(const bench_opts *o)
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
