/* GEMM backends for matmul and outer (private to src/ops): the geometry of
 * one batched product with broadcast batch dims, and the OpenBLAS (blas.c)
 * and oneDNN (dnnl_matmul.c) kernels that linalg.c puts in the op
 * descriptors. */
#ifndef MIRAS_OPS_BLAS_H
#define MIRAS_OPS_BLAS_H

#include <cblas.h>

#include "internal.h"

extern const mi_op mi_op_matmul, mi_op_outer, mi_op_matmul_acc;

/* C[q] = op(A[q]) · op(B[q]) for every q of the output's batch (row-major
 * over batch[0..nb)). A[q] starts at element Σ_d idx_d(q)·sa[d] of A's data,
 * with sa[d] = 0 along a dim A broadcasts: one matrix is re-used across the
 * batch, never copied. A is stored [M,K] (ta: [K,M]), B [K,N] (tb: [N,K]),
 * each C[q] is [M,N], contiguous after C[q-1]. */
typedef struct gemm_geom {
    double alpha, beta;     /* C = alpha·op(A)·op(B) + beta·C (matmul, outer: 1, 0) */
    int nb;
    int64_t batch[MI_MAX_RANK];
    int64_t sa[MI_MAX_RANK], sb[MI_MAX_RANK];
    int64_t nbatch, M, N, K;
    bool ta, tb;
} gemm_geom;

/* The geometry of matmul(in[0], in[1]) with a's flags into o, and of
 * outer(in[0], in[1]) as [..., M, 1] · [..., 1, N] (K = 1). Both fold the
 * batch into M when B is shared by the whole batch and A is not transposed
 * (x[B,T,D] · W[D,H] is one [B·T, D] · [D, H] GEMM). */
void gemm_geom_matmul(gemm_geom *g, const mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void gemm_geom_outer(gemm_geom *g, const mi_tensor *o, mi_tensor *const *in);
/* Element offset of batch q's matrix in an operand with batch strides st. */
int64_t gemm_batch_offset(const gemm_geom *g, const int64_t *st, int64_t q);
/* Whether every size and leading dimension fits the libraries' int. */
bool gemm_fits_int(const gemm_geom *g);

/* OpenBLAS (f32 sgemm, f64 dgemm), parallelised by OpenMP over the batch
 * or over row/column blocks of one large product. */
void matmul_blas_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void matmul_blas_f64(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void outer_blas_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void outer_blas_f64(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

/* matmul_acc (linalg.c): o = γ ⊙ c, both broadcast (γ NULL: 1; its last axis
 * 1), then o += scalar · op(A) op(B) as one GEMM with beta = 1, per block of
 * the product (the reference kernel: the fill, then loops over the same
 * geometry). */
void matmul_acc_fill(mi_tensor *o, const mi_tensor *c, const mi_tensor *gate);
void matmul_acc_blas_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void matmul_acc_blas_f64(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
/* The same with oneDNN's sgemm on each block (f32). */
void matmul_acc_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

/* Sets OpenBLAS to one thread, once (see blas.c): call before a cblas_* call
 * made outside gemm_run (cms_scan.c's per-chunk products). */
void blas_single_thread_once(void);
/* The kernels OpenBLAS chose for this CPU (its core name, "Haswell", "SkylakeX", ...;
 * OPENBLAS_CORETYPE overrides its choice). */
const char *blas_core_name(void);

/* cblas_sgemm's call, one f32 product on the calling thread: oneDNN's
 * sgemm, or OpenBLAS's where the DNNL backend is not allowed (dnnl_matmul.c
 * has the timings). The products of kernels that run a sequence a thread
 * (attention's row blocks, the CMS's chunks) and matmul_acc's DNNL blocks. */
void gemm_thread_f32(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                     int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc);

/* Whether gemm_thread_f32 runs oneDNN's sgemm with its AVX-512 kernels (the
 * DNNL backend allowed, oneDNN's ISA AVX-512 or above). */
bool gemm_thread_f32_avx512(void);

/* oneDNN 2.6 matmul primitive (f32 only), cached by geometry. */
void matmul_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void outer_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

#endif
