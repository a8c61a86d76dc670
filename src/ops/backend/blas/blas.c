/* OpenBLAS backend: matmul and outer as cblas_sgemm / cblas_dgemm calls,
 * plus the GEMM geometry shared with the oneDNN kernels (blas.h).
 *
 * Threading: OpenBLAS (the pthreads build) runs at one thread, set once
 * before its first call, and the framework's OpenMP parallelises around it:
 * over the batch, or over row (column) blocks of one large product, each
 * thread one GEMM on its block. Two spinning runtimes on two cores slow
 * each other down by up to 7× (measured on this 2-core kind of machine), so OpenBLAS never starts its
 * own threads here. */
#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "blas.h"

/* ---------------------------------------------------------------- geometry */

/* B shared by every batch entry and A's matrices stacked contiguously, A
 * not transposed: the batch is M·nbatch rows of one product. */
static void fold_batch(gemm_geom *g)
{
    if (g->ta || g->nbatch == 1) return;
    int64_t s = g->M * g->K;
    for (int d = g->nb - 1; d >= 0; d--) {
        if (g->batch[d] == 1) continue;
        if (g->sb[d] != 0 || g->sa[d] != s) return;
        s *= g->batch[d];
    }
    g->M *= g->nbatch;
    g->nbatch = 1;
    g->nb = 0;
}

void gemm_geom_matmul(gemm_geom *g, const mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *A = in[0];
    g->alpha = 1;
    g->beta = 0;
    g->nb = o->rank - 2;
    memcpy(g->batch, o->shape, sizeof(int64_t) * (size_t)g->nb);
    g->nbatch = mi_shape_numel(g->nb, o->shape);
    g->M = o->shape[g->nb];
    g->N = o->shape[g->nb + 1];
    g->ta = a->trans_a;
    g->tb = a->trans_b;
    g->K = g->ta ? A->shape[A->rank - 2] : A->shape[A->rank - 1];
    batch_strides(in[0], 2, g->nb, g->M * g->K, g->sa);
    batch_strides(in[1], 2, g->nb, g->K * g->N, g->sb);
    fold_batch(g);
}

void gemm_geom_outer(gemm_geom *g, const mi_tensor *o, mi_tensor *const *in)
{
    g->alpha = 1;
    g->beta = 0;
    g->nb = o->rank - 2;
    memcpy(g->batch, o->shape, sizeof(int64_t) * (size_t)g->nb);
    g->nbatch = mi_shape_numel(g->nb, o->shape);
    g->M = o->shape[g->nb];
    g->N = o->shape[g->nb + 1];
    g->K = 1;
    g->ta = g->tb = false;
    batch_strides(in[0], 1, g->nb, g->M, g->sa);
    batch_strides(in[1], 1, g->nb, g->N, g->sb);
    fold_batch(g);
}

int64_t gemm_batch_offset(const gemm_geom *g, const int64_t *st, int64_t q)
{
    return batch_offset(g->nb, g->batch, st, q);
}

bool gemm_fits_int(const gemm_geom *g)
{
    return g->M <= INT_MAX && g->N <= INT_MAX && g->K <= INT_MAX && g->K > 0;
}

/* ---------------------------------------------------------------- one block
 * C[r0:r1, c0:c1] = op(A)[r0:r1, :] · op(B)[:, c0:c1] of one batch entry,
 * leading dimensions those of the whole matrices. */
typedef void (*gemm_block_fn)(const gemm_geom *g, const void *A, const void *B, void *C,
                              int64_t r0, int64_t r1, int64_t c0, int64_t c1);

#define GEMM_BLOCK(fname, T, gemm)                                                        \
    static void fname(const gemm_geom *g, const void *A, const void *B, void *C, int64_t r0, \
                      int64_t r1, int64_t c0, int64_t c1)                                 \
    {                                                                                     \
        int64_t M = g->M, N = g->N, K = g->K;                                             \
        gemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,                            \
             g->tb ? CblasTrans : CblasNoTrans, (int)(r1 - r0), (int)(c1 - c0), (int)K,   \
             (T)g->alpha, (const T *)A + (g->ta ? r0 : r0 * K), (int)(g->ta ? M : K),     \
             (const T *)B + (g->tb ? c0 * K : c0), (int)(g->tb ? K : N), (T)g->beta,      \
             (T *)C + r0 * N + c0, (int)N);                                               \
    }
GEMM_BLOCK(block_f32, float, cblas_sgemm)
GEMM_BLOCK(block_f64, double, cblas_dgemm)

/* ---------------------------------------------------------------- matmul_acc's C
 * o's rows [r0, r1) (rows of its last axis, over all its leading axes),
 * columns [c0, c1): o = gate ⊙ c, both broadcast to o's shape (gate NULL:
 * 1; its last axis 1). Per GEMM block, just before the block's product, so
 * that the product's β = 1 reads them back from the cache. */
typedef struct acc_fill {
    const mi_tensor *o, *c, *gate;
    int64_t cst[MI_MAX_RANK], gst[MI_MAX_RANK]; /* strides along o's axes; cst's last: 0 or 1 */
} acc_fill;

/* c's and the gate's strides along every axis of o (batch_strides with no
 * matrix axes). */
static acc_fill acc_fill_of(const mi_tensor *o, const mi_tensor *c, const mi_tensor *gate)
{
    acc_fill f = {.o = o, .c = c, .gate = gate};
    batch_strides(c, 0, o->rank, 1, f.cst);
    if (gate) batch_strides(gate, 0, o->rank, 1, f.gst);
    return f;
}

#define ACC_FILL_ROWS(T)                                                                        \
    static void acc_fill_rows_##T(const acc_fill *f, int64_t r0, int64_t r1, int64_t c0,       \
                                  int64_t c1)                                                   \
    {                                                                                           \
        const mi_tensor *o = f->o;                                                              \
        int R = o->rank;                                                                        \
        int64_t N = o->shape[R - 1], cs = f->cst[R - 1];                                        \
        for (int64_t r = r0; r < r1; r++) { /* row r: entry r of o's leading axes */            \
            T *y = (T *)o->data + r * N;                                                        \
            const T *x = (const T *)f->c->data + batch_offset(R - 1, o->shape, f->cst, r);      \
            T a = f->gate ? ((const T *)f->gate->data)[batch_offset(R - 1, o->shape, f->gst, r)] \
                          : 1;                                                                  \
            if (y == x && a == 1) continue; /* in place: acc += product */                      \
            if (cs)                                                                             \
                for (int64_t j = c0; j < c1; j++) y[j] = a * x[j];                              \
            else                                                                                \
                for (int64_t j = c0; j < c1; j++) y[j] = a * x[0];                              \
        }                                                                                       \
    }
ACC_FILL_ROWS(float)
ACC_FILL_ROWS(double)

static void acc_fill_run(const acc_fill *f, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    if (f->o->dtype == MI_F64) acc_fill_rows_double(f, r0, r1, c0, c1);
    else acc_fill_rows_float(f, r0, r1, c0, c1);
}

/* ---------------------------------------------------------------- threading */

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) { openblas_set_num_threads(1); }
void blas_single_thread_once(void) { pthread_once(&blas_once, blas_single_thread); }

/* Below this many flops (2·M·N·K summed over the batch) an OpenMP region
 * costs more than it saves, and a product this small is not cut into
 * blocks. Measured (µs, one sgemm vs split over 2 threads): 64³ (0.5
 * MFLOP) 5.0 vs 7.7, 96³ (1.8 MFLOP) 16.3 vs 9.6–14.9, 128³ 38.5 vs 25.5. */
#define PAR_MIN_FLOPS 1e6

/* The work as tasks: every batch entry, each cut into `nblk` blocks of
 * `bsz` rows (or columns, when N > M) of C. The cut depends on the shape
 * alone, never on the thread count, so each element comes from the same
 * GEMM call at any number of threads: results are bitwise the same at 1
 * and 2 threads. Blocks are ≤ 256 long, a multiple of 16 (a cache line
 * of f32 in C's rows), an even count for two cores. Cutting costs 3–5% at
 * one thread (256³: 282 vs 269 µs for one sgemm; 512³: 2260 vs 2187). */
typedef struct gemm_tasks {
    const gemm_geom *g;
    gemm_block_fn block;
    size_t es;
    const char *A, *B;
    char *C;
    const acc_fill *fill; /* matmul_acc's C, each block's before its product (or NULL) */
    bool rows;
    int64_t len, nblk, bsz;
} gemm_tasks;

static void tasks_plan(gemm_tasks *t)
{
    const gemm_geom *g = t->g;
    t->rows = g->M >= g->N;
    t->len = t->rows ? g->M : g->N;
    t->nblk = 1;
    t->bsz = t->len;
    if (2.0 * (double)g->M * (double)g->N * (double)g->K < PAR_MIN_FLOPS || t->len < 32) return;
    int64_t n = 2 * ((t->len + 511) / 512);
    t->bsz = ((t->len + n - 1) / n + 15) / 16 * 16;
    t->nblk = (t->len + t->bsz - 1) / t->bsz;
}

static void task_run(const gemm_tasks *t, int64_t i)
{
    const gemm_geom *g = t->g;
    int64_t q = i / t->nblk, lo = (i % t->nblk) * t->bsz;
    int64_t hi = lo + t->bsz < t->len ? lo + t->bsz : t->len;
    const char *a = t->A + (size_t)gemm_batch_offset(g, g->sa, q) * t->es;
    const char *b = t->B + (size_t)gemm_batch_offset(g, g->sb, q) * t->es;
    char *c = t->C + (size_t)(q * g->M * g->N) * t->es;
    if (t->fill && t->rows) acc_fill_run(t->fill, q * g->M + lo, q * g->M + hi, 0, g->N);
    else if (t->fill) acc_fill_run(t->fill, q * g->M, (q + 1) * g->M, lo, hi);
    if (t->rows) t->block(g, a, b, c, lo, hi, 0, g->N);
    else t->block(g, a, b, c, 0, g->M, lo, hi);
}

/* Runs every task: on this thread alone when the work is small (not even
 * an `if (0)` OpenMP region: entering one costs ≈ 0.3 µs, as much as a
 * whole 8×8 product), else spread over the threads. */
static void gemm_run_fill(const gemm_geom *g, gemm_block_fn block, size_t es, const void *A,
                          const void *B, void *C, const acc_fill *fill)
{
    pthread_once(&blas_once, blas_single_thread);
    gemm_tasks t = {.g = g, .block = block, .es = es, .A = A, .B = B, .C = C, .fill = fill};
    tasks_plan(&t);
    int64_t n = g->nbatch * t.nblk;
    int nt = 1;
#ifdef _OPENMP
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->nbatch;
    if (!omp_in_parallel() && flops >= PAR_MIN_FLOPS * mi_parallel_cost(NULL))
        nt = omp_get_max_threads();
#endif
    if (nt > n) nt = (int)n;
    if (nt <= 1) {
        for (int64_t i = 0; i < n; i++) task_run(&t, i);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i++) task_run(&t, i);
}

static void gemm_run(const gemm_geom *g, gemm_block_fn block, size_t es, const void *A,
                     const void *B, void *C)
{
    gemm_run_fill(g, block, es, A, B, C, NULL);
}

/* ---------------------------------------------------------------- kernels
 * matmul: C = op(A) op(B) per batch entry (linalg.c states the op); outer:
 * y = a bᵀ per batch entry, a rank-1 GEMM. OpenBLAS for f64 (dgemm: 4–8×
 * the reference loop from 16³ up; oneDNN 2.6 has no f64), for f32 products
 * too small to pay oneDNN's per-call cost, and for very large outers
 * (linalg.c's select rules give the timings). Shapes its int API cannot
 * take, and K = 0, go to the reference kernel. */
#define BLAS_KERNEL(fname, op, geom, DT, block, T)                             \
    void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)          \
    {                                                                          \
        gemm_geom g;                                                           \
        geom;                                                                  \
        if (!gemm_fits_int(&g)) {                                              \
            op.kernel[MI_BACKEND_REF][DT](o, in, a);                           \
            return;                                                            \
        }                                                                      \
        gemm_run(&g, block, sizeof(T), in[0]->data, in[1]->data, o->data);     \
    }
BLAS_KERNEL(matmul_blas_f32, mi_op_matmul, gemm_geom_matmul(&g, o, in, a), MI_F32, block_f32,
            float)
BLAS_KERNEL(matmul_blas_f64, mi_op_matmul, gemm_geom_matmul(&g, o, in, a), MI_F64, block_f64,
            double)
BLAS_KERNEL(outer_blas_f32, mi_op_outer, gemm_geom_outer(&g, o, in), MI_F32, block_f32, float)
BLAS_KERNEL(outer_blas_f64, mi_op_outer, gemm_geom_outer(&g, o, in), MI_F64, block_f64, double)

/* ---------------------------------------------------------------- matmul_acc */
void matmul_acc_fill(mi_tensor *o, const mi_tensor *c, const mi_tensor *gate)
{
    acc_fill f = acc_fill_of(o, c, gate);
    int64_t N = o->shape[o->rank - 1];
    acc_fill_run(&f, 0, N ? o->numel / N : 0, 0, N);
}

#define ACC_KERNEL(fname, DT, block, T)                                        \
    void fname(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)          \
    {                                                                          \
        gemm_geom g;                                                           \
        gemm_geom_matmul(&g, o, in, a);                                        \
        if (!gemm_fits_int(&g)) {                                              \
            mi_op_matmul_acc.kernel[MI_BACKEND_REF][DT](o, in, a);             \
            return;                                                            \
        }                                                                      \
        acc_fill f = acc_fill_of(o, in[2], in[3]);                             \
        g.alpha = a->scalar;                                                   \
        g.beta = 1;                                                            \
        gemm_run_fill(&g, block, sizeof(T), in[0]->data, in[1]->data, o->data, \
                      &f);                                                     \
    }
ACC_KERNEL(matmul_acc_blas_f32, MI_F32, block_f32, float)
ACC_KERNEL(matmul_acc_blas_f64, MI_F64, block_f64, double)

/* matmul_acc's DNNL kernel: the same tasks and split as OpenBLAS's, each
 * block a oneDNN sgemm on its thread (gemm_thread_f32, dnnl_matmul.c). */
GEMM_BLOCK(block_dnnl_f32, float, gemm_thread_f32)
ACC_KERNEL(matmul_acc_dnnl_f32, MI_F32, block_dnnl_f32, float)

const char *blas_core_name(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}
