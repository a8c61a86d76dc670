/* hope_scan's sizes and buffers (hope_scan.c has the math), shared by its
 * REF kernels there and its OWN kernel (backend/cpu/own_hope_scan.c).
 * Private to ops/. */
#ifndef MIRAS_HOPE_SCAN_DEFS_H
#define MIRAS_HOPE_SCAN_DEFS_H

#include <cblas.h>
#include <limits.h>
#include <math.h>

#include "blas.h"
#include "scan_threads.h"

#define HS_IN 5
#define HS_PRAGMA_(x) _Pragma(#x)
#define HS_PRAGMA(x) HS_PRAGMA_(x)

typedef struct hs_dims {
    int64_t N, T, d, H, hd, hc, nr, nc, P, C, D;
    int64_t ss;       /* a row's states: P·d + n_r·d·h + 2·H·h */
    int64_t n_chunks;
    bool eq88, lms;
    double eps, heps;
} hs_dims;

static inline hs_dims hs_dims_of(mi_tensor *const *in, const mi_attrs *at)
{
    hs_dims k = {.N = in[0]->shape[0], .T = in[0]->shape[1], .d = in[0]->shape[2],
                 .H = in[3]->shape[1], .hc = in[2]->shape[2], .nr = in[2]->shape[0],
                 .C = at->index, .eq88 = at->axis == 1, .lms = at->keepdim, .eps = at->eps,
                 .heps = at->p};
    k.hd = k.d / k.H, k.nc = k.nr + 2, k.P = k.nc * k.hc, k.D = k.nr * k.d + 2 * k.H;
    k.ss = k.P * k.d + k.nr * k.d * k.hc + 2 * k.H * k.hc;
    k.n_chunks = (k.T + k.C - 1) / k.C;
    return k;
}

/* Layer L (0: S2, 1 + c: component c's W1): its rows, columns and offset in
 * a row's states; component c's first column in [·, D] rows (y, e, …). */
static inline int64_t hs_out(const hs_dims *k, int L)
{
    return L == 0 ? k->P : L - 1 < k->nr ? k->d : k->H;
}
static inline int64_t hs_in(const hs_dims *k, int L) { return L == 0 ? k->d : k->hc; }
static inline int64_t hs_col(const hs_dims *k, int64_t c)
{
    return c < k->nr ? c * k->d : k->nr * k->d + (c - k->nr) * k->H;
}
static inline int64_t hs_off(const hs_dims *k, int L)
{
    int64_t c = L - 1, o = k->P * k->d;
    if (L == 0) return 0;
    return c < k->nr ? o + c * k->d * k->hc : o + k->nr * k->d * k->hc + (c - k->nr) * k->H * k->hc;
}

/* A chunk's buffers, for at most C tokens, [rows, columns]: what the
 * forward keeps for the backward (the reads', R1–R3, and the step's, S1–S5
 * and U), and one thread's scratch (the backward's gradients). û and the W1
 * layers' [C, ·] arrays hold the components side by side (h or hs_col's
 * columns each). */
#define HS_KEPT(X)                                                                              \
    X(H0, C * P) X(GP0, C * P)                /* gelu(X S2ᵀ), gelu' */                          \
    X(R, C * nr * d) X(rh, C * nr * H)        /* R2's reads and their per-head 1/norms */       \
    X(Y, C * D) X(KV, 2 * C * d)              /* the outputs, [k̄; v̄] */                         \
    X(A1, 2 * C * P) X(H1, 2 * C * P) X(GP1, 2 * C * P)                                         \
    X(M, 2 * C * D) X(E, C * D)               /* the W1 reads at [k̄; v̄], e */                  \
    X(back, C * P) X(Dl, C * P)               /* W1ᵀ e, δ */                                    \
    X(U0, C * d) X(UW, C * P)                 /* û of S2, of the W1s */                         \
    X(G0, C * P) X(GW, C * D)                 /* g */                                           \
    X(WU0, C * P) X(WUW, C * D) X(P0, C * P) X(PW, C * D) /* F û, p */                          \
    X(r, nl * C) X(Q, nl * C * C) X(dec, (C + 1) * (C + 1))                                     \
    X(eta, C) X(alpha, C) X(beta, C)
#define HS_TEMP(X)                                                                              \
    X(A0, C * P) X(dY, C * D) X(dZ, C * D) X(dH0, C * P)                                        \
    X(dKV, 2 * C * d) X(dH1, 2 * C * P) X(dA1, 2 * C * P) X(dM, 2 * C * D)                      \
    X(dE, C * D) X(dback, C * P) X(dDl, C * P)                                                  \
    X(dU0, C * d) X(dUW, C * P) X(dG0, C * P) X(dGW, C * D) X(dWU0, C * P) X(dWUW, C * D)       \
    X(dP, C * P) X(tmp, C * P) X(dQ, C * C) X(ddec, (C + 1) * (C + 1))                          \
    X(deta, C) X(dalpha, C) X(dbeta, C)

#define HS_COUNT(f, n) +(n)
#define HS_SIZES(k)                                                                             \
    int64_t C = (k)->C, P = (k)->P, D = (k)->D, d = (k)->d, nr = (k)->nr, H = (k)->H,            \
            nl = 1 + (k)->nc;                                                                   \
    (void)C, (void)P, (void)D, (void)d, (void)nr, (void)H, (void)nl
static inline int64_t hs_kept_elems(const hs_dims *k)
{
    HS_SIZES(k);
    return 0 HS_KEPT(HS_COUNT);
}
static inline int64_t hs_temp_elems(const hs_dims *k)
{
    HS_SIZES(k);
    return 0 HS_TEMP(HS_COUNT);
}

/* What a recorded forward keeps per row: the states of chunks 1 … n − 1,
 * then every chunk's kept buffers. */
static inline int64_t hs_saved_elems(const hs_dims *k)
{
    return (k->n_chunks - 1) * k->ss + k->n_chunks * hs_kept_elems(k);
}

/* The OWN f32 kernels (own_hope_scan.c). */
void hope_scan_own_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void hope_scan_backward_own_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

#endif
