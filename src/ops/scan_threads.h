/* The fused per-sequence scans (delta_scan, mlp_scan, cms_scan): each
 * sequence runs on one thread, so a result does not depend on the thread
 * count, and a backward recomputes its states from √n-spaced checkpoints.
 * Private to ops/. */
#ifndef MIRAS_SCAN_THREADS_H
#define MIRAS_SCAN_THREADS_H

#include <stdint.h>

#include "autograd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Threads for a call: the sequences in parallel (one each) once the call
 * has ~64k multiply-adds (times mi_parallel_cost); none inside another
 * parallel region. */
static inline int scan_threads(int64_t n_seq, int64_t work)
{
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel() && work >= (1 << 16) * mi_parallel_cost(NULL))
        nt = omp_get_max_threads();
#endif
    return nt > n_seq ? (int)(n_seq > 0 ? n_seq : 1) : nt;
}

/* This thread's index in the scan's parallel region (its scratch slot). */
static inline int scan_thread(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* K = ⌈√n⌉: the steps between two checkpoints of a backward over n steps. */
static inline int64_t scan_segment(int64_t n)
{
    int64_t k = 1;
    while (k * k < n) k++;
    return k;
}

#endif
