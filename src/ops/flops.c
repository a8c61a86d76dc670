/* The tally of matrix-product floating-point operations (mi_flops): op_run
 * adds each successful call's count from its descriptor's flops rule, once
 * per call whichever backend ran it. Atomic, as ops run on any thread. */
#include "internal.h"

static uint64_t tally;

void op_flops_add(uint64_t n)
{
    if (n) __atomic_add_fetch(&tally, n, __ATOMIC_RELAXED);
}

uint64_t mi_flops(void) { return __atomic_load_n(&tally, __ATOMIC_RELAXED); }
