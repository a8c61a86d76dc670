/* delta_scan's OWN f32 kernels: delta_scan_impl.h's loops (the math is in
 * delta_scan.c's top comment), compiled like the other OWN files with -O3
 * -ffast-math -march=native, so the loops over dk run in AVX-512 with fused
 * multiply-adds; REF builds the same loops for the baseline ISA. */
#include "delta_scan_loops.h"
#include "own_delta_scan.h"

#define DS_KERNEL
#define DS_T float
#define DS_NAME(x) own_##x##_f32
#include "delta_scan_impl.h"
