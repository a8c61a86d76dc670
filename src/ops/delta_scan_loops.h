/* The loops delta_scan's kernels share (delta_scan_impl.h, included per
 * dtype by delta_scan.c for REF and by backend/cpu/own_delta_scan.c for the
 * OWN f32 kernel, which the same loops compiled with -O3 -ffast-math
 * -march=native): a gate's value, ρ of the rule, one step of the
 * recurrence. Private to ops/. */
#ifndef MIRAS_DELTA_SCAN_LOOPS_H
#define MIRAS_DELTA_SCAN_LOOPS_H

#include <string.h>

#include "internal.h"
#include "scan_threads.h"

/* The inner loops over dk are vectorised (OpenMP simd: the dot products'
 * sums are reassociated, within rounding of the sequential order). */
#define DS_PRAGMA(x) _Pragma(#x)
#define DS_SIMD(clauses) DS_PRAGMA(omp simd clauses)

/* A gate's value for row i of token nt: one per head (width 1) or one per
 * value row (width dv); ρ of the rule (without the write flag) from α; ω,
 * the write's scale, from β and the rule's MI_DELTA_RULE_UNIT_WRITE flag. */
#define DS_GATE(G, nt, w, i) ((G)[(nt) * (w) + ((w) > 1 ? (i) : 0)])
#define DS_RHO(T_, rule, alpha)                                                  \
    (((rule) & ~MI_DELTA_RULE_UNIT_WRITE) == MI_DELTA_RULE_DELTA         ? (T_)1   \
     : ((rule) & ~MI_DELTA_RULE_UNIT_WRITE) == MI_DELTA_RULE_DECAY_FIRST ? (alpha) \
                                                                         : (T_)0)
#define DS_OMEGA(T_, rule, beta) ((rule) & MI_DELTA_RULE_UNIT_WRITE ? (T_)1 : (beta))

/* One step S ← α S + u kᵀ, u = ω v − β ρ S k, from S_prev into S (they may
 * be the same buffer: each row reads only itself); p (dv) gets S_prev k. */
#define DS_STEP(T_, S, Sp, p, kt, vt, B, A, nt, bw, aw, rule, dv, dk)            \
    for (int64_t i = 0; i < (dv); i++) {                                         \
        const T_ *row = (Sp) + i * (dk);                                         \
        T_ acc = 0;                                                              \
        DS_SIMD(reduction(+ : acc))                                              \
        for (int64_t j = 0; j < (dk); j++) acc += row[j] * (kt)[j];              \
        (p)[i] = acc;                                                            \
        T_ beta = DS_GATE(B, nt, bw, i), alpha = DS_GATE(A, nt, aw, i);          \
        T_ u = DS_OMEGA(T_, rule, beta) * (vt)[i] - beta * DS_RHO(T_, rule, alpha) * acc; \
        T_ *dst = (S) + i * (dk);                                                \
        DS_SIMD()                                                                \
        for (int64_t j = 0; j < (dk); j++) dst[j] = alpha * row[j] + u * (kt)[j]; \
    }

/* The loops over dk, as written, run a vector loop's set-up and remainder
 * for every row of every token: at dk = 32 that cost more than the
 * arithmetic. The kernels call each sequence's loops through DS_DK, which
 * passes the common widths as constants (the loops then unroll) and any
 * other as it is. With the backward's sums over the rows kept in locals
 * (not loaded and stored row after row), OWN f32, 16 sequences of 512
 * tokens, dk = dv = 32, one thread on AMD EPYC Zen 4: forward 3.6 → 1.5 ms,
 * backward 10.7 → 5.0 ms; the BENCH gated DeltaNet layer (chunk 64, 2
 * threads) 11.2 → 8.0 ms. */
#define DS_INLINE static inline __attribute__((always_inline))
/* The widest key (dk) whose sums the backward keeps in locals. */
#define DS_DK_LOCAL 64
#define DS_DK(call_, dk_)                                                        \
    switch (dk_) {                                                               \
    case 16: call_(16); break;                                                   \
    case 32: call_(32); break;                                                   \
    case 64: call_(64); break;                                                   \
    default: call_(dk_); break;                                                  \
    }

/* The widths of β and α: 1 ([N, T]) or dv ([N, T, dv]). */
static inline int64_t gate_width(const mi_tensor *g) { return g->rank == 3 ? g->shape[2] : 1; }

#endif
