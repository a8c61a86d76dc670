/* attention's forward kernel, written once and included by sequence.c per
 * dtype, with ATT_T the element type and ATT_NAME(x) the name x with the
 * dtype's suffix. The math is stated above the include in sequence.c. Not
 * a header of its own: no guard. */

/* One pass per query row with an online softmax (no T×S buffer): y holds
 * Σ_s exp(sc·q·k_s − m) v_s and z the normaliser for the running max m.
 * Row t sits at position p = attrs.start + t; the keys it reads are
 * lo … hi, from the masks at p. */
static void ATT_NAME(attention)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    typedef ATT_T scalar_t; /* for F(exp) */
    att_dims g = att_dims_of(in, a);
    int64_t nt = g.nt, ns = g.ns, d = g.d, dv = g.dv, nh = g.nh, w = a->window;
    ATT_T sc = (ATT_T)(1.0 / sqrt((double)d));
    for (int64_t l = 0; l < g.lead; l++) {
        /* entry l's row 0 and the distance between its rows (nh: [.., T, H, D]) */
        const ATT_T *Q = (const ATT_T *)in[0]->data + att_row(&g, l, 0, nt) * d;
        const ATT_T *K = (const ATT_T *)in[1]->data + att_row(&g, l, 0, ns) * d;
        const ATT_T *V = (const ATT_T *)in[2]->data + att_row(&g, l, 0, ns) * dv;
        for (int64_t t = 0; t < nt; t++) {
            ATT_T *y = (ATT_T *)o->data + att_row(&g, l, t, nt) * dv;
            ATT_T m = (ATT_T)-INFINITY, z = 0; /* running max and normaliser */
            int64_t p = a->start + t;
            int64_t lo = w > 0 && p - w + 1 > 0 ? p - w + 1 : 0;
            int64_t hi = a->causal && p < ns - 1 ? p : ns - 1;
            for (int64_t e = 0; e < dv; e++) y[e] = 0;
            for (int64_t s = lo; s <= hi; s++) {
                ATT_T dot = 0;
                for (int64_t e = 0; e < d; e++) dot += Q[t * nh * d + e] * K[s * nh * d + e];
                dot *= sc;
                if (dot > m) { /* rescale what is summed so far to the new max */
                    ATT_T c = F(exp)(m - dot);
                    z *= c;
                    for (int64_t e = 0; e < dv; e++) y[e] *= c;
                    m = dot;
                }
                ATT_T pr = F(exp)(dot - m);
                z += pr;
                for (int64_t e = 0; e < dv; e++) y[e] += pr * V[s * nh * dv + e];
            }
            for (int64_t e = 0; e < dv; e++) y[e] /= z;
        }
    }
}

/* The three gradients, unrecorded, for the [.., T, H, D] layout where OWN
 * does not run (f64, or OWN not allowed): per query row, P's row recomputed
 * into p (S entries) from its max and sum, then, with G the row's cotangent,
 *   dv_s += p_s G,  dp_s = G·v_s,  δ = Σ_s p_s dp_s,  ds_s = p_s (dp_s − δ),
 *   dq_t = sc Σ_s ds_s k_s,  dk_s += sc ds_s q_t
 * over the keys the row reads; the heads' rows stay where they lie, so no
 * transposed copies. -1 when its 2·S scratch cannot be had. */
static int ATT_NAME(attention_grads)(mi_tensor *const *in, const mi_tensor *gy, const mi_attrs *a,
                                     mi_tensor *dq, mi_tensor *dk, mi_tensor *dv)
{
    typedef ATT_T scalar_t; /* for F(exp) */
    att_dims g = att_dims_of(in, a);
    int64_t nt = g.nt, ns = g.ns, d = g.d, e = g.dv, nh = g.nh, w = a->window;
    ATT_T sc = (ATT_T)(1.0 / sqrt((double)d)), *p = malloc(sizeof(ATT_T) * (size_t)(2 * ns));
    if (!p) return -1;
    ATT_T *u = p + ns; /* dp_s */
    memset(dk->data, 0, mi_dtype_size(dk->dtype) * (size_t)dk->numel);
    memset(dv->data, 0, mi_dtype_size(dv->dtype) * (size_t)dv->numel);
    for (int64_t l = 0; l < g.lead; l++) {
        int64_t q0 = att_row(&g, l, 0, nt), k0 = att_row(&g, l, 0, ns);
        const ATT_T *Q = (const ATT_T *)in[0]->data + q0 * d;
        const ATT_T *K = (const ATT_T *)in[1]->data + k0 * d;
        const ATT_T *V = (const ATT_T *)in[2]->data + k0 * e;
        const ATT_T *G = (const ATT_T *)gy->data + q0 * e;
        ATT_T *dQ = (ATT_T *)dq->data + q0 * d, *dK = (ATT_T *)dk->data + k0 * d;
        ATT_T *dV = (ATT_T *)dv->data + k0 * e;
        for (int64_t t = 0; t < nt; t++) {
            const ATT_T *qt = Q + t * nh * d, *gt = G + t * nh * e;
            ATT_T *dqt = dQ + t * nh * d, m = (ATT_T)-INFINITY, z = 0, delta = 0;
            int64_t pos = a->start + t;
            int64_t lo = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0;
            int64_t hi = a->causal && pos < ns - 1 ? pos : ns - 1;
            for (int64_t s = lo; s <= hi; s++) {
                ATT_T dot = 0;
                for (int64_t c = 0; c < d; c++) dot += qt[c] * K[s * nh * d + c];
                p[s] = dot * sc;
                m = p[s] > m ? p[s] : m;
            }
            for (int64_t s = lo; s <= hi; s++) z += p[s] = F(exp)(p[s] - m);
            for (int64_t c = 0; c < d; c++) dqt[c] = 0;
            for (int64_t s = lo; s <= hi; s++) {
                p[s] /= z;
                ATT_T dp = 0;
                for (int64_t c = 0; c < e; c++) {
                    dV[s * nh * e + c] += p[s] * gt[c];
                    dp += gt[c] * V[s * nh * e + c];
                }
                u[s] = dp;
                delta += p[s] * dp;
            }
            for (int64_t s = lo; s <= hi; s++) {
                ATT_T ds = p[s] * (u[s] - delta) * sc;
                for (int64_t c = 0; c < d; c++) {
                    dqt[c] += ds * K[s * nh * d + c];
                    dK[s * nh * d + c] += ds * qt[c];
                }
            }
        }
    }
    free(p);
    return 0;
}
