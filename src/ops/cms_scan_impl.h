/* cms_scan's kernels, written once and included by cms_scan.c per dtype,
 * with CS_T the element type, CS(x) the name x with the dtype's suffix,
 * CS_GEMM / CS_GEMV / CS_GER the cblas routines and CS_ERF / CS_EXP libm's.
 * The math is stated in cms_scan.c's top comment (Nested Learning Eq. 30–31);
 * here each step names the product it runs. Not a header of its own: no guard. */

/* C = alpha · op(A) op(B) + beta · C, row-major, op(A) [M, K], op(B) [K, N]:
 * one GEMM, or a GEMV for one row (a chunk of one token) and a GER for a
 * rank-1 accumulation (one token's weight step), which OpenBLAS 0.3.21 does
 * not pick by itself. */
static void CS(mm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, CS_T alpha, const CS_T *A,
                   int64_t lda, const CS_T *B, int64_t ldb, CS_T beta, CS_T *C, int64_t ldc)
{
    if (M == 1) {
        if (beta == 0) memset(C, 0, sizeof(CS_T) * (size_t)N); /* C may be uninitialised */
        int inca = ta ? (int)lda : 1;
        if (tb)
            CS_GEMV(CblasRowMajor, CblasNoTrans, (int)N, (int)K, alpha, B, (int)ldb, A, inca,
                    beta, C, 1);
        else
            CS_GEMV(CblasRowMajor, CblasTrans, (int)K, (int)N, alpha, B, (int)ldb, A, inca, beta,
                    C, 1);
        return;
    }
    if (K == 1 && beta == 1) {
        CS_GER(CblasRowMajor, (int)M, (int)N, alpha, A, ta ? 1 : (int)lda, B, tb ? (int)ldb : 1,
               C, (int)ldc);
        return;
    }
    CS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,
            (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* One thread's buffers for a chunk of n ≤ C tokens: [n, h] a, s, gp = gelu'(a),
 * m = W1ᵀ e, dl = δ, p2 and the backward's gs, ga, gd, gm; [n, d] y, e, p1, gy,
 * ge; [n] c1, c2, ns, nu. */
typedef struct CS(buf) {
    CS_T *a, *s, *gp, *m, *dl, *p2, *gs, *ga, *gd, *gm;
    CS_T *y, *e, *p1, *gy, *ge;
    CS_T *c1, *c2, *ns, *nu;
} CS(buf);

static void CS(buf_init)(CS(buf) *b, CS_T *p, int64_t C, int64_t d, int64_t h)
{
    CS_T **nh[] = {&b->a, &b->s, &b->gp, &b->m, &b->dl, &b->p2, &b->gs, &b->ga, &b->gd, &b->gm};
    CS_T **nd[] = {&b->y, &b->e, &b->p1, &b->gy, &b->ge};
    CS_T **n1[] = {&b->c1, &b->c2, &b->ns, &b->nu};
    for (size_t i = 0; i < sizeof nh / sizeof nh[0]; i++, p += C * h) *nh[i] = p;
    for (size_t i = 0; i < sizeof nd / sizeof nd[0]; i++, p += C * d) *nd[i] = p;
    for (size_t i = 0; i < sizeof n1 / sizeof n1[0]; i++, p += C) *n1[i] = p;
}

/* a = u W2ᵀ, s = gelu(a) (exact erf form), gp = gelu'(a) = Φ(a) + a φ(a) when
 * wanted; y = s W1ᵀ: the read of Eq. 30's block. */
static void CS(chunk_read)(const cs_dims *k, const CS_T *W1, const CS_T *W2, const CS_T *U,
                           int64_t n, CS_T *Y, CS(buf) *b, bool want_gp)
{
    int64_t d = k->d, h = k->h;
    CS(mm)(false, true, n, h, d, 1, U, d, W2, d, 0, b->a, h);
    for (int64_t i = 0; i < n * h; i++) {
        CS_T a = b->a[i], Phi = (CS_T)0.5 * (1 + CS_ERF(a * (CS_T)M_SQRT1_2));
        b->s[i] = a * Phi;
        if (want_gp) b->gp[i] = Phi + a * (CS_T)CS_INV_SQRT_2PI * CS_EXP((CS_T)-0.5 * a * a);
    }
    CS(mm)(false, true, n, d, h, 1, b->s, h, W1, h, 0, Y, d);
}

/* After chunk_read with gp: e = y − v, m = e W1, δ = gp ⊙ m, the rates
 * c1 = η/(‖s‖² + hidden_eps), c2 = η/(‖u‖² + eps) (lms; else c = η) with
 * ns, nu their denominators, p1 = c1 e, p2 = c2 δ. */
static void CS(chunk_terms)(const cs_dims *k, const CS_T *W1, const CS_T *U, const CS_T *V,
                            const CS_T *eta, int64_t n, const CS_T *Y, CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    for (int64_t i = 0; i < n * d; i++) b->e[i] = Y[i] - V[i];
    CS(mm)(false, false, n, h, d, 1, b->e, d, W1, h, 0, b->m, h);
    for (int64_t t = 0; t < n; t++) {
        const CS_T *st = b->s + t * h, *ut = U + t * d;
        CS_T ss = 0, uu = 0;
        for (int64_t j = 0; j < h; j++) ss += st[j] * st[j];
        for (int64_t j = 0; j < d; j++) uu += ut[j] * ut[j];
        b->ns[t] = ss + (CS_T)k->heps;
        b->nu[t] = uu + (CS_T)k->eps;
        b->c1[t] = k->lms ? eta[t] / b->ns[t] : eta[t];
        b->c2[t] = k->lms ? eta[t] / b->nu[t] : eta[t];
        for (int64_t j = 0; j < d; j++) b->p1[t * d + j] = b->c1[t] * b->e[t * d + j];
        for (int64_t j = 0; j < h; j++) {
            CS_T dl = b->gp[t * h + j] * b->m[t * h + j];
            b->dl[t * h + j] = dl;
            b->p2[t * h + j] = b->c2[t] * dl;
        }
    }
}

/* Eq. 31's step on the chunk, in place: W1 −= p1ᵀ s, W2 −= p2ᵀ u. */
static void CS(chunk_step)(const cs_dims *k, CS_T *W1, CS_T *W2, const CS_T *U, int64_t n,
                           CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    CS(mm)(true, false, d, h, n, -1, b->p1, d, b->s, h, 1, W1, h);
    CS(mm)(true, false, h, d, n, -1, b->p2, h, U, d, 1, W2, d);
}

/* The read of a chunk into Y, then its step when it makes one. */
static void CS(chunk_forward)(const cs_dims *k, CS_T *W1, CS_T *W2, const CS_T *U, const CS_T *V,
                              const CS_T *eta, int64_t n, bool update, CS_T *Y, CS(buf) *b)
{
    CS(chunk_read)(k, W1, W2, U, n, Y, b, update);
    if (!update) return;
    CS(chunk_terms)(k, W1, U, V, eta, n, Y, b);
    CS(chunk_step)(k, W1, W2, U, n, b);
}

/* The vjp of one chunk read with W = (W1, W2), G = (G1, G2) = ∂L/∂W_{j+1} on
 * entry (zero after the last chunk) and ∂L/∂W_j on return; gy = ∂L/∂y of
 * the chunk; writes gu, gv [n, d], geta [n]. Through the step (update):
 *   gp1 = −s G1ᵀ, gs = −p1 G1, gp2 = −u G2ᵀ, gu = −p2 G2,
 *   gc1 = ⟨gp1, e⟩, gc2 = ⟨gp2, δ⟩, ge = c1 gp1, gδ = c2 gp2,
 *   lms: gη = gc1/ns + gc2/nu, gs −= 2 gc1 c1/ns · s, gu −= 2 gc2 c2/nu · u;
 *   else gη = gc1 + gc2,
 *   gm = gδ ⊙ gelu'(a), ga = gδ ⊙ m ⊙ gelu''(a), gelu'' = φ(a)(2 − a²),
 *   ge += gm W1ᵀ, G1 += eᵀ gm, gv = −ge, gy += ge (e = y − v);
 * through the read y = W1 gelu(W2 u):
 *   gs += gy W1, G1 += gyᵀ s, ga += gs ⊙ gelu'(a), gu += ga W2, G2 += gaᵀ u. */
static void CS(chunk_backward)(const cs_dims *k, const CS_T *W1, const CS_T *W2, CS_T *G1,
                               CS_T *G2, const CS_T *U, const CS_T *V, const CS_T *eta,
                               int64_t n, bool update, const CS_T *gY, CS_T *gU, CS_T *gV,
                               CS_T *geta, CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    CS(chunk_read)(k, W1, W2, U, n, b->y, b, true);
    memcpy(b->gy, gY, sizeof(CS_T) * (size_t)(n * d));
    if (!update) {
        memset(b->gs, 0, sizeof(CS_T) * (size_t)(n * h));
        memset(b->ga, 0, sizeof(CS_T) * (size_t)(n * h));
        memset(gU, 0, sizeof(CS_T) * (size_t)(n * d));
        memset(gV, 0, sizeof(CS_T) * (size_t)(n * d));
        memset(geta, 0, sizeof(CS_T) * (size_t)n);
    } else {
        CS(chunk_terms)(k, W1, U, V, eta, n, b->y, b);
        CS(mm)(false, true, n, d, h, -1, b->s, h, G1, h, 0, b->ge, d);   /* gp1 */
        CS(mm)(false, false, n, h, d, -1, b->p1, d, G1, h, 0, b->gs, h); /* gs */
        CS(mm)(false, true, n, h, d, -1, U, d, G2, d, 0, b->gd, h);      /* gp2 */
        CS(mm)(false, false, n, d, h, -1, b->p2, h, G2, d, 0, gU, d);    /* gu */
        for (int64_t t = 0; t < n; t++) {
            CS_T *ge = b->ge + t * d, *gd = b->gd + t * h, *gs = b->gs + t * h, *gu = gU + t * d;
            const CS_T *e = b->e + t * d, *dl = b->dl + t * h, *m = b->m + t * h;
            const CS_T *a = b->a + t * h, *gp = b->gp + t * h;
            const CS_T *st = b->s + t * h, *ut = U + t * d;
            CS_T gc1 = 0, gc2 = 0, c1 = b->c1[t], c2 = b->c2[t];
            for (int64_t j = 0; j < d; j++) gc1 += ge[j] * e[j];
            for (int64_t j = 0; j < h; j++) gc2 += gd[j] * dl[j];
            if (k->lms) {
                geta[t] = gc1 / b->ns[t] + gc2 / b->nu[t];
                CS_T f1 = -2 * gc1 * c1 / b->ns[t], f2 = -2 * gc2 * c2 / b->nu[t];
                for (int64_t j = 0; j < h; j++) gs[j] += f1 * st[j];
                for (int64_t j = 0; j < d; j++) gu[j] += f2 * ut[j];
            } else {
                geta[t] = gc1 + gc2;
            }
            for (int64_t j = 0; j < d; j++) ge[j] *= c1;
            for (int64_t j = 0; j < h; j++) {
                CS_T gdl = c2 * gd[j];
                CS_T phi = (CS_T)CS_INV_SQRT_2PI * CS_EXP((CS_T)-0.5 * a[j] * a[j]);
                b->gm[t * h + j] = gdl * gp[j];
                b->ga[t * h + j] = gdl * m[j] * phi * (2 - a[j] * a[j]);
            }
        }
        CS(mm)(false, true, n, d, h, 1, b->gm, h, W1, h, 1, b->ge, d); /* ge += gm W1ᵀ */
        CS(mm)(true, false, d, h, n, 1, b->e, d, b->gm, h, 1, G1, h);  /* G1 += eᵀ gm */
        for (int64_t i = 0; i < n * d; i++) {
            gV[i] = -b->ge[i];
            b->gy[i] += b->ge[i];
        }
    }
    CS(mm)(false, false, n, h, d, 1, b->gy, d, W1, h, 1, b->gs, h); /* gs += gy W1 */
    CS(mm)(true, false, d, h, n, 1, b->gy, d, b->s, h, 1, G1, h);   /* G1 += gyᵀ s */
    for (int64_t i = 0; i < n * h; i++) b->ga[i] += b->gs[i] * b->gp[i];
    CS(mm)(false, false, n, d, h, 1, b->ga, h, W2, d, 1, gU, d);    /* gu += ga W2 */
    CS(mm)(true, false, h, d, n, 1, b->ga, h, U, d, 1, G2, d);      /* G2 += gaᵀ u */
}

/* ---------------------------------------------------------------- the op's kernels */
static void CS(cms_scan)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    cs_dims k = cs_dims_of(in, at);
    int64_t B = k.B, T = k.T, d = k.d, h = k.h, C = k.C, wsz = 2 * d * h;
    const CS_T *U = in[0]->data, *V = in[1]->data, *Eta = in[2]->data;
    const CS_T *W10 = in[3]->data, *W20 = in[4]->data;
    CS_T *Y = o->data;
    int n_thr = cs_threads(B, B * T * wsz);
    int64_t per = wsz + cs_buf_elems(C, d, h); /* one thread's weights and buffers */
    mi_scope *sc = mi_scope_current();
    size_t bytes = sizeof(CS_T) * (size_t)(per * n_thr);
    CS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) { /* kernels cannot fail: zeros, never uninitialised memory */
        memset(o->data, 0, sizeof(CS_T) * (size_t)o->numel);
        return;
    }
    blas_single_thread_once();
    CS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t bi = 0; bi < B; bi++) {
        CS_T *W1 = scratch + per * cs_thread(), *W2 = W1 + d * h;
        CS(buf) buf;
        CS(buf_init)(&buf, W1 + wsz, C, d, h);
        memcpy(W1, W10, sizeof(CS_T) * (size_t)(d * h));
        memcpy(W2, W20, sizeof(CS_T) * (size_t)(d * h));
        for (int64_t t0 = 0; t0 < T; t0 += C) {
            int64_t n = t0 + C < T ? C : T - t0, bt = bi * T + t0;
            CS(chunk_forward)(&k, W1, W2, U + bt * d, V + bt * d, Eta + bt, n, t0 + n < T,
                              Y + bt * d, &buf);
        }
    }
    mi_scope_release(sc, scratch, bytes);
}

/* Per sequence: a forward pass keeps the weights of every K-th chunk
 * (checkpoints, K = ⌈√n_chunks⌉); then segment by segment from the last, the
 * segment's weights are recomputed from its checkpoint and the chunks run
 * backwards through chunk_backward. (⌈n/K⌉ + K + 1) weight copies a thread. */
static void CS(cms_scan_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    cs_dims k = cs_dims_of(in, at);
    int64_t B = k.B, T = k.T, d = k.d, h = k.h, C = k.C, wsz = 2 * d * h;
    int64_t n_chunks = (T + C - 1) / C, K = cs_segment(n_chunks), ncp = (n_chunks + K - 1) / K;
    const CS_T *U = in[0]->data, *V = in[1]->data, *Eta = in[2]->data;
    const CS_T *W10 = in[3]->data, *W20 = in[4]->data, *GY = in[5]->data;
    CS_T *gU = o->data, *gV = gU + B * T * d, *gEta = gV + B * T * d;
    CS_T *gW = gEta + B * T; /* gw1 [d, h] then gw2 [h, d] */
    int n_thr = cs_threads(B, 4 * B * T * wsz);
    int64_t per = (ncp + K + 1) * wsz + cs_buf_elems(C, d, h);
    mi_scope *sc = mi_scope_current();
    size_t bytes = sizeof(CS_T) * (size_t)(per * n_thr + B * wsz);
    CS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) {
        memset(o->data, 0, sizeof(CS_T) * (size_t)o->numel);
        return;
    }
    CS_T *G_all = scratch + per * n_thr; /* each sequence's ∂L/∂θ_0, summed in order below */
    blas_single_thread_once();
    CS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t bi = 0; bi < B; bi++) {
        CS_T *cp = scratch + per * cs_thread(), *seg = cp + ncp * wsz, *cur = seg + K * wsz;
        CS(buf) buf;
        CS(buf_init)(&buf, cur + wsz, C, d, h);
        const CS_T *Ub = U + bi * T * d, *Vb = V + bi * T * d, *Eb = Eta + bi * T;
        CS_T *G1 = G_all + bi * wsz, *G2 = G1 + d * h;
        memcpy(cur, W10, sizeof(CS_T) * (size_t)(d * h));
        memcpy(cur + d * h, W20, sizeof(CS_T) * (size_t)(d * h));
        memcpy(cp, cur, sizeof(CS_T) * (size_t)wsz);
        for (int64_t j = 0; j + 1 < n_chunks; j++) { /* every chunk but the last updates */
            CS(chunk_forward)(&k, cur, cur + d * h, Ub + j * C * d, Vb + j * C * d, Eb + j * C,
                              C, true, buf.y, &buf);
            if ((j + 1) % K == 0) memcpy(cp + (j + 1) / K * wsz, cur, sizeof(CS_T) * (size_t)wsz);
        }
        memset(G1, 0, sizeof(CS_T) * (size_t)wsz);
        for (int64_t s = ncp - 1; s >= 0; s--) {
            int64_t j0 = s * K, j1 = j0 + K < n_chunks ? j0 + K : n_chunks;
            memcpy(seg, cp + s * wsz, sizeof(CS_T) * (size_t)wsz);
            for (int64_t j = j0; j + 1 < j1; j++) {
                CS_T *w = seg + (j - j0 + 1) * wsz;
                memcpy(w, w - wsz, sizeof(CS_T) * (size_t)wsz);
                CS(chunk_forward)(&k, w, w + d * h, Ub + j * C * d, Vb + j * C * d, Eb + j * C,
                                  C, true, buf.y, &buf);
            }
            for (int64_t j = j1 - 1; j >= j0; j--) {
                const CS_T *w = seg + (j - j0) * wsz;
                int64_t t0 = j * C, n = t0 + C < T ? C : T - t0, bt = bi * T + t0;
                CS(chunk_backward)(&k, w, w + d * h, G1, G2, Ub + t0 * d, Vb + t0 * d, Eb + t0,
                                   n, j + 1 < n_chunks, GY + bt * d, gU + bt * d, gV + bt * d,
                                   gEta + bt, &buf);
            }
        }
    }
    memcpy(gW, G_all, sizeof(CS_T) * (size_t)wsz);
    for (int64_t bi = 1; bi < B; bi++)
        for (int64_t i = 0; i < wsz; i++) gW[i] += G_all[bi * wsz + i];
    mi_scope_release(sc, scratch, bytes);
}
