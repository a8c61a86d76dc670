/* The element-wise REF kernel loops of UNARY_KERNELS and BINARY_KERNELS
 * (internal.h), written once and included by internal.h per dtype, with EW_T
 * the element type and EW_NAME(x) the name x with the dtype's suffix. Each
 * takes the op's element function as a constant argument and is always
 * inlined into the op's one-line kernel, so the call becomes the expression.
 * Not a header of its own: no guard. */

/* y[i] = el(x[i], attrs). */
static inline __attribute__((always_inline)) void
EW_NAME(unary_map)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a,
                   EW_T (*el)(EW_T x, const mi_attrs *a))
{
    const EW_T *X = in[0]->data;
    EW_T *Y = o->data;
    for (int64_t i = 0; i < o->numel; i++) {
        EW_T x = X[i];
        Y[i] = el(x, a);
    }
}

/* y[i] = el(a[i], b[i]), broadcasting (a plain loop when neither input
 * broadcasts). */
static inline __attribute__((always_inline)) void
EW_NAME(binary_map)(mi_tensor *o, mi_tensor *const *in, EW_T (*el)(EW_T x, EW_T y))
{
    const EW_T *A = in[0]->data, *B = in[1]->data;
    EW_T *Y = o->data;
    if (mi_same_shape(in[0], o) && mi_same_shape(in[1], o)) {
        for (int64_t i = 0; i < o->numel; i++) {
            EW_T x = A[i], y = B[i];
            Y[i] = el(x, y);
        }
        return;
    }
    bcast w;
    bcast_init(&w, o, in, 2);
    for (int64_t i = 0; i < o->numel; i++, bcast_next(&w)) {
        EW_T x = A[w.off[0]], y = B[w.off[1]];
        Y[i] = el(x, y);
    }
}

/* unary.c's GRAD_KERNELS: y[i] = el(x[i], g[i]), x = input 0 and g = input 1
 * of the same shape. */
static inline __attribute__((always_inline)) void
EW_NAME(grad_map)(mi_tensor *o, mi_tensor *const *in, EW_T (*el)(EW_T x, EW_T g))
{
    const EW_T *X = in[0]->data, *G = in[1]->data;
    EW_T *Y = o->data;
    for (int64_t i = 0; i < o->numel; i++) {
        EW_T x = X[i], g = G[i];
        Y[i] = el(x, g);
    }
}

/* binary.c's where: y = cond != 0 ? a : b, broadcasting all three. */
static inline void EW_NAME(where_map)(mi_tensor *o, mi_tensor *const *in)
{
    const EW_T *C = in[0]->data, *A = in[1]->data, *B = in[2]->data;
    EW_T *Y = o->data;
    bcast w;
    bcast_init(&w, o, in, 3);
    for (int64_t i = 0; i < o->numel; i++, bcast_next(&w))
        Y[i] = C[w.off[0]] != 0 ? A[w.off[1]] : B[w.off[2]];
}
