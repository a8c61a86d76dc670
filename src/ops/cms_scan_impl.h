/* cms_scan's kernels, written once and included by cms_scan.c per dtype,
 * with CS_T the element type, CS(x) the name x with the dtype's suffix,
 * CS_GEMM / CS_GEMV / CS_GER the cblas routines, CS_SMALL_GEMM the small
 * products' loops (or false), CS_GELU_PAIR(a, s, gp, n)
 * (s = gelu(a), gp = gelu'(a)) and CS_GELU_SECOND(a, y, n) (y = gelu''(a)) on
 * arrays of n.
 * The math is stated in cms_scan.c's top comment (Nested Learning Eq. 30–31);
 * here each step names the product it runs. Not a header of its own: no guard. */

/* C = alpha · op(A) op(B) + beta · C, row-major, op(A) [M, K], op(B) [K, N]:
 * CS_SMALL_GEMM's loops for a chunk of a few tokens where it has them (OWN),
 * else one GEMM, or a GEMV for one row (a chunk of one token) and a GER for a
 * rank-1 accumulation (one token's weight step), which OpenBLAS 0.3.21 does
 * not pick by itself. */
static void CS(mm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, CS_T alpha, const CS_T *A,
                   int64_t lda, const CS_T *B, int64_t ldb, CS_T beta, CS_T *C, int64_t ldc)
{
    if (CS_SMALL_GEMM(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
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

/* Y = beta Y + alpha · X op(W + σ Pᵀ Z), op = identity or ᵀ (tw), for a
 * matrix kept as W and m rank-one terms not yet added (P [m, rows of W], Z
 * [m, columns]): the weights a segment's first m steps left (σ = −1: P the
 * steps' p, Z their inputs) or a gradient with the terms of the chunks after
 * (σ = 1). X op(W) and then the rank-m correction,
 *   X (W + σ Pᵀ Z) = X W + σ (X Pᵀ) Z,   X (W + σ Pᵀ Z)ᵀ = X Wᵀ + σ (X Zᵀ) P,
 * so neither is formed (tmp: [n, m]). */
static void CS(mm_steps)(bool tw, int64_t n, int64_t N, int64_t K, CS_T alpha, const CS_T *X,
                         int64_t ldx, const CS_T *W, int64_t ldw, CS_T beta, int64_t m,
                         CS_T sigma, const CS_T *P, const CS_T *Z, CS_T *tmp, CS_T *Y,
                         int64_t ldy)
{
    if (W) CS(mm)(false, tw, n, N, K, alpha, X, ldx, W, ldw, beta, Y, ldy);
    if (m == 0) return;
    /* tw: W is [N, K], P [m, N], Z [m, K]; else W is [K, N], P [m, K], Z [m, N] */
    const CS_T *inner = tw ? Z : P, *outer = tw ? P : Z;
    CS(mm)(false, true, n, m, K, 1, X, ldx, inner, K, 0, tmp, m);
    CS(mm)(false, false, n, N, m, sigma * alpha, tmp, m, outer, N, 1, Y, ldy);
}

/* W1 [d, h] and its gradient are held as they are or transposed, [h, d]
 * (k->w1t, from CS_W1T: cms_scan.c says which runs faster where). Held
 * transposed, a product X op(W1 + σ P1ᵀ S) flips op, and its rank-m factors
 * trade places: W1ᵀ + σ Sᵀ P1. */
static void CS(mm_w1)(const cs_dims *k, bool tw, int64_t n, int64_t N, int64_t K, CS_T alpha,
                      const CS_T *X, int64_t ldx, const CS_T *W1, CS_T beta, int64_t m,
                      CS_T sigma, const CS_T *P1, const CS_T *S, CS_T *tmp, CS_T *Y, int64_t ldy)
{
    if (k->w1t)
        CS(mm_steps)(!tw, n, N, K, alpha, X, ldx, W1, k->d, beta, m, sigma, S, P1, tmp, Y, ldy);
    else
        CS(mm_steps)(tw, n, N, K, alpha, X, ldx, W1, k->h, beta, m, sigma, P1, S, tmp, Y, ldy);
}

/* W1 += alpha Aᵀ B (A [n, d], B [n, h]), W1 held either way. */
static void CS(w1_add)(const cs_dims *k, int64_t n, CS_T alpha, const CS_T *A, int64_t lda,
                       const CS_T *B, int64_t ldb, CS_T *W1)
{
    if (k->w1t) CS(mm)(true, false, k->h, k->d, n, alpha, B, ldb, A, lda, 1, W1, k->d);
    else CS(mm)(true, false, k->d, k->h, n, alpha, A, lda, B, ldb, 1, W1, k->h);
}

/* t [cols, rows] = aᵀ, a [rows, cols] */
static void CS(transpose)(const CS_T *a, int64_t rows, int64_t cols, CS_T *t)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) t[j * rows + i] = a[i * cols + j];
}

/* A chunk's activations, kept per token: a = W2 u, s = gelu(a), gp = gelu'(a),
 * y = W1 s, m = W1ᵀ e, the rates c1, c2 and their denominators ns, nu. The
 * forward points them at one chunk's buffers (y at the output), the backward
 * at a whole sequence's, so that its second pass needs no read. */
typedef struct CS(act) {
    CS_T *a, *s, *gp, *m, *y, *c1, *c2, *ns, *nu;
} CS(act);

/* The act of n tokens from t0 in arrays of a sequence (or a chunk: t0 = 0). */
static CS(act) CS(act_at)(const CS(act) *x, int64_t t0, int64_t d, int64_t h)
{
    return (CS(act)){x->a + t0 * h, x->s + t0 * h, x->gp + t0 * h, x->m + t0 * h, x->y + t0 * d,
                     x->c1 + t0, x->c2 + t0, x->ns + t0, x->nu + t0};
}

/* Carves an act of n tokens from p; returns the end. */
static CS_T *CS(act_carve)(CS(act) *x, CS_T *p, int64_t n, int64_t d, int64_t h)
{
    CS_T **nh[] = {&x->a, &x->s, &x->gp, &x->m};
    CS_T **n1[] = {&x->c1, &x->c2, &x->ns, &x->nu};
    for (size_t i = 0; i < 4; i++, p += n * h) *nh[i] = p;
    for (size_t i = 0; i < 4; i++, p += n) *n1[i] = p;
    x->y = p;
    return p + n * d;
}

/* One thread's work buffers for a chunk of n ≤ C tokens: [n, h] dl = δ, p2,
 * gs, ga, gd; [2n, h] gms = [gm; s]; [n, d] p1, ge; [2n, d] eg = [e; gy] (the
 * stacked pairs make G1 += eᵀ gm + gyᵀ s one product). */
typedef struct CS(buf) {
    CS_T *dl, *p2, *gs, *ga, *gd, *gms, *p1, *ge, *eg;
} CS(buf);

static CS_T *CS(buf_carve)(CS(buf) *b, CS_T *p, int64_t C, int64_t d, int64_t h)
{
    CS_T **nh[] = {&b->dl, &b->p2, &b->gs, &b->ga, &b->gd};
    for (size_t i = 0; i < 5; i++, p += C * h) *nh[i] = p;
    b->gms = p, p += 2 * C * h;
    b->p1 = p, p += C * d;
    b->ge = p, p += C * d;
    b->eg = p, p += 2 * C * d;
    return p;
}

/* a = u W2ᵀ, s = gelu(a) (exact erf form), gp = gelu'(a) = Φ(a) + a φ(a);
 * y = s W1ᵀ: the read of Eq. 30's block. */
static void CS(chunk_read)(const cs_dims *k, const CS_T *W1, const CS_T *W2, const CS_T *U,
                           int64_t n, const CS(act) *x)
{
    int64_t d = k->d, h = k->h;
    CS(mm)(false, true, n, h, d, 1, U, d, W2, d, 0, x->a, h);
    CS_GELU_PAIR(x->a, x->s, x->gp, n * h);
    CS(mm_w1)(k, true, n, d, h, 1, x->s, h, W1, 0, 0, 0, NULL, NULL, NULL, x->y, d);
}

/* From the act (m and the rates set): e = y − v (in eg), p1 = c1 e, δ = gp ⊙ m,
 * p2 = c2 δ. */
static void CS(chunk_p)(const cs_dims *k, const CS_T *V, int64_t n, const CS(act) *x, CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t j = 0; j < d; j++) {
            CS_T e = x->y[t * d + j] - V[t * d + j];
            b->eg[t * d + j] = e;
            b->p1[t * d + j] = x->c1[t] * e;
        }
        for (int64_t j = 0; j < h; j++) {
            CS_T dl = x->gp[t * h + j] * x->m[t * h + j];
            b->dl[t * h + j] = dl;
            b->p2[t * h + j] = x->c2[t] * dl;
        }
    }
}

/* With e (in eg) and m set: the rates c1 = η/(‖s‖² + hidden_eps),
 * c2 = η/(‖u‖² + eps) (lms; else c = η) with ns, nu their denominators,
 * then chunk_p. */
static void CS(chunk_rates)(const cs_dims *k, const CS_T *U, const CS_T *V, const CS_T *eta,
                            int64_t n, const CS(act) *x, CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    for (int64_t t = 0; t < n; t++) {
        const CS_T *st = x->s + t * h, *ut = U + t * d;
        CS_T ss = 0, uu = 0;
        for (int64_t j = 0; j < h; j++) ss += st[j] * st[j];
        for (int64_t j = 0; j < d; j++) uu += ut[j] * ut[j];
        x->ns[t] = ss + (CS_T)k->heps;
        x->nu[t] = uu + (CS_T)k->eps;
        x->c1[t] = k->lms ? eta[t] / x->ns[t] : eta[t];
        x->c2[t] = k->lms ? eta[t] / x->nu[t] : eta[t];
    }
    CS(chunk_p)(k, V, n, x, b);
}

/* After chunk_read: m = e W1 (e = y − v), then chunk_rates. */
static void CS(chunk_terms)(const cs_dims *k, const CS_T *W1, const CS_T *U, const CS_T *V,
                            const CS_T *eta, int64_t n, const CS(act) *x, CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    for (int64_t i = 0; i < n * d; i++) b->eg[i] = x->y[i] - V[i];
    CS(mm_w1)(k, false, n, h, d, 1, b->eg, d, W1, 0, 0, 0, NULL, NULL, NULL, x->m, h);
    CS(chunk_rates)(k, U, V, eta, n, x, b);
}

/* Eq. 31's step on the chunk, in place: W1 −= p1ᵀ s, W2 −= p2ᵀ u. */
static void CS(chunk_step)(const cs_dims *k, CS_T *W1, CS_T *W2, const CS_T *U, int64_t n,
                           const CS(act) *x, const CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    CS(w1_add)(k, n, -1, b->p1, d, x->s, h, W1);
    CS(mm)(true, false, h, d, n, -1, b->p2, h, U, d, 1, W2, d);
}

/* The read of a chunk, then its step when it makes one. */
static void CS(chunk_forward)(const cs_dims *k, CS_T *W1, CS_T *W2, const CS_T *U, const CS_T *V,
                              const CS_T *eta, int64_t n, bool update, const CS(act) *x,
                              CS(buf) *b)
{
    CS(chunk_read)(k, W1, W2, U, n, x);
    if (!update) return;
    CS(chunk_terms)(k, W1, U, V, eta, n, x, b);
    CS(chunk_step)(k, W1, W2, U, n, x, b);
}

/* One-token chunks (C = 1), n of them from the weights W (updated in place
 * at the end): the first n_up tokens step. Token i reads and steps with
 * W_i = W − Pᵀ Z, the i steps before it (mm_steps), so that W itself
 * changes once, by two rank-n_up products, and W2 u is one product for all
 * n tokens:
 *   a_i = (U W2ᵀ)_i − Σ_{j<i} (u_j·u_i) p2_j,   y_i = W1_i s_i,   m_i = W1_iᵀ e_i
 * (equal to the per-token scan to rounding). sc: p1 [n, d], p2 [n, h],
 * gram [n, n], tmp [n]. */
static void CS(tokens_forward)(const cs_dims *k, CS_T *W1, CS_T *W2, const CS_T *U,
                               const CS_T *V, const CS_T *eta, int64_t n, int64_t n_up,
                               const CS(act) *x, CS(buf) *b, CS_T *sc)
{
    int64_t d = k->d, h = k->h;
    CS_T *P1 = sc, *P2 = P1 + n * d, *gram = P2 + n * h, *tmp = gram + n * n;
    CS(mm)(false, true, n, h, d, 1, U, d, W2, d, 0, x->a, h);             /* U W2ᵀ */
    CS(mm)(false, true, n, n, d, 1, U, d, U, d, 0, gram, n);              /* U Uᵀ */
    for (int64_t i = 0; i < n; i++) {
        CS(act) xi = CS(act_at)(x, i, d, h);
        if (i > 0) CS(mm)(false, false, 1, h, i, -1, gram + i * n, n, P2, h, 1, xi.a, h);
        CS_GELU_PAIR(xi.a, xi.s, xi.gp, h);
        CS(mm_w1)(k, true, 1, d, h, 1, xi.s, h, W1, 0, i, -1, P1, x->s, tmp, xi.y, d);
        if (i >= n_up) continue;
        for (int64_t j = 0; j < d; j++) b->eg[j] = xi.y[j] - V[i * d + j];
        CS(mm_w1)(k, false, 1, h, d, 1, b->eg, d, W1, 0, i, -1, P1, x->s, tmp, xi.m, h);
        CS(chunk_rates)(k, U + i * d, V + i * d, eta + i, 1, &xi, b);
        memcpy(P1 + i * d, b->p1, sizeof(CS_T) * (size_t)d);
        memcpy(P2 + i * h, b->p2, sizeof(CS_T) * (size_t)h);
    }
    if (n_up == 0) return;
    CS(w1_add)(k, n_up, -1, P1, d, x->s, h, W1);                         /* W1 −= P1ᵀ S */
    CS(mm)(true, false, h, d, n_up, -1, P2, h, U, d, 1, W2, d);          /* W2 −= P2ᵀ U */
}

/* The weights a chunk was read with, as its segment's checkpoint (W1, W2)
 * and the m steps the segment took before it: W1_j = W1 − P1ᵀ S,
 * W2_j = W2 − P2ᵀ U (P1 [m, d] = c1 e, P2 [m, h] = c2 δ, S [m, h], U [m, d]
 * the tokens' hidden activations and inputs); tmp [C, m] scratch. */
typedef struct CS(steps) {
    const CS_T *W1, *W2, *P1, *P2, *S, *U;
    int64_t m;
    CS_T *tmp;
} CS(steps);

/* ∂L/∂W_{j+1} on entry to a chunk's backward as G1 [d, h] (held as W1 is:
 * mm_w1), G2 [h, d] plus the terms of the later chunks of its segment not
 * yet added, G1 + A1ᵀ B1, G2 + A2ᵀ B2 (r1, r2 rows: [e; gy] and [gm; s], ga
 * and u); the chunk's own terms go to A1n, B1n, A2n (NULL: into G1, G2 at
 * once). */
typedef struct CS(grad) {
    CS_T *G1, *G2;
    const CS_T *A1, *B1, *A2, *B2;
    int64_t r1, r2;
    CS_T *A1n, *B1n, *A2n;
    const CS_T *pre; /* one token's −s G1ᵀ, −p1 G1, −u G2ᵀ, −p2 G2 with G1, G2 (or NULL) */
} CS(grad);

/* For the n one-token chunks of a segment from token ts, with the gradient
 * G1, G2 at its end: each token's −s G1ᵀ [d], −p1 G1 [h], −u G2ᵀ [h],
 * −p2 G2 [d], side by side in pre (a row of 2d + 2h a token), as four
 * products over all n tokens (p1, p2 [n, …] the segment's steps). */
static void CS(grad_pre)(const cs_dims *k, const CS_T *G1, const CS_T *G2, const CS_T *U,
                         const CS(act) *xs, int64_t ts, int64_t n, const CS_T *P1,
                         const CS_T *P2, CS_T *pre)
{
    int64_t d = k->d, h = k->h, ld = 2 * d + 2 * h;
    CS(mm_w1)(k, true, n, d, h, -1, xs->s + ts * h, h, G1, 0, 0, 0, NULL, NULL, NULL, pre, ld);
    CS(mm_w1)(k, false, n, h, d, -1, P1, d, G1, 0, 0, 0, NULL, NULL, NULL, pre + d, ld);
    CS(mm)(false, true, n, h, d, -1, U, d, G2, d, 0, pre + d + h, ld);
    CS(mm)(false, false, n, d, h, -1, P2, h, G2, d, 0, pre + d + 2 * h, ld);
}

/* Y = −X op(G + A1ᵀ B1) for a gradient kept as G and r later terms (G NULL:
 * Y holds −X op(G) already, the terms are added). */
static void CS(mm_base)(bool tw, int64_t n, int64_t N, int64_t K, const CS_T *X, int64_t ldx,
                        const CS_T *G, int64_t r, const CS_T *A, const CS_T *B, CS_T *tmp,
                        CS_T *Y, int64_t ldy)
{
    CS(mm_steps)(tw, n, N, K, -1, X, ldx, G, tw ? K : N, 0, r, 1, A, B, tmp, Y, ldy);
}

/* The vjp of one chunk read with W = (W1, W2) (w: its segment's checkpoint and
 * steps), its act x as the forward left it; G = (G1, G2) = ∂L/∂W_{j+1} on
 * entry (zero after the last chunk; g: with its deferred terms) and ∂L/∂W_j
 * on return (or its terms deferred); gy = ∂L/∂y of the chunk; writes gu, gv
 * [n, d], geta [n].
 * Through the step (update):
 *   gp1 = −s G1ᵀ, gs = −p1 G1, gp2 = −u G2ᵀ, gu = −p2 G2,
 *   gc1 = ⟨gp1, e⟩, gc2 = ⟨gp2, δ⟩, ge = c1 gp1, gδ = c2 gp2,
 *   lms: gη = gc1/ns + gc2/nu, gs −= 2 gc1 c1/ns · s, gu −= 2 gc2 c2/nu · u;
 *   else gη = gc1 + gc2,
 *   gm = gδ ⊙ gelu'(a), ga = gδ ⊙ m ⊙ gelu''(a), gelu'' = φ(a)(2 − a²),
 *   ge += gm W1ᵀ, G1 += eᵀ gm, gv = −ge, gy += ge (e = y − v);
 * through the read y = W1 gelu(W2 u):
 *   gs += gy W1, G1 += gyᵀ s, ga += gs ⊙ gelu'(a), gu += ga W2, G2 += gaᵀ u. */
static void CS(chunk_backward)(const cs_dims *k, const CS(steps) *w, const CS(grad) *g,
                               const CS_T *U, const CS_T *V, int64_t n, bool update,
                               const CS(act) *x, const CS_T *gY, CS_T *gU, CS_T *gV,
                               CS_T *geta, CS(buf) *b)
{
    int64_t d = k->d, h = k->h;
    const CS_T *W1 = w->W1, *W2 = w->W2;
    /* eg = [e; gy] and gms = [gm; s] when the chunk updates, else gy and s alone */
    CS_T *gy = update ? b->eg + n * d : b->eg, *gs_s = update ? b->gms + n * h : b->gms;
    memcpy(gy, gY, sizeof(CS_T) * (size_t)(n * d));
    memcpy(gs_s, x->s, sizeof(CS_T) * (size_t)(n * h));
    if (!update) {
        memset(b->gs, 0, sizeof(CS_T) * (size_t)(n * h));
        memset(b->ga, 0, sizeof(CS_T) * (size_t)(n * h));
        memset(gU, 0, sizeof(CS_T) * (size_t)(n * d));
        memset(gV, 0, sizeof(CS_T) * (size_t)(n * d));
        memset(geta, 0, sizeof(CS_T) * (size_t)n);
    } else {
        CS(chunk_p)(k, V, n, x, b);
        /* gp1 = −s G1ᵀ, gs = −p1 G1, gp2 = −u G2ᵀ, gu = −p2 G2: the products with
           the base G taken here or before (pre: one token), then the later terms */
        const CS_T *G1 = g->G1, *G2 = g->G2;
        if (g->pre) {
            memcpy(b->ge, g->pre, sizeof(CS_T) * (size_t)d);
            memcpy(b->gs, g->pre + d, sizeof(CS_T) * (size_t)h);
            memcpy(b->gd, g->pre + d + h, sizeof(CS_T) * (size_t)h);
            memcpy(gU, g->pre + d + 2 * h, sizeof(CS_T) * (size_t)d);
            G1 = G2 = NULL; /* no base product below: the corrections alone */
        }
        CS(mm_w1)(k, true, n, d, h, -1, x->s, h, G1, 0, g->r1, 1, g->A1, g->B1, w->tmp, b->ge, d);
        CS(mm_w1)(k, false, n, h, d, -1, b->p1, d, G1, 0, g->r1, 1, g->A1, g->B1, w->tmp, b->gs,
                  h);
        CS(mm_base)(true, n, h, d, U, d, G2, g->r2, g->A2, g->B2, w->tmp, b->gd, h);
        CS_GELU_SECOND(x->a, b->ga, n * h);                              /* gelu''(a) */
        CS(mm_base)(false, n, d, h, b->p2, h, G2, g->r2, g->A2, g->B2, w->tmp, gU, d);
        for (int64_t t = 0; t < n; t++) {
            CS_T *ge = b->ge + t * d, *gd = b->gd + t * h, *gs = b->gs + t * h, *gu = gU + t * d;
            const CS_T *e = b->eg + t * d, *dl = b->dl + t * h, *m = x->m + t * h;
            const CS_T *gp = x->gp + t * h;
            const CS_T *st = x->s + t * h, *ut = U + t * d;
            CS_T gc1 = 0, gc2 = 0, c1 = x->c1[t], c2 = x->c2[t];
            for (int64_t j = 0; j < d; j++) gc1 += ge[j] * e[j];
            for (int64_t j = 0; j < h; j++) gc2 += gd[j] * dl[j];
            if (k->lms) {
                geta[t] = gc1 / x->ns[t] + gc2 / x->nu[t];
                CS_T f1 = -2 * gc1 * c1 / x->ns[t], f2 = -2 * gc2 * c2 / x->nu[t];
                for (int64_t j = 0; j < h; j++) gs[j] += f1 * st[j];
                for (int64_t j = 0; j < d; j++) gu[j] += f2 * ut[j];
            } else {
                geta[t] = gc1 + gc2;
            }
            for (int64_t j = 0; j < d; j++) ge[j] *= c1;
            for (int64_t j = 0; j < h; j++) {
                CS_T gdl = c2 * gd[j];
                b->gms[t * h + j] = gdl * gp[j];
                b->ga[t * h + j] *= gdl * m[j];
            }
        }
        /* ge += gm W1ᵀ */
        CS(mm_w1)(k, true, n, d, h, 1, b->gms, h, W1, 1, w->m, -1, w->P1, w->S, w->tmp, b->ge,
                  d);
        for (int64_t i = 0; i < n * d; i++) {
            gV[i] = -b->ge[i];
            gy[i] += b->ge[i];
        }
    }
    int64_t n2 = update ? 2 * n : n;
    /* gs += gy W1 */
    CS(mm_w1)(k, false, n, h, d, 1, gy, d, W1, 1, w->m, -1, w->P1, w->S, w->tmp, b->gs, h);
    for (int64_t i = 0; i < n * h; i++) b->ga[i] += b->gs[i] * x->gp[i];
    CS(mm_steps)(false, n, d, h, 1, b->ga, h, W2, d, 1, w->m, -1, w->P2, w->U, w->tmp, gU,
                 d);                                                     /* gu += ga W2 */
    if (g->A1n) { /* G1 += eᵀ gm + gyᵀ s, G2 += gaᵀ u, for the segment's end */
        memcpy(g->A1n, b->eg, sizeof(CS_T) * (size_t)(n2 * d));
        memcpy(g->B1n, b->gms, sizeof(CS_T) * (size_t)(n2 * h));
        memcpy(g->A2n, b->ga, sizeof(CS_T) * (size_t)(n * h));
    } else {
        CS(w1_add)(k, n2, 1, b->eg, d, b->gms, h, g->G1);
        CS(mm)(true, false, h, d, n, 1, b->ga, h, U, d, 1, g->G2, d);
    }
}

/* ---------------------------------------------------------------- the op's kernels
 * With attrs.data (mi_cms_scan when the op is recorded) the forward also
 * keeps what the backward would otherwise run it again for: per sequence,
 * every token's act and the weights after the last step, cs_saved_elems
 * elements from attrs.data + bi · cs_saved_elems. */
static void CS(cms_scan)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    cs_dims k = cs_dims_of(in, at);
    k.w1t = CS_W1T(k.C);
    int64_t B = k.B, T = k.T, d = k.d, h = k.h, C = k.C, wsz = 2 * d * h;
    const CS_T *U = in[0]->data, *V = in[1]->data, *Eta = in[2]->data;
    const CS_T *W10 = in[3]->data, *W20 = in[4]->data;
    CS_T *Y = o->data, *saved = (CS_T *)(uintptr_t)at->data;
    int n_thr = scan_threads(B, B * T * wsz);
    /* C = 1: tokens_forward over segments of L tokens, else chunk by chunk */
    int64_t L = C == 1 ? scan_segment(T) : C;
    int64_t per = wsz + cs_act_elems(L, d, h) + cs_buf_elems(C, d, h) +
                  (C == 1 ? cs_tokens_elems(L, d, h) : 0); /* one thread's */
    mi_scope *sc = mi_scope_current();
    size_t bytes = sizeof(CS_T) * (size_t)(per * n_thr + d * h);
    CS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) { /* kernels cannot fail: zeros, never uninitialised memory */
        memset(o->data, 0, sizeof(CS_T) * (size_t)o->numel);
        return;
    }
    const CS_T *W1h = W10; /* W1 as held */
    if (k.w1t) CS(transpose)(W10, d, h, scratch + per * n_thr), W1h = scratch + per * n_thr;
    blas_single_thread_once();
    CS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t bi = 0; bi < B; bi++) {
        CS_T *W1 = scratch + per * scan_thread(), *W2 = W1 + d * h;
        CS(act) x;
        CS(buf) buf;
        CS_T *tsc = CS(buf_carve)(&buf, CS(act_carve)(&x, W1 + wsz, L, d, h), C, d, h);
        memcpy(W1, W1h, sizeof(CS_T) * (size_t)(d * h));
        memcpy(W2, W20, sizeof(CS_T) * (size_t)(d * h));
        CS(act) xk; /* the sequence's acts, kept for the backward */
        CS_T *w_end = saved ? CS(act_carve)(&xk, saved + bi * cs_saved_elems(T, d, h), T, d, h)
                            : NULL;
        for (int64_t t0 = 0; t0 < T; t0 += L) {
            int64_t n = t0 + L < T ? L : T - t0, bt = bi * T + t0;
            if (saved) x = CS(act_at)(&xk, t0, d, h);
            else x.y = Y + bt * d; /* the read goes straight to the output */
            if (C == 1)
                CS(tokens_forward)(&k, W1, W2, U + bt * d, V + bt * d, Eta + bt, n,
                                   t0 + n < T ? n : n - 1, &x, &buf, tsc);
            else
                CS(chunk_forward)(&k, W1, W2, U + bt * d, V + bt * d, Eta + bt, n, t0 + n < T,
                                  &x, &buf);
            if (saved) memcpy(Y + bt * d, x.y, sizeof(CS_T) * (size_t)(n * d));
        }
        if (saved) memcpy(w_end, W1, sizeof(CS_T) * (size_t)wsz);
    }
    mi_scope_release(sc, scratch, bytes);
}

/* Per sequence: the forward again, keeping every token's act and the weights
 * of every K-th chunk (checkpoints, K = ⌈√n_chunks⌉); then segment by
 * segment from the last, the segment's steps p1 = c1 e, p2 = c2 δ are formed
 * from the kept acts (no product), and its chunks run backwards through
 * chunk_backward with the weights as checkpoint and steps (mm_steps): no
 * weight copy but the ⌈n/K⌉ + 1 checkpoints a thread.
 * With what the forward kept (attrs.data) there is no second forward: the
 * acts are the kept ones, and each segment's checkpoint comes from the
 * weights after it by undoing its steps, W1 += P1ᵀ S, W2 += P2ᵀ U (two
 * products of the segment's rank, against the forward's ten a token; equal
 * to the checkpoint to rounding). */
static void CS(cms_scan_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    cs_dims k = cs_dims_of(in, at);
    k.w1t = CS_W1T(k.C);
    int64_t B = k.B, T = k.T, d = k.d, h = k.h, C = k.C, wsz = 2 * d * h;
    int64_t n_chunks = (T + C - 1) / C, K = scan_segment(n_chunks), ncp = (n_chunks + K - 1) / K;
    const CS_T *U = in[0]->data, *V = in[1]->data, *Eta = in[2]->data;
    const CS_T *W10 = in[3]->data, *W20 = in[4]->data, *GY = in[5]->data;
    const CS_T *saved = at->data;
    CS_T *gU = o->data, *gV = gU + B * T * d, *gEta = gV + B * T * d;
    CS_T *gW = gEta + B * T; /* gw1 [d, h] then gw2 [h, d] */
    int n_thr = scan_threads(B, 4 * B * T * wsz);
    int64_t per = (saved ? wsz : (ncp + 1) * wsz + cs_act_elems(T, d, h)) +
                  cs_buf_elems(C, d, h) + cs_steps_elems(K * C, C, d, h) +
                  (C == 1 && !saved ? cs_tokens_elems(K, d, h) : 0);
    mi_scope *sc = mi_scope_current();
    size_t bytes = sizeof(CS_T) * (size_t)(per * n_thr + B * wsz + d * h);
    CS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) {
        memset(o->data, 0, sizeof(CS_T) * (size_t)o->numel);
        return;
    }
    /* each sequence's ∂L/∂θ_0 (∂L/∂W1 held as W1 is), summed in order below */
    CS_T *G_all = scratch + per * n_thr;
    const CS_T *W1h = W10;
    if (k.w1t && !saved) CS(transpose)(W10, d, h, G_all + B * wsz), W1h = G_all + B * wsz;
    blas_single_thread_once();
    CS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t bi = 0; bi < B; bi++) {
        CS_T *cp = scratch + per * scan_thread(), *cur = saved ? cp : cp + ncp * wsz;
        CS(act) xs; /* the sequence's acts */
        CS(buf) buf;
        CS_T *acts_end = cur + wsz;
        if (saved) /* the weights after the last step: undone segment by segment below */
            memcpy(cur, CS(act_carve)(&xs, (CS_T *)saved + bi * cs_saved_elems(T, d, h), T, d, h),
                   sizeof(CS_T) * (size_t)wsz);
        else
            acts_end = CS(act_carve)(&xs, acts_end, T, d, h);
        CS_T *P1 = CS(buf_carve)(&buf, acts_end, C, d, h);
        CS_T *P2 = P1 + K * C * d, *tmp = P2 + K * C * h, *A1 = tmp + 2 * C * K * C;
        CS_T *B1 = A1 + 2 * K * C * d, *A2 = B1 + 2 * K * C * h, *pre = A2 + K * C * h;
        CS_T *tsc = pre + K * (2 * d + 2 * h);
        const CS_T *Ub = U + bi * T * d, *Vb = V + bi * T * d, *Eb = Eta + bi * T;
        CS_T *G1 = G_all + bi * wsz, *G2 = G1 + d * h;
        if (!saved) {
            memcpy(cur, W1h, sizeof(CS_T) * (size_t)(d * h));
            memcpy(cur + d * h, W20, sizeof(CS_T) * (size_t)(d * h));
            memcpy(cp, cur, sizeof(CS_T) * (size_t)wsz);
        }
        for (int64_t j = 0; j < n_chunks && !saved;) {
            int64_t t0 = j * C;
            CS(act) x = CS(act_at)(&xs, t0, d, h);
            if (C == 1) { /* a segment's tokens at once */
                int64_t n = j + K < n_chunks ? K : n_chunks - j;
                CS(tokens_forward)(&k, cur, cur + d * h, Ub + t0 * d, Vb + t0 * d, Eb + t0, n,
                                   j + n < n_chunks ? n : n - 1, &x, &buf, tsc);
                j += n;
            } else {
                int64_t n = t0 + C < T ? C : T - t0;
                CS(chunk_forward)(&k, cur, cur + d * h, Ub + t0 * d, Vb + t0 * d, Eb + t0, n,
                                  j + 1 < n_chunks, &x, &buf);
                j++;
            }
            if (j % K == 0 && j < n_chunks)
                memcpy(cp + j / K * wsz, cur, sizeof(CS_T) * (size_t)wsz);
        }
        memset(G1, 0, sizeof(CS_T) * (size_t)wsz);
        for (int64_t s = ncp - 1; s >= 0; s--) {
            int64_t j0 = s * K, j1 = j0 + K < n_chunks ? j0 + K : n_chunks, ts = j0 * C;
            for (int64_t j = j0; j < j1 && j + 1 < n_chunks; j++) { /* the chunks that update */
                CS(act) x = CS(act_at)(&xs, j * C, d, h);
                CS(chunk_p)(&k, Vb + j * C * d, C, &x, &buf);
                memcpy(P1 + (j - j0) * C * d, buf.p1, sizeof(CS_T) * (size_t)(C * d));
                memcpy(P2 + (j - j0) * C * h, buf.p2, sizeof(CS_T) * (size_t)(C * h));
            }
            /* the segment's updating tokens: its full chunks before the sequence's last */
            int64_t m_up = ((j1 < n_chunks ? j1 : n_chunks - 1) - j0) * C;
            if (saved && m_up > 0) { /* its checkpoint: the weights after it, its steps undone */
                CS(w1_add)(&k, m_up, 1, P1, d, xs.s + ts * h, h, cur);
                CS(mm)(true, false, h, d, m_up, 1, P2, h, Ub + ts * d, d, 1, cur + d * h, d);
            }
            const CS_T *W = saved ? cur : cp + s * wsz;
            CS(steps) w = {.W1 = W, .W2 = W + d * h, .P1 = P1, .P2 = P2, .S = xs.s + ts * h,
                           .U = Ub + ts * d, .tmp = tmp};
            /* at C = 1 the segment's updating tokens keep their gradient terms
               (A1, B1, A2 by token, B2 the inputs u) until its first token is done,
               and the products with the gradient at the segment's end are taken
               for all its tokens at once (pre); at larger C the corrections would
               cost more than they save */
            int64_t n_up = C > 1 ? 0 : j1 < n_chunks ? j1 - j0 : j1 - j0 - 1;
            for (int64_t j = j1 - 1; j >= j0; j--) {
                /* after the sequence's last chunk (no step: its terms go in at once) */
                if (n_up > 0 && j == j0 + n_up - 1)
                    CS(grad_pre)(&k, G1, G2, Ub + ts * d, &xs, ts, n_up, P1, P2, pre);
                int64_t t0 = j * C, n = t0 + C < T ? C : T - t0, bt = bi * T + t0, i = j - j0;
                int64_t later = n_up - i - 1 > 0 ? n_up - i - 1 : 0;
                CS(act) x = CS(act_at)(&xs, t0, d, h);
                bool up = j + 1 < n_chunks;
                CS(grad) g = {.G1 = G1, .G2 = G2, .A1 = A1 + 2 * (i + 1) * C * d,
                              .B1 = B1 + 2 * (i + 1) * C * h, .A2 = A2 + (i + 1) * C * h,
                              .B2 = Ub + (j + 1) * C * d, .r1 = 2 * C * later, .r2 = C * later,
                              .A1n = n_up > 0 && up ? A1 + 2 * i * C * d : NULL,
                              .B1n = B1 + 2 * i * C * h, .A2n = A2 + i * C * h,
                              .pre = n_up > 0 && up ? pre + i * (2 * d + 2 * h) : NULL};
                w.m = t0 - ts;
                CS(chunk_backward)(&k, &w, &g, Ub + t0 * d, Vb + t0 * d, n, up, &x, GY + bt * d,
                                   gU + bt * d, gV + bt * d, gEta + bt, &buf);
            }
            if (n_up > 0) {
                CS(w1_add)(&k, 2 * C * n_up, 1, A1, d, B1, h, G1);
                CS(mm)(true, false, h, d, C * n_up, 1, A2, h, Ub + ts * d, d, 1, G2, d);
            }
        }
    }
    for (int64_t bi = 1; bi < B; bi++)
        for (int64_t i = 0; i < wsz; i++) G_all[i] += G_all[bi * wsz + i];
    if (k.w1t) CS(transpose)(G_all, h, d, gW);
    else memcpy(gW, G_all, sizeof(CS_T) * (size_t)(d * h));
    memcpy(gW + d * h, G_all + d * h, sizeof(CS_T) * (size_t)(d * h));
    mi_scope_release(sc, scratch, bytes);
}
