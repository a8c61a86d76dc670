/* mlp_scan's forward kernel and the pieces its backward (mlp_scan_back_impl.h,
 * included after this file) shares, written once and included per dtype and
 * backend (by mlp_scan.c for REF, by backend/cpu/own_mlp_scan.c for OWN f32), with MS_T
 * the element type, MS(x) the kernel's name and MS_KERNEL its linkage. The
 * math is stated in mlp_scan.c's top comment; the dimensions (ms_dims), the
 * flags and the dtype's math functions (MS_GEMV, MS_EXP, …) come from
 * mlp_scan_defs.h, the threads from scan_threads.h, the bias and the reads
 * from mlp_scan_rules_impl.h. Not a header of its own: no guard. */

/* kl's write and read of a layer's rows and their part of a token's
 * backward (mlp_scan_rules_impl.h's kl_rows and kl_rows_back, or kernels of
 * the including file's own) */
#ifndef MS_KL_ROWS
#define MS_KL_ROWS MS(kl_rows)
#endif
#ifndef MS_KL_ROWS_BACK
#define MS_KL_ROWS_BACK MS(kl_rows_back)
#endif

/* y = c op(A) x (+ y with acc), A [rows, cols] row-major; op(A) = Aᵀ with
 * trans. c scales the weights read at c W (decay_first: c = α_t). The
 * BLAS's gemv, or the including file's own kernel (MS_MV, which may fall
 * back to this one); MS_MV is undefined at the end of mlp_scan_back_impl.h,
 * for the next inclusion. */
static void MS(mv)(bool trans, int64_t rows, int64_t cols, MS_T c, const MS_T *A, const MS_T *x,
                   bool acc, MS_T *y)
{
    MS_GEMV(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, (int)rows, (int)cols, c, A,
            (int)cols, x, 1, acc ? 1 : 0, y, 1);
}
#ifndef MS_MV
#define MS_MV MS(mv)
#endif
/* C = op(A) op(B) (cblas's call, row-major), for the products of a
 * segment's tokens at one weight (inner_seg): the BLAS's gemm, or the
 * including file's (MS_GEMM; undefined with MS_MV). */
#ifndef MS_GEMM
#define MS_GEMM _Generic((MS_T)0, float: cblas_sgemm, default: cblas_dgemm)
#endif

/* One read of the memory and what its derivatives need: a = W2 x, s = gelu(a),
 * gp = gelu'(a), ẑ = LN(W1 s), r = 1/√(var(W1 s) + eps), y = x + ẑ; and for
 * the write at k the error e = ∂ℓ/∂y against v, the switch of yaad (sw = 1:
 * the ℓ2 branch), δ1 = ∂ℓ/∂(W1 s), mv = W1ᵀ δ1, δ2 = gp ⊙ mv. */
typedef struct MS(act) {
    MS_T *a, *s, *gp, *mv, *dl2; /* [h] */
    MS_T *zh, *y, *e, *dl1;      /* [d] */
    MS_T *r, *sw;                /* [1] */
} MS(act);

static MS_T *MS(act_carve)(MS(act) *x, MS_T *p, const ms_dims *k)
{
    MS_T **nh[] = {&x->a, &x->s, &x->gp, &x->mv, &x->dl2};
    MS_T **nd[] = {&x->zh, &x->y, &x->e, &x->dl1};
    for (size_t i = 0; i < 5; i++, p += k->h) *nh[i] = p;
    for (size_t i = 0; i < 4; i++, p += k->d) *nd[i] = p;
    x->r = p++;
    x->sw = p++;
    return p;
}

/* out = r (g − mean(g) − ẑ mean(g ⊙ ẑ)): the vjp of ẑ = LN(z) (no affine),
 * and, with g = e, δ1 of mlp.c's closed form. */
static void MS(ln_back)(int64_t d, const MS_T *g, const MS_T *zh, MS_T r, MS_T *out)
{
    MS_T gm = 0, gz = 0;
    for (int64_t i = 0; i < d; i++) gm += g[i], gz += g[i] * zh[i];
    gm /= (MS_T)d, gz /= (MS_T)d;
    for (int64_t i = 0; i < d; i++) out[i] = r * (g[i] - gm - zh[i] * gz);
}

/* The read's activation, from a = c W2 x in a: s = gelu(a), gp = gelu'(a). */
static void MS(read_gelu)(const ms_dims *k, const MS(act) *o)
{
    for (int64_t j = 0; j < k->h; j++) {
        MS_T a = o->a[j], Phi = (MS_T)0.5 * (1 + MS_ERF(a * (MS_T)M_SQRT1_2));
        o->s[j] = a * Phi;
        o->gp[j] = Phi + a * (MS_T)MS_INV_SQRT_2PI * MS_EXPV((MS_T)-0.5 * a * a);
    }
}

/* The read's end, from z = c W1 s in zh: ẑ = LN(z), r, y = x + ẑ. */
static void MS(read_norm)(const ms_dims *k, const MS_T *x, const MS(act) *o)
{
    int64_t d = k->d;
    MS_T mean = 0, var = 0;
    for (int64_t i = 0; i < d; i++) mean += o->zh[i];
    mean /= (MS_T)d;
    for (int64_t i = 0; i < d; i++) {
        o->zh[i] -= mean;
        var += o->zh[i] * o->zh[i];
    }
    MS_T r = 1 / MS_SQRT(var / (MS_T)d + (MS_T)MS_LN_EPS);
    *o->r = r;
    for (int64_t i = 0; i < d; i++) {
        o->zh[i] *= r;
        o->y[i] = x[i] + o->zh[i];
    }
}

/* The read y = M_{cW}(x) = x + LN(c W1 gelu(c W2 x)) (MIRAS "MIRAS's
 * Variants", Titans' deep memory; mlp.c) into x's act; kl's W as f_i E_ij
 * (kl_f): (W x)_i = f_i (E x)_i. */
static void MS(read)(const ms_dims *k, const MS_T *W, MS_T c, const MS_T *x, const MS(act) *o)
{
    int64_t d = k->d, h = k->h;
    const MS_T *W1 = W, *W2 = W + d * h;
    const MS_T *f1 = NULL, *f2 = NULL; /* kl's row scales of W1, W2 */
    if (k->read == MI_MLP_READ_KL) f1 = MS(kl_f)(k, W, 0), f2 = MS(kl_f)(k, W, 1);
    MS_MV(false, h, d, c, W2, x, false, o->a);
    for (int64_t i = 0; f2 && i < h; i++) o->a[i] *= f2[i];
    MS(read_gelu)(k, o);
    MS_MV(false, d, h, c, W1, o->s, false, o->zh);
    for (int64_t i = 0; f1 && i < d; i++) o->zh[i] *= f1[i];
    MS(read_norm)(k, x, o);
}

/* e against v, the switch and δ1, from the read in o */
static void MS(inner_error)(const ms_dims *k, const MS_T *v, const MS_T *gate, const MS(act) *o)
{
    int64_t d = k->d;
    for (int64_t i = 0; i < d; i++) o->e[i] = o->y[i] - v[i];
    *o->sw = MS(bias_error)(k, d, gate[3], o->e);
    MS(ln_back)(d, o->e, o->zh, *o->r, o->dl1);
}

/* The inner gradient's factors at c W on token (k, v) with threshold δ (kl's
 * W as it is: a grad point, f = 1):
 *   e  = ∂ℓ/∂y at y − v (bias_error)
 *   δ1 = LN'ᵀ e,  δ2 = gelu'(a) ⊙ W1ᵀ δ1  (∂ℓ/∂W1 = δ1 sᵀ, ∂ℓ/∂W2 = δ2 kᵀ) */
static void MS(inner)(const ms_dims *k, const MS_T *W, MS_T c, const MS_T *x, const MS_T *v,
                      const MS_T *gate, const MS(act) *o)
{
    int64_t d = k->d, h = k->h;
    MS(read)(k, W, c, x, o);
    MS(inner_error)(k, v, gate, o);
    MS_MV(true, d, h, c, W, o->dl1, false, o->mv);
    for (int64_t j = 0; j < h; j++) o->dl2[j] = o->gp[j] * o->mv[j];
}

/* inner at W (c = 1) for the n tokens of a segment, keys X [n, d] and
 * values V, into the acts acts + j·ms_act_elems: the mini-batch rule takes
 * them all at the segment's grad point, so each of the three products with W
 * (W2 k, W1 s, W1ᵀ δ1) is one product of the n tokens (a GEMM, where n
 * matrix-vector products would each read W again); the rest token by token. */
static void MS(inner_seg)(const ms_dims *k, const MS_T *W, const MS_T *X, const MS_T *V,
                          const MS_T *gates, int64_t n, MS_T *acts)
{
    int d = (int)k->d, h = (int)k->h, na = (int)ms_act_elems(k), nn = (int)n;
    const MS_T *W1 = W, *W2 = W + k->d * k->h;
    MS(act) rows, o; /* the first token's act: each field's rows, na apart; token j's */
    MS(act_carve)(&rows, acts, k);
    MS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nn, h, d, 1, X, d, W2, d, 0, rows.a, na);
    for (int64_t j = 0; j < n; j++) {
        MS(act_carve)(&o, acts + j * na, k);
        MS(read_gelu)(k, &o);
    }
    MS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nn, d, h, 1, rows.s, na, W1, h, 0, rows.zh,
            na);
    for (int64_t j = 0; j < n; j++) {
        MS(act_carve)(&o, acts + j * na, k);
        MS(read_norm)(k, X + j * d, &o);
        MS(inner_error)(k, V + j * d, gates + j * MS_GATES, &o);
    }
    MS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nn, h, d, 1, rows.dl1, na, W1, h, 0,
            rows.mv, na);
    for (int64_t j = 0; j < n; j++) {
        MS(act_carve)(&o, acts + j * na, k);
        for (int64_t i = 0; i < h; i++) o.dl2[i] = o.gp[i] * o.mv[i];
    }
}

/* The number of tokens in the segment that starts at t. */
static int64_t MS(seg_len)(const ms_dims *k, int64_t t)
{
    int64_t n = 1;
    while (!ms_seg_end(k, t + n - 1)) n++;
    return n;
}

/* inner at the weights of state A: at c A (c = α_t with decay_first, else
 * 1), or with a read at R(c A), put in wbuf. */
static void MS(inner_at)(const ms_dims *k, const MS_T *A, const MS_T *x, const MS_T *v,
                         const MS_T *gate, MS_T *wbuf, const MS(act) *o)
{
    MS_T c = k->decay_first ? gate[1] : 1;
    if (k->read == MI_MLP_READ_STATE) {
        MS(inner)(k, A, c, x, v, gate, o);
        return;
    }
    MS(wread)(k, A, c, wbuf);
    MS(inner)(k, wbuf, 1, x, v, gate, o);
}

/* The write of one token (MIRAS eq:OGDupdate with the retention's decay; Titans §3.1 with momentum):
 *   gd:       W ← α W − η g
 *   momentum: S ← μ S − η g,  W ← α W + S
 * with g = (δ1 sᵀ, δ2 kᵀ) from inner's act (taken at α W with decay_first,
 * gated DeltaNet's order), from the state `from` into `state` (the same
 * pointer: in place; else a copy the write makes as it goes, where the
 * backward keeps each token's state: one pass instead of a copy and then
 * the write). The state is A (W with no read); with a read
 * then W_t = R(A_t) into wt, after kl's boundary (kl_row) where the
 * token ends its segment (boundary); wt NULL: no read (never with a
 * boundary). kl reads each row as soon as it is written, from the max the
 * write found. */
static void MS(step)(const ms_dims *k, const MS_T *from, MS_T *state, const MS_T *x,
                     const MS_T *gate, const MS(act) *o, MS_T *wt, bool boundary)
{
    int64_t d = k->d, h = k->h, m = 2 * d * h;
    MS_T eta = gate[0], alpha = gate[1], mu = gate[2];
    for (int64_t l = 0; l < 2; l++) {
        int64_t rows = l == 0 ? d : h, cols = l == 0 ? h : d;
        const MS_T *dl = l == 0 ? o->dl1 : o->dl2, *in = l == 0 ? o->s : x;
        MS_T *W = state + l * d * h, *S = k->momentum ? W + m : NULL;
        const MS_T *W0 = from + l * d * h, *S0 = k->momentum ? W0 + m : NULL;
        if (!S && k->read == MI_MLP_READ_KL && wt) {
            if (W0 != W) memcpy(W, W0, sizeof(MS_T) * (size_t)(rows * cols));
            MS_KL_ROWS(k, W, in, dl, eta, alpha, wt + l * d * h, MS(kl_f)(k, wt, (int)l), rows,
                       cols, boundary);
            continue;
        }
        for (int64_t i = 0; i < rows; i++) {
            MS_T c = eta * dl[i], *w = W + i * cols;
            const MS_T *w0 = W0 + i * cols;
            if (S) {
                MS_T *s = S + i * cols;
                const MS_T *s0 = S0 + i * cols;
                MS_PRAGMA(omp simd)
                for (int64_t j = 0; j < cols; j++) {
                    s[j] = mu * s0[j] - c * in[j];
                    w[j] = alpha * w0[j] + s[j];
                }
            } else {
                MS_PRAGMA(omp simd)
                for (int64_t j = 0; j < cols; j++) w[j] = alpha * w0[j] - c * in[j];
            }
        }
    }
    if (k->read == MI_MLP_READ_LQ && wt) MS(wread)(k, state, 1, wt);
}

/* Where a segment of the mini-batch rule (chunk > 1) takes its inner
 * gradients, at its first token t (inner_seg, before any of its writes):
 * the weights of the state before it, A itself, or with a read R(A): the
 * last token's wt, or at t = 0 read here into buf. */
static const MS_T *MS(grad_point)(const ms_dims *k, int64_t t, const MS_T *A, const MS_T *wt,
                                  MS_T *buf)
{
    if (!k->read) return A;
    if (t > 0) return wt;
    MS(wread)(k, A, 1, buf);
    return buf;
}

/* Forward: per sequence, the state in the output's slot; per token the
 * inner gradient at W_{t−1} (α_t W_{t−1} with decay_first; with chunk > 1
 * at the segment's grad_point), the write, then y_t = M_{W_t}(q_t). With
 * attrs.data (a recorded call, mi_mlp_scan_packed) the backward's
 * checkpoints too, the state before every K-th token (ms_spacing), ⌈T/K⌉ of
 * P elements per sequence, sequence after sequence. */
MS_KERNEL void MS(mlp_scan)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    ms_dims k = ms_dims_of(in, at);
    int64_t N = k.N, T = k.T, d = k.d, P = k.P, width = T * d + P;
    const MS_T *W0 = in[0]->data, *Q = in[1]->data, *K = in[2]->data, *V = in[3]->data;
    const MS_T *Gt = in[4]->data;
    MS_T *kept = (MS_T *)(uintptr_t)at->data;
    int64_t K_cp = ms_spacing(&k), n_cp = ms_checkpoints(&k);
    int64_t nr = ms_read_elems(&k), na = ms_act_elems(&k), per = na + (k.read ? 2 * nr : 0);
    if (k.chunk > 1) per += k.chunk * na; /* the segment's acts */
    /* act, R(A_{t−1}) (with chunk > 1 the segment's: grad_point), R(A_t) */
    mi_scope *sc = mi_scope_current();
    int n_thr = scan_threads(N, N * T * P);
    size_t bytes = sizeof(MS_T) * (size_t)(per * n_thr);
    MS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) { /* kernels cannot fail: zeros, never uninitialised memory */
        memset(o->data, 0, sizeof(MS_T) * (size_t)o->numel);
        return;
    }
    blas_single_thread_once();
    MS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t n = 0; n < N; n++) {
        MS(act) x, sa, *ia = &x; /* the query's read; the token's inner */
        MS_T *wg = MS(act_carve)(&x, scratch + per * scan_thread(), &k);
        MS_T *wt = k.read ? wg + nr : NULL, *sacts = wg + (k.read ? 2 * nr : 0);
        MS_T *Y = (MS_T *)o->data + n * width, *state = Y + T * d;
        memcpy(state, W0 + n * P, sizeof(MS_T) * (size_t)P);
        for (int64_t t = 0; t < T; t++) {
            int64_t nt = n * T + t;
            const MS_T *gate = Gt + nt * MS_GATES;
            if (kept && t % K_cp == 0)
                memcpy(kept + (n * n_cp + t / K_cp) * P, state, sizeof(MS_T) * (size_t)P);
            if (k.chunk > 1) {
                if (ms_seg_start(&k, t))
                    MS(inner_seg)(&k, MS(grad_point)(&k, t, state, wt, wg), K + nt * d,
                                  V + nt * d, gate, MS(seg_len)(&k, t), sacts);
                MS(act_carve)(&sa, sacts + (t - ms_seg_first(&k, t)) * na, &k);
                ia = &sa;
            } else if (k.read && t > 0 && !k.decay_first) { /* R(A_{t−1}): the last token's read */
                MS(inner)(&k, wt, 1, K + nt * d, V + nt * d, gate, &x);
            } else {
                MS(inner_at)(&k, state, K + nt * d, V + nt * d, gate, wg, &x);
            }
            MS(step)(&k, state, state, K + nt * d, gate, ia, wt, ms_seg_end(&k, t));
            MS(read)(&k, k.read ? wt : state, 1, Q + nt * d, &x);
            memcpy(Y + t * d, x.y, sizeof(MS_T) * (size_t)d);
        }
    }
    mi_scope_release(sc, scratch, bytes);
}
