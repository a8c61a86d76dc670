/* The project's own vectorised kernels (MI_BACKEND_OWN, f32) for the unary
 * ops of unary.c, the row ops of nn.c (softmax, log-softmax, the three
 * normalisations) and the fused backward ops. Private to ops/; defined in
 * own_unary.c (built with -O3 -ffast-math -march=native, see the accuracy
 * and exactness notes at its top). */
#ifndef MIRAS_OWN_UNARY_H
#define MIRAS_OWN_UNARY_H

#include "internal.h"

#define OWN_UNARY_DECL(name) \
    void own_##name##_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

/* Same bits as REF (IEEE section: no fast math, no contraction). */
OWN_UNARY_DECL(neg) OWN_UNARY_DECL(abs) OWN_UNARY_DECL(sign) OWN_UNARY_DECL(sqrt)
OWN_UNARY_DECL(rsqrt) OWN_UNARY_DECL(square) OWN_UNARY_DECL(reciprocal) OWN_UNARY_DECL(relu)
OWN_UNARY_DECL(clamp) OWN_UNARY_DECL(add_scalar) OWN_UNARY_DECL(mul_scalar)
OWN_UNARY_DECL(tanh_backward) OWN_UNARY_DECL(sigmoid_backward)

/* Within a few ulp of REF (own polynomials or glibc's vector libm). */
OWN_UNARY_DECL(exp) OWN_UNARY_DECL(log) OWN_UNARY_DECL(pow_scalar) OWN_UNARY_DECL(tanh)
OWN_UNARY_DECL(sigmoid) OWN_UNARY_DECL(silu) OWN_UNARY_DECL(gelu) OWN_UNARY_DECL(erf)
OWN_UNARY_DECL(softplus) OWN_UNARY_DECL(log_sigmoid)
OWN_UNARY_DECL(gelu_backward) OWN_UNARY_DECL(silu_backward) OWN_UNARY_DECL(swiglu)
OWN_UNARY_DECL(swiglu_backward)

/* Row ops: reassociated sums (a few ulp from REF). */
OWN_UNARY_DECL(softmax) OWN_UNARY_DECL(log_softmax) OWN_UNARY_DECL(softmax_backward)
OWN_UNARY_DECL(cross_entropy)
OWN_UNARY_DECL(layer_norm) OWN_UNARY_DECL(rms_norm) OWN_UNARY_DECL(l2_normalize)
OWN_UNARY_DECL(layer_norm_backward) OWN_UNARY_DECL(rms_norm_backward) OWN_UNARY_DECL(rms_norm_gain)
#undef OWN_UNARY_DECL

/* rms_norm_gain's two gradients in one pass (nn.c's vjp, not recorded): dx
 * as x (added into dx with add), dw [D] as w; -1 with a message when its
 * scratch cannot be had. */
int own_rms_norm_gain_grads_f32(const mi_tensor *x, const mi_tensor *w, const mi_tensor *g,
                                double eps, mi_tensor *dx, bool add, mi_tensor *dw);
/* cross_entropy's gradient with respect to the logits x [N, C] (nn.c's vjp, not
 * recorded): c·(softmax(x) − one_hot(t)) on rows whose target is not ignore, 0 on
 * the others. */
void own_cross_entropy_grad_f32(const mi_tensor *x, const mi_tensor *t, int64_t ignore, double c,
                                mi_tensor *dx);
/* swiglu's two gradients in one pass (unary.c's vjp, not recorded): ga =
 * g·b·silu'(a), gb = g·silu(a); all five tensors one shape. */
void own_swiglu_grads_f32(const mi_tensor *a, const mi_tensor *b, const mi_tensor *g,
                          mi_tensor *ga, mi_tensor *gb);

/* On raw arrays of n (cms_scan.c): s = gelu(a), gp = gelu'(a); y = gelu''(a). */
void own_gelu_pair_f32(const float *a, float *s, float *gp, int64_t n);
void own_gelu_second_f32(const float *a, float *y, int64_t n);
/* C = alpha op(A) op(B) + beta C (row-major) when M ≤ OWN_SMALL_GEMM_MAX
 * (op(A) not transposed) or K ≤ OWN_SMALL_GEMM_MAX (A transposed, B not):
 * own_small_gemm.c; false, untouched, for any other shape. */
#define OWN_SMALL_GEMM_MAX 8
bool own_small_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc);
/* matmul's OWN f32 kernel (own_small_gemm.c): a batch of products that
 * own_small_gemm_f32 takes, which own_matmul_fits tells from the geometry;
 * REF for any other. */
struct gemm_geom;
bool own_matmul_fits(const struct gemm_geom *g);
void own_matmul_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
/* acc += op(A) op(B), acc the product's shape (matmul's vjp added into a
 * gradient, linalg.c); false, touching nothing, for a geometry that
 * own_matmul_fits refuses. */
bool own_matmul_into_f32(mi_tensor *acc, mi_tensor *const *in, const mi_attrs *a);
/* outer's OWN f32 kernel (own_small_gemm.c), any shape. */
void own_outer_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
/* tri_solve's OWN f32 kernel (own_tri_solve.c), any shape. */
void own_tri_solve_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);

#endif
