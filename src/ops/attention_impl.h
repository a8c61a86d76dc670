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
    int rk = in[0]->rank;
    int64_t nt = in[0]->shape[rk - 2], d = in[0]->shape[rk - 1];
    int64_t ns = in[1]->shape[rk - 2], dv = in[2]->shape[rk - 1];
    int64_t lead = nt ? in[0]->numel / (nt * d) : 0, w = a->window;
    ATT_T sc = (ATT_T)(1.0 / sqrt((double)d));
    for (int64_t l = 0; l < lead; l++) {
        const ATT_T *Q = (const ATT_T *)in[0]->data + l * nt * d;
        const ATT_T *K = (const ATT_T *)in[1]->data + l * ns * d;
        const ATT_T *V = (const ATT_T *)in[2]->data + l * ns * dv;
        for (int64_t t = 0; t < nt; t++) {
            ATT_T *y = (ATT_T *)o->data + (l * nt + t) * dv;
            ATT_T m = (ATT_T)-INFINITY, z = 0; /* running max and normaliser */
            int64_t p = a->start + t;
            int64_t lo = w > 0 && p - w + 1 > 0 ? p - w + 1 : 0;
            int64_t hi = a->causal && p < ns - 1 ? p : ns - 1;
            for (int64_t e = 0; e < dv; e++) y[e] = 0;
            for (int64_t s = lo; s <= hi; s++) {
                ATT_T dot = 0;
                for (int64_t e = 0; e < d; e++) dot += Q[t * d + e] * K[s * d + e];
                dot *= sc;
                if (dot > m) { /* rescale what is summed so far to the new max */
                    ATT_T c = F(exp)(m - dot);
                    z *= c;
                    for (int64_t e = 0; e < dv; e++) y[e] *= c;
                    m = dot;
                }
                ATT_T pr = F(exp)(dot - m);
                z += pr;
                for (int64_t e = 0; e < dv; e++) y[e] += pr * V[s * dv + e];
            }
            for (int64_t e = 0; e < dv; e++) y[e] /= z;
        }
    }
}
