/* hope_scan's OWN f32 kernels: hope_scan_impl.h's loops compiled like the
 * other OWN files (-O3 -ffast-math -march=<cpu>), so the state-sized dot
 * products and the substitution's rows run in vectors (as REF, in SSE
 * scalars, they took as long as the products), the products on oneDNN's
 * sgemm on the calling thread (gemm_thread_f32) and gelu in own_unary.c's
 * vectorised form (within a few ulp). */
#include <math.h>
#include <string.h>

#include "hope_scan_defs.h"
#include "own_unary.h"

#define HS_KERNEL
#define HS_T float
#define HS(x) x##_own_f32
#define HS_GEMM gemm_thread_f32
#define HS_GELU_PAIR own_gelu_pair_f32
#define HS_GELU_SECOND own_gelu_second_f32
#define HS_SQRT sqrtf
#define HS_EXP expf
#include "hope_scan_impl.h"
