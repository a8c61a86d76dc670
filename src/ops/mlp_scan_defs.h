/* What mlp_scan's kernels share (mlp_scan_impl.h, mlp_scan_back_impl.h and
 * mlp_scan_rules_impl.h, built per dtype by mlp_scan.c for REF and by
 * backend/cpu/own_mlp_scan.c for the OWN f32 kernels): the attributes as
 * dimensions and flags, and the sizes of the kernels' scratch. The math is in
 * mlp_scan.c's top comment. Private to ops/. */
#ifndef MIRAS_MLP_SCAN_DEFS_H
#define MIRAS_MLP_SCAN_DEFS_H

#include <cblas.h>
#include <limits.h>

#include "internal.h"
#include "blas.h"
#include "scan_threads.h"

#define MS_IN 5
#define MS_GATES 4
#define MS_LN_EPS 1e-5
#define MS_INV_SQRT_2PI 0.39894228040143267794
#define MS_PRAGMA_(x) _Pragma(#x)
#define MS_PRAGMA(x) MS_PRAGMA_(x)

/* The math of the element type MS_T (float or double, set by the file that
 * builds the kernels): libm's f-suffixed functions and cblas's s-routines for
 * float. */
#define MS_MATH(fn) _Generic((MS_T)0, float: fn##f, default: fn)
#define MS_ERF MS_MATH(erf)
#define MS_EXP MS_MATH(exp)
#define MS_TANH MS_MATH(tanh)
#define MS_SQRT MS_MATH(sqrt)
#define MS_LOG MS_MATH(log)
#define MS_POW MS_MATH(pow)
#define MS_GEMV _Generic((MS_T)0, float: cblas_sgemv, default: cblas_dgemv)

/* e^x in kl's softmax rows and in gelu's derivatives (x ≤ 0 there): libm's
 * exp, or (the OWN f32 kernels define it first) own_math.h's polynomial,
 * which the compiler vectorises in place: a call into glibc's vector exp per
 * row of 32 cost more than its work, and gelu''s loop in the backward called
 * the scalar expf once per hidden unit. */
#ifndef MS_EXPV
#define MS_EXPV(x) MS_EXP(x)
#endif

typedef struct ms_dims {
    int64_t N, T, d, h, m, P; /* m = 2·d·h: one copy of (W1, W2) */
    bool momentum, yaad, lp, decay_first;
    double sharp, lp_p, lp_eps;
    mi_mlp_scan_read read;
    double rq, reps, kc; /* lq's q and ε, kl's c */
    int64_t chunk;       /* the mini-batch rule's b (1: per token) */
    bool lag;            /* a chunk's first token its own segment (Memora's lag token) */
} ms_dims;

static inline ms_dims ms_dims_of(mi_tensor *const *in, const mi_attrs *at)
{
    int64_t f = at->index;
    ms_dims k = {.N = in[0]->shape[0], .T = in[2]->shape[1], .d = in[2]->shape[2],
                 .P = in[0]->shape[1], .momentum = f & MI_MLP_SCAN_MOMENTUM,
                 .yaad = f & MI_MLP_SCAN_YAAD, .lp = f & MI_MLP_SCAN_LP,
                 .decay_first = f & MI_MLP_SCAN_DECAY_FIRST, .sharp = at->p, .lp_p = at->p,
                 .lp_eps = at->eps,
                 .read = (f & MI_MLP_SCAN_LQ)   ? MI_MLP_READ_LQ
                         : (f & MI_MLP_SCAN_KL) ? MI_MLP_READ_KL
                                                : MI_MLP_READ_STATE,
                 .rq = at->scalar, .reps = at->lo, .kc = at->scalar,
                 .chunk = at->window > 1 ? at->window : 1, .lag = f & MI_MLP_SCAN_LAG};
    k.m = k.momentum ? k.P / 2 : k.P;
    k.h = k.m / (2 * k.d);
    return k;
}

/* The mini-batch rule's segments (mlp_scan.c's top comment): runs of tokens
 * whose gradients are taken at the state before the run's first token. Per
 * token every token is one; with chunk b the chunks, and with a lag token the
 * chunk's first token alone, then the rest. */
static inline bool ms_seg_start(const ms_dims *k, int64_t t)
{
    int64_t j = t % k->chunk;
    return j == 0 || (k->lag && j == 1);
}
/* The first token of t's segment. */
static inline int64_t ms_seg_first(const ms_dims *k, int64_t t)
{
    int64_t c0 = t - t % k->chunk;
    return k->lag && t > c0 ? c0 + 1 : c0;
}
/* Whether t ends its segment (where kl's boundary applies). */
static inline bool ms_seg_end(const ms_dims *k, int64_t t)
{
    return t + 1 == k->T || ms_seg_start(k, t + 1);
}

/* K: the tokens between two checkpoints of the backward, ⌈√T⌉ rounded up
 * to a multiple of the chunk b (a segment of the mini-batch rule never
 * straddles two checkpoints); ⌈T/K⌉ checkpoints, the states before tokens
 * 0, K, 2K, …, of P elements each per sequence: what a recorded forward
 * keeps (attrs.data, mi_mlp_scan_packed) or the backward forms again. */
static inline int64_t ms_spacing(const ms_dims *k)
{
    return (scan_segment(k->T) + k->chunk - 1) / k->chunk * k->chunk;
}
static inline int64_t ms_checkpoints(const ms_dims *k)
{
    int64_t K = ms_spacing(k);
    return (k->T + K - 1) / K;
}

/* The elements of one act and of one thread's backward work vectors
 * (mlp_scan_impl.h's act, mlp_scan_back_impl.h's work). */
static inline int64_t ms_act_elems(const ms_dims *k) { return 5 * k->h + 4 * k->d + 2; }
/* One read of the weights, R(A): W [m], then for lq S = ‖A‖_F² + ε of W1
 * and of W2, then for kl the rows' scales f [d + h] (mlp_scan_rules_impl.h's
 * wread and kl_f). */
static inline int64_t ms_read_elems(const ms_dims *k)
{
    return k->m + 2 + (k->read == MI_MLP_READ_KL ? k->d + k->h : 0);
}
static inline int64_t ms_work_elems(const ms_dims *k)
{
    return 7 * k->d + 5 * k->h + (k->read ? 4 * ms_read_elems(k) : 0);
}

#endif
