/* The kernels of cumsum, cumprod and linear_scan, written once and included
 * by scan.c per dtype, with SCAN_T the element type and SCAN_NAME(x) the name
 * x with the dtype's suffix (split_axis, bcast_strides and attr_axis come
 * from scan.c). Each op's vjp is stated at the op in scan.c. Not a header of
 * its own: no guard. */

/* y_t = y_{t∓1} OP x_t, y_first = x_first, along attrs.axis (attrs.reverse:
 * from the end); OP is * when prod, else +. */
static inline __attribute__((always_inline)) void
SCAN_NAME(cumulate)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at, bool prod)
{
    int64_t outer, len, inner;
    split_axis(o, attr_axis(at, o->rank), &outer, &len, &inner);
    const SCAN_T *X = in[0]->data;
    SCAN_T *Y = o->data;
    for (int64_t b = 0; b < outer; b++) {
        const SCAN_T *x = X + b * len * inner;
        SCAN_T *y = Y + b * len * inner;
        for (int64_t s = 0; s < len; s++) {
            int64_t t = at->reverse ? len - 1 - s : s;
            const SCAN_T *xt = x + t * inner;
            SCAN_T *yt = y + t * inner;
            if (s == 0) {
                for (int64_t i = 0; i < inner; i++) yt[i] = xt[i];
                continue;
            }
            const SCAN_T *yp = at->reverse ? yt + inner : yt - inner;
            for (int64_t i = 0; i < inner; i++) yt[i] = prod ? yp[i] * xt[i] : yp[i] + xt[i];
        }
    }
}

/* y_t = Σ_{s ≤ t} x_s (reverse: Σ_{s ≥ t} x_s). */
static void SCAN_NAME(cumsum)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    SCAN_NAME(cumulate)(o, in, at, false);
}

/* y_t = Π_{s ≤ t} x_s (reverse: Π_{s ≥ t} x_s). */
static void SCAN_NAME(cumprod)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    SCAN_NAME(cumulate)(o, in, at, true);
}

/* One kernel body for linear_scan and linear_scan_from: th NULL starts
 * from zero (h_first = x_first, no multiply, the bits linear_scan always
 * gave), else h_first = a_first ⊙ h0 + x_first with h0 read through its
 * broadcast strides (0 along the scan axis). */
static void SCAN_NAME(linear_scan_core)(mi_tensor *o, const mi_tensor *ta,
                                   const mi_tensor *tx, const mi_tensor *th,
                                   const mi_attrs *at)
{
    int ax = attr_axis(at, tx->rank);
    int64_t outer, len, inner, ast[MI_MAX_RANK], hst[MI_MAX_RANK] = {0};
    int64_t xst[MI_MAX_RANK];
    split_axis(tx, ax, &outer, &len, &inner);
    bcast_strides(ta, tx, ast);
    mi_strides(tx->rank, tx->shape, xst);
    if (th) bcast_strides(th, tx, hst);
    bool same = mi_same_shape(ta, tx), h_same = true;
    for (int d = ax + 1; th && d < tx->rank; d++)
        h_same = h_same && (tx->shape[d] == 1 || hst[d] == xst[d]);
    const SCAN_T *A = ta->data, *X = tx->data, *H0 = th ? th->data : NULL;
    SCAN_T *H = o->data;
    for (int64_t b = 0; b < outer; b++) {
        int64_t aoff = 0, hoff = 0, rem = b; /* offsets of the outer index */
        for (int d = ax - 1; d >= 0; d--) {
            aoff += (rem % tx->shape[d]) * ast[d];
            hoff += (rem % tx->shape[d]) * hst[d];
            rem /= tx->shape[d];
        }
        for (int64_t s = 0; s < len; s++) {
            int64_t t = at->reverse ? len - 1 - s : s;
            int64_t row = (b * len + t) * inner;
            const SCAN_T *x = X + row, *a = A + aoff + t * ast[ax];
            SCAN_T *h = H + row;
            const SCAN_T *hp = at->reverse ? h + inner : h - inner;
            const int64_t *pst = xst; /* hp's strides in x's frame */
            bool p_same = true;
            if (s == 0) {
                if (!H0) {
                    for (int64_t i = 0; i < inner; i++) h[i] = x[i];
                    continue;
                }
                hp = H0 + hoff;
                pst = hst;
                p_same = h_same;
            }
            if (same && p_same) {
                for (int64_t i = 0; i < inner; i++) h[i] = a[i] * hp[i] + x[i];
            } else { /* walk the inner axes, offsets by odometer */
                int64_t idx[MI_MAX_RANK] = {0}, off = 0, poff = 0;
                for (int64_t i = 0; i < inner; i++) {
                    h[i] = a[off] * hp[poff] + x[i];
                    for (int d = tx->rank - 1; d > ax; d--) {
                        off += ast[d];
                        poff += pst[d];
                        if (++idx[d] < tx->shape[d]) break;
                        off -= ast[d] * tx->shape[d];
                        poff -= pst[d] * tx->shape[d];
                        idx[d] = 0;
                    }
                }
            }
        }
    }
}
static void SCAN_NAME(linear_scan)(mi_tensor *o, mi_tensor *const *in,
                              const mi_attrs *at)
{
    SCAN_NAME(linear_scan_core)(o, in[0], in[1], NULL, at);
}
static void SCAN_NAME(linear_scan_from)(mi_tensor *o, mi_tensor *const *in,
                                   const mi_attrs *at)
{
    SCAN_NAME(linear_scan_core)(o, in[0], in[1], in[2], at);
}
