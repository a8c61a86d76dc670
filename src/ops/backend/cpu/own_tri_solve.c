/* tri_solve's OWN f32 kernel (linalg.c has the op and its math): the unit
 * lower-triangular solve X = (I + StrictLower(l))⁻¹ B, or with trans_a the
 * upper one, that the delta rule's chunk form takes per chunk (the UT
 * transform's [n, n] with n the chunk's tokens, B the pseudo-values [n, m]).
 * REF walks one batch entry after another on one thread, a row of X at a
 * time with a pass over it per earlier row; here the entries are split over
 * the threads (each written by one: the same bits at any thread count) and
 * each row of X is formed OWN_W · P columns at a time in registers,
 *   X_i = B_i − Σ_{j<i} l_ij X_j    (trans_a: X_i = B_i − Σ_{j>i} l_ji X_j),
 * its terms added in REF's order (fast math may fuse them into FMAs). */
#include <stdint.h>
#include <string.h>

#define OWN_VECTORS
#include "own_kernels.h"
#include "own_unary.h"

typedef struct ts_ctx {
    const float *l, *b;
    float *x;
    int64_t n, m;
    bool trans;
    int nb;                       /* batch dims */
    const int64_t *shape;         /* the output's */
    int64_t sl[MI_MAX_RANK], sb[MI_MAX_RANK];
} ts_ctx;

/* Columns [c0, c0 + P·OWN_W) of row i. */
static inline __attribute__((always_inline)) void ts_cols(int P, const ts_ctx *k, const float *L,
                                                          const float *B, float *X, int64_t i,
                                                          int64_t c0)
{
    int64_t n = k->n, m = k->m, j0 = k->trans ? i + 1 : 0, j1 = k->trans ? n : i;
    vecf acc[4];
    for (int p = 0; p < P; p++) acc[p] = vld(B + i * m + c0 + p * OWN_W);
    for (int64_t j = j0; j < j1; j++) {
        float lij = k->trans ? L[j * n + i] : L[i * n + j];
        for (int p = 0; p < P; p++) acc[p] -= lij * vld(X + j * m + c0 + p * OWN_W);
    }
    for (int p = 0; p < P; p++) vst(X + i * m + c0 + p * OWN_W, acc[p]);
}

static void ts_range(const void *v, int64_t q0, int64_t q1)
{
    const ts_ctx *k = v;
    int64_t n = k->n, m = k->m;
    for (int64_t q = q0; q < q1; q++) {
        const float *L = k->l + batch_offset(k->nb, k->shape, k->sl, q);
        const float *B = k->b + batch_offset(k->nb, k->shape, k->sb, q);
        float *X = k->x + q * n * m;
        for (int64_t s = 0; s < n; s++) {
            int64_t i = k->trans ? n - 1 - s : s, c = 0;
            for (; c + 4 * OWN_W <= m; c += 4 * OWN_W) ts_cols(4, k, L, B, X, i, c);
            for (; c + OWN_W <= m; c += OWN_W) ts_cols(1, k, L, B, X, i, c);
            for (; c < m; c++) {
                float x = B[i * m + c];
                for (int64_t j = k->trans ? i + 1 : 0; j < (k->trans ? n : i); j++)
                    x -= (k->trans ? L[j * n + i] : L[i * n + j]) * X[j * m + c];
                X[i * m + c] = x;
            }
        }
    }
}

void own_tri_solve_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    ts_ctx k = {.l = in[0]->data, .b = in[1]->data, .x = o->data, .trans = a->trans_a,
                .nb = o->rank - 2, .shape = o->shape};
    k.n = o->shape[k.nb];
    k.m = o->shape[k.nb + 1];
    batch_strides(in[0], 2, k.nb, k.n * k.n, k.sl);
    batch_strides(in[1], 2, k.nb, k.n * k.m, k.sb);
    int64_t nbatch = mi_shape_numel(k.nb, o->shape);
    /* work: the multiply-adds, n(n − 1)/2 per column */
    own_parallel(nbatch, nbatch * k.n * (k.n - 1) / 2 * k.m, OWN_PAR_MIN, 1, ts_range, &k);
}
