/* mlp_scan's OWN f32 kernels: mlp_scan_impl.h's loops (the math is in
 * mlp_scan.c's top comment), compiled like the other OWN files with -O3
 * -ffast-math -march=native, so the loops over the hidden units run in
 * AVX-512 and erf in glibc's vector math, and Memora's softmax rows (an exp
 * per weight and token) in own_math.h's polynomial, in place; REF builds the same loops for the baseline
 * ISA with libm's scalar functions. Yaad's bias runs the REF kernels: its
 * exact sign (sharpness ∞) is outside fast math's finite-only rules, and
 * with tanh its f32 result came out 5× further from f64 than REF's (1.6e-4
 * against 3.3e-5 relative on the op's examples). */
#include "own_math.h"
#define MS_EXPV(x) f_exp_lo(x)
#include "mlp_scan_defs.h"
#include "own_mlp_scan.h"
#define OWN_VECTORS
#include "own_kernels.h"

#define MS_KERNEL static
#define MS_T float
#define MS(x) fast_##x##_f32
#include "mlp_scan_rules_impl.h"

/* kl_rows for OWN_W rows at a time (rows a whole number of vectors long,
 * else kl_rows): each row's write leaves a vector of lane maxima, the
 * group's OWN_W maxima come out of one fold (own_lane_maxes), and so do its
 * sums of exponentials and, from them, one vector division for the OWN_W
 * scales c_kl/Σ; per row, the reductions and the division would cost about
 * as much as the row's arithmetic (Memora's W2 rows are 2 vectors long). */
static void own_kl_rows(const ms_dims *k, float *A, const float *x, const float *dl, float eta,
                        float alpha, float *wt, int64_t rows, int64_t cols, bool boundary)
{
    if (cols % OWN_W) {
        fast_kl_rows_f32(k, A, x, dl, eta, alpha, wt, rows, cols, boundary);
        return;
    }
    float kc = (float)k->kc, log_kc = logf(kc);
    for (int64_t r0 = 0; r0 < rows; r0 += OWN_W) {
        int64_t nr = rows - r0 < OWN_W ? rows - r0 : OWN_W;
        vecf part[OWN_W];
        float mx[OWN_W], f[OWN_W], sum[OWN_W];
        for (int64_t r = 0; r < OWN_W; r++) { /* A_i ← α A_i − c_i x, and its lane maxima */
            if (r >= nr) {
                part[r] = part[0];
                continue;
            }
            float c = eta * dl[r0 + r], *a = A + (r0 + r) * cols;
            vecf m = alpha * vld(a) - c * vld(x);
            vst(a, m);
            for (int64_t j = OWN_W; j < cols; j += OWN_W) {
                vecf v = alpha * vld(a + j) - c * vld(x + j);
                vst(a + j, v);
                m = own_vmax(m, v);
            }
            part[r] = m;
        }
        vst(mx, own_lane_maxes(part));
        for (int64_t r = 0; r < OWN_W; r++) { /* e^(A_i − max) and their lane sums */
            if (r >= nr) {
                part[r] = (vecf){0} + 1;
                continue;
            }
            const float *a = A + (r0 + r) * cols;
            float *w = wt + (r0 + r) * cols, m = mx[r];
            for (int64_t j = 0; j < cols; j++) w[j] = f_exp_lo(a[j] - m);
            vecf s = vld(w);
            for (int64_t j = OWN_W; j < cols; j += OWN_W) s += vld(w + j);
            part[r] = s;
        }
        vecf sums = own_lane_sums(part);
        vst(f, kc / sums);
        vst(sum, sums);
        for (int64_t r = 0; r < nr; r++) { /* W_i = c_kl e/Σ; A_i ← log c_kl + log_softmax(A_i) */
            float *a = A + (r0 + r) * cols, *w = wt + (r0 + r) * cols, fr = f[r];
            for (int64_t j = 0; j < cols; j++) w[j] *= fr;
            if (boundary) {
                float sh = log_kc - mx[r] - logf(sum[r]);
                for (int64_t j = 0; j < cols; j++) a[j] += sh;
            }
        }
    }
}
#define MS_KL_ROWS own_kl_rows

#include "mlp_scan_impl.h"

void own_mlp_scan_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (a->index & MI_MLP_SCAN_YAAD) mlp_scan_f32(o, in, a);
    else fast_mlp_scan_f32(o, in, a);
}

void own_mlp_scan_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (a->index & MI_MLP_SCAN_YAAD) mlp_scan_backward_f32(o, in, a);
    else fast_mlp_scan_backward_f32(o, in, a);
}
