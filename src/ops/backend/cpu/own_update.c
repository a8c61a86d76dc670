/* update.c's OWN f32 loops: update_impl.h built like the other OWN files
 * with -O3 -ffast-math -march=<cpu>, so the rows run in vector registers
 * with fused multiply-adds (the row sums reassociated: a few ulp from REF). */
#include "update_geom.h"

#define UP_KERNEL
#define UP_T float
#define UP_NAME(x) own_##x##_f32
#include "update_impl.h"
