/* matmul's REF kernel, written once and included by linalg.c per dtype, with
 * MM_T the element type and MM_NAME(x) the name x with the dtype's suffix.
 * Not a header of its own: no guard. */
static void MM_NAME(matmul)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    const mi_tensor *a = in[0], *b = in[1];
    bool ta = at->trans_a, tb = at->trans_b;
    int nb = o->rank - 2;
    int64_t M = o->shape[nb], N = o->shape[nb + 1];
    int64_t K = ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    /* op(A)[i,k] = A[i*sai + k*sak];  B is [K,N] (tb = 0) or [N,K] (tb = 1) */
    int64_t sai = ta ? 1 : K, sak = ta ? M : 1;
    int64_t sa[MI_MAX_RANK], sb[MI_MAX_RANK], idx[MI_MAX_RANK] = {0}, oa = 0, ob = 0;
    batch_strides(a, 2, nb, M * K, sa);
    batch_strides(b, 2, nb, K * N, sb);
    int64_t nbatch = mi_shape_numel(nb, o->shape);
    for (int64_t q = 0; q < nbatch; q++) {
        const MM_T *A = (const MM_T *)a->data + oa, *B = (const MM_T *)b->data + ob;
        MM_T *C = (MM_T *)o->data + q * M * N;
        if (!tb) { /* i-k-j: C[i,:] += op(A)[i,k] · B[k,:] */
            for (int64_t i = 0; i < M; i++) {
                MM_T *c = C + i * N;
                for (int64_t j = 0; j < N; j++) c[j] = 0;
                for (int64_t k = 0; k < K; k++) {
                    MM_T aik = A[i * sai + k * sak];
                    const MM_T *bk = B + k * N;
                    for (int64_t j = 0; j < N; j++) c[j] += aik * bk[j];
                }
            }
        } else { /* i-j-k: C[i,j] = op(A)[i,:] · B[j,:] */
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    const MM_T *bj = B + j * K, *ai = A + i * sai;
                    MM_T acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += ai[k * sak] * bj[k];
                    C[i * N + j] = acc;
                }
        }
        batch_next(idx, o->shape, nb, sa, sb, &oa, &ob);
    }
}
