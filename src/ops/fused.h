/* Installed as miras/ops/fused.h, for op and component authors: included by
 * miras/extend.h, not by miras.h. The fused ops' own entry points under
 * their users' wrappers in ops/ops.h: the scans as the registered ops
 * compute them (inputs and results packed into single tensors) and their
 * vjps, the attribute flags of mlp_scan (mi_attrs, for mi_op_call on its
 * descriptor), and the fused backward ops that vjps and components with
 * closed-form gradients call. Each is a recorded op like any other. A user
 * of the models needs none of it: mi_delta_scan, mi_cms_scan and mi_mlp_scan
 * (ops/ops.h) are the API. */
#ifndef MIRAS_OPS_FUSED_H
#define MIRAS_OPS_FUSED_H

#include "ops/ops.h"

/* ---------------------------------------------------------------- delta_scan (ops.h) */
/* The op mi_delta_scan runs: y and S_T packed as [N, T·dv + dv·dk]. */
mi_tensor *mi_delta_scan_packed(mi_tensor *s0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                mi_tensor *beta, mi_tensor *alpha, mi_delta_rule rule);
/* Its vjp: g [N, T·dv + dv·dk] → the gradients of s0, q, k, v, beta, alpha
 * packed in that order, [N, dv·dk + 2·T·dk + T·dv + T·bw + T·aw] (bw, aw:
 * the widths of beta and alpha, 1 or dv). */
mi_tensor *mi_delta_scan_backward(mi_tensor *s0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                  mi_tensor *beta, mi_tensor *alpha, mi_tensor *g,
                                  mi_delta_rule rule);

/* ---------------------------------------------------------------- cms_scan (ops.h) */
/* mi_cms_scan's vjp: g [B, T, d] → the gradients of u, v, eta, w1, w2 flattened and
 * packed in that order, [2·B·T·d + B·T + 2·d·h]. */
mi_tensor *mi_cms_scan_backward(mi_tensor *u, mi_tensor *v, mi_tensor *eta, mi_tensor *w1,
                                mi_tensor *w2, mi_tensor *g, int64_t chunk, bool lms, double eps,
                                double hidden_eps);

/* ---------------------------------------------------------------- hope_scan
 * HOPE's component memories over a sequence (hope_scan.c; models/hope uses
 * it): x̂ [N, T, d], s2 [(n_r + 2)·h, d] the stacked input layers, w1r
 * [n_r, d, h] (k, v, q's output layers, n_r = 2 without q), w1g [2, H, h]
 * (η, α's), bias [2, H] → [N, T, n_r·d + 2H]: k, v, (q) ℓ2-normalised per
 * head, η, α; every chunk of `chunk` tokens read at the states its start had
 * and each but the last stepped by Eq. 28 (eq88: arXiv Eq. 88). */
mi_tensor *mi_hope_scan(mi_tensor *x, mi_tensor *s2, mi_tensor *w1r, mi_tensor *w1g,
                        mi_tensor *bias, int64_t chunk, bool eq88, bool lms, double eps,
                        double hidden_eps);
/* Its vjp: g [N, T, n_r·d + 2H] → the gradients of x, s2, w1r, w1g, bias
 * flattened and packed in that order. */
mi_tensor *mi_hope_scan_backward(mi_tensor *x, mi_tensor *s2, mi_tensor *w1r, mi_tensor *w1g,
                                 mi_tensor *bias, mi_tensor *g, int64_t chunk, bool eq88,
                                 bool lms, double eps, double hidden_eps);

/* ---------------------------------------------------------------- mlp_scan (ops.h)
 * Its flags (attrs, packed from mi_mlp_scan_rule). */
enum {
    MI_MLP_SCAN_MOMENTUM = 1, MI_MLP_SCAN_YAAD = 2, MI_MLP_SCAN_DECAY_FIRST = 4,
    MI_MLP_SCAN_LP = 8, MI_MLP_SCAN_LQ = 16, MI_MLP_SCAN_KL = 32, MI_MLP_SCAN_LAG = 64
};
/* The op mi_mlp_scan runs: state0 packed [N, P] (W1, W2 (, S1, S2) flattened, P =
 * 2·d·h, ×2 with momentum) → y and the final state packed [N, T·d + P]. */
mi_tensor *mi_mlp_scan_packed(mi_tensor *state0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                              mi_tensor *gates, const mi_mlp_scan_rule *rule);
/* Its vjp: g [N, T·d + P] → the gradients of state0, q, k, v, gates packed in
 * that order, [N, P + 3·T·d + 4·T]. */
mi_tensor *mi_mlp_scan_backward(mi_tensor *state0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                mi_tensor *gates, mi_tensor *g, const mi_mlp_scan_rule *rule);

/* ---------------------------------------------------------------- conv1d_causal (ops.h) */
/* mi_conv1d_causal's weight gradient: dw[c,j] = Σ_{b,t} g[b,t,c]·x[b, t−K+1+j, c]. */
mi_tensor *mi_conv1d_causal_wgrad(mi_tensor *g, mi_tensor *x, int64_t k);

/* ---------------------------------------------------------------- grad ops
 * Fused backward ops: the vjps of gelu, silu, swiglu, tanh, sigmoid,
 * softmax, layer_norm and rms_norm call these (each is itself differentiable). g is the gradient
 * of the forward output and has x's (or y's) shape. */
mi_tensor *mi_gelu_backward(mi_tensor *x, mi_tensor *g);    /* g·(Φ(x) + x·φ(x)) */
mi_tensor *mi_silu_backward(mi_tensor *x, mi_tensor *g);    /* g·σ(x)·(1 + x·(1 − σ(x))) */
/* g·b·silu'(a): swiglu(a, b)'s gradient at a */
mi_tensor *mi_swiglu_backward(mi_tensor *a, mi_tensor *b, mi_tensor *g);
mi_tensor *mi_tanh_backward(mi_tensor *y, mi_tensor *g);    /* g·(1 − y²), y = tanh x */
mi_tensor *mi_sigmoid_backward(mi_tensor *y, mi_tensor *g); /* g·y·(1 − y), y = σ(x) */
/* y = softmax(x, axis): y ⊙ (g − Σ_axis g ⊙ y). */
mi_tensor *mi_softmax_backward(mi_tensor *y, mi_tensor *g, int axis);
/* The gradient of layer_norm(x, eps) at x: r·(g − mean(g) − y·mean(g ⊙ y)). */
mi_tensor *mi_layer_norm_backward(mi_tensor *x, mi_tensor *g, double eps);
/* The gradient of rms_norm(x, eps) at x: r·(g − y·mean(g ⊙ y)). */
mi_tensor *mi_rms_norm_backward(mi_tensor *x, mi_tensor *g, double eps);

#endif
