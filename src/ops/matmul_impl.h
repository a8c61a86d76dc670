/* The REF kernels of matmul, outer and matmul_acc, written once and included
 * by linalg.c per dtype, with MM_T the element type and MM_NAME(x) the name x
 * with the dtype's suffix. Each op's vjp is stated at the op in linalg.c. Not
 * a header of its own: no guard. */
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

/* y[..., i, j] = a[..., i] · b[..., j] */
static void MM_NAME(outer)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    (void)at;
    int nb = o->rank - 2;
    int64_t M = o->shape[nb], N = o->shape[nb + 1];
    int64_t sa[MI_MAX_RANK], sb[MI_MAX_RANK], idx[MI_MAX_RANK] = {0}, oa = 0, ob = 0;
    batch_strides(in[0], 1, nb, M, sa);
    batch_strides(in[1], 1, nb, N, sb);
    int64_t nbatch = mi_shape_numel(nb, o->shape);
    MM_T *Y = o->data;
    for (int64_t q = 0; q < nbatch; q++) {
        const MM_T *A = (const MM_T *)in[0]->data + oa, *B = (const MM_T *)in[1]->data + ob;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) *Y++ = A[i] * B[j];
        batch_next(idx, o->shape, nb, sa, sb, &oa, &ob);
    }
}

/* Y = γ ⊙ C + s · op(A) op(B), C and γ broadcast to the product's shape;
 * in = (A, B, C, γ), s = attrs.scalar. */
static void MM_NAME(matmul_acc)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    gemm_geom g;
    gemm_geom_matmul(&g, o, in, at);
    matmul_acc_fill(o, in[2], in[3]);
    for (int64_t q = 0; q < g.nbatch; q++) {
        const MM_T *A = (const MM_T *)in[0]->data + gemm_batch_offset(&g, g.sa, q);
        const MM_T *B = (const MM_T *)in[1]->data + gemm_batch_offset(&g, g.sb, q);
        MM_T *C = (MM_T *)o->data + q * g.M * g.N;
        for (int64_t i = 0; i < g.M; i++)
            for (int64_t j = 0; j < g.N; j++) {
                MM_T acc = 0;
                for (int64_t k = 0; k < g.K; k++)
                    acc += (g.ta ? A[k * g.M + i] : A[i * g.K + k]) *
                           (g.tb ? B[j * g.K + k] : B[k * g.N + j]);
                C[i * g.N + j] += (MM_T)at->scalar * acc;
            }
    }
}
