/* oneDNN backend for matmul and outer: the 2.6 matmul primitive, f32 only
 * (2.6 has no f64 on the CPU), one primitive per geometry in the shared
 * cache of dnnl_common.c.
 *
 * Transposes are strides of the memory descriptors (A stored [K,M] is the
 * [M,K] descriptor with strides {1, M}); a broadcast batch dim is a dim of
 * size 1 in that operand's descriptor, which the primitive re-uses across
 * the batch (all three descriptors have the output's rank). */
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cblas.h>

#include "blas.h"
#include "dnnl_common.h"

/* Cache key kind: distinct from other files' kinds (the cache is shared). */
enum { KIND_GEMM = 0x4d4d0001 };

/* Key layout: dims = {nb, A's batch dims [4], B's batch dims [4], M, N, K,
 * ta, tb, threads}; a broadcast dim is 1 in the operand's list. oneDNN
 * fixes a primitive's thread count when it is created, so the count is
 * part of the key (mi_set_threads then gets new primitives). */
enum { KB_A = 1, KB_B = 5, K_M = 9, K_N = 10, K_K = 11, K_TA = 12, K_TB = 13, K_NT = 14 };
#define KEY_MAX_BATCH 4
_Static_assert(MI_MAX_RANK - 2 <= KEY_MAX_BATCH, "key holds every batch dim");

static void key_of(dnnl_key *k, const gemm_geom *g, int nt)
{
    memset(k, 0, sizeof *k);
    k->kind = KIND_GEMM;
    k->dtype = MI_F32;
    k->dims[0] = g->nb;
    for (int d = 0; d < g->nb; d++) {
        k->dims[KB_A + d] = g->sa[d] ? g->batch[d] : 1;
        k->dims[KB_B + d] = g->sb[d] ? g->batch[d] : 1;
    }
    k->dims[K_M] = g->M;
    k->dims[K_N] = g->N;
    k->dims[K_K] = g->K;
    k->dims[K_TA] = g->ta;
    k->dims[K_TB] = g->tb;
    k->dims[K_NT] = nt;
}

/* A descriptor of logical dims {batch..., rows, cols} over a row-major
 * buffer stored {batch..., rows, cols} or, when `trans`, {batch..., cols,
 * rows}. */
static int md_init(dnnl_memory_desc_t *md, int nb, const int64_t *batch, int64_t rows,
                   int64_t cols, bool trans)
{
    dnnl_dims_t dims, strides;
    int nd = nb + 2;
    for (int d = 0; d < nb; d++) dims[d] = batch[d];
    dims[nb] = rows;
    dims[nb + 1] = cols;
    strides[nb] = trans ? 1 : cols;
    strides[nb + 1] = trans ? rows : 1;
    int64_t s = rows * cols;
    for (int d = nb - 1; d >= 0; d--) {
        strides[d] = s;
        s *= batch[d];
    }
    return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides) == dnnl_success
               ? 0
               : -1;
}

/* ctx is the engine. */
static int build_gemm(const dnnl_key *k, dnnl_entry *e, void *ctx)
{
    int nb = (int)k->dims[0];
    int64_t M = k->dims[K_M], N = k->dims[K_N], K = k->dims[K_K], out_batch[KEY_MAX_BATCH];
    for (int d = 0; d < nb; d++)
        out_batch[d] = k->dims[KB_A + d] > k->dims[KB_B + d] ? k->dims[KB_A + d]
                                                             : k->dims[KB_B + d];
    dnnl_memory_desc_t src, wei, dst;
    if (md_init(&src, nb, k->dims + KB_A, M, K, k->dims[K_TA]) != 0 ||
        md_init(&wei, nb, k->dims + KB_B, K, N, k->dims[K_TB]) != 0 ||
        md_init(&dst, nb, out_batch, M, N, false) != 0)
        return -1;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &src, &wei, NULL, &dst) != dnnl_success) return -1;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &desc, NULL, (dnnl_engine_t)ctx, NULL) != dnnl_success)
        return -1;
    dnnl_status_t st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        e->prim = NULL;
        return -1;
    }
    if (miras_dnnl_memory(e, DNNL_ARG_SRC, &src) != 0 ||
        miras_dnnl_memory(e, DNNL_ARG_WEIGHTS, &wei) != 0)
        return -1;
    return miras_dnnl_memory(e, DNNL_ARG_DST, &dst);
}

/* Below this many flops a primitive runs on one thread: a fork-join of
 * two costs more than it saves. Measured (µs, 1 vs 2 threads, raw
 * oneDNN): 32³ 0.50 vs 0.73, 64³ (0.5 MFLOP) 2.4 vs 3.6, 96³ (1.8 MFLOP)
 * 7.6 vs 6.7, 128³ 18 vs 11, 64×32³ (4.2 MFLOP) 20 vs 10. */
#define DNNL_PAR_MIN_FLOPS 1e6

static int threads_for(const gemm_geom *g)
{
#ifdef _OPENMP
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->nbatch;
    if (omp_in_parallel() || flops < DNNL_PAR_MIN_FLOPS * mi_parallel_cost(NULL)) return 1;
    return omp_get_max_threads();
#else
    (void)g;
    return 1;
#endif
}

/* Runs g on oneDNN with nt threads (the OpenMP setting oneDNN reads when
 * it creates and runs the primitive); -1 when the library refuses it, with
 * no output written. */
static int gemm_dnnl(const gemm_geom *g, const void *A, const void *B, void *C)
{
    dnnl_engine_t engine = miras_dnnl_engine();
    if (!engine || !gemm_fits_int(g)) return -1; /* K = 0 */
    int nt = threads_for(g);
    dnnl_key k;
    key_of(&k, g, nt);
    void *ptr[3] = {(void *)A, (void *)B, C};
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    if (nt != saved) omp_set_num_threads(nt);
#endif
    int rc = miras_dnnl_run(&k, build_gemm, engine, ptr);
#ifdef _OPENMP
    if (nt != saved) omp_set_num_threads(saved);
#endif
    return rc;
}

/* matmul: C = op(A) op(B) per batch entry; outer: y = a bᵀ (K = 1).
 * oneDNN because its matmul (AVX-512 brgemm) runs 1.5–2.5× faster than
 * OpenBLAS 0.3.21 here from ≈ 32³ up, one product or batched, and takes a
 * whole broadcast batch in one call (linalg.c's select rules give the
 * timings). A geometry it refuses runs on the reference kernel. */
void matmul_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    gemm_geom g;
    gemm_geom_matmul(&g, o, in, a);
    if (gemm_dnnl(&g, in[0]->data, in[1]->data, o->data) != 0)
        mi_op_matmul.kernel[MI_BACKEND_REF][MI_F32](o, in, a);
}

void outer_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    gemm_geom g;
    gemm_geom_outer(&g, o, in);
    if (gemm_dnnl(&g, in[0]->data, in[1]->data, o->data) != 0)
        mi_op_outer.kernel[MI_BACKEND_REF][MI_F32](o, in, a);
}

/* One product on the calling thread: oneDNN's sgemm, which compiles for
 * the CPU's own ISA (AVX-512 where it has one), where OpenBLAS 0.3.21 runs
 * its Haswell kernels on every CPU; OpenBLAS's where the DNNL backend is
 * not allowed (MIRAS_BACKEND). At the sizes of attention's row blocks and
 * the CMS's chunks (µs a call, 1 thread, AMD EPYC family 26 with AVX-512;
 * the same host held to AVX2 with ONEDNN_MAX_CPU_ISA=AVX2 and
 * OPENBLAS_CORETYPE=Haswell): 64×256·(32)ᵀ OpenBLAS 11.9, oneDNN 6.0 (AVX2
 * 12.0 and 10.6); 64×32 inner 256: 11.6, 5.4 (11.6, 10.1); 16×128 inner
 * 512: 27.5, 10.5 (27.9, 23.1); (16×128)ᵀ·16×512: 23.5, 11.1 (23.4, 21.0).
 * One thread whatever the caller's team, so a kernel that splits its work
 * by sequence keeps each sequence's sums in one order at any thread count. */
void gemm_thread_f32(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                     int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc)
{
    dnnl_status_t st = dnnl_unimplemented;
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    if (saved != 1) omp_set_num_threads(1);
#endif
    if (order == CblasRowMajor && mi_backends_allowed() >> MI_BACKEND_DNNL & 1u)
        st = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', M, N, K,
                        alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef _OPENMP
    if (saved != 1) omp_set_num_threads(saved);
#endif
    if (st == dnnl_success) return;
    blas_single_thread_once(); /* not allowed, or sizes oneDNN refuses: OpenBLAS's */
    cblas_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool gemm_thread_f32_avx512(void)
{
    return (mi_backends_allowed() >> MI_BACKEND_DNNL & 1u) && miras_dnnl_avx512();
}
