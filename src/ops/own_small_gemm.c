/* Small f32 products for cms_scan's OWN kernel (cms_scan.c): a chunk of a
 * few tokens against a weight matrix, C = alpha · op(A) op(B) + beta · C
 * (row-major) with few rows (M, the chunk's tokens) or a small inner
 * dimension (K: the chunk's rank-K step W −= Pᵀ S). OpenBLAS 0.3.21 packs
 * both operands on every sgemm call; at M = 4 the packing took as long as
 * the product (perf on one CMS level, d 128, h 512, C = 4: 33 % in
 * sgemm_incopy/itcopy, 37 % in the kernel). Here the big operand is read
 * once, straight from memory, in loops GCC vectorises (-O3 -march=native
 * -ffast-math: sums reassociated, a few ulp from a sequential sum).
 * One thread (cms_scan runs a sequence a thread). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "own_unary.h"

/* Rows or inner dimension at most this: the chunk sizes that OpenBLAS's
 * packing dominates (C = 16 stays with sgemm). */
#define SMALL 8

static void rows_init(float *C, int64_t M, int64_t N, int64_t ldc, float beta)
{
    for (int64_t m = 0; m < M; m++) {
        float *c = C + m * ldc;
        if (beta == 0.0f) memset(c, 0, sizeof(float) * (size_t)N);
        else if (beta != 1.0f)
            for (int64_t j = 0; j < N; j++) c[j] *= beta;
    }
}

bool own_small_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *restrict A, int64_t lda, const float *restrict B,
                        int64_t ldb, float beta, float *restrict C, int64_t ldc)
{
    if (!ta && !tb && M <= SMALL) {
        /* C[m, :] += Σ_k alpha A[m, k] B[k, :]: B's rows once each */
        rows_init(C, M, N, ldc, beta);
        for (int64_t k = 0; k < K; k++) {
            const float *b = B + k * ldb;
            for (int64_t m = 0; m < M; m++) {
                float a = alpha * A[m * lda + k], *c = C + m * ldc;
                for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
            }
        }
        return true;
    }
    if (!ta && tb && M <= SMALL) {
        /* C[m, j] = Σ_k A[m, k] B[j, k]: B's rows (op(B)'s columns) once each */
        for (int64_t j = 0; j < N; j++) {
            const float *b = B + j * ldb;
            for (int64_t m = 0; m < M; m++) {
                const float *a = A + m * lda;
                float s = 0;
                for (int64_t k = 0; k < K; k++) s += a[k] * b[k];
                float *c = C + m * ldc + j;
                *c = (beta == 0.0f ? 0.0f : beta * *c) + alpha * s;
            }
        }
        return true;
    }
    if (ta && !tb && K <= SMALL) {
        /* C[i, :] = beta C[i, :] + Σ_t alpha A[t, i] B[t, :]: a rank-K update, C once */
        float a[SMALL];
        for (int64_t i = 0; i < M; i++) {
            float *c = C + i * ldc;
            rows_init(c, 1, N, ldc, beta);
            for (int64_t t = 0; t < K; t++) a[t] = alpha * A[t * lda + i];
            for (int64_t t = 0; t < K; t++) {
                const float *b = B + t * ldb;
                for (int64_t j = 0; j < N; j++) c[j] += a[t] * b[j];
            }
        }
        return true;
    }
    return false;
}
