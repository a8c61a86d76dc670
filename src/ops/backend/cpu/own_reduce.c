/* OWN reductions (sum, mean, max, logsumexp, norm, sum_to) and the row-wise
 * MIRAS helpers (lq_normalize, sphere_retract), f32, with -ffast-math (GCC
 * vectorises the sums and calls glibc's vector expf/powf).
 *
 * The two layouts that matter get their own loops; the rest go to REF:
 *   rows  x = [M, R], reduce the contiguous R (last axes: softmax-style
 *         statistics, norms of rows, whole-tensor sums);
 *   cols  x = [M, R, L], reduce the middle R (leading axes: sum_to of a
 *         bias gradient [B·T, D] → [D], mean over the batch).
 * Accuracy: terms are added in f32 vector accumulators over blocks of at
 * most OWN_FLUSH elements of a row (OWN_FLUSH / OWN_W terms per lane) or COL_FLUSH rows of
 * a column, and the blocks' sums in f64 (a 4096-long row of mean 1: sum
 * and mean within 1e-8 of the f64 result; REF accumulates in f64).
 * Determinism: long reductions are cut into blocks whose size follows from
 * the shape alone; blocks run in parallel and their f64 partial results are
 * combined in block order. NaN and ±inf follow REF (checked on the bits:
 * fast math folds x != x); a max over ±0 may return either zero. */
#define OWN_VECTORS
#include "own_kernels.h"

typedef uint32_t own_u32 __attribute__((may_alias));

static inline bool bits_nan_f(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
}
static inline bool bits_nan_d(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
static inline bool bits_inf_d(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    return (u & 0x7fffffffffffffffull) == 0x7ff0000000000000ull;
}

/* ---------------------------------------------------------------- kinds
 * What each reduced element contributes: a sum of f(x) (f = x, |x|, x²,
 * exp(x − c), (|x|/c)^p with c an output's centre from a first pass) or a
 * maximum of x or |x|. */
enum { K_SUM, K_ABS, K_SQ, K_EXP, K_POW, K_MAX, K_MAXABS };
#define OWN_FLUSH 1024 /* elements per f32 block before an f64 add */

/* ---------------------------------------------------------------- rows
 * One f32 block (n ≤ OWN_FLUSH) of a row: Σ f(x) in f64, or max with a NaN
 * flag. The linear kinds and max keep four (max: two) vector accumulators
 * in registers (GCC vector extensions: the loads, not the add latency,
 * limit them); exp and pow are bound by the vector libm call. */
static inline vecf vabs(vecf v) { return (vecf)((vecu)v & 0x7fffffffu); }
static inline vecf vmax(vecf a, vecf b)
{
    veci gt = a > b;
    return (vecf)(((veci)a & gt) | ((veci)b & ~gt));
}
/* all-ones lanes where v is a NaN */
static inline vecu vnan(vecf v) { return (vecu)((vecu)vabs(v) > 0x7f800000u); }

/* Σ_j a[j] in f64 as a tree of halvings (log2 OWN_W vector adds), not a
 * serial chain of OWN_W dependent adds: on rows of a few dozen elements
 * that chain cost more than the row itself. */
static inline double vsum_d(vecf a)
{
    double t[OWN_W];
    for (int j = 0; j < OWN_W; j++) t[j] = (double)a[j];
    for (int w = OWN_W / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) t[j] += t[j + w];
    return t[0];
}

/* ROW_LINEAR(fname, FV, FS): Σ f over a block, f given on a vector v (FV)
 * and on a float e (FS). */
#define ROW_LINEAR(fname, FV, FS)                                             \
    static inline double fname(const float *restrict x, int64_t n)           \
    {                                                                        \
        vecf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, v;                      \
        int64_t i = 0;                                                       \
        for (; i + 4 * OWN_W <= n; i += 4 * OWN_W) {                         \
            v = vld(x + i), a0 += (FV);                                      \
            v = vld(x + i + OWN_W), a1 += (FV);                              \
            v = vld(x + i + 2 * OWN_W), a2 += (FV);                          \
            v = vld(x + i + 3 * OWN_W), a3 += (FV);                          \
        }                                                                    \
        for (; i + OWN_W <= n; i += OWN_W) v = vld(x + i), a0 += (FV);       \
        float t = 0;                                                         \
        for (int64_t r = i; r < n; r++) {                                    \
            float e = x[r];                                                  \
            t += (FS);                                                       \
        }                                                                    \
        if (i == 0) return t; /* a row shorter than a vector */              \
        return (double)t + vsum_d((a0 + a1) + (a2 + a3));                    \
    }
ROW_LINEAR(row_sum, v, e)
ROW_LINEAR(row_abs, vabs(v), fabsf(e))
ROW_LINEAR(row_sq, v *v, e *e)

static double row_exp(const float *restrict x, int64_t n, float c, float p)
{
    (void)p;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += expf(x[i] - c);
    return s;
}
static double row_pow(const float *restrict x, int64_t n, float c, float p)
{
    float s = 0, inv = 1.0f / c;
    for (int64_t i = 0; i < n; i++) s += powf(fabsf(x[i]) * inv, p);
    return s;
}

/* max (abs: of |x|) of a block; *nan set when a NaN was seen. */
static inline float row_max(const float *restrict x, int64_t n, bool abs, bool *nan)
{
    const float lo = abs ? 0.0f : -INFINITY;
    vecf m0 = {0}, m1, v;
    m0 += lo, m1 = m0;
    vecu bad = {0};
    int64_t i = 0;
    for (; i + 2 * OWN_W <= n; i += 2 * OWN_W) {
        v = vld(x + i), bad |= vnan(v), m0 = vmax(abs ? vabs(v) : v, m0);
        v = vld(x + i + OWN_W), bad |= vnan(v), m1 = vmax(abs ? vabs(v) : v, m1);
    }
    m0 = vmax(m0, m1);
    float r = lo;
    uint32_t any = 0;
    for (int j = 0; j < OWN_W && i > 0; j++) {
        r = m0[j] > r ? m0[j] : r;
        any |= bad[j];
    }
    for (; i < n; i++) {
        float e = abs ? fabsf(x[i]) : x[i];
        r = e > r ? e : r;
        any |= bits_nan_f(x[i]);
    }
    *nan = *nan || any;
    return r;
}

/* The contribution of one row piece (any length), as f64: a sum, or a max
 * that is NaN when the piece holds a NaN. */
static double row_piece(int kind, const float *x, int64_t n, float c, float p)
{
    if (kind == K_MAX || kind == K_MAXABS) {
        bool nan = false;
        float m = kind == K_MAXABS ? 0.0f : -INFINITY;
        for (int64_t i = 0; i < n; i += OWN_FLUSH) {
            float b = row_max(x + i, n - i < OWN_FLUSH ? n - i : OWN_FLUSH, kind == K_MAXABS, &nan);
            m = b > m ? b : m;
        }
        return nan ? (double)NAN : (double)m;
    }
    double s = 0;
    for (int64_t i = 0; i < n; i += OWN_FLUSH) {
        int64_t b = n - i < OWN_FLUSH ? n - i : OWN_FLUSH;
        switch (kind) {
        case K_SUM: s += row_sum(x + i, b); break;
        case K_ABS: s += row_abs(x + i, b); break;
        case K_SQ: s += row_sq(x + i, b); break;
        case K_EXP: s += row_exp(x + i, b, c, p); break;
        default: s += row_pow(x + i, b, c, p); break;
        }
    }
    return s;
}

/* ---------------------------------------------------------------- cols
 * Rows [r0, r1) of x[m] (each L long) into columns [l0, l1): Σ f(x) per
 * column into acc (f64), or max into acc with NaN flags. */
#define COL_BLOCK 256 /* columns per work item */
#define COL_FLUSH 64  /* rows per f32 block */

/* One row xr into the f32 column accumulators f (max: NaN flags in bad). */
static inline void col_row(int kind, float *restrict f, uint32_t *restrict bad,
                           const float *restrict xr, int64_t nb, const float *restrict c, float p)
{
    const own_u32 *xu = (const own_u32 *)xr;
    switch (kind) {
    case K_SUM: for (int64_t j = 0; j < nb; j++) f[j] += xr[j]; break;
    case K_ABS: for (int64_t j = 0; j < nb; j++) f[j] += fabsf(xr[j]); break;
    case K_SQ: for (int64_t j = 0; j < nb; j++) f[j] += xr[j] * xr[j]; break;
    case K_EXP: for (int64_t j = 0; j < nb; j++) f[j] += expf(xr[j] - c[j]); break;
    case K_POW: for (int64_t j = 0; j < nb; j++) f[j] += powf(fabsf(xr[j]) / c[j], p); break;
    default:
        for (int64_t j = 0; j < nb; j++) {
            float v = kind == K_MAXABS ? fabsf(xr[j]) : xr[j];
            f[j] = v > f[j] ? v : f[j];
            bad[j] |= (xu[j] & 0x7fffffffu) > 0x7f800000u;
        }
    }
}

/* Four rows at once for the linear kinds: a short dependency chain per
 * accumulator when the block is narrow (L = 32 is two vectors). */
static inline void col_row4(int kind, float *restrict f, const float *restrict x0, int64_t L,
                            int64_t nb)
{
    const float *restrict x1 = x0 + L, *restrict x2 = x1 + L, *restrict x3 = x2 + L;
    switch (kind) {
    case K_SUM:
        for (int64_t j = 0; j < nb; j++) f[j] += (x0[j] + x1[j]) + (x2[j] + x3[j]);
        break;
    case K_ABS:
        for (int64_t j = 0; j < nb; j++)
            f[j] += (fabsf(x0[j]) + fabsf(x1[j])) + (fabsf(x2[j]) + fabsf(x3[j]));
        break;
    default:
        for (int64_t j = 0; j < nb; j++)
            f[j] += (x0[j] * x0[j] + x1[j] * x1[j]) + (x2[j] * x2[j] + x3[j] * x3[j]);
    }
}

/* Rows [r0, r1) of x[m] (each L long) into columns [l0, l1): Σ f(x) per
 * column into acc (f64, from f32 blocks of COL_FLUSH rows), or max with
 * NaN for a column that holds one. */
static void col_piece(int kind, const float *x, int64_t L, int64_t r0, int64_t r1, int64_t l0,
                      int64_t l1, const float *c, float p, double *acc)
{
    const int64_t nb = l1 - l0;
    bool is_max = kind == K_MAX || kind == K_MAXABS;
    float f[COL_BLOCK];
    uint32_t bad[COL_BLOCK] = {0};
    for (int64_t j = 0; j < nb; j++) acc[j] = is_max ? (kind == K_MAX ? -INFINITY : 0.0) : 0.0;
    for (int64_t rb = r0; rb < r1; rb += COL_FLUSH) {
        int64_t re = r1 - rb < COL_FLUSH ? r1 : rb + COL_FLUSH, r = rb;
        for (int64_t j = 0; j < nb; j++) f[j] = is_max ? (float)acc[j] : 0.0f;
        if (kind <= K_SQ)
            for (; r + 4 <= re; r += 4) col_row4(kind, f, x + r * L + l0, L, nb);
        for (; r < re; r++) col_row(kind, f, bad, x + r * L + l0, nb, c, p);
        for (int64_t j = 0; j < nb; j++) acc[j] = is_max ? (double)f[j] : acc[j] + (double)f[j];
    }
    if (is_max)
        for (int64_t j = 0; j < nb; j++)
            if (bad[j]) acc[j] = NAN;
}

/* ---------------------------------------------------------------- the plan
 * x as [M, R, L] reduced over R (L = 1: rows), cut into items for threads:
 * rows: M × nc pieces of ≤ chunk elements; cols: M × ceil(L/COL_BLOCK)
 * column blocks × nc row chunks of ≤ chunk rows. nc > 1 only when the
 * outputs alone give too little parallel work; the partial results (at
 * most OWN_PARTS) are then combined in order. */
#define OWN_PARTS 4096
#define ROW_CHUNK 16384  /* elements per row piece */
#define COL_WORK 32768   /* elements per column item */

typedef struct rplan {
    int64_t M, R, L, count; /* count: elements per output (REF's N) */
    int64_t nc, chunk;      /* pieces of the reduced run, elements/rows each */
    int64_t nlb;            /* column blocks (cols) */
} rplan;

/* Merges x's non-1 dims into runs of kept / reduced; false unless there is
 * exactly one reduced run (then M, R, L are the products before, of, after
 * it): two runs ([B,H,T,D] over {1,3}) and nothing to reduce go to REF. */
static bool rplan_build(rplan *pl, const mi_tensor *x, uint32_t mask)
{
    int64_t size[MI_MAX_RANK];
    int red[MI_MAX_RANK], n = 0, nred = 0;
    pl->count = 1;
    for (int d = 0; d < x->rank; d++) {
        int r = (mask >> d) & 1u;
        if (r) pl->count *= x->shape[d];
        if (x->shape[d] == 1) continue;
        if (n > 0 && red[n - 1] == r) {
            size[n - 1] *= x->shape[d];
            continue;
        }
        size[n] = x->shape[d];
        red[n++] = r;
        nred += r;
    }
    if (nred != 1 || x->numel == 0) return false;
    pl->M = 1, pl->R = 1, pl->L = 1;
    for (int i = 0, seen = 0; i < n; i++) {
        if (red[i]) seen = 1, pl->R = size[i];
        else if (seen) pl->L = size[i];
        else pl->M = size[i];
    }
    pl->nlb = (pl->L + COL_BLOCK - 1) / COL_BLOCK;
    int64_t outs = pl->M * pl->L, unit = pl->L == 1 ? ROW_CHUNK : COL_WORK / pl->L;
    if (unit < 64) unit = 64;
    pl->nc = pl->R >= 2 * unit ? (pl->R + unit - 1) / unit : 1;
    if (pl->nc > 1 && outs * pl->nc > OWN_PARTS)
        pl->nc = OWN_PARTS / outs > 1 ? OWN_PARTS / outs : 1;
    pl->chunk = (pl->R + pl->nc - 1) / pl->nc;
    return true;
}

enum { OP_SUM, OP_MEAN, OP_MAX, OP_LSE, OP_NORM };

typedef struct rctx {
    const rplan *pl;
    int op, kind;
    bool second;        /* the pass that uses the centres y */
    double p;
    const float *x;
    float *y;           /* the output; in the second pass also the centres */
    double *part;       /* [M·L][nc] partial results, or NULL when nc = 1 */
} rctx;

/* An output from its f64 reduction A (and its centre C, the first pass's
 * result, in the second pass), with REF's formulas and special cases. */
static float finish(const rctx *k, double A, double C)
{
    if (k->second) {
        if (bits_nan_d(C) || bits_inf_d(C) || (k->op == OP_NORM && C == 0)) return (float)C;
        return (float)(k->op == OP_LSE ? C + log(A) : C * pow(A, 1.0 / k->p));
    }
    if (k->op == OP_MEAN) return (float)(A / (double)k->pl->count);
    if (k->op == OP_NORM && k->p == 2) return (float)sqrt(A);
    return (float)A;
}

/* Stores output o's piece q: a partial result, or the finished output. */
static inline void put(const rctx *k, int64_t o, int64_t q, double A)
{
    if (k->part) k->part[o * k->pl->nc + q] = A;
    else k->y[o] = finish(k, A, k->second ? k->y[o] : 0.0);
}

/* Short rows (one block, no pieces) of the linear kinds and max, 64 at a
 * time: the block reductions inline, then the outputs finish in a batch. */
static void rows_short(const rctx *k, int64_t i0, int64_t i1)
{
    const int64_t R = k->pl->R;
    for (int64_t m0 = i0; m0 < i1; m0 += 64) {
        int64_t nb = i1 - m0 < 64 ? i1 - m0 : 64;
        const float *x = k->x + m0 * R;
        double A[64];
        switch (k->kind) {
        case K_SUM: for (int64_t j = 0; j < nb; j++) A[j] = row_sum(x + j * R, R); break;
        case K_ABS: for (int64_t j = 0; j < nb; j++) A[j] = row_abs(x + j * R, R); break;
        case K_SQ: for (int64_t j = 0; j < nb; j++) A[j] = row_sq(x + j * R, R); break;
        default:
            for (int64_t j = 0; j < nb; j++) {
                bool nan = false;
                float m = row_max(x + j * R, R, k->kind == K_MAXABS, &nan);
                A[j] = nan ? (double)NAN : (double)m;
            }
        }
        for (int64_t j = 0; j < nb; j++) k->y[m0 + j] = finish(k, A[j], 0.0);
    }
}

/* Items of the rows layout: (m, piece). */
static void rows_range(const void *v, int64_t i0, int64_t i1)
{
    const rctx *k = v;
    const rplan *pl = k->pl;
    if (pl->nc == 1 && pl->R <= OWN_FLUSH && k->kind != K_EXP && k->kind != K_POW) {
        rows_short(k, i0, i1);
        return;
    }
    for (int64_t it = i0; it < i1; it++) {
        int64_t m = pl->nc == 1 ? it : it / pl->nc, q = it - m * pl->nc, r0 = q * pl->chunk;
        int64_t r1 = r0 + pl->chunk < pl->R ? r0 + pl->chunk : pl->R;
        if (r0 > r1) r0 = r1;
        float c = k->second ? k->y[m] : 0.0f;
        put(k, m, q, row_piece(k->kind, k->x + m * pl->R + r0, r1 - r0, c, (float)k->p));
    }
}

/* Items of the cols layout: (m, column block, row chunk). */
static void cols_range(const void *v, int64_t i0, int64_t i1)
{
    const rctx *k = v;
    const rplan *pl = k->pl;
    double acc[COL_BLOCK];
    for (int64_t it = i0; it < i1; it++) {
        int64_t q = it % pl->nc, lb = it / pl->nc % pl->nlb, m = it / pl->nc / pl->nlb;
        int64_t l0 = lb * COL_BLOCK, l1 = l0 + COL_BLOCK < pl->L ? l0 + COL_BLOCK : pl->L;
        int64_t r0 = q * pl->chunk, r1 = r0 + pl->chunk < pl->R ? r0 + pl->chunk : pl->R;
        if (r0 > r1) r0 = r1;
        const float *c = k->second ? k->y + m * pl->L + l0 : NULL;
        col_piece(k->kind, k->x + m * pl->R * pl->L, pl->L, r0, r1, l0, l1, c, (float)k->p, acc);
        for (int64_t j = 0; j < l1 - l0; j++) put(k, m * pl->L + l0 + j, q, acc[j]);
    }
}

/* One pass over x: every output's pieces in parallel, then (nc > 1) each
 * output's partial results combined in piece order and finished. */
static void reduce_pass(rctx *k, int kind, bool second)
{
    const rplan *pl = k->pl;
    k->kind = kind;
    k->second = second;
    int64_t items = pl->L == 1 ? pl->M * pl->nc : pl->M * pl->nlb * pl->nc;
    /* work in units of an f32 add streamed from a short row (~0.15 ns):
     * exp/pow cost ~8, a column add ~1/4 (measured, 1 thread) */
    int64_t work = pl->M * pl->R * pl->L;
    work = kind == K_EXP || kind == K_POW ? work * 8 : pl->L > 1 ? work / 4 : work;
    own_parallel(items, work, OWN_PAR_MIN, 1, pl->L == 1 ? rows_range : cols_range, k);
    if (!k->part) return;
    bool is_max = kind == K_MAX || kind == K_MAXABS;
    for (int64_t o = 0; o < pl->M * pl->L; o++) {
        const double *pp = k->part + o * pl->nc;
        double a = pp[0];
        for (int64_t q = 1; q < pl->nc; q++) {
            if (!is_max) a += pp[q];
            else if (bits_nan_d(pp[q]) || (!bits_nan_d(a) && pp[q] > a)) a = pp[q];
        }
        k->y[o] = finish(k, a, second ? k->y[o] : 0.0);
    }
}

/* y = op over the reduction of x described by mask; false when the layout
 * is not one of the two and REF must run. */
static bool own_reduce(int op, float *y, const mi_tensor *x, uint32_t mask, double p)
{
    rplan pl;
    if (!rplan_build(&pl, x, mask)) return false;
    double part[OWN_PARTS]; /* pieces only exist while outputs·nc ≤ OWN_PARTS */
    rctx k = {.pl = &pl, .op = op, .p = p, .x = x->data, .y = y,
              .part = pl.nc > 1 ? part : NULL};
    int first = op == OP_MAX || op == OP_LSE ? K_MAX
              : op == OP_NORM && p == 1  ? K_ABS
              : op == OP_NORM && p == 2  ? K_SQ
              : op == OP_NORM            ? K_MAXABS
                                         : K_SUM;
    reduce_pass(&k, first, false);
    if (op == OP_LSE || (op == OP_NORM && p != 1 && p != 2))
        reduce_pass(&k, op == OP_LSE ? K_EXP : K_POW, true);
    return true;
}

static uint32_t all_axes(const mi_tensor *x, uint32_t axes)
{
    return axes ? axes : (x->rank ? (uint32_t)((1u << x->rank) - 1u) : 0u);
}

/* y = Σ_axes x (reduce.c's sum). */
void own_sum_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (!own_reduce(OP_SUM, o->data, in[0], all_axes(in[0], a->axes), 0))
        own_ref(&mi_op_sum, o, in, a);
}

/* y = Σ_axes x / N (reduce.c's mean). */
void own_mean_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (!own_reduce(OP_MEAN, o->data, in[0], all_axes(in[0], a->axes), 0))
        own_ref(&mi_op_mean, o, in, a);
}

/* y = max_axes x, NaN if any (reduce.c's max). */
void own_max_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (!own_reduce(OP_MAX, o->data, in[0], all_axes(in[0], a->axes), 0))
        own_ref(&mi_op_max, o, in, a);
}

/* y = m + log Σ exp(x − m) (reduce.c's logsumexp). */
void own_logsumexp_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (!own_reduce(OP_LSE, o->data, in[0], all_axes(in[0], a->axes), 0))
        own_ref(&mi_op_logsumexp, o, in, a);
}

/* y = (Σ |x|^p)^(1/p), scaled by max|x| for general p (reduce.c's norm). */
void own_norm_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (!own_reduce(OP_NORM, o->data, in[0], all_axes(in[0], a->axes), a->p))
        own_ref(&mi_op_norm, o, in, a);
}

/* x summed to attrs.shape (reduce.c's sum_to): leading axes and the axes
 * where the target has 1. */
void own_sum_to_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0];
    uint32_t m = 0;
    int lead = x->rank - a->rank;
    for (int d = 0; d < x->rank; d++)
        if (d < lead || (a->shape[d - lead] == 1 && x->shape[d] != 1)) m |= 1u << d;
    if (!own_reduce(OP_SUM, o->data, x, m, 0)) own_ref(&mi_op_sum_to, o, in, a);
}

/* ---------------------------------------------------------------- lq_normalize
 * W = A · S^(−r/p) per matrix (the last two axes), S = Σ A² + ε (Frobenius form)
 * or Σ |A|^p + ε (paper form), as in miras.c; here S is summed in f32 blocks with
 * f64 totals and the scale computed in f64. Parallel over matrices. */
typedef struct lq_ctx {
    const float *a;
    float *w;
    int64_t mn;
    bool fro;
    double p, r, eps;
} lq_ctx;

static void lq_range(const void *v, int64_t b0, int64_t b1)
{
    const lq_ctx *k = v;
    for (int64_t b = b0; b < b1; b++) {
        const float *restrict a = k->a + b * k->mn;
        float *restrict w = k->w + b * k->mn;
        double s = k->eps;
        for (int64_t i = 0; i < k->mn; i += OWN_FLUSH) {
            int64_t n = k->mn - i < OWN_FLUSH ? k->mn - i : OWN_FLUSH;
            s += k->fro ? row_sq(a + i, n) : row_pow(a + i, n, 1.0f, (float)k->p);
        }
        float scale = !bits_nan_d(s) && s > 0 ? (float)pow(s, -k->r / k->p) : 0.0f;
        for (int64_t i = 0; i < k->mn; i++) w[i] = a[i] * scale;
    }
}

void own_lq_normalize_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    bool fro = at->index == MI_LQ_FROBENIUS;
    double q = at->p;
    lq_ctx k = {.a = in[0]->data, .w = o->data, .fro = fro, .p = fro ? 2.0 : q,
                .r = fro ? (q - 2) / q : q - 2, .eps = at->eps,
                .mn = o->shape[o->rank - 2] * o->shape[o->rank - 1]};
    if (k.mn == 0) return;
    own_parallel(o->numel / k.mn, o->numel * (fro ? 1 : 8), OWN_PAR_MIN, 1, lq_range, &k);
}

/* ---------------------------------------------------------------- sphere_retract
 * y = (s + d) / ‖s + d‖₂ per row of the last axis (miras.c), ‖·‖² summed in
 * f32 blocks with an f64 total. Parallel over rows. */
typedef struct retract_ctx {
    const float *s, *d;
    float *y;
    int64_t n;
} retract_ctx;

static void retract_range(const void *v, int64_t b0, int64_t b1)
{
    const retract_ctx *k = v;
    for (int64_t b = b0; b < b1; b++) {
        const float *restrict s = k->s + b * k->n, *restrict d = k->d + b * k->n;
        float *restrict y = k->y + b * k->n;
        double ss = 0; /* Σ y², y = s + d written on the way */
        for (int64_t i0 = 0; i0 < k->n; i0 += OWN_FLUSH) {
            int64_t i = i0, i1 = k->n - i0 < OWN_FLUSH ? k->n : i0 + OWN_FLUSH;
            vecf acc = {0};
            for (; i + OWN_W <= i1; i += OWN_W) {
                vecf u = vld(s + i) + vld(d + i);
                vst(y + i, u);
                acc += u * u;
            }
            float t = 0;
            for (; i < i1; i++) {
                y[i] = s[i] + d[i];
                t += y[i] * y[i];
            }
            ss += t;
            ss += vsum_d(acc);
        }
        float inv = !bits_nan_d(ss) && ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
        for (int64_t i = 0; i < k->n; i++) y[i] *= inv;
    }
}

void own_sphere_retract_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)a;
    retract_ctx k = {.s = in[0]->data, .d = in[1]->data, .y = o->data,
                     .n = o->shape[o->rank - 1]};
    if (k.n == 0) return;
    own_parallel(o->numel / k.n, o->numel * 2, OWN_PAR_MIN, 1, retract_range, &k);
}
