/* hope_scan's kernels, written once and included by hope_scan.c per dtype,
 * with HS_T the element type, HS(x) the name x with the dtype's suffix,
 * HS_GEMM the cblas_?gemm call, HS_GELU_PAIR(a, s, gp, n) (s = gelu(a),
 * gp = gelu'(a)) and HS_GELU_SECOND(a, y, n) (y = gelu''(a)) on arrays of n,
 * HS_SQRT and HS_EXP, HS_KERNEL the two kernels' linkage. The math is in
 * hope_scan.c's top comment; the steps here carry its numbers (R1–R3 the
 * reads, S1–S5 the step, U the update).
 * Not a header of its own: no guard. */

/* C = alpha op(A) op(B) + beta C, row-major, op(A) [M, K], op(B) [K, N]. */
static void HS(mm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, HS_T alpha, const HS_T *A,
                   int64_t lda, const HS_T *B, int64_t ldb, HS_T beta, HS_T *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
        return;
    }
    HS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,
            (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

static HS_T HS(dot)(const HS_T *a, const HS_T *b, int64_t n)
{
    HS_T s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* A chunk's buffers (hope_scan_defs.h's HS_KEPT and HS_TEMP list them). */
#define HS_FIELD(f, n) HS_T *f;
typedef struct HS(ws) {
    HS_KEPT(HS_FIELD)
    HS_TEMP(HS_FIELD)
} HS(ws);
#undef HS_FIELD

#define HS_TAKE(f, n) w->f = p, p += (n);
/* The kept buffers at p (a chunk's in what the forward keeps, or scratch). */
static void HS(carve_kept)(HS(ws) *w, HS_T *p, const hs_dims *k)
{
    HS_SIZES(k);
    HS_KEPT(HS_TAKE)
}

static void HS(carve_temp)(HS(ws) *w, HS_T *p, const hs_dims *k)
{
    HS_SIZES(k);
    HS_TEMP(HS_TAKE)
}
#undef HS_TAKE

/* A layer's arrays in the buffers: its û (and ld), its g, F û and p (and
 * ld), and F u, the read its input had in the step (raw: A1 or M at k̄). */
typedef struct HS(lay) {
    HS_T *u, *g, *wu, *p, *du, *dg, *dwu, *r, *Q, *raw;
    int64_t ldu, ldg, ldraw, out, in;
} HS(lay);

static HS(lay) HS(layer)(const hs_dims *k, HS(ws) *w, int L)
{
    HS(lay) l = {.out = hs_out(k, L), .in = hs_in(k, L), .r = w->r + L * k->C,
                 .Q = w->Q + L * k->C * k->C};
    if (L == 0) {
        l.u = w->U0, l.du = w->dU0, l.ldu = k->d;
        l.g = w->G0, l.wu = w->WU0, l.p = w->P0, l.dg = w->dG0, l.dwu = w->dWU0, l.ldg = k->P;
        l.raw = w->A1, l.ldraw = k->P;
    } else {
        int64_t c = L - 1, col = hs_col(k, c);
        l.u = w->UW + c * k->hc, l.du = w->dUW + c * k->hc, l.ldu = k->P;
        l.g = w->GW + col, l.wu = w->WUW + col, l.p = w->PW + col, l.dg = w->dGW + col;
        l.dwu = w->dWUW + col, l.ldg = k->D, l.raw = w->M + col, l.ldraw = k->D;
    }
    return l;
}

/* R1–R3, the chunk's reads at the states F in force: Y [n, D] (ld D). */
static void HS(reads)(const hs_dims *k, const HS_T *F, const HS_T *bias, const HS_T *X,
                      int64_t n, HS(ws) *w, HS_T *Y)
{
    int64_t d = k->d, P = k->P, hc = k->hc, H = k->H, hd = k->hd, nr = k->nr, D = k->D;
    HS(mm)(false, true, n, P, d, 1, X, d, F, d, 0, w->A0, P); /* R1 */
    HS_GELU_PAIR(w->A0, w->H0, w->GP0, n * P);
    for (int64_t c = 0; c < k->nc; c++) {
        const HS_T *W1 = F + hs_off(k, 1 + c);
        if (c >= nr) { /* R3: η, α = σ(H0_c W1ᵀ + b) */
            HS_T *Z = Y + hs_col(k, c);
            const HS_T *b = bias + (c - nr) * H;
            HS(mm)(false, true, n, H, hc, 1, w->H0 + c * hc, P, W1, hc, 0, Z, D);
            for (int64_t t = 0; t < n; t++)
                for (int64_t h = 0; h < H; h++)
                    Z[t * D + h] = 1 / (1 + HS_EXP(-(Z[t * D + h] + b[h])));
            continue;
        }
        /* R2: x + H0_c W1ᵀ, ℓ2-normalised per head */
        HS_T *R = w->R + c * d;
        for (int64_t t = 0; t < n; t++) memcpy(R + t * nr * d, X + t * d, sizeof(HS_T) * (size_t)d);
        HS(mm)(false, true, n, d, hc, 1, w->H0 + c * hc, P, W1, hc, 1, R, nr * d);
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < H; h++) {
                const HS_T *seg = R + t * nr * d + h * hd;
                HS_T r = 1 / HS_SQRT(HS(dot)(seg, seg, hd) + (HS_T)k->eps);
                w->rh[t * nr * H + c * H + h] = r;
                for (int64_t i = 0; i < hd; i++) Y[t * D + c * d + h * hd + i] = seg[i] * r;
            }
    }
}

/* A layer's factors from its gradient's rows G and input rows U:
 * r = 1/√(‖u‖² + ε), û = u r, g = G r (lms) or G/r, and F û = (F u) r
 * from the step's own read of F at u (no product of its own). */
static void HS(factor)(const hs_dims *k, const HS(lay) *l, const HS_T *G, int64_t ldG,
                       const HS_T *U, int64_t ldU, double eps, int64_t n)
{
    for (int64_t t = 0; t < n; t++) {
        const HS_T *u = U + t * ldU;
        HS_T r = 1 / HS_SQRT(HS(dot)(u, u, l->in) + (HS_T)eps), s = k->lms ? r : 1 / r;
        l->r[t] = r;
        for (int64_t i = 0; i < l->in; i++) l->u[t * l->ldu + i] = u[i] * r;
        for (int64_t i = 0; i < l->out; i++) {
            l->g[t * l->ldg + i] = G[t * ldG + i] * s;
            l->wu[t * l->ldg + i] = l->raw[t * l->ldraw + i] * r;
        }
    }
}

/* S1–S5: the step's factors at the states F, from the chunk's outputs Y. */
static void HS(factors)(const hs_dims *k, const HS_T *F, int64_t n, HS(ws) *w, const HS_T *Y)
{
    int64_t d = k->d, P = k->P, hc = k->hc, H = k->H, nr = k->nr, D = k->D, C = k->C;
    HS_T s = 1 / HS_SQRT((HS_T)H);
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++) { /* S1: [k̄; v̄] */
            w->KV[t * d + i] = s * Y[t * D + i];
            w->KV[(n + t) * d + i] = s * Y[t * D + d + i];
        }
    HS(mm)(false, true, 2 * n, P, d, 1, w->KV, d, F, d, 0, w->A1, P); /* S2 */
    HS_GELU_PAIR(w->A1, w->H1, w->GP1, 2 * n * P);
    for (int64_t c = 0; c < k->nc; c++) {
        const HS_T *W1 = F + hs_off(k, 1 + c);
        int64_t out = hs_out(k, 1 + c), col = hs_col(k, c);
        HS_T *M = w->M + col, *E = w->E + col;
        HS(mm)(false, true, 2 * n, out, hc, 1, w->H1 + c * hc, P, W1, hc, 0, M, D);
        for (int64_t t = 0; t < n; t++) /* S3: e = M(k̄) − M(v̄) */
            for (int64_t i = 0; i < out; i++)
                E[t * D + i] = M[t * D + i] - M[(n + t) * D + i] +
                               (c < nr ? w->KV[t * d + i] - w->KV[(n + t) * d + i] : 0);
        HS(mm)(false, false, n, hc, out, 1, E, D, W1, hc, 0, w->back + c * hc, P);
        HS(lay) l = HS(layer)(k, w, 1 + c);
        HS(factor)(k, &l, E, D, w->H1 + c * hc, P, k->heps, n);
    }
    for (int64_t i = 0; i < n * P; i++) w->Dl[i] = w->GP1[i] * w->back[i]; /* S4: δ */
    HS(lay) l0 = HS(layer)(k, w, 0);
    HS(factor)(k, &l0, w->Dl, P, w->KV, d, k->eps, n);
    for (int64_t t = 0; t < n; t++) { /* S5: the head means of η and α, β */
        HS_T e = 0, a = 0;
        for (int64_t h = 0; h < H; h++) e += Y[t * D + nr * d + h], a += Y[t * D + nr * d + H + h];
        w->eta[t] = e / (HS_T)H, w->alpha[t] = a / (HS_T)H;
        w->beta[t] = k->eq88 ? w->eta[t] : 1;
    }
    HS_T *dec = w->dec; /* dec[a][b] = Π_{a ≤ i < b} ᾱ_i */
    for (int64_t a = 0; a <= n; a++) {
        dec[a * (C + 1) + a] = 1;
        for (int64_t b = a + 1; b <= n; b++)
            dec[a * (C + 1) + b] = dec[a * (C + 1) + b - 1] * w->alpha[b - 1];
    }
}

#define DEC(a, b) w->dec[(a) * (k->C + 1) + (b)]
#define DDEC(a, b) w->ddec[(a) * (k->C + 1) + (b)]

/* U, a layer's step: û·û, and p_t = β_t dec(0, t) F û_t + η_t g_t
 * − Σ_{j<t} β_t dec(j+1, t) (û_t·û_j) p_j (the forward substitution). */
static void HS(layer_p)(const hs_dims *k, HS(ws) *w, const HS(lay) *l, int64_t n)
{
    HS(mm)(false, true, n, n, l->in, 1, l->u, l->ldu, l->u, l->ldu, 0, l->Q, n);
    for (int64_t t = 0; t < n; t++) {
        HS_T *p = l->p + t * l->ldg, bt = w->beta[t], a = bt * DEC(0, t), e = w->eta[t];
        const HS_T *wu = l->wu + t * l->ldg, *g = l->g + t * l->ldg;
        for (int64_t i = 0; i < l->out; i++) p[i] = a * wu[i] + e * g[i];
        for (int64_t j = 0; j < t; j++) {
            HS_T c = bt * DEC(j + 1, t) * l->Q[t * n + j];
            const HS_T *pj = l->p + j * l->ldg;
            for (int64_t i = 0; i < l->out; i++) p[i] -= c * pj[i];
        }
    }
}

/* U applied in place: F ← dec(0, n) F − Σ_j dec(j+1, n) p_j û_jᵀ. */
static void HS(layer_apply)(const hs_dims *k, HS(ws) *w, const HS(lay) *l, HS_T *FL, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < l->out; i++)
            w->tmp[j * l->out + i] = DEC(j + 1, n) * l->p[j * l->ldg + i];
    HS(mm)(true, false, l->out, l->in, n, -1, w->tmp, l->out, l->u, l->ldu, DEC(0, n), FL, l->in);
}

/* A chunk's kept buffers in a row's saved elements (hs_saved_elems). */
static HS_T *HS(kept_at)(const hs_dims *k, HS_T *saved, int64_t j)
{
    return saved + (k->n_chunks - 1) * k->ss + j * hs_kept_elems(k);
}

/* A row's forward: the chunks in order, each read at the states in force and
 * (but the last) stepping them, the outputs into Y (or not, NULL); with
 * saved, the states each chunk after the first starts from and every
 * chunk's kept buffers, else those in kept (one chunk's). state: [ss]. */
static void HS(row_forward)(const hs_dims *k, const HS_T *init, const HS_T *bias, const HS_T *X,
                            HS_T *Y, HS_T *state, HS_T *saved, HS_T *kept, HS(ws) *w)
{
    memcpy(state, init, sizeof(HS_T) * (size_t)k->ss);
    for (int64_t j = 0; j < k->n_chunks; j++) {
        int64_t t0 = j * k->C, n = k->T - t0 < k->C ? k->T - t0 : k->C;
        if (saved && j > 0) memcpy(saved + (j - 1) * k->ss, state, sizeof(HS_T) * (size_t)k->ss);
        HS(carve_kept)(w, saved ? HS(kept_at)(k, saved, j) : kept, k);
        HS(reads)(k, state, bias, X + t0 * k->d, n, w, w->Y);
        if (Y) memcpy(Y + t0 * k->D, w->Y, sizeof(HS_T) * (size_t)(n * k->D));
        if (t0 + n >= k->T) break;
        HS(factors)(k, state, n, w, w->Y);
        for (int L = 0; L <= k->nc; L++) {
            HS(lay) l = HS(layer)(k, w, L);
            HS(layer_p)(k, w, &l, n);
            HS(layer_apply)(k, w, &l, state + hs_off(k, L), n);
        }
    }
}

/* U's vjp for one layer: G [out, in] the gradient of its state after the
 * chunk, replaced by that of F; into dU, dG, dWU (set), ddec, deta, dbeta. */
static void HS(layer_back)(const hs_dims *k, HS(ws) *w, const HS(lay) *l, const HS_T *FL,
                           HS_T *GL, int64_t n)
{
    int64_t out = l->out, in = l->in, ldg = l->ldg;
    DDEC(0, n) += HS(dot)(GL, FL, out * in);
    /* W_n = dec(0, n) F − P̃ᵀ Û, P̃_j = dec(j+1, n) p_j: ∂P̃ = −Û Gᵀ, ∂Û = −P̃ G */
    HS(mm)(false, true, n, out, in, -1, l->u, l->ldu, GL, in, 0, w->dP, out);
    for (int64_t j = 0; j < n; j++) {
        HS_T *dp = w->dP + j * out;
        DDEC(j + 1, n) += HS(dot)(dp, l->p + j * ldg, out);
        for (int64_t i = 0; i < out; i++) {
            w->tmp[j * out + i] = DEC(j + 1, n) * l->p[j * ldg + i];
            dp[i] *= DEC(j + 1, n);
        }
    }
    HS(mm)(false, false, n, in, out, -1, w->tmp, out, GL, in, 0, l->du, l->ldu);
    /* the substitution's vjp, ∂r_t = ∂p_t − Σ_{i>t} L_it ∂r_i (in dP), and ∂L */
    memset(w->dQ, 0, sizeof(HS_T) * (size_t)(n * n));
    for (int64_t t = n - 1; t >= 0; t--) {
        HS_T *dr = w->dP + t * out;
        const HS_T *pt = l->p + t * ldg;
        for (int64_t i = t + 1; i < n; i++) {
            const HS_T *dri = w->dP + i * out;
            HS_T Lit = w->beta[i] * DEC(t + 1, i) * l->Q[i * n + t];
            HS_T dL = -HS(dot)(dri, pt, out);
            w->dbeta[i] += dL * DEC(t + 1, i) * l->Q[i * n + t];
            DDEC(t + 1, i) += dL * w->beta[i] * l->Q[i * n + t];
            w->dQ[i * n + t] = dL * w->beta[i] * DEC(t + 1, i);
            for (int64_t q = 0; q < out; q++) dr[q] -= Lit * dri[q];
        }
    }
    for (int64_t t = 0; t < n; t++) { /* p_t's own terms: β_t dec(0, t) F û_t + η_t g_t */
        const HS_T *dr = w->dP + t * out, *wu = l->wu + t * ldg, *g = l->g + t * ldg;
        HS_T a = w->beta[t] * DEC(0, t), dwu_r = HS(dot)(wu, dr, out);
        w->dbeta[t] += DEC(0, t) * dwu_r;
        DDEC(0, t) += w->beta[t] * dwu_r;
        w->deta[t] += HS(dot)(g, dr, out);
        for (int64_t i = 0; i < out; i++) {
            l->dwu[t * ldg + i] = a * dr[i];
            l->dg[t * ldg + i] = w->eta[t] * dr[i];
        }
    }
    /* û·û (lower): ∂Û += (∂Q + ∂Qᵀ) Û; ∂F = dec(0, n) G (F û's part goes back
       through the read it came from, factor_back) */
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < t; j++) w->dQ[j * n + t] = w->dQ[t * n + j];
    HS(mm)(false, false, n, in, n, 1, w->dQ, n, l->u, l->ldu, 1, l->du, l->ldu);
    HS_T a = DEC(0, n);
    for (int64_t i = 0; i < out * in; i++) GL[i] *= a;
}

/* The vjp of HS(factor): from ∂û (l->du), ∂g (l->dg) and ∂(F û) (l->dwu),
 * ∂G into dG [n, ·] (ld ldG, added) and ∂U into dU (ld ldU, added); the
 * read's, r ∂(F û), is added where the read's gradient is formed. */
static void HS(factor_back)(const hs_dims *k, const HS(lay) *l, const HS_T *G, int64_t ldG,
                            const HS_T *U, int64_t ldU, HS_T *dG, HS_T *dU, int64_t n)
{
    for (int64_t t = 0; t < n; t++) {
        HS_T r = l->r[t], s = k->lms ? r : 1 / r;
        const HS_T *dg = l->dg + t * l->ldg, *du = l->du + t * l->ldu, *u = U + t * ldU;
        HS_T dgG = HS(dot)(dg, G + t * ldG, l->out);
        /* ∂r = σ r^(σ−1) ⟨∂g, G⟩ + ⟨∂û, u⟩, ∂u = r ∂û − r³ ∂r u */
        HS_T dr = (k->lms ? dgG : -dgG / (r * r)) + HS(dot)(du, u, l->in) +
                  HS(dot)(l->dwu + t * l->ldg, l->raw + t * l->ldraw, l->out);
        for (int64_t i = 0; i < l->out; i++) dG[t * ldG + i] += s * dg[i];
        for (int64_t i = 0; i < l->in; i++) dU[t * ldU + i] += r * du[i] - r * r * r * dr * u[i];
    }
}

/* ∂ᾱ_i = Σ_{a ≤ i < b} ∂dec(a, b) dec(a, i) dec(i+1, b): no division by ᾱ. */
static void HS(alpha_back)(const hs_dims *k, HS(ws) *w, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        HS_T s = 0;
        for (int64_t a = 0; a <= i; a++)
            for (int64_t b = i + 1; b <= n; b++) s += DDEC(a, b) * DEC(a, i) * DEC(i + 1, b);
        w->dalpha[i] = s;
    }
}

/* One chunk's vjp, from its kept buffers (w): F its states (not changed),
 * dYc [n, D] the gradient of its outputs, G [ss] that of the states after
 * it (upd) or zeros, replaced by that of F; dbias [2H] added; dX [n, d]
 * set. */
static void HS(chunk_back)(const hs_dims *k, const HS_T *F, const HS_T *X, int64_t n, bool upd,
                           const HS_T *dYc, HS_T *G, HS_T *dbias, HS_T *dX, HS(ws) *w)
{
    int64_t d = k->d, P = k->P, hc = k->hc, H = k->H, hd = k->hd, nr = k->nr, D = k->D, C = k->C;
    memcpy(w->dY, dYc, sizeof(HS_T) * (size_t)(n * D));
    memset(w->dH0, 0, sizeof(HS_T) * (size_t)(n * P));
    if (upd) {
        memset(w->ddec, 0, sizeof(HS_T) * (size_t)((C + 1) * (C + 1)));
        memset(w->deta, 0, sizeof(HS_T) * (size_t)n), memset(w->dbeta, 0, sizeof(HS_T) * (size_t)n);
        for (int L = 0; L <= k->nc; L++) { /* U's vjp, layer by layer */
            HS(lay) l = HS(layer)(k, w, L);
            HS(layer_back)(k, w, &l, F + hs_off(k, L), G + hs_off(k, L), n);
        }
        for (int64_t t = 0; t < n && k->eq88; t++) w->deta[t] += w->dbeta[t];
        HS(alpha_back)(k, w, n);
        for (int64_t t = 0; t < n; t++) /* S5's means */
            for (int64_t h = 0; h < H; h++) {
                w->dY[t * D + nr * d + h] += w->deta[t] / (HS_T)H;
                w->dY[t * D + nr * d + H + h] += w->dalpha[t] / (HS_T)H;
            }
        /* the factors' vjps: S2's (∂δ, ∂k̄), the W1s' (∂e, ∂H1 at k̄) */
        memset(w->dKV, 0, sizeof(HS_T) * (size_t)(2 * n * d));
        memset(w->dH1, 0, sizeof(HS_T) * (size_t)(2 * n * P));
        memset(w->dE, 0, sizeof(HS_T) * (size_t)(n * D));
        memset(w->dDl, 0, sizeof(HS_T) * (size_t)(n * P));
        HS(lay) l0 = HS(layer)(k, w, 0);
        HS(factor_back)(k, &l0, w->Dl, P, w->KV, d, w->dDl, w->dKV, n);
        for (int64_t c = 0; c < k->nc; c++) {
            HS(lay) l = HS(layer)(k, w, 1 + c);
            int64_t col = hs_col(k, c);
            HS(factor_back)(k, &l, w->E + col, D, w->H1 + c * hc, P, w->dE + col, w->dH1 + c * hc,
                            n);
        }
        /* S4: δ = gelu'(A1) ⊙ back at k̄ */
        HS_GELU_SECOND(w->A1, w->dA1, n * P);
        for (int64_t i = 0; i < n * P; i++) {
            w->dback[i] = w->GP1[i] * w->dDl[i];
            w->dA1[i] *= w->back[i] * w->dDl[i];
        }
        memset(w->dA1 + n * P, 0, sizeof(HS_T) * (size_t)(n * P));
        for (int64_t t = 0; t < n; t++) /* F û = r A1(k̄) for S2 */
            for (int64_t i = 0; i < P; i++) w->dA1[t * P + i] += w->r[t] * w->dWU0[t * P + i];
        for (int64_t c = 0; c < k->nc; c++) { /* S3 and S2's W1 reads */
            const HS_T *W1 = F + hs_off(k, 1 + c);
            HS_T *GW1 = G + hs_off(k, 1 + c);
            int64_t out = hs_out(k, 1 + c), col = hs_col(k, c);
            HS_T *dE = w->dE + col, *dM = w->dM + col;
            HS(mm)(false, true, n, out, hc, 1, w->dback + c * hc, P, W1, hc, 1, dE, D);
            HS(mm)(true, false, out, hc, n, 1, w->E + col, D, w->dback + c * hc, P, 1, GW1, hc);
            for (int64_t t = 0; t < n; t++)
                for (int64_t i = 0; i < out; i++) {
                    HS_T g = dE[t * D + i];
                    /* F û = r M(k̄) for W1_c */
                    dM[t * D + i] = g + w->r[(1 + c) * C + t] * w->dWUW[t * D + col + i];
                    dM[(n + t) * D + i] = -g;
                    if (c < nr) w->dKV[t * d + i] += g, w->dKV[(n + t) * d + i] -= g;
                }
            HS(mm)(false, false, 2 * n, hc, out, 1, dM, D, W1, hc, 1, w->dH1 + c * hc, P);
            HS(mm)(true, false, out, hc, 2 * n, 1, dM, D, w->H1 + c * hc, P, 1, GW1, hc);
        }
        for (int64_t i = 0; i < 2 * n * P; i++) w->dA1[i] += w->GP1[i] * w->dH1[i];
        HS(mm)(false, false, 2 * n, d, P, 1, w->dA1, P, F, d, 1, w->dKV, d);
        HS(mm)(true, false, P, d, 2 * n, 1, w->dA1, P, w->KV, d, 1, G, d);
        HS_T s = 1 / HS_SQRT((HS_T)H); /* S1 */
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < d; i++) {
                w->dY[t * D + i] += s * w->dKV[t * d + i];
                w->dY[t * D + d + i] += s * w->dKV[(n + t) * d + i];
            }
    } else {
        memset(G, 0, sizeof(HS_T) * (size_t)k->ss);
    }
    /* R3 and R2's vjps into dZ (the reads before σ or the normalisation) */
    for (int64_t t = 0; t < n; t++) {
        for (int64_t g = 0; g < 2; g++)
            for (int64_t h = 0; h < H; h++) {
                int64_t j = t * D + nr * d + g * H + h;
                HS_T y = w->Y[j], dz = w->dY[j] * y * (1 - y);
                w->dZ[j] = dz;
                dbias[g * H + h] += dz;
            }
        memset(dX + t * d, 0, sizeof(HS_T) * (size_t)d);
        for (int64_t c = 0; c < nr; c++)
            for (int64_t h = 0; h < H; h++) {
                /* y = R r: ∂R = r ∂y − r³ ⟨∂y, R⟩ R; x's residual takes ∂R too */
                const HS_T *R = w->R + t * nr * d + c * d + h * hd;
                const HS_T *dy = w->dY + t * D + c * d + h * hd;
                HS_T r = w->rh[t * nr * H + c * H + h], dyR = HS(dot)(dy, R, hd);
                HS_T *dz = w->dZ + t * D + c * d + h * hd;
                for (int64_t i = 0; i < hd; i++) {
                    dz[i] = r * dy[i] - r * r * r * dyR * R[i];
                    dX[t * d + h * hd + i] += dz[i];
                }
            }
    }
    for (int64_t c = 0; c < k->nc; c++) { /* R2, R3: the W1 reads at H0 */
        const HS_T *W1 = F + hs_off(k, 1 + c);
        int64_t out = hs_out(k, 1 + c), col = hs_col(k, c);
        HS(mm)(false, false, n, hc, out, 1, w->dZ + col, D, W1, hc, 0, w->dH0 + c * hc, P);
        HS(mm)(true, false, out, hc, n, 1, w->dZ + col, D, w->H0 + c * hc, P, 1,
               G + hs_off(k, 1 + c), hc);
    }
    for (int64_t i = 0; i < n * P; i++) w->dH0[i] *= w->GP0[i]; /* R1 */
    HS(mm)(false, false, n, d, P, 1, w->dH0, P, F, d, 1, dX, d);
    HS(mm)(true, false, P, d, n, 1, w->dH0, P, X, d, 1, G, d);
}

#undef DEC
#undef DDEC

/* A row's backward: its chunks in reverse, each from its saved start states
 * (the first from init) and kept buffers, G [ss + 2H] the gradient of the
 * states in force and of the biases, left with the initial states' and the
 * biases'. */
static void HS(row_backward)(const hs_dims *k, const HS_T *init, const HS_T *X, const HS_T *dY,
                             HS_T *saved, HS_T *G, HS_T *dX, HS(ws) *w)
{
    memset(G, 0, sizeof(HS_T) * (size_t)(k->ss + 2 * k->H));
    for (int64_t j = k->n_chunks - 1; j >= 0; j--) {
        int64_t t0 = j * k->C, n = k->T - t0 < k->C ? k->T - t0 : k->C;
        const HS_T *F = j == 0 ? init : saved + (j - 1) * k->ss;
        HS(carve_kept)(w, HS(kept_at)(k, saved, j), k);
        HS(chunk_back)(k, F, X + t0 * k->d, n, t0 + n < k->T, dY + t0 * k->D, G,
                       G + k->ss, dX + t0 * k->d, w);
    }
}

/* The initial states, one row's layout: [S2 | W1 of the residual components
 * | W1 of the gates], from the op's inputs. */
static void HS(init_state)(const hs_dims *k, mi_tensor *const *in, HS_T *init)
{
    int64_t n0 = k->P * k->d, n1 = k->nr * k->d * k->hc, n2 = 2 * k->H * k->hc;
    memcpy(init, in[1]->data, sizeof(HS_T) * (size_t)n0);
    memcpy(init + n0, in[2]->data, sizeof(HS_T) * (size_t)n1);
    memcpy(init + n0 + n1, in[3]->data, sizeof(HS_T) * (size_t)n2);
}

/* The forward, y [N, T, D]; with attrs.data (a recorded call), the states
 * every chunk after the first starts from, per row (hs_saved_elems). */
HS_KERNEL void HS(hope_scan)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    hs_dims k = hs_dims_of(in, at);
    int n_thr = scan_threads(k.N, k.N * k.T * k.P * k.d);
    int64_t per = k.ss + hs_kept_elems(&k) + hs_temp_elems(&k);
    mi_scope *sc = mi_scope_current();
    size_t bytes = sizeof(HS_T) * (size_t)(per * n_thr + k.ss);
    HS_T *scratch = mi_scope_alloc(sc, bytes), *saved = (HS_T *)(uintptr_t)at->data;
    if (!scratch) { /* kernels cannot fail: zeros, never uninitialised memory */
        memset(o->data, 0, sizeof(HS_T) * (size_t)o->numel);
        return;
    }
    HS_T *init = scratch + per * n_thr;
    HS(init_state)(&k, in, init);
    const HS_T *X = in[0]->data, *bias = in[4]->data;
    HS_T *Y = o->data;
    blas_single_thread_once();
    HS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t b = 0; b < k.N; b++) {
        HS_T *state = scratch + per * scan_thread(), *kept = state + k.ss;
        HS(ws) w;
        HS(carve_temp)(&w, kept + hs_kept_elems(&k), &k);
        HS(row_forward)(&k, init, bias, X + b * k.T * k.d, Y + b * k.T * k.D, state,
                        saved ? saved + b * hs_saved_elems(&k) : NULL, kept, &w);
    }
    mi_scope_release(sc, scratch, bytes);
}

/* The vjp, packed: ∂x [N·T·d], then ∂S2, ∂W1 (residual), ∂W1 (gates), ∂b,
 * summed over the rows in their order (the same bits at any thread count).
 * Without attrs.data the forward runs again first, into scratch, for the
 * saved states. */
HS_KERNEL void HS(hope_scan_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    hs_dims k = hs_dims_of(in, at);
    int n_thr = scan_threads(k.N, 3 * k.N * k.T * k.P * k.d);
    int64_t sv = hs_saved_elems(&k), gsz = k.ss + 2 * k.H;
    int64_t per = k.ss + hs_temp_elems(&k);
    HS_T *saved = (HS_T *)(uintptr_t)at->data;
    mi_scope *sc = mi_scope_current();
    size_t bytes =
        sizeof(HS_T) * (size_t)(per * n_thr + k.ss + k.N * gsz + (saved ? 0 : k.N * sv));
    HS_T *scratch = mi_scope_alloc(sc, bytes);
    memset(o->data, 0, sizeof(HS_T) * (size_t)o->numel);
    if (!scratch) return;
    HS_T *init = scratch + per * n_thr, *Gs = init + k.ss, *own = Gs + k.N * gsz;
    HS(init_state)(&k, in, init);
    const HS_T *X = in[0]->data, *bias = in[4]->data, *dY = in[5]->data;
    HS_T *dX = o->data, *dW = dX + k.N * k.T * k.d;
    blas_single_thread_once();
    HS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t b = 0; b < k.N; b++) {
        HS_T *state = scratch + per * scan_thread();
        HS(ws) w;
        HS(carve_temp)(&w, state + k.ss, &k);
        const HS_T *xb = X + b * k.T * k.d;
        if (!saved) HS(row_forward)(&k, init, bias, xb, NULL, state, own + b * sv, NULL, &w);
        HS(row_backward)(&k, init, xb, dY + b * k.T * k.D,
                         saved ? saved + b * sv : own + b * sv, Gs + b * gsz, dX + b * k.T * k.d,
                         &w);
    }
    for (int64_t b = 0; b < k.N; b++)
        for (int64_t i = 0; i < gsz; i++) dW[i] += Gs[b * gsz + i];
    mi_scope_release(sc, scratch, bytes);
}
