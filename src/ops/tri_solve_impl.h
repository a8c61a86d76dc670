/* tri_solve's kernel, written once and included by linalg.c per dtype, with
 * TS_T the element type and TS_NAME(x) the name x with the dtype's suffix.
 * Not a header of its own: no guard. */
static void TS_NAME(tri_solve)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    const mi_tensor *l = in[0], *b = in[1];
    int nb = o->rank - 2;
    int64_t n = o->shape[nb], m = o->shape[nb + 1];
    int64_t sl[MI_MAX_RANK], sb[MI_MAX_RANK], idx[MI_MAX_RANK] = {0}, ol = 0, ob = 0;
    batch_strides(l, 2, nb, n * n, sl);
    batch_strides(b, 2, nb, n * m, sb);
    int64_t nbatch = mi_shape_numel(nb, o->shape);
    for (int64_t q = 0; q < nbatch; q++) {
        const TS_T *L = (const TS_T *)l->data + ol, *B = (const TS_T *)b->data + ob;
        TS_T *X = (TS_T *)o->data + q * n * m;
        for (int64_t s = 0; s < n; s++) {
            int64_t i = at->trans_a ? n - 1 - s : s;
            TS_T *x = X + i * m;
            for (int64_t c = 0; c < m; c++) x[c] = B[i * m + c];
            int64_t j0 = at->trans_a ? i + 1 : 0, j1 = at->trans_a ? n : i;
            for (int64_t j = j0; j < j1; j++) {
                TS_T lij = at->trans_a ? L[j * n + i] : L[i * n + j];
                const TS_T *xj = X + j * m;
                for (int64_t c = 0; c < m; c++) x[c] -= lij * xj[c];
            }
        }
        batch_next(idx, o->shape, nb, sl, sb, &ol, &ob);
    }
}
