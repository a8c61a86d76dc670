/* Small f32 products for cms_scan's OWN kernel (cms_scan.c): a chunk of a
 * few tokens against a weight matrix, C = alpha · op(A) op(B) + beta · C
 * (row-major) with few rows (M, the chunk's tokens) or a small inner
 * dimension (K: the chunk's rank-K step W −= Pᵀ S). OpenBLAS 0.3.21 packs
 * both operands on every sgemm call; at M = 4 the packing took as long as
 * the product (perf on one CMS level, d 128, h 512, C = 4: 33 % in
 * sgemm_incopy/itcopy, 37 % in the kernel). Here the big operand is read
 * once, straight from memory, W columns of C at a time in registers (GCC's
 * vector extension, -O3 -march=<cpu> -ffast-math: sums reassociated, a few
 * ulp from a sequential sum).
 * One thread (cms_scan runs a sequence a thread). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define OWN_VECTORS
#include "blas.h"
#include "own_kernels.h"
#include "own_unary.h"

/* Rows or inner dimension at most this: the chunk sizes that OpenBLAS's
 * packing dominates (C = 16 stays with sgemm). */
#define SMALL OWN_SMALL_GEMM_MAX
/* Floats in a vector: 16 with AVX-512, 8 with AVX2 (own_kernels.h). The
 * tiles below hold 8 accumulators: 8 of the 32 zmm, or 8 of the 16 ymm. */
#define W OWN_W

typedef vecf vec;
#define vload vld
#define vstore vst

/* C[m, j] = beta C[m, j] + alpha Σ_k A[m, k] B[k, j] for m < M, columns
 * [j0, j0 + P·W): M·P accumulators, independent FMA chains, in registers (M
 * and P constants after inlining). */
static inline __attribute__((always_inline)) void nn_panel(int64_t M, int64_t P, int64_t K,
                                                           int64_t j0, float alpha,
                                                           const float *A, int64_t lda,
                                                           const float *B, int64_t ldb,
                                                           float beta, float *C, int64_t ldc)
{
    vec acc[SMALL][SMALL];
    for (int64_t m = 0; m < M; m++)
        for (int64_t p = 0; p < P; p++) acc[m][p] = (vec){0};
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb + j0;
        for (int64_t p = 0; p < P; p++) {
            vec bv = vload(b + p * W);
            for (int64_t m = 0; m < M; m++) acc[m][p] += A[m * lda + k] * bv;
        }
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t p = 0; p < P; p++) {
            float *c = C + m * ldc + j0 + p * W;
            vstore(c, beta == 0.0f ? alpha * acc[m][p] : beta * vload(c) + alpha * acc[m][p]);
        }
}

/* Panels of 8/M vectors for M = 1, 2, 4, 8 (eight chains), one vector else. */
#define NN_PANEL(M_, P_) nn_panel(M_, P_, K, j, alpha, A, lda, B, ldb, beta, C, ldc)
static void nn_rows(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    int64_t P = (M == 1 || M == 2 || M == 4 || M == 8) ? 8 / M : 1, j = 0;
    for (; j + P * W <= N; j += P * W) {
        switch (M) {
        case 1: NN_PANEL(1, 8); break;
        case 2: NN_PANEL(2, 4); break;
        case 4: NN_PANEL(4, 2); break;
        case 8: NN_PANEL(8, 1); break;
        default: NN_PANEL(M, 1); break;
        }
    }
    for (; j + W <= N; j += W) NN_PANEL(M, 1);
    for (; j < N; j++)
        for (int64_t m = 0; m < M; m++) {
            float s = 0, *c = C + m * ldc + j;
            for (int64_t k = 0; k < K; k++) s += A[m * lda + k] * B[k * ldb + j];
            *c = (beta == 0.0f ? 0.0f : beta * *c) + alpha * s;
        }
}
#undef NN_PANEL

/* C[m, j0 + r] = beta C + alpha ⟨A[m, :], B[j0 + r, :]⟩ for m < M, r < R: M·R
 * dot products at once (independent chains), each row of B read once. With
 * part, the products' vectors of lane sums go to part[m][r] (added up by
 * own_lane_sums, W columns at a time); without, each is summed here. */
static inline __attribute__((always_inline)) void nt_rows(int64_t M, int64_t R, int64_t K,
                                                          int64_t j0, float alpha,
                                                          const float *A, int64_t lda,
                                                          const float *B, int64_t ldb,
                                                          float beta, float *C, int64_t ldc,
                                                          vec (*part)[W])
{
    vec acc[SMALL][SMALL];
    for (int64_t m = 0; m < M; m++)
        for (int64_t r = 0; r < R; r++) acc[m][r] = (vec){0};
    int64_t k = 0;
    for (; k + W <= K; k += W)
        for (int64_t r = 0; r < R; r++) {
            vec bv = vload(B + (j0 + r) * ldb + k);
            for (int64_t m = 0; m < M; m++) acc[m][r] += vload(A + m * lda + k) * bv;
        }
    for (; k < K; k++) /* the remainder in lane 0 */
        for (int64_t r = 0; r < R; r++)
            for (int64_t m = 0; m < M; m++) acc[m][r][0] += A[m * lda + k] * B[(j0 + r) * ldb + k];
    for (int64_t m = 0; m < M; m++)
        for (int64_t r = 0; r < R; r++) {
            if (part) {
                part[m][r] = acc[m][r];
                continue;
            }
            float sum = 0;
            for (int l = 0; l < W; l++) sum += acc[m][r][l];
            float *c = C + m * ldc + j0 + r;
            *c = (beta == 0.0f ? 0.0f : beta * *c) + alpha * sum;
        }
}

#define NT_ROWS(M_, R_, part_) nt_rows(M_, R_, K, j, alpha, A, lda, B, ldb, beta, C, ldc, part_)
static void nt_all(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    int64_t R = (M == 1 || M == 2 || M == 4 || M == 8) ? 8 / M : 1, j = 0;
    vec part[SMALL][W];
    /* W columns of C at a time: their products' lane vectors, then their sums */
    for (int64_t j1 = W; j1 <= N; j1 += W) {
        for (; j + R <= j1; j += R) {
            vec(*p)[W] = (vec(*)[W])((vec *)part + (j - (j1 - W)));
            switch (M) {
            case 1: NT_ROWS(1, 8, p); break;
            case 2: NT_ROWS(2, 4, p); break;
            case 4: NT_ROWS(4, 2, p); break;
            case 8: NT_ROWS(8, 1, p); break;
            default: NT_ROWS(M, 1, p); break;
            }
        }
        for (int64_t m = 0; m < M; m++) {
            float *c = C + m * ldc + j1 - W;
            vec sum = alpha * own_lane_sums(part[m]);
            vstore(c, beta == 0.0f ? sum : beta * vload(c) + sum);
        }
    }
    for (; j < N; j++) NT_ROWS(M, 1, NULL);
}
#undef NT_ROWS

bool own_small_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *restrict A, int64_t lda, const float *restrict B,
                        int64_t ldb, float beta, float *restrict C, int64_t ldc)
{
    if (!ta && !tb && M <= SMALL) {
        /* C[m, :] = beta C[m, :] + alpha Σ_k A[m, k] B[k, :]: W columns at a time, B once */
        nn_rows(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return true;
    }
    if (ta && !tb && K <= SMALL) {
        /* a rank-K update, C[i, :] = beta C[i, :] + alpha Σ_t A[t, i] B[t, :]: row by
         * row of C, once each (B's K rows stay in cache) */
        for (int64_t i = 0; i < M; i++) {
            float a[SMALL], *c = C + i * ldc;
            for (int64_t t = 0; t < K; t++) a[t] = alpha * A[t * lda + i];
            int64_t j = 0;
            for (; j + W <= N; j += W) {
                vec acc = beta == 0.0f ? (vec){0} : beta * vload(c + j);
                for (int64_t t = 0; t < K; t++) acc += a[t] * vload(B + t * ldb + j);
                vstore(c + j, acc);
            }
            for (; j < N; j++) {
                float acc = beta == 0.0f ? 0.0f : beta * c[j];
                for (int64_t t = 0; t < K; t++) acc += a[t] * B[t * ldb + j];
                c[j] = acc;
            }
        }
        return true;
    }
    if (!ta && tb && M <= SMALL) {
        /* C[m, j] = Σ_k A[m, k] B[j, k]: each row of B (a column of op(B)) once */
        nt_all(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return true;
    }
    return false;
}

/* The products with one column (N = 1: a matrix times a vector) or a
 * rank-one product (K = 1: an outer product) for matmul's OWN kernel: the
 * per-token products of a memory's MLP and their vjps, where each call
 * reads or writes a weight-sized block once (linalg.c's matmul_select has
 * the timings); false for any other shape. */
static bool vector_gemm_f32(bool ta, int64_t M, int64_t N, int64_t K, float alpha,
                            const float *restrict A, int64_t lda, const float *restrict B,
                            float beta, float *restrict C, int64_t ldc)
{
    if (N == 1 && ta) {
        /* a matrix-vector product, Cᵀ = bᵀ A with b = op(B) (K × 1, contiguous
         * either way): the rows of A added up, scaled, W outputs at a time */
        nn_rows(1, M, K, alpha, B, K, A, lda, beta, C, M);
        return true;
    }
    if (N == 1) {
        /* C[m] = ⟨A[m, :], b⟩, each row of A once (a vector sum per row) */
        for (int64_t m = 0; m < M; m++) {
            const float *a = A + m * lda;
            float acc = 0;
            for (int64_t k = 0; k < K; k++) acc += a[k] * B[k];
            C[m * ldc] = (beta == 0.0f ? 0.0f : beta * C[m * ldc]) + alpha * acc;
        }
        return true;
    }
    if (K == 1) {
        /* an outer product, C[m, :] = alpha a[m] b + beta C[m, :] (a, b contiguous
         * either way) */
        for (int64_t m = 0; m < M; m++) {
            float am = alpha * A[m], *c = C + m * ldc;
            for (int64_t j = 0; j < N; j++) c[j] = (beta == 0.0f ? 0.0f : beta * c[j]) + am * B[j];
        }
        return true;
    }
    return false;
}

/* ---------------------------------------------------------------- matmul
 * matmul's OWN f32 kernel for the batched tiny products of chunked memory
 * updates (titans at chunk 8: 64 × 8×16·16×64, 64 × 8×64·64×16, …): one
 * own_small_gemm_f32 per batch entry, entries split across threads (each
 * output written by one thread: the same bits at any thread count).
 * linalg.c's matmul_select says which geometries it gets, with timings. */
bool own_matmul_fits(const gemm_geom *g)
{
    return g->alpha == 1 && g->beta == 0 &&
           ((!g->ta && g->M <= SMALL) || (g->ta && !g->tb && g->K <= SMALL) || g->N == 1 ||
            g->K == 1);
}

typedef struct {
    const gemm_geom *g;
    const float *A, *B;
    float *C;
    float beta; /* 0: C = product; 1: C += product */
} mm_ctx;

static void mm_range(const void *v, int64_t q0, int64_t q1)
{
    const mm_ctx *k = v;
    const gemm_geom *g = k->g;
    int64_t lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    for (int64_t q = q0; q < q1; q++) {
        const float *A = k->A + gemm_batch_offset(g, g->sa, q),
                    *B = k->B + gemm_batch_offset(g, g->sb, q);
        float *C = k->C + q * g->M * g->N;
        if (!own_small_gemm_f32(g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, k->beta,
                                C, g->N))
            vector_gemm_f32(g->ta, g->M, g->N, g->K, 1.0f, A, lda, B, k->beta, C, g->N);
    }
}

void own_matmul_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    gemm_geom g;
    gemm_geom_matmul(&g, o, in, a);
    if (!own_matmul_fits(&g)) {
        own_ref(&mi_op_matmul, o, in, a);
        return;
    }
    mm_ctx k = {&g, in[0]->data, in[1]->data, o->data, 0.0f};
    /* work: multiply-adds / 4, an FMA in registers against an add streamed
     * from memory (OWN_PAR_MIN's unit) */
    own_parallel(g.nbatch, g.nbatch * g.M * g.N * g.K / 4, OWN_PAR_MIN, 1, mm_range, &k);
}

bool own_matmul_into_f32(mi_tensor *acc, mi_tensor *const *in, const mi_attrs *a)
{
    gemm_geom g;
    gemm_geom_matmul(&g, acc, in, a);
    if (!own_matmul_fits(&g)) return false;
    mm_ctx k = {&g, in[0]->data, in[1]->data, acc->data, 1.0f};
    own_parallel(g.nbatch, g.nbatch * g.M * g.N * g.K / 4, OWN_PAR_MIN, 1, mm_range, &k);
    return true;
}

/* outer's OWN f32 kernel: the batch of rank-one products as matmul's K = 1
 * (vector_gemm_f32), entries split across threads like matmul's. */
void own_outer_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)a;
    gemm_geom g;
    gemm_geom_outer(&g, o, in);
    mm_ctx k = {&g, in[0]->data, in[1]->data, o->data, 0.0f};
    own_parallel(g.nbatch, g.nbatch * g.M * g.N / 4, OWN_PAR_MIN, 1, mm_range, &k);
}
