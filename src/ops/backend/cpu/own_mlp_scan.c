/* mlp_scan's OWN f32 kernels: mlp_scan_impl.h's and mlp_scan_back_impl.h's
 * loops (the math is in mlp_scan.c's top comment), compiled like the other OWN
 * files with -O3 -ffast-math -march=native, so the loops over the hidden units
 * run in AVX-512 and erf in glibc's vector math, and Memora's softmax rows (an
 * exp per weight and token) in own_math.h's polynomial, in place, and a
 * segment's products with its grad point (inner_seg) on oneDNN's sgemm
 * (gemm_thread_f32: 5 % faster than OpenBLAS's on Memora's chunk-16 layer);
 * REF builds the same loops for the baseline ISA with libm's scalar functions
 * and the BLAS. Yaad's bias runs the REF kernels: its exact sign (sharpness ∞)
 * is outside fast math's finite-only rules, and with tanh its f32 result came
 * out 5× further from f64 than REF's (1.6e-4 against 3.3e-5 relative on the
 * op's examples). */
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
                        float alpha, float *wt, float *fs, int64_t rows, int64_t cols,
                        bool boundary)
{
    if (cols % OWN_W) {
        fast_kl_rows_f32(k, A, x, dl, eta, alpha, wt, fs, rows, cols, boundary);
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
            vecf s = {0};
            for (int64_t j = 0; j < cols; j += OWN_W) {
                vecf e = own_vexp_lo(vld(a + j) - m);
                vst(w + j, e);
                s += e;
            }
            part[r] = s;
        }
        vecf sums = own_lane_sums(part);
        vst(f, kc / sums);
        vst(sum, sums);
        if (!boundary) { /* W_i = f_i e with f_i = c_kl/Σ (kl_f) */
            memcpy(fs + r0, f, sizeof(float) * (size_t)nr);
            continue;
        }
        for (int64_t r = 0; r < nr; r++) { /* W_i = c_kl e/Σ; A_i ← log c_kl + log_softmax(A_i) */
            float *a = A + (r0 + r) * cols, *w = wt + (r0 + r) * cols, fr = f[r];
            float sh = log_kc - mx[r] - logf(sum[r]);
            for (int64_t j = 0; j < cols; j++) {
                w[j] *= fr;
                a[j] += sh;
            }
            fs[r0 + r] = 1;
        }
    }
}
#define MS_KL_ROWS own_kl_rows

/* Σ_j A_ij x_j for the nr ≤ OWN_W rows of A (rows cols apart, a whole
 * number of vectors long) in lanes 0 … nr − 1 (0 in the others): each row's
 * lane vector, then one fold for all of them (own_lane_sums). A whole group
 * keeps its OWN_W sums in registers and takes a column of vectors at a time
 * (rows of two vectors, Titans' W2 at head dimension 32, one expression a
 * row): a row at a time, each row's FMAs were one chain and the sums went
 * through memory (warm, AVX-512: 128 × 32 256 → 129 ns, 32 × 128 177 → 150). */
static inline vecf own_group_dots(const float *A, int64_t cols, int64_t nr, const float *x)
{
    vecf part[OWN_W];
    if (nr == OWN_W && cols == 2 * OWN_W) {
        vecf x0 = vld(x), x1 = vld(x + OWN_W);
#pragma GCC unroll 16
        for (int64_t r = 0; r < OWN_W; r++)
            part[r] = vld(A + r * cols) * x0 + vld(A + r * cols + OWN_W) * x1;
        return own_lane_sums(part);
    }
    if (nr == OWN_W) {
        for (int64_t r = 0; r < OWN_W; r++) part[r] = (vecf){0};
        for (int64_t j = 0; j < cols; j += OWN_W) {
            vecf xv = vld(x + j);
#pragma GCC unroll 16
            for (int64_t r = 0; r < OWN_W; r++) part[r] += vld(A + r * cols + j) * xv;
        }
        return own_lane_sums(part);
    }
    for (int64_t r = 0; r < OWN_W; r++) {
        vecf s = {0};
        for (int64_t j = 0; r < nr && j < cols; j += OWN_W)
            s += vld(A + r * cols + j) * vld(x + j);
        part[r] = s;
    }
    return own_lane_sums(part);
}

/* One vector of a row of G in kl_rows_back's last pass: its part of
 * (G x)_i into p, of Gᵀ dl into s and of ⟨G, A⟩ into ga, then G ← α G. */
static inline __attribute__((always_inline)) void kl_back_vec(float *g, const float *a, vecf xv,
                                                              float dl, float alpha, vecf *p,
                                                              vecf *s, vecf *ga)
{
    vecf gv = vld(g);
    *p += gv * xv;
    *s += dl * gv;
    *ga += gv * vld(a);
    vst(g, alpha * gv);
}

/* kl_rows_back likewise, OWN_W rows at a time: the rows' dot products with
 * b, their sums (at a boundary) and their products with x come out of one
 * fold each per group, and ⟨G, A_{t−1}⟩ is summed in one vector to the end. */
static void own_kl_rows_back(const ms_dims *k, int l, const float *W, const float *Ap, float *G,
                             const float *a, const float *b, bool boundary, const float *x,
                             const float *dl, float alpha, float *prod, float *acc,
                             float *galpha)
{
    int64_t rows, cols, at = l * k->d * k->h;
    fast_shape_of_f32(k, l, &rows, &cols);
    if (cols % OWN_W) {
        fast_kl_rows_back_f32(k, l, W, Ap, G, a, b, boundary, x, dl, alpha, prod, acc, galpha);
        return;
    }
    float inv = 1 / (float)k->kc, dot[OWN_W], sum[OWN_W], px[OWN_W], fr[OWN_W];
    const float *f = fast_kl_f_f32(k, W, l);
    vecf ga = {0}, ga1 = {0};
    memset(acc, 0, sizeof(float) * (size_t)cols);
    for (int64_t r0 = 0; r0 < rows; r0 += OWN_W) {
        int64_t nr = rows - r0 < OWN_W ? rows - r0 : OWN_W;
        const float *W0 = W + at + r0 * cols, *A0 = Ap + at + r0 * cols;
        float *G0 = G + at + r0 * cols;
        vecf part[OWN_W];
        for (int64_t r = 0; r < OWN_W; r++) fr[r] = r < nr ? f[r0 + r] : 0;
        /* W_i = f_i E_i (kl_f): (W b)_i / c_kl */
        vst(dot, inv * vld(fr) * own_group_dots(W0, cols, nr, b));
        for (int64_t r = 0; r < OWN_W; r++) { /* G_i += a_i W_i ⊙ (b − dot_i), and Σ_j G_ij */
            vecf s = {0};
            float c = r < nr ? a[r0 + r] * fr[r] : 0;
            for (int64_t j = 0; r < nr && j < cols; j += OWN_W) {
                vecf g = vld(G0 + r * cols + j) +
                         c * vld(W0 + r * cols + j) * (vld(b + j) - dot[r]);
                vst(G0 + r * cols + j, g);
                s += g;
            }
            part[r] = s;
        }
        if (boundary) { /* G_i −= W_i Σ_j G_ij / c_kl */
            vst(sum, inv * vld(fr) * own_lane_sums(part));
            for (int64_t r = 0; r < nr; r++)
                for (int64_t j = 0; j < cols; j += OWN_W)
                    vst(G0 + r * cols + j,
                        vld(G0 + r * cols + j) - sum[r] * vld(W0 + r * cols + j));
        }
        /* (G x)_i, acc += Gᵀ dl, ⟨G, A⟩, G ← α G: a column of vectors at a
         * time over the rows in pairs, so acc's vector and ⟨G, A⟩ add up in
         * two registers each (a row at a time, acc went through memory from
         * row to row and both were one chain of FMAs: W2's rows are 2
         * vectors long) */
        for (int64_t r = 0; r < OWN_W; r++) part[r] = (vecf){0};
        for (int64_t j = 0; j < cols; j += OWN_W) {
            vecf xv = vld(x + j), s0 = vld(acc + j), s1 = {0};
            int64_t r = 0, o = j;
            for (; r + 1 < nr; r += 2, o += 2 * cols) {
                kl_back_vec(G0 + o, A0 + o, xv, dl[r0 + r], alpha, &part[r], &s0, &ga);
                kl_back_vec(G0 + o + cols, A0 + o + cols, xv, dl[r0 + r + 1], alpha,
                            &part[r + 1], &s1, &ga1);
            }
            if (r < nr) kl_back_vec(G0 + o, A0 + o, xv, dl[r0 + r], alpha, &part[r], &s0, &ga);
            vst(acc + j, s0 + s1);
        }
        vst(px, own_lane_sums(part));
        for (int64_t r = 0; r < nr; r++) prod[r0 + r] = px[r];
    }
    float g_sum = 0;
    ga += ga1;
    for (int i = 0; i < OWN_W; i++) g_sum += ga[i];
    *galpha += g_sum;
}
#define MS_KL_ROWS_BACK own_kl_rows_back

#ifdef __AVX512F__
static void own_mv(bool trans, int64_t rows, int64_t cols, float c, const float *A,
                   const float *x, bool acc, float *y);
#define MS_MV own_mv
#endif

#define MS_GEMM gemm_thread_f32
#include "mlp_scan_impl.h"
#include "mlp_scan_back_impl.h"

#ifdef __AVX512F__
/* The memory's products with a vector, y = c op(A) x (+ y), with AVX-512
 * (a weight matrix of Memora's or Titans' MLP is 32 × 128: the chunk-1
 * Titans layer went 10 % faster than on OpenBLAS's gemv; with AVX2 the same
 * loops in 8 lanes were 7–10 % slower than OpenBLAS's Haswell kernels, which
 * those builds keep). Rows a whole number of vectors long, else the BLAS.
 *   y_i = c Σ_j A_ij x_j: OWN_W rows at a time (own_group_dots);
 *   y_j = c Σ_i A_ij x_i: a vector of columns at a time, over four rows at
 *     once so that four sums are in flight. */
static void own_mv(bool trans, int64_t rows, int64_t cols, float c, const float *A,
                   const float *x, bool acc, float *y)
{
    if (cols % OWN_W) {
        fast_mv_f32(trans, rows, cols, c, A, x, acc, y);
        return;
    }
    if (trans) {
        for (int64_t j = 0; j < cols; j += OWN_W) {
            vecf s[4] = {{0}, {0}, {0}, {0}};
            int64_t i = 0;
            for (; i + 4 <= rows; i += 4)
                for (int p = 0; p < 4; p++) s[p] += x[i + p] * vld(A + (i + p) * cols + j);
            for (; i < rows; i++) s[0] += x[i] * vld(A + i * cols + j);
            vecf v = c * ((s[0] + s[1]) + (s[2] + s[3]));
            vst(y + j, acc ? vld(y + j) + v : v);
        }
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += OWN_W) {
        int64_t nr = rows - r0 < OWN_W ? rows - r0 : OWN_W;
        float out[OWN_W];
        vst(out, c * own_group_dots(A + r0 * cols, cols, nr, x));
        for (int64_t r = 0; r < nr; r++) y[r0 + r] = acc ? y[r0 + r] + out[r] : out[r];
    }
}
#endif

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
