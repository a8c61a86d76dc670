/* The loops of update.c's ops, written once and included per dtype and
 * backend (by update.c for REF, by backend/cpu/own_update.c for OWN f32),
 * with UP_T the element type, UP_NAME(x) the function's name and UP_KERNEL
 * its linkage. Each loop takes a range of rows [r0, r1) (OWN's callers split
 * the rows over the threads). The math is in update.c's top comment; up_geom
 * and up_walk come from update_geom.h. Not a header of its own: no guard. */

/* Y = a ⊙ X + b ⊙ (d ⊗ x), rows [r0, r1). */
UP_KERNEL void UP_NAME(outer_update_rows)(const up_geom *g, int64_t r0, int64_t r1, UP_T *Y,
                                          const UP_T *X, const UP_T *A, const UP_T *B,
                                          const UP_T *D, const UP_T *V)
{
    int64_t C = g->cols;
    up_walk w = up_walk_at(g, r0);
    for (int64_t r = r0; r < r1; r++, up_walk_next(&w, g)) {
        const UP_T *xr = X + r * C, *v = V + (r / g->out) * C;
        UP_T *yr = Y + r * C, bd = B[w.b] * D[r];
        if (g->a_col) {
            const UP_T *ar = A + w.a;
            for (int64_t c = 0; c < C; c++) yr[c] = ar[c] * xr[c] + bd * v[c];
        } else {
            UP_T a = A[w.a];
            for (int64_t c = 0; c < C; c++) yr[c] = a * xr[c] + bd * v[c];
        }
    }
}

/* The vjps of outer_update in one pass over rows [r0, r1) of G and X, for
 * the outputs that are not NULL: gX = a ⊙ G; gA += Σ G ⊙ X over a's broadcast axes;
 * with w_r = Σ_c G_rc x_c: gB += d_r w_r, gD_r = b_r w_r; gV += b_r d_r G_r.
 * gA, gB, gV start at zero (the caller's). */
UP_KERNEL void UP_NAME(outer_update_grads)(const up_geom *g, int64_t r0, int64_t r1,
                                           const UP_T *G, const UP_T *X, const UP_T *A,
                                           const UP_T *B, const UP_T *D, const UP_T *V,
                                           UP_T *gX, UP_T *gA, UP_T *gB, UP_T *gD, UP_T *gV)
{
    int64_t C = g->cols;
    up_walk w = up_walk_at(g, r0);
    for (int64_t r = r0; r < r1; r++, up_walk_next(&w, g)) {
        const UP_T *gr = G + r * C, *xr = X + r * C, *v = V + (r / g->out) * C;
        if (!g->a_col && gX && gA && gV) {
            /* the common case (gates per matrix or per row, every gradient
             * asked for) in one loop over the row */
            UP_T a = A[w.a], bd = B[w.b] * D[r], sa = 0, sv = 0;
            UP_T *ox = gX + r * C, *ov = gV + (r / g->out) * C;
            for (int64_t c = 0; c < C; c++) {
                ox[c] = a * gr[c];
                sa += gr[c] * xr[c];
                sv += gr[c] * v[c];
                ov[c] += bd * gr[c];
            }
            gA[w.a] += sa;
            if (gB) gB[w.b] += D[r] * sv;
            if (gD) gD[r] = B[w.b] * sv;
            continue;
        }
        if (gX) {
            UP_T *o = gX + r * C;
            if (g->a_col) {
                const UP_T *ar = A + w.a;
                for (int64_t c = 0; c < C; c++) o[c] = ar[c] * gr[c];
            } else {
                UP_T a = A[w.a];
                for (int64_t c = 0; c < C; c++) o[c] = a * gr[c];
            }
        }
        if (gA && g->a_col) {
            UP_T *o = gA + w.a;
            for (int64_t c = 0; c < C; c++) o[c] += gr[c] * xr[c];
        } else if (gA) {
            UP_T s = 0;
            for (int64_t c = 0; c < C; c++) s += gr[c] * xr[c];
            gA[w.a] += s;
        }
        if (gB || gD) {
            UP_T s = 0;
            for (int64_t c = 0; c < C; c++) s += gr[c] * v[c];
            if (gB) gB[w.b] += D[r] * s;
            if (gD) gD[r] = B[w.b] * s;
        }
        if (gV) {
            UP_T bd = B[w.b] * D[r], *o = gV + (r / g->out) * C;
            for (int64_t c = 0; c < C; c++) o[c] += bd * gr[c];
        }
    }
}

/* Y = a ⊙ X + Z, rows [r0, r1). */
UP_KERNEL void UP_NAME(scale_add_rows)(const up_geom *g, int64_t r0, int64_t r1, UP_T *Y,
                                       const UP_T *X, const UP_T *A, const UP_T *Z)
{
    int64_t C = g->cols;
    up_walk w = up_walk_at(g, r0);
    for (int64_t r = r0; r < r1; r++, up_walk_next(&w, g)) {
        const UP_T *xr = X + r * C, *zr = Z + r * C;
        UP_T *yr = Y + r * C;
        if (g->a_col) {
            const UP_T *ar = A + w.a;
            for (int64_t c = 0; c < C; c++) yr[c] = ar[c] * xr[c] + zr[c];
        } else {
            UP_T a = A[w.a];
            for (int64_t c = 0; c < C; c++) yr[c] = a * xr[c] + zr[c];
        }
    }
}

/* scale_add's vjps for X and a in one pass: gX = a ⊙ G, gA += Σ G ⊙ X. */
UP_KERNEL void UP_NAME(scale_add_grads)(const up_geom *g, int64_t r0, int64_t r1, const UP_T *G,
                                        const UP_T *X, const UP_T *A, UP_T *gX, UP_T *gA)
{
    UP_NAME(outer_update_grads)(g, r0, r1, G, X, A, NULL, NULL, NULL, gX, gA, NULL, NULL, NULL);
}
