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
