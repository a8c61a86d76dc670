/* delta_scan's kernels for a channel-wise α on the key axis (the rule's
 * MI_DELTA_RULE_ALPHA_KEYS flag: GLA's and RWKV-7's decay), included by
 * delta_scan_impl.h per dtype and backend with its DS_T and DS_NAME. Per
 * sequence, D_t = Diag(α_t), α_t ∈ R^dk:
 *   S_t = S_{t−1} D_t + u_t k_tᵀ,   u_t = β_t (v_t − ρ p_t),   y_t = S_t q_t
 *   p_t = S_{t−1} w_t,   w_t = α_t ⊙ k_t (decay_first: S_{t−1} D_t (I − β k kᵀ)
 *   + β v kᵀ) or k_t (delta: S_{t−1} D_t − β (S_{t−1} k − v) kᵀ); ρ = 0 Hebbian.
 * vjp, G = ∂L/∂S_t carried backwards (after G += gy_t q_tᵀ, gq_t = S_tᵀ gy_t):
 *   gu = G k_t,   gv_t = β_t gu,   gβ_t = ⟨gu, v_t − ρ p_t⟩,   gp = −ρ β_t gu
 *   s  = S_{t−1}ᵀ gp,   gw = s
 *   gk_t = Gᵀ u_t + (α_t ⊙ s or s),   gα_t = Σ_i G_i ⊙ S_{t−1,i} (+ k_t ⊙ s: decay_first)
 *   G ← G D_t + gp w_tᵀ
 * (β per head or per value row, as the value-row kernels). Not a header of
 * its own: no guard. */

/* One step from Sp into S (may be the same buffer), p (dv) gets S_prev w. */
static void DS_NAME(keys_step)(DS_T *S, const DS_T *Sp, DS_T *p, const DS_T *kt, const DS_T *vt,
                              const DS_T *at, DS_T bt0, const DS_T *bt, bool rows, int64_t rule,
                              int64_t dv, int64_t dk)
{
    bool first = rule == MI_DELTA_RULE_DECAY_FIRST, hebbian = rule == MI_DELTA_RULE_HEBBIAN;
    for (int64_t i = 0; i < dv; i++) {
        const DS_T *row = Sp + i * dk;
        DS_T acc = 0;
        if (!hebbian) {
            if (first) {
                DS_SIMD(reduction(+ : acc))
                for (int64_t j = 0; j < dk; j++) acc += row[j] * at[j] * kt[j];
            } else {
                DS_SIMD(reduction(+ : acc))
                for (int64_t j = 0; j < dk; j++) acc += row[j] * kt[j];
            }
        }
        p[i] = acc;
        DS_T u = (rows ? bt[i] : bt0) * (vt[i] - acc);
        DS_T *dst = S + i * dk;
        DS_SIMD()
        for (int64_t j = 0; j < dk; j++) dst[j] = at[j] * row[j] + u * kt[j];
    }
}

static void DS_NAME(delta_scan_keys)(mi_tensor *o, mi_tensor *const *in, int64_t rule)
{
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2];
    int64_t T = in[2]->shape[1], width = T * dv + dv * dk, bw = gate_width(in[4]);
    const DS_T *S0 = in[0]->data, *Q = in[1]->data, *K = in[2]->data, *V = in[3]->data;
    const DS_T *B = in[4]->data, *A = in[5]->data;
    int n_thr = scan_threads(N, N * T * dv * dk);
    (void)n_thr;
    DS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t n = 0; n < N; n++) {
        DS_T *Y = (DS_T *)o->data + n * width, *S = Y + T * dv;
        memcpy(S, S0 + n * dv * dk, sizeof(DS_T) * (size_t)(dv * dk));
        for (int64_t t = 0; t < T; t++) {
            int64_t nt = n * T + t;
            const DS_T *qt = Q + nt * dk;
            DS_T *yt = Y + t * dv; /* scratch for p, then y_t */
            DS_NAME(keys_step)(S, S, yt, K + nt * dk, V + nt * dv, A + nt * dk, B[nt * bw],
                               B + nt * bw, bw > 1, rule, dv, dk);
            for (int64_t i = 0; i < dv; i++) {
                DS_T acc = 0;
                DS_SIMD(reduction(+ : acc))
                for (int64_t j = 0; j < dk; j++) acc += S[i * dk + j] * qt[j];
                yt[i] = acc;
            }
        }
    }
}

static void DS_NAME(delta_scan_keys_backward)(mi_tensor *o, mi_tensor *const *in, int64_t rule)
{
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2];
    int64_t T = in[2]->shape[1], gw = T * dv + dv * dk, ow = o->shape[1];
    int64_t m = dv * dk, bw = gate_width(in[4]);
    bool first = rule == MI_DELTA_RULE_DECAY_FIRST, hebbian = rule == MI_DELTA_RULE_HEBBIAN;
    const DS_T *S0 = in[0]->data, *Q = in[1]->data, *K = in[2]->data, *V = in[3]->data;
    const DS_T *B = in[4]->data, *A = in[5]->data, *Gin = in[6]->data;
    mi_scope *sc = mi_scope_current();
    int n_thr = scan_threads(N, 4 * N * T * dv * dk);
    int64_t per = (T + 2) * m + 2 * dv + dk; /* one thread's scratch */
    size_t bytes = sizeof(DS_T) * (size_t)(per * n_thr);
    DS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) { /* kernels cannot fail: zeros, never uninitialised memory */
        memset(o->data, 0, sizeof(DS_T) * (size_t)o->numel);
        return;
    }
    DS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t n = 0; n < N; n++) {
        DS_T *St = scratch + per * scan_thread();
        DS_T *G = St + (T + 1) * m, *p = G + m, *gu = p + dv, *s = gu + dv;
        DS_T *out = (DS_T *)o->data + n * ow;
        DS_T *gS0 = out, *gQ = gS0 + m, *gK = gQ + T * dk, *gV = gK + T * dk;
        DS_T *gB = gV + T * dv, *gA = gB + T * bw;
        const DS_T *gY = Gin + n * gw, *gST = gY + T * dv;
        memcpy(St, S0 + n * m, sizeof(DS_T) * (size_t)m);
        for (int64_t t = 0; t < T; t++) {
            int64_t nt = n * T + t;
            DS_NAME(keys_step)(St + (t + 1) * m, St + t * m, p, K + nt * dk, V + nt * dv,
                               A + nt * dk, B[nt * bw], B + nt * bw, bw > 1, rule, dv, dk);
        }
        memcpy(G, gST, sizeof(DS_T) * (size_t)m);
        for (int64_t t = T - 1; t >= 0; t--) {
            int64_t nt = n * T + t;
            const DS_T *kt = K + nt * dk, *vt = V + nt * dv, *qt = Q + nt * dk, *at = A + nt * dk;
            const DS_T *gy = gY + t * dv, *Sc = St + (t + 1) * m, *Sp = St + t * m;
            DS_T *gq = gQ + t * dk, *gk = gK + t * dk, *gv = gV + t * dv;
            DS_T *gb = gB + t * bw, *ga = gA + t * dk;
            /* y_t = S_t q_t */
            for (int64_t j = 0; j < dk; j++) gq[j] = 0;
            for (int64_t i = 0; i < dv; i++)
                DS_SIMD()
                for (int64_t j = 0; j < dk; j++) {
                    gq[j] += Sc[i * dk + j] * gy[i];
                    G[i * dk + j] += gy[i] * qt[j];
                }
            /* gu = G k, p = S_{t−1} w, gv, gβ */
            for (int64_t c = 0; c < bw; c++) gb[c] = 0;
            for (int64_t i = 0; i < dv; i++) {
                const DS_T *gr = G + i * dk, *sr = Sp + i * dk;
                DS_T acc = 0, pi = 0;
                DS_SIMD(reduction(+ : acc, pi))
                for (int64_t j = 0; j < dk; j++) {
                    acc += gr[j] * kt[j];
                    pi += sr[j] * (first ? at[j] : (DS_T)1) * kt[j];
                }
                DS_T beta = bw > 1 ? B[nt * bw + i] : B[nt * bw];
                if (hebbian) pi = 0;
                gu[i] = acc;
                p[i] = pi;
                gv[i] = beta * acc;
                gb[bw > 1 ? i : 0] += acc * (vt[i] - pi);
            }
            /* gk = Gᵀ u + (α ⊙) s, gα = Σ_i G_i ⊙ S_{t−1,i} (+ k ⊙ s), G ← G D + gp wᵀ */
            for (int64_t j = 0; j < dk; j++) gk[j] = ga[j] = s[j] = 0;
            for (int64_t i = 0; i < dv; i++) {
                DS_T beta = bw > 1 ? B[nt * bw + i] : B[nt * bw];
                DS_T u = beta * (vt[i] - p[i]), gp = hebbian ? (DS_T)0 : -beta * gu[i];
                DS_T *gr = G + i * dk;
                const DS_T *sr = Sp + i * dk;
                DS_SIMD()
                for (int64_t j = 0; j < dk; j++) {
                    gk[j] += gr[j] * u;
                    ga[j] += gr[j] * sr[j];
                    s[j] += sr[j] * gp;
                    gr[j] = at[j] * gr[j] + gp * (first ? at[j] : (DS_T)1) * kt[j];
                }
            }
            DS_SIMD()
            for (int64_t j = 0; j < dk; j++) {
                gk[j] += (first ? at[j] : (DS_T)1) * s[j];
                ga[j] += first ? kt[j] * s[j] : (DS_T)0;
            }
        }
        memcpy(gS0, G, sizeof(DS_T) * (size_t)m);
    }
    mi_scope_release(sc, scratch, bytes);
}
