/* delta_scan's kernels, written once and included per dtype and backend (by
 * delta_scan.c for REF, by backend/cpu/own_delta_scan.c for OWN f32), with
 * DS_T the element type, DS_NAME(x) the kernel's name and DS_KERNEL its
 * linkage (static, or empty for OWN's). The math is stated in delta_scan.c's
 * top comment; DS_STEP, DS_GATE and DS_RHO come from
 * delta_scan_loops.h. Not a header of its own: no guard. */

#include "delta_scan_keys_impl.h"

/* One sequence's forward: S_t from S_{t−1} (DS_STEP), then y_t = S_t q_t
 * (n: the sequence, for its tokens' rows nt = n·T + t). */
DS_INLINE void DS_NAME(forward_seq)(DS_T *Y, DS_T *S, const DS_T *Q, const DS_T *K,
                                    const DS_T *V, const DS_T *B, const DS_T *A, int64_t n,
                                    int64_t T, int64_t bw, int64_t aw, int64_t rule, int64_t dv,
                                    int64_t dk)
{
    for (int64_t t = 0; t < T; t++) {
        int64_t nt = n * T + t;
        const DS_T *kt = K + nt * dk, *vt = V + nt * dv, *qt = Q + nt * dk;
        DS_T *yt = Y + t * dv; /* scratch for S_{t−1} k_t, then y_t */
        DS_STEP(DS_T, S, S, yt, kt, vt, B, A, nt, bw, aw, rule, dv, dk)
        for (int64_t i = 0; i < dv; i++) {
            DS_T acc = 0;
            DS_SIMD(reduction(+ : acc))
            for (int64_t j = 0; j < dk; j++) acc += S[i * dk + j] * qt[j];
            yt[i] = acc;
        }
    }
}

/* Forward: per sequence, forward_seq; the output packs y [T, dv] and S_T
 * [dv, dk]. */
DS_KERNEL void DS_NAME(delta_scan)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    if (at->index & MI_DELTA_RULE_ALPHA_KEYS) {
        DS_NAME(delta_scan_keys)(o, in, at->index & ~MI_DELTA_RULE_ALPHA_KEYS);
        return;
    }
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2];
    int64_t T = in[2]->shape[1], width = T * dv + dv * dk;
    int64_t bw = gate_width(in[4]), aw = gate_width(in[5]), rule = at->index;
    const DS_T *S0 = in[0]->data, *Q = in[1]->data, *K = in[2]->data, *V = in[3]->data;
    const DS_T *B = in[4]->data, *A = in[5]->data;
    int n_thr = scan_threads(N, N * T * dv * dk);
    (void)n_thr;
    DS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t n = 0; n < N; n++) {
        DS_T *Y = (DS_T *)o->data + n * width, *S = Y + T * dv;
        memcpy(S, S0 + n * dv * dk, sizeof(DS_T) * (size_t)(dv * dk));
#define DS_FORWARD(dk_) DS_NAME(forward_seq)(Y, S, Q, K, V, B, A, n, T, bw, aw, rule, dv, dk_)
        DS_DK(DS_FORWARD, dk)
#undef DS_FORWARD
    }
}

/* One sequence's backward (n: the sequence): S_0..S_{T−1} again into St,
 * then back from G = ∂L/∂S_T; G ends as ∂L/∂S_0. */
DS_INLINE void DS_NAME(backward_seq)(DS_T *St, DS_T *G, DS_T *p, DS_T *gQ, DS_T *gK, DS_T *gV,
                                     DS_T *gB, DS_T *gA, const DS_T *S0n, const DS_T *gY,
                                     const DS_T *gST, const DS_T *Q, const DS_T *K,
                                     const DS_T *V, const DS_T *B, const DS_T *A, int64_t n,
                                     int64_t T, int64_t bw, int64_t aw, int64_t rule,
                                     int64_t dv, int64_t dk)
{
    int64_t m = dv * dk;
    bool decay_first = (rule & ~MI_DELTA_RULE_UNIT_WRITE) == MI_DELTA_RULE_DECAY_FIRST;
    bool unit = rule & MI_DELTA_RULE_UNIT_WRITE; /* ω = 1: ∂u/∂β = −ρ p only */
    memcpy(St, S0n, sizeof(DS_T) * (size_t)m);
    for (int64_t t = 0; t + 1 < T; t++) {
        int64_t nt = n * T + t;
        DS_STEP(DS_T, St + (t + 1) * m, St + t * m, p, K + nt * dk, V + nt * dv,
                B, A, nt, bw, aw, rule, dv, dk)
    }
    memcpy(G, gST, sizeof(DS_T) * (size_t)m);
    for (int64_t t = T - 1; t >= 0; t--) {
        int64_t nt = n * T + t;
        const DS_T *kt = K + nt * dk, *vt = V + nt * dv, *qt = Q + nt * dk;
        const DS_T *gy = gY + t * dv, *Sp = St + t * m;
        DS_T *gq = gQ + t * dk, *gk = gK + t * dk, *gv = gV + t * dv;
        DS_T *gb = gB + t * bw, *ga = gA + t * aw;
        /* gq, gk and a head's gβ, gα summed over the rows in locals (registers,
           at the widths DS_DK passes as constants), not through memory row by row */
        DS_T lq[DS_DK_LOCAL], lk[DS_DK_LOCAL], gb1 = 0, ga1 = 0;
        bool local = dk <= DS_DK_LOCAL;
        DS_T *aq = local ? lq : gq, *ak = local ? lk : gk;
        for (int64_t j = 0; j < dk; j++) aq[j] = ak[j] = 0;
        /* One pass over the rows of G and S_{t−1}, row i in cache for all of it:
         *   G += gy qᵀ (y_t = S_t q_t), gu = G k, p = S_{t−1} k, ⟨G, S_{t−1}⟩
         *   gq += gy_i S_t[i, :] = gy_i (α S_{t−1}[i, :] + u_i k)   (S_t not kept)
         *   gk += G[i, :] u_i + S_{t−1}[i, :] gp_i,  G[i, :] ← α G[i, :] + gp_i k
         * (S_t = α S_{t−1} + u kᵀ, u = ω v − β ρ p, gp = −β ρ gu) */
        DS_T gyu = 0; /* Σ_i gy_i u_i, gq's term along k */
        for (int64_t i = 0; i < dv; i++) {
            DS_T *gr = G + i * dk;
            const DS_T *sr = Sp + i * dk;
            DS_T beta = DS_GATE(B, nt, bw, i), alpha = DS_GATE(A, nt, aw, i);
            DS_T rho = DS_RHO(DS_T, rule, alpha), gyi = gy[i];
            DS_T acc = 0, pi = 0, gs = 0;
            DS_SIMD(reduction(+ : acc, pi, gs))
            for (int64_t j = 0; j < dk; j++) {
                DS_T g = gr[j] + gyi * qt[j];
                gr[j] = g;
                acc += g * kt[j];
                pi += sr[j] * kt[j];
                gs += g * sr[j];
            }
            DS_T u = DS_OMEGA(DS_T, rule, beta) * vt[i] - beta * rho * pi;
            DS_T gp = -beta * rho * acc, ay = alpha * gyi;
            gv[i] = DS_OMEGA(DS_T, rule, beta) * acc;
            DS_T db = acc * ((unit ? (DS_T)0 : vt[i]) - rho * pi);
            DS_T da = gs - (decay_first ? acc * beta * pi : (DS_T)0);
            if (bw > 1) gb[i] = db;
            else gb1 += db;
            if (aw > 1) ga[i] = da;
            else ga1 += da;
            gyu += gyi * u;
            DS_SIMD()
            for (int64_t j = 0; j < dk; j++) {
                aq[j] += ay * sr[j];
                ak[j] += gr[j] * u + sr[j] * gp;
                gr[j] = alpha * gr[j] + gp * kt[j];
            }
        }
        if (bw == 1) gb[0] = gb1;
        if (aw == 1) ga[0] = ga1;
        for (int64_t j = 0; j < dk; j++) {
            gq[j] = aq[j] + gyu * kt[j];
            gk[j] = ak[j];
        }
    }
}

/* Backward: recompute S_0..S_{T−1} into scope scratch, then walk back
 * carrying G = ∂L/∂S_t (the packed output's layout is grad_width's). */
DS_KERNEL void DS_NAME(delta_scan_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    if (at->index & MI_DELTA_RULE_ALPHA_KEYS) {
        DS_NAME(delta_scan_keys_backward)(o, in, at->index & ~MI_DELTA_RULE_ALPHA_KEYS);
        return;
    }
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2];
    int64_t T = in[2]->shape[1], gw = T * dv + dv * dk, ow = o->shape[1];
    int64_t m = dv * dk, bw = gate_width(in[4]), aw = gate_width(in[5]);
    int64_t rule = at->index;
    const DS_T *S0 = in[0]->data, *Q = in[1]->data, *K = in[2]->data, *V = in[3]->data;
    const DS_T *B = in[4]->data, *A = in[5]->data, *Gin = in[6]->data;
    /* the states S_0..S_{T−1} of one sequence and G = ∂L/∂S_t: scratch from the
     * current scope, given back at the end (the next call reuses it) */
    mi_scope *sc = mi_scope_current();
    int n_thr = scan_threads(N, 4 * N * T * dv * dk);
    int64_t per = (T + 1) * m + dv; /* one thread's scratch */
    size_t bytes = sizeof(DS_T) * (size_t)(per * n_thr);
    DS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) { /* kernels cannot fail: zeros, never uninitialised memory */
        memset(o->data, 0, sizeof(DS_T) * (size_t)o->numel);
        return;
    }
    DS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t n = 0; n < N; n++) {
        DS_T *St = scratch + per * scan_thread();
        DS_T *G = St + T * m, *p = G + m;
        DS_T *out = (DS_T *)o->data + n * ow;
        DS_T *gS0 = out, *gQ = gS0 + m, *gK = gQ + T * dk, *gV = gK + T * dk;
        DS_T *gB = gV + T * dv, *gA = gB + T * bw;
        const DS_T *gY = Gin + n * gw, *gST = gY + T * dv;
#define DS_BACKWARD(dk_)                                                                   \
    DS_NAME(backward_seq)(St, G, p, gQ, gK, gV, gB, gA, S0 + n * m, gY, gST, Q, K, V, B, A, n, T, \
                          bw, aw, rule, dv, dk_)
        DS_DK(DS_BACKWARD, dk)
#undef DS_BACKWARD
        memcpy(gS0, G, sizeof(DS_T) * (size_t)m);
    }
    mi_scope_release(sc, scratch, bytes);
}
