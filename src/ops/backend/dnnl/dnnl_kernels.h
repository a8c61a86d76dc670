/* oneDNN 2.6 kernels (MI_BACKEND_DNNL, f32 only) for the eltwise ops of
 * unary.c, softmax / log-softmax / layer norm of nn.c, the causal depthwise
 * conv1d of sequence.c, and the fused backward ops. Private to ops/;
 * defined in dnnl_kernels.c. Each falls back to the op's REF kernel when
 * oneDNN refuses a case, so the output is always written. */
#ifndef MIRAS_DNNL_KERNELS_H
#define MIRAS_DNNL_KERNELS_H

#include "internal.h"

#define DNNL_KERNEL_DECL(name) \
    void name##_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

/* eltwise forward */
DNNL_KERNEL_DECL(neg) DNNL_KERNEL_DECL(abs) DNNL_KERNEL_DECL(sqrt) DNNL_KERNEL_DECL(square)
DNNL_KERNEL_DECL(tanh) DNNL_KERNEL_DECL(sigmoid) DNNL_KERNEL_DECL(silu)
DNNL_KERNEL_DECL(gelu) DNNL_KERNEL_DECL(relu) DNNL_KERNEL_DECL(add_scalar)
DNNL_KERNEL_DECL(mul_scalar)
/* eltwise backward */
DNNL_KERNEL_DECL(gelu_backward) DNNL_KERNEL_DECL(silu_backward)
/* rows */
DNNL_KERNEL_DECL(softmax) DNNL_KERNEL_DECL(log_softmax) DNNL_KERNEL_DECL(softmax_backward)
DNNL_KERNEL_DECL(layer_norm) DNNL_KERNEL_DECL(layer_norm_backward)
/* convolution */
DNNL_KERNEL_DECL(conv1d_causal)
#undef DNNL_KERNEL_DECL

#endif
