/* The reduction passes, written once and included by reduce.c per dtype,
 * with RED_T the element type and RED_NAME(x) the name x with the dtype's
 * suffix. red_plan, odo_next, prod, RED_BLOCK, the step and finish
 * functions (red_step_fn, red_finish_fn) come from reduce.c, which states
 * each pass's math. Not a header of its own: no guard. */

/* One pass
 *   y[o] = finish(A, C, s)  over  A = init; for each x reduced into o: A = step(A, x, C, s)
 * with A and x in double, C y[o]'s value on entry when cen (the centre of a
 * second pass: logsumexp's max, norm's scale), else 0, and s a parameter.
 * Stride-1 reduced runs are summed as contiguous loops; stride-1 kept runs
 * are done in blocks of RED_BLOCK accumulators, so that every layout reads x
 * in contiguous runs. Always inlined into the passes below, where step and
 * finish are constants and are inlined in turn. */
static inline __attribute__((always_inline)) void
RED_NAME(reduce_pass)(const red_plan *pl, const RED_T *X, RED_T *Y, double s, bool cen,
                      double init, red_step_fn step, red_finish_fn finish)
{
    int64_t ki[MI_MAX_RANK] = {0}, kb = 0;
    if (pl->inner_reduced) {
        int64_t L = pl->rs[pl->nr - 1], nouter = prod(pl->rs, pl->nr - 1);
        int64_t nout = prod(pl->ks, pl->nk);
        for (int64_t o = 0; o < nout; o++) {
            const double C = cen ? (double)Y[o] : 0.0;
            double A = init;
            int64_t ri[MI_MAX_RANK] = {0}, rb = 0;
            for (int64_t q = 0; q < nouter; q++) {
                const RED_T *p = X + kb + rb;
                for (int64_t j = 0; j < L; j++) A = step(A, (double)p[j], C, s);
                odo_next(ri, &rb, pl->rs, pl->rst, pl->nr - 1);
            }
            Y[o] = (RED_T)finish(A, C, s);
            odo_next(ki, &kb, pl->ks, pl->kst, pl->nk);
        }
        return;
    }
    int64_t L = pl->ks[pl->nk - 1], nrows = prod(pl->ks, pl->nk - 1);
    int64_t nred = prod(pl->rs, pl->nr);
    for (int64_t row = 0; row < nrows; row++) {
        for (int64_t j0 = 0; j0 < L; j0 += RED_BLOCK) {
            int64_t nb = L - j0 < RED_BLOCK ? L - j0 : RED_BLOCK;
            double acc[RED_BLOCK], cenv[RED_BLOCK];
            RED_T *y = Y + row * L + j0;
            for (int64_t j = 0; j < nb; j++) {
                acc[j] = init;
                cenv[j] = cen ? (double)y[j] : 0.0;
            }
            int64_t ri[MI_MAX_RANK] = {0}, rb = 0;
            for (int64_t q = 0; q < nred; q++) {
                const RED_T *p = X + kb + rb + j0;
                for (int64_t j = 0; j < nb; j++) acc[j] = step(acc[j], (double)p[j], cenv[j], s);
                odo_next(ri, &rb, pl->rs, pl->rst, pl->nr);
            }
            for (int64_t j = 0; j < nb; j++) y[j] = (RED_T)finish(acc[j], cenv[j], s);
        }
        odo_next(ki, &kb, pl->ks, pl->kst, pl->nk - 1);
    }
}

/* logsumexp's step: the exponential in the element type, A += exp(x − C). */
static inline double RED_NAME(red_add_exp)(double A, double x, double C, double s)
{
    typedef RED_T scalar_t; /* for F(exp) */
    return A + (double)F(exp)((scalar_t)(x - C));
}

/* The passes: (cen, init, step, finish) of reduce.c's table. */
static void RED_NAME(pass_sum)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, false, 0.0, red_add, red_same);
}
static void RED_NAME(pass_mean)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, false, 0.0, red_add, red_div_s);
}
static void RED_NAME(pass_max)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, false, -INFINITY, red_max, red_same);
}
static void RED_NAME(pass_maxabs)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, false, 0.0, red_maxabs, red_same);
}
static void RED_NAME(pass_sumexp)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, true, 0.0, RED_NAME(red_add_exp), red_lse);
}
static void RED_NAME(pass_norm1)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, false, 0.0, red_add_abs, red_same);
}
static void RED_NAME(pass_norm2)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, false, 0.0, red_add_sq, red_sqrt);
}
static void RED_NAME(pass_normp)(const red_plan *pl, const RED_T *X, RED_T *Y, double s)
{
    RED_NAME(reduce_pass)(pl, X, Y, s, true, 0.0, red_add_powabs, red_normp);
}
