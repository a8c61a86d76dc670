/* mlp_scan's backward kernel, written once and included after
 * mlp_scan_impl.h (whose forward pieces, MS_MV and MS_GEMM it uses) per dtype
 * and backend, like it. The math is stated in mlp_scan.c's top comment.
 * Not a header of its own: no guard. */

/* One thread's work vectors for the backward of a token. */
typedef struct MS(work) {
    MS_T *gz, *gdl1, *gzh, *ge; /* [d] ∂L/∂ of W1 s, δ1, ẑ, e */
    MS_T *g1s, *g2d;            /* [d] G̃1 s, G̃2ᵀ δ2 */
    MS_T *gs, *ga, *gm;         /* [h] ∂L/∂ of s, a, mv */
    MS_T *g2k;                  /* [h] G̃2 k */
    MS_T *fx;                   /* [d + h] a vector times kl's row scales */
    MS_T *wg, *wt, *gr, *j;     /* [P] with a read: R(c A_{t−1}), R(A_t), ∂L/∂R(A_t), J */
} MS(work);

static MS_T *MS(work_carve)(MS(work) *w, MS_T *p, const ms_dims *k)
{
    MS_T **nd[] = {&w->gz, &w->gdl1, &w->gzh, &w->ge, &w->g1s, &w->g2d};
    MS_T **nh[] = {&w->gs, &w->ga, &w->gm, &w->g2k};
    for (size_t i = 0; i < 6; i++, p += k->d) *nd[i] = p;
    for (size_t i = 0; i < 4; i++, p += k->h) *nh[i] = p;
    w->fx = p, p += k->d + k->h;
    MS_T **np[] = {&w->wg, &w->wt, &w->gr, &w->j};
    int64_t nr = k->read ? ms_read_elems(k) : 0;
    for (size_t i = 0; i < 4; i++) *np[i] = k->read ? p : NULL, p += nr;
    return p;
}

/* x for the product Wᵀ x with weight l of the read W; for kl's W_ij = f_i
 * E_ij (kl_f), f ⊙ x into buf: Wᵀ x = Eᵀ (f ⊙ x). */
static const MS_T *MS(times_f)(const ms_dims *k, const MS_T *W, int l, const MS_T *x, MS_T *buf)
{
    if (k->read != MI_MLP_READ_KL) return x;
    const MS_T *f = MS(kl_f)(k, W, l);
    for (int64_t i = 0; i < (l ? k->h : k->d); i++) buf[i] = f[i] * x[i];
    return buf;
}

/* G += a bᵀ, G [rows, cols]. */
static void MS(add_outer)(MS_T *G, int64_t rows, int64_t cols, const MS_T *a, const MS_T *b)
{
    for (int64_t i = 0; i < rows; i++) {
        MS_T *g = G + i * cols, ai = a[i];
        MS_PRAGMA(omp simd)
        for (int64_t j = 0; j < cols; j++) g[j] += ai * b[j];
    }
}

/* G += Σ_j a_j b_jᵀ over n tokens, a_j and b_j the rows of A and B (lda,
 * ldb apart), G [rows, cols]: add_outer for one token, one GEMM (Aᵀ B) for
 * a segment's. */
static void MS(add_outers)(MS_T *G, int64_t rows, int64_t cols, int64_t n, const MS_T *A,
                           int64_t lda, const MS_T *B, int64_t ldb)
{
    if (n == 1) {
        MS(add_outer)(G, rows, cols, A, B);
        return;
    }
    MS_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)cols, (int)n, 1, A,
            (int)lda, B, (int)ldb, 1, G, (int)cols);
}

/* y_j += c op(W) x_j over n tokens, x_j and y_j the rows of X and Y (ldx,
 * ldy apart), W [rows, cols] row-major, op(W) = Wᵀ with trans: a
 * matrix-vector product for one token, one GEMM (X op(W)ᵀ) for a segment's. */
static void MS(rows_times)(bool trans, int64_t rows, int64_t cols, MS_T c, const MS_T *W,
                           int64_t n, const MS_T *X, int64_t ldx, MS_T *Y, int64_t ldy)
{
    if (n == 1) {
        MS_MV(trans, rows, cols, c, W, X, true, Y);
        return;
    }
    MS_GEMM(CblasRowMajor, CblasNoTrans, trans ? CblasNoTrans : CblasTrans, (int)n,
            (int)(trans ? cols : rows), (int)(trans ? rows : cols), c, X, (int)ldx, W,
            (int)cols, 1, Y, (int)ldy);
}

/* Token j's act in a run of acts na apart that starts with a0 (act_carve
 * starts each act at its field a). */
static MS(act) MS(act_at)(const MS(act) *a0, int64_t j, const ms_dims *k)
{
    MS(act) o;
    MS(act_carve)(&o, a0->a + j * ms_act_elems(k), k);
    return o;
}

/* The inner gradient's backward from the write's seeds ∂L/∂δ1, ∂L/∂s,
 * ∂L/∂mv, ∂L/∂a (token_backward) to the token's k, v and δ: for one token
 * in its work vectors, or with the mini-batch rule for the n tokens of a
 * segment, a row each (gdl1, gz [n, d]; gs, gm, ga [n, h]), all at the
 * segment's grad point. */
typedef struct MS(chain) {
    MS_T *gdl1, *gz, *gs, *gm, *ga;
} MS(chain);

/* The rows of n tokens' chains from p (as act_carve and work_carve). */
static MS_T *MS(chain_carve)(MS(chain) *c, MS_T *p, int64_t n, const ms_dims *k)
{
    MS_T **nd[] = {&c->gdl1, &c->gz}, **nh[] = {&c->gs, &c->gm, &c->ga};
    for (size_t i = 0; i < 2; i++, p += n * k->d) *nd[i] = p;
    for (size_t i = 0; i < 3; i++, p += n * k->h) *nh[i] = p;
    return p;
}

static MS(chain) MS(chain_row)(const MS(chain) *c, int64_t j, const ms_dims *k)
{
    int64_t d = k->d, h = k->h;
    return (MS(chain)){c->gdl1 + j * d, c->gz + j * d, c->gs + j * h, c->gm + j * h,
                       c->ga + j * h};
}

/* The chain (token_backward's comment, from gδ1 += c W1 gm on) for n tokens
 * at the weights Wp (scale cp), their acts from a0 (na apart), their rows of
 * k, v, gates and of the gradients gk, gv, ggate; each of the three
 * products with Wp one GEMM over the tokens (rows_times), the rest token by
 * token. */
static void MS(inner_back)(const ms_dims *k, const MS_T *Wp, MS_T cp, int64_t n,
                           const MS(act) *a0, const MS_T *v, const MS_T *gates, MS_T *gk,
                           MS_T *gv, MS_T *ggate, const MS(chain) *c, const MS(work) *w)
{
    int64_t d = k->d, h = k->h, na = ms_act_elems(k);
    MS(rows_times)(false, d, h, cp, Wp, n, c->gm, h, c->gdl1, d); /* gδ1 += c W1 gm */
    for (int64_t j = 0; j < n; j++) {
        MS(act) ik = MS(act_at)(a0, j, k);
        MS_T *gdl1 = c->gdl1 + j * d, *gz = c->gz + j * d, *gkj = gk + j * d;
        /* through δ1 = r (e − ē − ẑ ρ) */
        MS_T r = *ik.r, rho = 0, kap = 0, gr = 0;
        for (int64_t i = 0; i < d; i++) {
            rho += ik.e[i] * ik.zh[i];
            kap += gdl1[i] * ik.zh[i];
            gr += gdl1[i] * ik.dl1[i];
        }
        rho /= (MS_T)d, kap /= (MS_T)d, gr /= r;
        MS(ln_back)(d, gdl1, ik.zh, r, w->ge);
        /* e from y − v: ∂L/∂(y − v) into ge */
        ggate[j * MS_GATES + 3] =
            MS(bias_back)(k, d, ik.y, v + j * d, gates[j * MS_GATES + 3], *ik.sw, w->ge);
        for (int64_t i = 0; i < d; i++) {
            gv[j * d + i] = -w->ge[i];
            gkj[i] += w->ge[i];
            w->gzh[i] = w->ge[i] - r * (rho * gdl1[i] + kap * ik.e[i]);
        }
        MS(ln_back)(d, w->gzh, ik.zh, r, gz);
        for (int64_t i = 0; i < d; i++) gz[i] -= gr * r * r * ik.zh[i] / (MS_T)d;
    }
    MS(rows_times)(true, d, h, cp, Wp, n, c->gz, d, c->gs, h); /* gs += c W1ᵀ gz */
    for (int64_t j = 0; j < n; j++) {
        const MS_T *gp = a0->gp + j * na, *gs = c->gs + j * h;
        MS_T *ga = c->ga + j * h;
        for (int64_t i = 0; i < h; i++) ga[i] += gs[i] * gp[i];
    }
    MS(rows_times)(true, h, d, cp, Wp + d * h, n, c->ga, h, gk, d); /* gk += c W2ᵀ ga */
}

/* J = ∂L/∂(c W) of the inner gradients of the n tokens, Σ_j (δ1 gmᵀ + gz sᵀ,
 * ga kᵀ) over them (keys X, d apart), into J: one GEMM for each of the
 * three sums over a segment's tokens (add_outers). */
static void MS(inner_j)(const ms_dims *k, int64_t n, const MS(act) *a0, const MS_T *X,
                        const MS(chain) *c, MS_T *J)
{
    int64_t d = k->d, h = k->h, na = ms_act_elems(k);
    memset(J, 0, sizeof(MS_T) * (size_t)k->m);
    MS(add_outers)(J, d, h, n, a0->dl1, na, c->gm, h);
    MS(add_outers)(J, d, h, n, c->gz, d, a0->s, na);
    MS(add_outers)(J + d * h, h, d, n, c->ga, h, X, d);
}

/* The mini-batch rule at a segment's first token, the last the backward
 * takes: the chain of its n tokens (their seeds in c's rows) at its grad
 * point Wp (R(A) with a read, else A), their J, and ∂L/∂ the state before
 * the segment, G += R'ᵀ J (kl: wread_back) or G += J. */
static void MS(seg_back)(const ms_dims *k, const MS_T *Wp, int64_t n, const MS(act) *a0,
                         const MS_T *X, const MS_T *v, const MS_T *gates, MS_T *gk, MS_T *gv,
                         MS_T *ggate, const MS(chain) *c, MS_T *G, MS_T *J, const MS(work) *w)
{
    MS(inner_back)(k, Wp, 1, n, a0, v, gates, gk, gv, ggate, c, w);
    MS(inner_j)(k, n, a0, X, c, J);
    const MS_T *gJ = J;
    if (k->read) {
        MS(wread_back)(k, Wp, J, w->gr);
        gJ = w->gr;
    }
    for (int64_t i = 0; i < k->m; i++) G[i] += gJ[i];
}

/* One layer's ∂L/∂W_{t−1} from G = ∂L/∂W_t (W_t = α W_{t−1} + …) and
 * J = a0 b0ᵀ + a1 b1ᵀ = ∂L/∂(c W_{t−1}) through the inner gradient, in place:
 *   G ← α G + c J;  adds ⟨G, W_{t−1}⟩ (before the update) to *gw and
 *   ⟨J, W_{t−1}⟩ to *jw (α's terms). a1 NULL: J = a0 b0ᵀ. */
static void MS(fold)(MS_T *G, const MS_T *Wp, int64_t rows, int64_t cols, MS_T alpha, MS_T c,
                     const MS_T *a0, const MS_T *b0, const MS_T *a1, const MS_T *b1, MS_T *gw,
                     MS_T *jw)
{
    MS_T sg = 0, sj = 0;
    if (!a1) b1 = b0; /* with a1_i = 0 */
    for (int64_t i = 0; i < rows; i++) {
        MS_T *g = G + i * cols, c0 = a0[i], c1 = a1 ? a1[i] : 0;
        const MS_T *w = Wp + i * cols;
        MS_PRAGMA(omp simd reduction(+ : sg, sj))
        for (int64_t j = 0; j < cols; j++) {
            MS_T J = c0 * b0[j] + c1 * b1[j];
            sg += g[j] * w[j];
            sj += J * w[j];
            g[j] = alpha * g[j] + c * J;
        }
    }
    *gw += sg, *jw += sj;
}

/* lq's read W = σ A of one matrix [rows, cols] (σ = S^(−r/2), S = ‖A‖_F² + ε):
 * ∂L/∂A of GR = a bᵀ (= ∂L/∂W) into G without writing GR out:
 *   ∂L/∂A = σ GR − r σ ⟨GR, A⟩ A / S = σ a bᵀ − κ A,  κ = r ⟨GR, W⟩ / S
 * with gw = ⟨GR, W⟩ from the read's products. */
static void MS(lq_add)(const ms_dims *k, MS_T *G, const MS_T *A, int64_t rows, int64_t cols,
                       MS_T S, const MS_T *a, const MS_T *b, MS_T gw)
{
    if (!(S > 0)) return; /* W = 0 whatever A (ε = 0, A = 0): no gradient */
    MS_T r = (MS_T)((k->rq - 2) / k->rq), sig = MS_POW(S, -r / 2), kap = r * gw / S;
    for (int64_t i = 0; i < rows; i++) {
        MS_T *g = G + i * cols, ai = sig * a[i];
        const MS_T *x = A + i * cols;
        MS_PRAGMA(omp simd)
        for (int64_t j = 0; j < cols; j++) g[j] += ai * b[j] - kap * x[j];
    }
}

/* fold for lq's read of the inner gradient's weights, W = σ X, X = c A_{t−1}
 * (σ = S^(−r/2), S = ‖X‖_F² + ε), one matrix: with J = ∂L/∂W,
 *   ∂L/∂X = σ J − r σ ⟨J, X⟩ X / S,  ∂L/∂A_{t−1} = c ∂L/∂X
 *   G ← α G + c σ J − κ A_{t−1},  κ = c³ r σ ⟨J, A_{t−1}⟩ / S
 * adds ⟨G, A_{t−1}⟩ to *gw and ⟨∂L/∂X, A_{t−1}⟩ = σ ⟨J, A⟩ (1 − r (S − ε)/S)
 * to *jw. */
static void MS(lq_fold)(const ms_dims *k, MS_T *G, const MS_T *A, int64_t rows, int64_t cols,
                        MS_T alpha, MS_T c, MS_T S, const MS_T *a0, const MS_T *b0,
                        const MS_T *a1, const MS_T *b1, MS_T *gw, MS_T *jw)
{
    MS_T r = (MS_T)((k->rq - 2) / k->rq), sig = S > 0 ? MS_POW(S, -r / 2) : 0, sg = 0, sj = 0;
    MS(fold)(G, A, rows, cols, alpha, c * sig, a0, b0, a1, b1, &sg, &sj);
    MS_T kap = S > 0 ? c * c * c * r * sig * sj / S : 0;
    int64_t n = rows * cols;
    MS_PRAGMA(omp simd)
    for (int64_t i = 0; i < n; i++) G[i] -= kap * A[i];
    *gw += sg;
    *jw += S > 0 ? sig * sj * (1 - r * (S - (MS_T)k->reps) / S) : 0;
}

/* The vjp of token t, with Ap = W_{t−1} (and S_{t−1}) its inner act ik (at Ap
 * on k_t), W_t's read ra on q_t; on entry G = ∂L/∂W_t less the read's part,
 * H = ∂L/∂S_t (momentum); on return ∂L/∂W_{t−1}, ∂L/∂S_{t−1}.
 *   read:   gz = LN'ᵀ gy, G1 += gz sᵀ, ga = gelu'(a) ⊙ W1ᵀ gz, G2 += ga qᵀ,
 *           gq = gy + W2ᵀ ga
 *   write:  G̃ = G (gd) or H + G (momentum: ∂L/∂S_t, W_t = α W_{t−1} + S_t);
 *           gα = ⟨G, W_{t−1}⟩, gμ = ⟨G̃, S_{t−1}⟩, gη = −⟨G̃, g⟩,
 *           ∂L/∂g = −η G̃; H ← μ G̃
 *   g = (δ1 sᵀ, δ2 kᵀ) at W_{t−1}: gδ1 = −η G̃1 s, gs = −η G̃1ᵀ δ1,
 *           gδ2 = −η G̃2 k, gk = −η G̃2ᵀ δ2;
 *           δ2 = gp ⊙ mv: gm = gδ2 ⊙ gp, ga = gδ2 ⊙ mv ⊙ gelu''(a), gelu'' = φ(a)(2 − a²);
 *           mv = W1ᵀ δ1: J1 = δ1 gmᵀ, gδ1 += W1 gm;
 *           δ1 = r (e − ē − ẑ ρ), ρ = mean(e ⊙ ẑ), κ = mean(gδ1 ⊙ ẑ):
 *             ge = LN'ᵀ gδ1, gẑ = −r (ρ gδ1 + κ e), gr = ⟨gδ1, δ1⟩ / r;
 *           e from y − v (bias): gdiff, gv = −gdiff, gδ (yaad);
 *           y = k + ẑ: gẑ += gdiff, gk += gdiff;
 *           gz = LN'ᵀ gẑ − gr r² ẑ / d (∂r/∂z = −r² ẑ / d);
 *           J1 += gz sᵀ, gs += W1ᵀ gz, ga += gs ⊙ gp, J2 = ga kᵀ, gk += W2ᵀ ga
 *   G ← α G + J.
 * With a read (state A, weights R(A)): the read's part ∂L/∂R(A_t) goes
 * through wread_back (kl: kl_rows_back, with the boundary) into G, the inner gradient's
 * J = ∂L/∂R(c A_{t−1}) through wread_back at c A_{t−1}, and G ← α G + c R'ᵀJ
 * (gα: ⟨G, A_{t−1}⟩, + ⟨R'ᵀJ, A_{t−1}⟩ with decay_first). Ap, At: the
 * states A_{t−1}, A_t; with a read rt = R(A_t) and rg = R(A_{t−1}) (NULL
 * with decay_first: R(α_t A_{t−1}) is computed here).
 * The mini-batch rule (chunk > 1): rg is the weights where the segment takes
 * its gradients (R(A) or, with no read, A, of the state before its first
 * token), and every token's J is taken there. So the token leaves its
 * chain's seeds in its row of ch (G ← α G here), and the chains, their J
 * and G += R'ᵀ J run once for the segment after its first token (seg_back);
 * kl's boundary only where the token ends its segment (boundary). */
static void MS(token_backward)(const ms_dims *k, const MS_T *Ap, const MS_T *At, MS_T *G,
                               MS_T *H, const MS_T *q, const MS_T *kt, const MS_T *v,
                               const MS_T *gate, const MS(act) *ik, const MS(act) *ra,
                               const MS_T *gy, MS_T *gq, MS_T *gk, MS_T *gv, MS_T *ggate,
                               const MS_T *rg, const MS_T *rt, const MS(chain) *ch,
                               bool boundary, const MS(work) *w)
{
    int64_t d = k->d, h = k->h, dh = d * h, m = 2 * dh;
    MS_T eta = gate[0], alpha = gate[1], mu = gate[2];
    MS_T c = k->decay_first ? alpha : 1; /* the inner gradient at c W_{t−1} */
    /* the weights: Wt read at y, Wp (at scale cp) where the inner gradient is taken */
    const MS_T *Wt = At, *Wp = rg ? rg : Ap;
    MS_T cp = c;
    bool lq = k->read == MI_MLP_READ_LQ, kl = k->read == MI_MLP_READ_KL;
    if (k->read) {
        if (!rg) MS(wread)(k, Ap, c, w->wg);
        Wt = rt, Wp = rg ? rg : w->wg, cp = 1;
    }
    MS_T galpha = 0;
    /* the read y_t = M_{W_t}(q_t), its ∂L/∂W_t = GR the outer products
     * (gz sᵀ, ga qᵀ); with lq ∂L/∂A_t of W = σ A: G += σ GR − κ A,
     * κ = r ⟨GR, W⟩ / S (lq_add); with kl R'ᵀ GR, the boundary's vjp, the
     * write's products and G ← α G in one pass (kl_rows_back) */
    MS(read)(k, Wt, 1, q, ra);
    MS(ln_back)(d, gy, ra->zh, *ra->r, w->gz);
    MS_MV(true, d, h, 1, Wt, MS(times_f)(k, Wt, 0, w->gz, w->fx), false, w->gs);
    MS_T gw1 = 0, gw2 = 0; /* ⟨GR1, W1⟩ = ⟨W1ᵀ gz, s⟩, ⟨GR2, W2⟩ = ⟨W2ᵀ ga, q⟩ */
    for (int64_t j = 0; j < h; j++) {
        gw1 += w->gs[j] * ra->s[j];
        w->ga[j] = w->gs[j] * ra->gp[j];
    }
    if (!k->read) {
        MS(add_outer)(G, d, h, w->gz, ra->s);
        MS(add_outer)(G + dh, h, d, w->ga, q);
    }
    memcpy(gq, gy, sizeof(MS_T) * (size_t)d);
    MS_MV(true, h, d, 1, Wt + dh, MS(times_f)(k, Wt, 1, w->ga, w->fx), true, gq);
    if (lq) {
        for (int64_t i = 0; i < d; i++) gw2 += (gq[i] - gy[i]) * q[i];
        MS(lq_add)(k, G, At, d, h, rt[m], w->gz, ra->s, gw1);
        MS(lq_add)(k, G + dh, At + dh, h, d, rt[m + 1], w->ga, q, gw2);
    } else if (kl) {
        MS_KL_ROWS_BACK(k, 0, Wt, Ap, G, w->gz, ra->s, boundary, ik->s, ik->dl1, alpha, w->g1s,
                        w->gs, &galpha);
        MS_KL_ROWS_BACK(k, 1, Wt, Ap, G, w->ga, q, boundary, kt, ik->dl2, alpha, w->g2k,
                        w->g2d, &galpha);
    }
    /* the write: G̃ (H + G with momentum, in H) */
    MS_T *Gs = G;
    if (k->momentum) {
        for (int64_t i = 0; i < m; i++) H[i] += G[i];
        Gs = H;
    }
    if (!kl) {
        MS_MV(false, d, h, 1, Gs, ik->s, false, w->g1s);       /* G̃1 s */
        MS_MV(false, h, d, 1, Gs + dh, kt, false, w->g2k);      /* G̃2 k */
        MS_MV(true, d, h, 1, Gs, ik->dl1, false, w->gs);       /* G̃1ᵀ δ1 */
        MS_MV(true, h, d, 1, Gs + dh, ik->dl2, false, w->g2d);  /* G̃2ᵀ δ2 */
    }
    MS_T gw = 0; /* ⟨G̃, g⟩ */
    for (int64_t i = 0; i < d; i++) gw += ik->dl1[i] * w->g1s[i];
    for (int64_t j = 0; j < h; j++) gw += ik->dl2[j] * w->g2k[j];
    ggate[0] = -gw;
    /* the chain's seeds: in the work vectors, or with the mini-batch rule in
     * the token's rows of its segment (ch), for seg_back */
    MS(chain) sd = ch ? *ch : (MS(chain)){w->gdl1, w->gz, w->gs, w->gm, w->ga};
    for (int64_t i = 0; i < d; i++) {
        sd.gdl1[i] = -eta * w->g1s[i];
        gk[i] = -eta * w->g2d[i];
    }
    MS_PRAGMA(omp simd)
    for (int64_t j = 0; j < h; j++) {
        MS_T gdl2 = -eta * w->g2k[j], a = ik->a[j];
        sd.gs[j] = -eta * w->gs[j];
        sd.gm[j] = gdl2 * ik->gp[j];
        sd.ga[j] = gdl2 * ik->mv[j] * (MS_T)MS_INV_SQRT_2PI * MS_EXPV((MS_T)-0.5 * a * a) *
                   (2 - a * a);
    }
    MS_T jw = 0, gmu = 0;
    if (ch) {
        /* the mini-batch rule: J goes to the segment's (seg_back), G ← α G
         * (kl's was kl_rows_back's) */
        if (!kl)
            for (int64_t i = 0; i < m; i++) {
                galpha += G[i] * Ap[i];
                G[i] *= alpha;
            }
    } else {
        MS(inner_back)(k, Wp, cp, 1, ik, v, gate, gk, gv, ggate, &sd, w);
        /* G ← α G + c J with gα = ⟨G, W_{t−1}⟩ (+ ⟨J, W_{t−1}⟩ with
         * decay_first) */
        if (lq) {
            /* W = σ X, X = c A_{t−1}: G ← α G + c σ J − κ A (lq_fold) */
            MS(lq_fold)(k, G, Ap, d, h, alpha, c, Wp[m], ik->dl1, w->gm, w->gz, ik->s,
                        &galpha, &jw);
            MS(lq_fold)(k, G + dh, Ap + dh, h, d, alpha, c, Wp[m + 1], w->ga, kt, NULL, NULL,
                        &galpha, &jw);
        } else if (kl) {
            /* J = ∂L/∂R(c A_{t−1}), R'ᵀ J = ∂L/∂(c A_{t−1}) in gr and
             * G += c gr (α G was kl_rows_back's) */
            MS(inner_j)(k, 1, ik, kt, &sd, w->j);
            MS(wread_back)(k, Wp, w->j, w->gr);
            for (int64_t i = 0; i < m; i++) {
                jw += w->gr[i] * Ap[i];
                G[i] += c * w->gr[i];
            }
        } else {
            MS(fold)(G, Ap, d, h, alpha, c, ik->dl1, w->gm, w->gz, ik->s, &galpha, &jw);
            MS(fold)(G + dh, Ap + dh, h, d, alpha, c, w->ga, kt, NULL, NULL, &galpha, &jw);
        }
    }
    if (k->decay_first) galpha += jw;
    if (k->momentum) {
        const MS_T *Sp = Ap + m;
        for (int64_t i = 0; i < m; i++) {
            gmu += H[i] * Sp[i];
            H[i] *= mu;
        }
    }
    ggate[1] = galpha;
    ggate[2] = gmu;
}

/* State j of a segment: j = 0 its checkpoint st0, read where it is; the
 * others recomputed into the scratch slots seg + j·P. */
static inline const MS_T *MS(seg_state)(const MS_T *st0, const MS_T *seg, int64_t j, int64_t P)
{
    return j ? seg + j * P : st0;
}

/* Backward: per sequence, the checkpoints, the state before every K-th
 * token (ms_spacing): those the recorded forward kept (attrs.data), or else
 * the forward's writes run again to keep them; then segment by segment from
 * the last, the segment's states recomputed from its checkpoint (with each
 * token's inner act, and with a read each state's R(A)) and its tokens run
 * backwards through token_backward.
 * K + 1 state copies a thread (and ⌈T/K⌉ more for checkpoints of its own).
 * The packed output per sequence is gstate [P], gq, gk, gv [T, d],
 * ggates [T, 4]. */
MS_KERNEL void MS(mlp_scan_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    ms_dims k = ms_dims_of(in, at);
    int64_t N = k.N, T = k.T, d = k.d, P = k.P, gw = T * d + P, ow = o->shape[1];
    int64_t K = ms_spacing(&k), ncp = ms_checkpoints(&k), na = ms_act_elems(&k);
    const MS_T *W0 = in[0]->data, *Q = in[1]->data, *Kx = in[2]->data, *V = in[3]->data;
    const MS_T *Gt = in[4]->data, *Gin = in[5]->data, *kept = at->data;
    int64_t nr = ms_read_elems(&k), nrd = k.read ? (K + 1) * nr : 0; /* R(A) of a segment */
    int64_t per = ((kept ? 0 : ncp) + K + 1) * P + (K + 1) * na + ms_work_elems(&k) + P + nrd;
    if (k.chunk > 1) /* the segment's J and its chain rows */
        per += k.m + k.chunk * (2 * d + 3 * k.h);
    mi_scope *sc = mi_scope_current();
    int n_thr = scan_threads(N, 4 * N * T * P);
    size_t bytes = sizeof(MS_T) * (size_t)(per * n_thr);
    MS_T *scratch = mi_scope_alloc(sc, bytes);
    if (!scratch) {
        memset(o->data, 0, sizeof(MS_T) * (size_t)o->numel);
        return;
    }
    blas_single_thread_once();
    MS_PRAGMA(omp parallel for num_threads(n_thr) schedule(static))
    for (int64_t n = 0; n < N; n++) {
        MS_T *own = scratch + per * scan_thread(), *seg = own + (kept ? 0 : ncp) * P;
        MS_T *acts = seg + (K + 1) * P;
        const MS_T *cp = kept ? kept + n * ncp * P : own;
        MS_T *H = acts + (K + 1) * na; /* ∂L/∂S_t (momentum) */
        MS(work) w;
        MS(act) ra, ik;
        MS_T *rd = MS(work_carve)(&w, H + P, &k);
        MS_T *ja = k.chunk > 1 ? rd + nrd : NULL;
        MS(chain) rows = {0}; /* the segment's chain seeds, a row a token */
        if (ja) MS(chain_carve)(&rows, ja + k.m, k.chunk, &k);
        MS(act_carve)(&ra, acts + K * na, &k);
        MS_T *out = (MS_T *)o->data + n * ow, *G = out;
        MS_T *gQ = out + P, *gK = gQ + T * d, *gV = gK + T * d, *gG = gV + T * d;
        const MS_T *gY = Gin + n * gw, *gEnd = gY + T * d;
        /* the checkpoints, where the forward kept none */
        if (!kept) memcpy(seg, W0 + n * P, sizeof(MS_T) * (size_t)P);
        for (int64_t t = 0; !kept && t < T; t++) {
            int64_t nt = n * T + t;
            if (t % K == 0) memcpy(own + t / K * P, seg, sizeof(MS_T) * (size_t)P);
            MS(act_carve)(&ik, acts, &k);
            if (k.chunk > 1) {
                if (ms_seg_start(&k, t))
                    MS(inner_seg)(&k, MS(grad_point)(&k, t, seg, w.wt, w.wg),
                                  Kx + nt * d, V + nt * d, Gt + nt * MS_GATES,
                                  MS(seg_len)(&k, t), acts);
                MS(act_carve)(&ik, acts + (t - ms_seg_first(&k, t)) * na, &k);
            } else if (k.read && t > 0 && !k.decay_first) { /* R(A_{t−1}) from the last step */
                MS(inner)(&k, w.wt, 1, Kx + nt * d, V + nt * d, Gt + nt * MS_GATES, &ik);
            } else {
                MS(inner_at)(&k, seg, Kx + nt * d, V + nt * d, Gt + nt * MS_GATES, w.wg, &ik);
            }
            /* with chunk > 1 a token's read matters where the next segment takes
             * its gradients from it */
            bool end = ms_seg_end(&k, t);
            MS(step)(&k, seg, seg, Kx + nt * d, Gt + nt * MS_GATES, &ik,
                     k.chunk == 1 || end ? w.wt : NULL, end);
        }
        /* ∂L/∂ the final state: G (W, in the output's gstate slot) and H (S) */
        memcpy(G, gEnd, sizeof(MS_T) * (size_t)k.m);
        if (k.momentum) memcpy(H, gEnd + k.m, sizeof(MS_T) * (size_t)k.m);
        for (int64_t s = ncp - 1; s >= 0; s--) {
            int64_t t0 = s * K, t1 = t0 + K < T ? t0 + K : T;
            const MS_T *st0 = cp + s * P;
            if (k.read) MS(wread)(&k, st0, 1, rd);
            /* p: where token t takes its gradient, the state before token t0 + p
             * (t itself per token; its segment's first with chunk > 1) */
            for (int64_t t = t0; t < t1; t++) {
                int64_t nt = n * T + t, j = t - t0, p = ms_seg_first(&k, t) - t0;
                const MS_T *Aj = MS(seg_state)(st0, seg, j, P), *Ap = MS(seg_state)(st0, seg, p, P);
                MS(act_carve)(&ik, acts + j * na, &k);
                if (k.chunk > 1) { /* the segment's acts from its first token (no decay_first) */
                    if (ms_seg_start(&k, t))
                        MS(inner_seg)(&k, k.read ? rd + p * nr : Ap, Kx + nt * d, V + nt * d,
                                      Gt + nt * MS_GATES, MS(seg_len)(&k, t), acts + j * na);
                } else if (k.read && !k.decay_first) {
                    MS(inner)(&k, rd + p * nr, 1, Kx + nt * d, V + nt * d, Gt + nt * MS_GATES,
                              &ik);
                } else {
                    MS(inner_at)(&k, Ap, Kx + nt * d, V + nt * d, Gt + nt * MS_GATES, w.wg, &ik);
                }
                MS(step)(&k, Aj, seg + (j + 1) * P, Kx + nt * d, Gt + nt * MS_GATES, &ik,
                         k.read ? rd + (j + 1) * nr : NULL, ms_seg_end(&k, t));
            }
            for (int64_t t = t1 - 1; t >= t0; t--) {
                int64_t nt = n * T + t, j = t - t0, p = ms_seg_first(&k, t) - t0;
                const MS_T *Aj = MS(seg_state)(st0, seg, j, P), *Ap = MS(seg_state)(st0, seg, p, P);
                MS(act_carve)(&ik, acts + j * na, &k);
                const MS_T *rg = k.read && !k.decay_first ? rd + p * nr
                                 : ja                     ? Ap
                                                          : NULL;
                MS(chain) row = ja ? MS(chain_row)(&rows, t - t0 - p, &k) : rows;
                MS(token_backward)(&k, Aj, seg + (j + 1) * P, G, H, Q + nt * d, Kx + nt * d,
                                   V + nt * d, Gt + nt * MS_GATES, &ik, &ra,
                                   gY + t * d, gQ + t * d, gK + t * d, gV + t * d,
                                   gG + t * MS_GATES, rg, k.read ? rd + (j + 1) * nr : NULL,
                                   ja ? &row : NULL, ms_seg_end(&k, t), &w);
                if (ja && ms_seg_start(&k, t))
                    MS(seg_back)(&k, rg, MS(seg_len)(&k, t), &ik, Kx + nt * d, V + nt * d,
                                 Gt + nt * MS_GATES, gK + t * d, gV + t * d, gG + t * MS_GATES,
                                 &rows, G, ja, &w);
            }
        }
        if (k.momentum) memcpy(G + k.m, H, sizeof(MS_T) * (size_t)k.m);
    }
    mi_scope_release(sc, scratch, bytes);
}
#undef MS_MV
#undef MS_GEMM
