/* mlp_scan's rule pieces, written once and included before mlp_scan_impl.h
 * per dtype and backend (the same macros: MS_T, MS(x), and mlp_scan_defs.h's
 * math functions and MS_PRAGMA): the bias's error ∂ℓ/∂y and its
 * derivative, and the weights' read from the state, W = R(A), with its vjp
 * and the kl boundary. The math is stated in mlp_scan.c's top comment. Not
 * a header of its own: no guard. */

/* ∂ℓ/∂y from diff = y − v, in place, d entries, with threshold δ; returns the
 * switch of yaad (1: the ℓ2 branch; 1 for the other biases).
 *   ℓ2 (MIRAS, the MSE objective): e = diff
 *   yaad (MIRAS eq:huber-loss):  e = diff if ‖diff‖ ≤ δ, else δ tanh(a diff)
 *                                (a = ∞: δ sign(diff))
 *   lp (MIRAS Variant 1, eq:lp-attentional-bias, with the smooth
 *       |x| ≈ s(x) = √(x² + ε)): e = p s(diff)^(p−2) ⊙ diff */
static MS_T MS(bias_error)(const ms_dims *k, int64_t d, MS_T delta, MS_T *e)
{
    if (k->lp) {
        MS_T p = (MS_T)k->lp_p, eps = (MS_T)k->lp_eps;
        for (int64_t i = 0; i < d; i++)
            e[i] *= p * MS_POW(MS_SQRT(e[i] * e[i] + eps), p - 2);
        return 1;
    }
    if (!k->yaad) return 1;
    MS_T nrm = 0;
    for (int64_t i = 0; i < d; i++) nrm += e[i] * e[i];
    if (MS_SQRT(nrm) <= delta) return 1;
    for (int64_t i = 0; i < d; i++)
        e[i] = delta * (isinf(k->sharp) ? (MS_T)((e[i] > 0) - (e[i] < 0))
                                        : MS_TANH((MS_T)k->sharp * e[i]));
    return 0;
}

/* The vjp of bias_error: ge = ∂L/∂e in, ∂L/∂diff out (diff = y − v); the
 * gradient of δ is returned (yaad's ℓ1 branch, else 0).
 *   yaad:  ∂e/∂diff = δ a (1 − tanh²(a diff)) (a = ∞: 0), ∂e/∂δ = tanh(a diff)
 *   lp:    ∂e_i/∂diff_i = p s^(p−4) (s² + (p − 2) diff_i²),  s = √(diff_i² + ε) */
static MS_T MS(bias_back)(const ms_dims *k, int64_t d, const MS_T *y, const MS_T *v, MS_T delta,
                          MS_T sw, MS_T *ge)
{
    if (k->lp) {
        MS_T p = (MS_T)k->lp_p, eps = (MS_T)k->lp_eps;
        for (int64_t i = 0; i < d; i++) {
            MS_T diff = y[i] - v[i], s2 = diff * diff + eps;
            ge[i] *= p * MS_POW(MS_SQRT(s2), p - 4) * (s2 + (p - 2) * diff * diff);
        }
        return 0;
    }
    if (sw != 0) return 0;
    MS_T gdelta = 0;
    for (int64_t i = 0; i < d; i++) {
        MS_T diff = y[i] - v[i];
        if (isinf(k->sharp)) {
            gdelta += ge[i] * (MS_T)((diff > 0) - (diff < 0));
            ge[i] = 0;
        } else {
            MS_T th = MS_TANH((MS_T)k->sharp * diff);
            gdelta += ge[i] * th;
            ge[i] *= delta * (MS_T)k->sharp * (1 - th * th);
        }
    }
    return gdelta;
}

/* Weight l's rows and columns: W1 [d, h], W2 [h, d]. */
static void MS(shape_of)(const ms_dims *k, int l, int64_t *rows, int64_t *cols)
{
    *rows = l == 0 ? k->d : k->h;
    *cols = l == 0 ? k->h : k->d;
}

/* kl's row scales of weight l (W1's d rows, then W2's h) in a read buffer W
 * of ms_read_elems: the read is W_ij = f_i E_ij with E in W's place. kl_rows
 * leaves E = exp(A − max) and f = c_kl / Σ where a token does not end its
 * segment (the scaling pass is then the products' few multiplies: read,
 * token_backward, kl_rows_back); elsewhere E = W and f = 1 (a segment's end,
 * wread): the grad points, which inner, inner_seg and the backward's
 * products with them take as they are. */
static inline MS_T *MS(kl_f)(const ms_dims *k, const MS_T *W, int l)
{
    return (MS_T *)W + k->m + 2 + (l ? k->d : 0);
}

/* One row of kl's read, from c a's max mx: w = c_kl softmax(c a), or with fs
 * w = exp(c a − mx) and *fs = c_kl / Σ (kl_f); with a_out also kl's
 * projection (retention/kl.c's boundary; c = 1) from the same exponentials,
 * a_out ← log c_kl + log_softmax(a). */
static void MS(kl_row)(const ms_dims *k, const MS_T *a, MS_T *a_out, MS_T *w, MS_T *fs,
                       int64_t cols, MS_T c, MS_T mx)
{
    MS_T sum = 0;
    MS_PRAGMA(omp simd reduction(+ : sum))
    for (int64_t j = 0; j < cols; j++) sum += w[j] = MS_EXPV(c * a[j] - mx);
    MS_T f = (MS_T)k->kc / sum;
    if (fs) {
        *fs = f;
        return;
    }
    if (!a_out) {
        MS_PRAGMA(omp simd)
        for (int64_t j = 0; j < cols; j++) w[j] *= f;
        return;
    }
    MS_T sh = MS_LOG((MS_T)k->kc) - mx - MS_LOG(sum);
    MS_PRAGMA(omp simd)
    for (int64_t j = 0; j < cols; j++) {
        a_out[j] = a[j] + sh;
        w[j] *= f;
    }
}

/* kl's write of the rows of one layer in place, then their read (kl_row):
 *   A_i ← α A_i − c_i x,  c_i = η dl_i;  W_i = c_kl softmax(A_i) into wt as
 * f_i E_i (kl_f: E_i and f_i into wt and f; at a boundary W_i and f_i = 1,
 * and A_i ← log c_kl + log_softmax(A_i)). */
static void MS(kl_rows)(const ms_dims *k, MS_T *A, const MS_T *x, const MS_T *dl, MS_T eta,
                        MS_T alpha, MS_T *wt, MS_T *f, int64_t rows, int64_t cols,
                        bool boundary)
{
    for (int64_t i = 0; i < rows; i++) {
        MS_T c = eta * dl[i], *a = A + i * cols, mx = alpha * a[0] - c * x[0];
        MS_PRAGMA(omp simd reduction(max : mx))
        for (int64_t j = 0; j < cols; j++) {
            a[j] = alpha * a[j] - c * x[j];
            mx = a[j] > mx ? a[j] : mx;
        }
        MS(kl_row)(k, a, boundary ? a : NULL, wt + i * cols, boundary ? NULL : f + i, cols, 1,
                   mx);
        if (boundary) f[i] = 1;
    }
}

/* kl's part of a token's backward, one pass over each row i of weight l of
 * G (rows × cols):
 *   the read's vjp for ∂L/∂W_t = a bᵀ (W = R(A_t), as wread_back; W_ij =
 *   f_i E_ij as W holds it, kl_f):
 *     G_ij += W_ij a_i (b_j − (W b)_i / c_kl)
 *   kl's boundary where the token ends its segment (G = ∂L/∂L_after →
 *   ∂L/∂L_before, softmax(L) = W / c_kl on either side):
 *     G_ij −= (W_ij / c_kl) Σ_l G_il
 *   the write's products with G̃ = G (kl takes gd), prod[i] = (G x)_i and
 *   acc += Gᵀ dl (G̃1 s, G̃1ᵀ δ1 or G̃2 k, G̃2ᵀ δ2 of token_backward),
 *   *galpha += ⟨G, A_{t−1}⟩, then G ← α G (the inner gradient's c R'ᵀ J is
 *   token_backward's to add). */
static void MS(kl_rows_back)(const ms_dims *k, int l, const MS_T *W, const MS_T *Ap, MS_T *G,
                             const MS_T *a, const MS_T *b, bool boundary, const MS_T *x,
                             const MS_T *dl, MS_T alpha, MS_T *prod, MS_T *acc, MS_T *galpha)
{
    int64_t rows, cols, at = l * k->d * k->h;
    MS(shape_of)(k, l, &rows, &cols);
    MS_T inv = 1 / (MS_T)k->kc, ga = 0;
    memset(acc, 0, sizeof(MS_T) * (size_t)cols);
    const MS_T *f = MS(kl_f)(k, W, l);
    for (int64_t i = 0; i < rows; i++) {
        const MS_T *wr = W + at + i * cols, *ar = Ap + at + i * cols;
        MS_T *g = G + at + i * cols, dot = 0, sum = 0, px = 0, ai = a[i] * f[i], di = dl[i];
        MS_PRAGMA(omp simd reduction(+ : dot))
        for (int64_t j = 0; j < cols; j++) dot += wr[j] * b[j];
        dot *= inv * f[i];
        MS_PRAGMA(omp simd reduction(+ : sum))
        for (int64_t j = 0; j < cols; j++) sum += g[j] += ai * wr[j] * (b[j] - dot);
        if (boundary) {
            sum *= inv * f[i];
            MS_PRAGMA(omp simd)
            for (int64_t j = 0; j < cols; j++) g[j] -= wr[j] * sum;
        }
        MS_PRAGMA(omp simd reduction(+ : px, ga))
        for (int64_t j = 0; j < cols; j++) {
            px += g[j] * x[j];
            acc[j] += di * g[j];
            ga += g[j] * ar[j];
            g[j] *= alpha;
        }
        prod[i] = px;
    }
    *galpha += ga;
}

/* W = R(c A), both weights (c = α_t where the gradient is taken at α_t A
 * with decay_first, else 1), W [m + 2] (ms_read_elems; lq: then S of each):
 *   lq (MIRAS Variant 4, eq:q-norm, the Frobenius form of retention/lq.c):
 *       W = X / (‖X‖_F² + ε)^(r/2) per matrix, X = c A, r = (q − 2)/q
 *   kl (MIRAS Variant 1, eq:xmodel; retention/kl.c): W = c_kl softmax(X) per row */
static void MS(wread)(const ms_dims *k, const MS_T *A, MS_T c, MS_T *W)
{
    for (int l = 0; l < 2; l++) {
        int64_t rows, cols, n = k->d * k->h;
        MS(shape_of)(k, l, &rows, &cols);
        const MS_T *a = A + l * n;
        MS_T *w = W + l * n;
        if (k->read == MI_MLP_READ_LQ) {
            MS_T sq = 0, r = (MS_T)((k->rq - 2) / k->rq);
            MS_PRAGMA(omp simd reduction(+ : sq))
            for (int64_t i = 0; i < n; i++) sq += a[i] * a[i];
            W[k->m + l] = c * c * sq + (MS_T)k->reps;
            /* S = 0 (ε = 0 and A = 0): W = 0, as lq_normalize */
            MS_T s = W[k->m + l] > 0 ? c * MS_POW(W[k->m + l], -r / 2) : 0;
            MS_PRAGMA(omp simd)
            for (int64_t i = 0; i < n; i++) w[i] = s * a[i];
            continue;
        }
        for (int64_t i = 0; i < rows; i++) {
            const MS_T *ar = a + i * cols;
            MS_T mx = c * ar[0];
            MS_PRAGMA(omp simd reduction(max : mx))
            for (int64_t j = 0; j < cols; j++) mx = c * ar[j] > mx ? c * ar[j] : mx;
            MS(kl_row)(k, ar, NULL, w + i * cols, NULL, cols, c, mx);
            MS(kl_f)(k, W, l)[i] = 1;
        }
    }
}

/* The vjp of kl's read with respect to X = c L: GW = ∂L/∂W → out = ∂L/∂X,
 * with W = R(X) as wread left it (lq's, a scale of each matrix, is
 * written out where it is used: lq_add, lq_fold):
 *   ∂L/∂X_ij = W_ij (GW_ij − Σ_l GW_il W_il / c_kl) */
static void MS(wread_back)(const ms_dims *k, const MS_T *W, const MS_T *GW, MS_T *out)
{
    MS_T inv = 1 / (MS_T)k->kc;
    for (int l = 0; l < 2; l++) {
        int64_t rows, cols, at = l * k->d * k->h;
        MS(shape_of)(k, l, &rows, &cols);
        for (int64_t i = 0; i < rows; i++) {
            const MS_T *wr = W + at + i * cols, *gr = GW + at + i * cols;
            MS_T *orow = out + at + i * cols, dot = 0;
            MS_PRAGMA(omp simd reduction(+ : dot))
            for (int64_t j = 0; j < cols; j++) dot += gr[j] * wr[j];
            dot *= inv;
            MS_PRAGMA(omp simd)
            for (int64_t j = 0; j < cols; j++) orow[j] = wr[j] * (gr[j] - dot);
        }
    }
}

