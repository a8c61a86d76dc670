/* The project's own delta_scan kernels (MI_BACKEND_OWN, f32); defined in
 * own_delta_scan.c. Private to ops/. */
#ifndef MIRAS_OWN_DELTA_SCAN_H
#define MIRAS_OWN_DELTA_SCAN_H

#include "internal.h"

void own_delta_scan_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void own_delta_scan_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

#endif
