/* The project's own kernels (MI_BACKEND_OWN, f32) for the sequence ops rope,
 * attention and conv1d_causal_wgrad; defined in own_sequence.c. Private to
 * ops/. */
#ifndef MIRAS_OWN_SEQUENCE_H
#define MIRAS_OWN_SEQUENCE_H

#include "internal.h"

void own_rope_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
void own_attention_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
/* attention's three gradients from q [..., T, D], k [..., S, D], v
 * [..., S, Dv], attrs as the op's and the cotangent g [..., T, Dv], into dq,
 * dk, dv shaped as q, k, v, over the keys each block of query rows reads (P
 * recomputed a block at a time); -1 with a message when its scratch cannot
 * be had. */
int own_attention_grads_f32(const mi_tensor *q, const mi_tensor *k,
                            const mi_tensor *v, const mi_tensor *g, const mi_attrs *a,
                            mi_tensor *dq, mi_tensor *dk, mi_tensor *dv);
void own_conv1d_causal_wgrad_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

#endif
