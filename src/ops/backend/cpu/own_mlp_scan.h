/* The project's own mlp_scan kernels (MI_BACKEND_OWN, f32); defined in
 * own_mlp_scan.c. Private to ops/. */
#ifndef MIRAS_OWN_MLP_SCAN_H
#define MIRAS_OWN_MLP_SCAN_H

#include "internal.h"

void own_mlp_scan_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void own_mlp_scan_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

/* The REF f32 kernels (mlp_scan.c), which the OWN ones run for Yaad's bias. */
void mlp_scan_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void mlp_scan_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

#endif
