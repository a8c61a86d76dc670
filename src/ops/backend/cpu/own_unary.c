/* The project's own vectorised kernels (MI_BACKEND_OWN, f32) for the unary
 * ops, the row ops of nn.c and the fused backward ops.
 *
 * Why. REF's scalar loops (libm per element, SSE2) are 10–40× slower than
 * oneDNN on 4096×128; this file's AVX-512 loops match or beat oneDNN's jit
 * kernels (the figures in unary.c / nn.c) and cost no
 * primitive lookup, so they win at every size.
 *
 * Accuracy. Built with -ffast-math (src/meson.build). exp and log1p use
 * the polynomials below (≤ 3 ulp); gelu's Φ uses Abramowitz & Stegun
 * 7.1.26 (|error| < 1.5e-7 in erf, the formula oneDNN's gelu_erf uses);
 * tanh, log, erf and pow use glibc's vector libm (≤ 4 ulp). Sums over rows
 * are reassociated. On this CPU (512-bit ops double-pumped) every vector
 * instruction over 4096×128 costs ≈ 10–20 µs, so the formulas are short.
 * Special values follow REF: NaN in gives NaN out (detected with integer
 * bit tests, which fast math cannot fold away), exp(−inf) = 0 exactly (so
 * softmax under −inf attention masks gives exact zeros), ±inf where REF
 * gives them. The section marked EXACT at the end turns fast math off: those
 * kernels give REF's bits.
 *
 * Determinism. Elementwise ops split independent elements and row ops
 * independent rows, so results never depend on the thread count. */
#include <stdint.h>
#include <stdlib.h>

#include "own_kernels.h"
#include "own_math.h"
#include "own_unary.h"

/* Work (elements × this cost) below which one thread is faster; see
 * own_kernels.h (OWN_PAR_MIN) for the fork/join cost. */
enum { COST_CHEAP = 1, COST_TRANS = 4 };

/* ================================================================ scalar maths
 * (exp and the NaN test: own_math.h, shared with own_sequence.c) */
/* log(1 + u) for u in [0, 1]: 2·atanh(s), s = u/(2 + u) ≤ 1/3, odd series
 * to s¹³ (truncation 1.3e-8 relative); exact relative accuracy as u → 0. */
static inline float f_log1p_unit(float u)
{
    float s = u / (2.0f + u), s2 = s * s;
    float p = 1.0f / 13;
    p = p * s2 + 1.0f / 11;
    p = p * s2 + 1.0f / 9;
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    return 2.0f * (s + s * s2 * p);
}

/* Φ(x) = ½(1 + erf(x/√2)) by Abramowitz & Stegun 7.1.26: for z = |x|/√2,
 * ½ erfc(z) ≈ ½ t·P(t)·e^(−z²), t = 1/(1 + 0.3275911 z); each side
 * without cancellation. z is capped at 12 (so t stays finite; e^−144 is 0
 * anyway). NaN x gives a finite Φ: callers multiply by x. */
static inline float f_Phi(float x)
{
    float z = fabsf(x) * (float)M_SQRT1_2;
    z = z < 12.0f ? z : 12.0f;
    float t = 1.0f / (1.0f + 0.3275911f * z);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    float c = 0.5f * t * p * f_exp_lo(-z * z);
    return x >= 0 ? 1.0f - c : c;
}

/* σ(x) = 1/(1 + e^−x); 0 below ln FLT_MIN (REF gives denormals there, so
 * silu(−inf) = −inf·0 = NaN as in REF), and e^−x capped so that no divisor
 * is infinite. */
static inline float f_sigmoid(float x)
{
    float y = 1.0f / (1.0f + f_exp_lo(-x < 88.0f ? -x : 88.0f));
    y = x < F_EXP_MIN ? 0.0f : y;
    return f_isnan(x) ? x : y;
}

/* log(1 + e^−|x|): the shared tail of softplus and log-sigmoid. */
static inline float f_softplus_tail(float x) { return f_log1p_unit(f_exp_lo(-fabsf(x))); }

/* ================================================================ elementwise maps
 * OWN_MAP(name, COST, EXPR): own_<name>_f32 writes y[i] = EXPR of x (input
 * 0) and, for two-input ops, g (input 1); p = attrs.scalar, lo/hi =
 * attrs.lo/hi, as floats. Parallel over contiguous ranges when the work
 * (elements × COST) reaches OWN_PAR_MIN. */
typedef struct map_ctx {
    float *y;
    const float *x, *g;
    float p, lo, hi;
} map_ctx;

static void map_start(map_ctx *k, mi_tensor *o, mi_tensor *const *in, const mi_attrs *a, int n_in)
{
    k->y = o->data;
    k->x = in[0]->data;
    k->g = n_in > 1 ? in[1]->data : NULL;
    k->p = (float)a->scalar;
    k->lo = (float)a->lo;
    k->hi = (float)a->hi;
}

#define OWN_MAP_N(name, N_IN, COST, EXPR)                                                  \
    static void name##_range(const void *c, int64_t i0, int64_t i1)                        \
    {                                                                                      \
        const map_ctx *k = c;                                                              \
        const float *restrict X = k->x, *restrict G = k->g;                                \
        float *restrict Y = k->y;                                                          \
        const float p = k->p, lo = k->lo, hi = k->hi;                                      \
        (void)G, (void)p, (void)lo, (void)hi;                                              \
        for (int64_t i = i0; i < i1; i++) {                                                \
            const float x = X[i], g = N_IN > 1 ? G[i] : 0.0f;                              \
            (void)g;                                                                       \
            Y[i] = (float)(EXPR);                                                          \
        }                                                                                  \
    }                                                                                      \
    void own_##name##_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)           \
    {                                                                                      \
        map_ctx k;                                                                         \
        map_start(&k, o, in, a, N_IN);                                                     \
        own_parallel(o->numel, own_stream_work(o->numel) * (COST), OWN_PAR_MIN, 16,         \
                     name##_range, &k);                                                    \
    }
#define OWN_MAP(name, COST, EXPR) OWN_MAP_N(name, 1, COST, EXPR)
#define OWN_MAP2(name, COST, EXPR) OWN_MAP_N(name, 2, COST, EXPR)

/* Own polynomials (see the top): exp, σ, silu, gelu, softplus. */
OWN_MAP(exp, COST_TRANS, f_exp(x))
OWN_MAP(sigmoid, COST_TRANS, f_sigmoid(x))
OWN_MAP(silu, COST_TRANS, x * f_sigmoid(x))
OWN_MAP(gelu, COST_TRANS, x * f_Phi(x))
/* max(x, 0) + log1p(e^−|x|) and min(x, 0) − log1p(e^−|x|), as REF. */
OWN_MAP(softplus, COST_TRANS, f_isnan(x) ? x : (x > 0 ? x : 0.0f) + f_softplus_tail(x))
OWN_MAP(log_sigmoid, COST_TRANS, f_isnan(x) ? x : (x < 0 ? x : 0.0f) - f_softplus_tail(x))
/* glibc's vector libm (_ZGVeN16v_logf, …): special cases are its own.
 * tanhf is faster here than any exp-based formula short enough to keep
 * tanh's relative accuracy near 0 (92 against 115 µs on 4096×128). */
OWN_MAP(tanh, COST_TRANS, tanhf(x))
OWN_MAP(log, COST_TRANS, logf(x))
OWN_MAP(erf, COST_TRANS, erff(x))
OWN_MAP(pow_scalar, COST_TRANS, powf(x, p))

/* dx = g·(Φ(x) + x·φ(x)), φ(x) = e^(−x²/2)/√(2π)  (gelu's derivative) */
OWN_MAP2(gelu_backward, COST_TRANS,
         g * (f_Phi(x) + x * (0.39894228040143267794f * f_exp_lo(-0.5f * x * x))))
/* dx = g·σ(x)·(1 + x·(1 − σ(x)))  (silu's derivative) */
OWN_MAP2(silu_backward, COST_TRANS, g * (f_sigmoid(x) * (1.0f + x * (1.0f - f_sigmoid(x)))))
/* y = silu(a)·b (a = x, b = g) */
OWN_MAP2(swiglu, COST_TRANS, x * f_sigmoid(x) * g)

/* y = g·b·σ(a)·(1 + a·(1 − σ(a)))  (swiglu's gradient at a; inputs a, b, g) */
typedef struct swiglu_bwd_ctx {
    const float *a, *b, *g;
    float *y, *yb; /* yb: gb, with own_swiglu_grads_f32 */
} swiglu_bwd_ctx;

static void swiglu_bwd_range(const void *c, int64_t i0, int64_t i1)
{
    const swiglu_bwd_ctx *k = c;
    const float *restrict A = k->a, *restrict B = k->b, *restrict G = k->g;
    float *restrict Y = k->y;
    for (int64_t i = i0; i < i1; i++) {
        const float s = f_sigmoid(A[i]);
        Y[i] = G[i] * B[i] * (s * (1.0f + A[i] * (1.0f - s)));
    }
}

void own_swiglu_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)a;
    swiglu_bwd_ctx k = {in[0]->data, in[1]->data, in[2]->data, o->data, NULL};
    own_parallel(o->numel, o->numel * COST_TRANS, OWN_PAR_MIN, 16, swiglu_bwd_range, &k);
}

/* ga = g·b·σ(a)·(1 + a·(1 − σ(a))), gb = g·a·σ(a) */
static void swiglu_grads_range(const void *c, int64_t i0, int64_t i1)
{
    const swiglu_bwd_ctx *k = c;
    const float *restrict A = k->a, *restrict B = k->b, *restrict G = k->g;
    float *restrict GA = k->y, *restrict GB = k->yb;
    for (int64_t i = i0; i < i1; i++) {
        const float s = f_sigmoid(A[i]);
        GA[i] = G[i] * B[i] * (s * (1.0f + A[i] * (1.0f - s)));
        GB[i] = A[i] * s * G[i];
    }
}

void own_swiglu_grads_f32(const mi_tensor *a, const mi_tensor *b, const mi_tensor *g,
                          mi_tensor *ga, mi_tensor *gb)
{
    swiglu_bwd_ctx k = {a->data, b->data, g->data, ga->data, gb->data};
    own_parallel(a->numel, a->numel * COST_TRANS, OWN_PAR_MIN, 16, swiglu_grads_range, &k);
}

/* ================================================================ rows
 * x viewed as [outer, n, inner] around attrs.axis. Row ops along the last
 * axis (inner = 1) run row by row; other axes in column blocks of COLS
 * entries, vectorised across the block. Units (rows or blocks) split over
 * threads. */
typedef struct row_ctx {
    float *y;
    const float *x, *g;
    int64_t n, inner, blocks; /* blocks per outer index (inner > 1) */
    float eps;
    int log;
} row_ctx;

enum { COLS = 64 };

static void row_start(row_ctx *k, mi_tensor *o, mi_tensor *const *in, int n_in, int axis)
{
    const mi_tensor *x = in[0];
    int ax = axis < 0 ? axis + x->rank : axis;
    k->y = o->data;
    k->x = x->data;
    k->g = n_in > 1 ? in[1]->data : NULL;
    k->n = x->shape[ax];
    k->inner = mi_shape_numel(x->rank - ax - 1, x->shape + ax + 1);
    k->blocks = (k->inner + COLS - 1) / COLS;
}

/* Units of work: rows, or (outer index, column block) pairs. */
static int64_t row_units(const row_ctx *k, const mi_tensor *o)
{
    int64_t outer = o->numel / (k->n * k->inner);
    return k->inner == 1 ? outer : outer * k->blocks;
}

/* Column block u: base offset, first column, width. */
static void col_block(const row_ctx *k, int64_t u, int64_t *base, int64_t *q0, int64_t *w)
{
    int64_t p = u / k->blocks;
    *q0 = (u % k->blocks) * COLS;
    *w = k->inner - *q0 < COLS ? k->inner - *q0 : COLS;
    *base = p * k->n * k->inner + *q0;
}

/* ---------------------------------------------------------------- softmax, log-softmax
 * y = e^(x − m)/s, or x − m − log s;  m = max x, s = Σ e^(x − m).
 * −inf entries give exactly 0 (−inf for log); an all −inf row gives NaN,
 * like REF. log-softmax subtracts m and log s in two passes: fast math
 * would otherwise hoist m + log s out of the loop, which loses x's digits
 * when |x| is large (shift stability). */
static void softmax_row(const float *restrict x, float *restrict y, int64_t n, int log)
{
    float m = x[0], s = 0;
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    if (log) {
        for (int64_t i = 0; i < n; i++) {
            y[i] = x[i] - m;
            s += f_exp(y[i]);
        }
        float ls = logf(s);
        for (int64_t i = 0; i < n; i++) y[i] -= ls;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        y[i] = f_exp(x[i] - m);
        s += y[i];
    }
    float rs = 1.0f / s;
    for (int64_t i = 0; i < n; i++) y[i] *= rs;
}

static void softmax_cols(const float *restrict x, float *restrict y, int64_t n, int64_t inner,
                         int64_t w, int log)
{
    float m[COLS], s[COLS];
    for (int64_t q = 0; q < w; q++) m[q] = x[q], s[q] = 0;
    for (int64_t i = 1; i < n; i++)
        for (int64_t q = 0; q < w; q++) m[q] = x[i * inner + q] > m[q] ? x[i * inner + q] : m[q];
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < w; q++) {
            float d = x[i * inner + q] - m[q], e = f_exp(d);
            y[i * inner + q] = log ? d : e;
            s[q] += e;
        }
    for (int64_t q = 0; q < w; q++) s[q] = log ? logf(s[q]) : 1.0f / s[q];
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < w; q++)
            y[i * inner + q] = log ? y[i * inner + q] - s[q] : y[i * inner + q] * s[q];
}

static void softmax_range(const void *c, int64_t u0, int64_t u1)
{
    const row_ctx *k = c;
    for (int64_t u = u0; u < u1; u++) {
        if (k->inner == 1) {
            softmax_row(k->x + u * k->n, k->y + u * k->n, k->n, k->log);
            continue;
        }
        int64_t base, q0, w;
        col_block(k, u, &base, &q0, &w);
        softmax_cols(k->x + base, k->y + base, k->n, k->inner, w, k->log);
    }
}

static void softmax_run(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a, int log)
{
    row_ctx k = {.log = log};
    row_start(&k, o, in, 1, a->axis);
    own_parallel(row_units(&k, o), o->numel * COST_TRANS, OWN_PAR_MIN, 1, softmax_range, &k);
}

void own_softmax_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    softmax_run(o, in, a, 0);
}

void own_log_softmax_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    softmax_run(o, in, a, 1);
}

/* ---------------------------------------------------------------- softmax_backward
 * dx = y ⊙ (g − Σ g ⊙ y) along attrs.axis (y = softmax output). */
static void softmax_bwd_row(const float *restrict y, const float *restrict g,
                            float *restrict dx, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += g[i] * y[i];
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] * (g[i] - s);
}

static void softmax_bwd_cols(const float *restrict y, const float *restrict g,
                             float *restrict dx, int64_t n, int64_t inner, int64_t w)
{
    float s[COLS];
    for (int64_t q = 0; q < w; q++) s[q] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < w; q++) s[q] += g[i * inner + q] * y[i * inner + q];
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < w; q++)
            dx[i * inner + q] = y[i * inner + q] * (g[i * inner + q] - s[q]);
}

static void softmax_bwd_range(const void *c, int64_t u0, int64_t u1)
{
    const row_ctx *k = c;
    for (int64_t u = u0; u < u1; u++) {
        if (k->inner == 1) {
            int64_t off = u * k->n;
            softmax_bwd_row(k->x + off, k->g + off, k->y + off, k->n);
            continue;
        }
        int64_t base, q0, w;
        col_block(k, u, &base, &q0, &w);
        softmax_bwd_cols(k->x + base, k->g + base, k->y + base, k->n, k->inner, w);
    }
}

void own_softmax_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    row_ctx k = {0};
    row_start(&k, o, in, 2, a->axis);
    own_parallel(row_units(&k, o), o->numel * COST_CHEAP, OWN_PAR_MIN, 1, softmax_bwd_range, &k);
}

/* ---------------------------------------------------------------- cross_entropy
 * L = (1/n) Σ_{r: t_r ≠ ignore} (m_r + log Σ_j e^(x_rj − m_r) − x_{r,t_r}), m_r = max_j x_rj.
 * Rows in fixed blocks, each block's sum in double, the blocks summed in
 * order: the same value at any thread count. */
enum { CE_BLOCK = 64 };

typedef struct ce_ctx {
    const float *x;
    const mi_tensor *t;
    int64_t nr, nc, ignore;
    double *sum;     /* per block */
    int64_t *count;  /* per block */
} ce_ctx;

static void ce_range(const void *c, int64_t b0, int64_t b1)
{
    const ce_ctx *k = c;
    for (int64_t b = b0; b < b1; b++) {
        double total = 0;
        int64_t counted = 0, end = (b + 1) * CE_BLOCK < k->nr ? (b + 1) * CE_BLOCK : k->nr;
        for (int64_t r = b * CE_BLOCK; r < end; r++) {
            int64_t t = index_at(k->t, r);
            if (t == k->ignore) continue;
            const float *restrict x = k->x + r * k->nc;
            float m = x[0], s = 0;
            for (int64_t j = 1; j < k->nc; j++) m = x[j] > m ? x[j] : m;
            for (int64_t j = 0; j < k->nc; j++) s += f_exp(x[j] - m);
            total += (double)m + log((double)s) - (double)x[t];
            counted++;
        }
        k->sum[b] = total;
        k->count[b] = counted;
    }
}

void own_cross_entropy_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int64_t nr = in[0]->shape[0], nc = in[0]->shape[1], blocks = (nr + CE_BLOCK - 1) / CE_BLOCK;
    ce_ctx k = {.x = in[0]->data, .t = in[1], .nr = nr, .nc = nc, .ignore = a->index,
                .sum = malloc(sizeof(double) * (size_t)(blocks ? blocks : 1)),
                .count = malloc(sizeof(int64_t) * (size_t)(blocks ? blocks : 1))};
    if (!k.sum || !k.count) { /* no room for the block sums: REF needs none */
        free(k.sum), free(k.count);
        mi_op_cross_entropy.kernel[MI_BACKEND_REF][MI_F32](o, in, a);
        return;
    }
    own_parallel(blocks, nr * nc * COST_TRANS, OWN_PAR_MIN, 1, ce_range, &k);
    double total = 0;
    int64_t counted = 0;
    for (int64_t b = 0; b < blocks; b++) total += k.sum[b], counted += k.count[b];
    ((float *)o->data)[0] = counted ? (float)(total / (double)counted) : 0.0f;
    free(k.sum), free(k.count);
}

/* Its gradient for the cotangent scale c = g / max(n, 1), row by row:
 *   dx_rj = c·(e^(x_rj − m_r) / Σ_l e^(x_rl − m_r) − [j = t_r]),  0 on ignored rows */
typedef struct ce_grad_ctx {
    const float *x;
    const mi_tensor *t;
    float *dx;
    int64_t nc, ignore;
    float c;
} ce_grad_ctx;

static void ce_grad_range(const void *c, int64_t r0, int64_t r1)
{
    const ce_grad_ctx *k = c;
    int64_t nc = k->nc;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = k->x + r * nc;
        float *restrict dx = k->dx + r * nc;
        int64_t t = index_at(k->t, r);
        if (t == k->ignore) {
            for (int64_t j = 0; j < nc; j++) dx[j] = 0;
            continue;
        }
        softmax_row(x, dx, nc, 0);
        for (int64_t j = 0; j < nc; j++) dx[j] *= k->c;
        dx[t] -= k->c;
    }
}

void own_cross_entropy_grad_f32(const mi_tensor *x, const mi_tensor *t, int64_t ignore, double c,
                                mi_tensor *dx)
{
    int64_t nr = x->shape[0], nc = x->shape[1];
    ce_grad_ctx k = {x->data, t, dx->data, nc, ignore, (float)c};
    own_parallel(nr, nr * nc * COST_TRANS, OWN_PAR_MIN, 1, ce_grad_range, &k);
}

/* ---------------------------------------------------------------- normalisations
 * Over the last axis (d entries), as nn.c:
 *   layer_norm    y = (x − μ)·r,  r = 1/√(mean((x − μ)²) + eps)
 *   rms_norm      y = x·r,        r = 1/√(mean(x²) + eps)
 *   l2_normalize  y = x·r,        r = 1/√(Σx² + eps)
 * r is taken in double (one per row): exact, and 1/√0 = inf as in REF. */
enum { NORM_LAYER, NORM_RMS, NORM_L2 };

static void norm_row(const float *restrict x, float *restrict y, int64_t d, float eps, int kind)
{
    float mu = 0, ss = 0;
    if (kind == NORM_LAYER) {
        for (int64_t j = 0; j < d; j++) mu += x[j];
        mu /= (float)d;
    }
    for (int64_t j = 0; j < d; j++) ss += (x[j] - mu) * (x[j] - mu);
    if (kind != NORM_L2) ss /= (float)d;
    float r = (float)(1.0 / sqrt((double)ss + (double)eps));
    for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mu) * r;
}

static void norm_range(const void *c, int64_t r0, int64_t r1)
{
    const row_ctx *k = c;
    for (int64_t r = r0; r < r1; r++)
        norm_row(k->x + r * k->n, k->y + r * k->n, k->n, k->eps, k->log);
}

static void norm_run(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a, int kind)
{
    row_ctx k = {.eps = (float)a->eps, .log = kind};
    row_start(&k, o, in, 1, -1);
    own_parallel(row_units(&k, o), o->numel * COST_CHEAP, OWN_PAR_MIN, 1, norm_range, &k);
}

void own_layer_norm_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    norm_run(o, in, a, NORM_LAYER);
}

void own_rms_norm_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    norm_run(o, in, a, NORM_RMS);
}

void own_l2_normalize_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    norm_run(o, in, a, NORM_L2);
}

/* ---------------------------------------------------------------- layer_norm_backward
 * dx = r·(g − mean(g) − y·mean(g ⊙ y)), y = (x − μ)·r, per row of x. */
static void layer_norm_bwd_range(const void *c, int64_t r0, int64_t r1)
{
    const row_ctx *k = c;
    int64_t d = k->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = k->x + r * d, *restrict g = k->g + r * d;
        float *restrict dx = k->y + r * d;
        float mu = 0, ss = 0, sg = 0, sgy = 0;
        for (int64_t j = 0; j < d; j++) mu += x[j];
        mu /= (float)d;
        for (int64_t j = 0; j < d; j++) ss += (x[j] - mu) * (x[j] - mu);
        float rs = (float)(1.0 / sqrt((double)(ss / (float)d) + (double)k->eps));
        for (int64_t j = 0; j < d; j++) {
            sg += g[j];
            sgy += g[j] * ((x[j] - mu) * rs);
        }
        float mg = sg / (float)d, mgy = sgy / (float)d;
        for (int64_t j = 0; j < d; j++) dx[j] = rs * (g[j] - mg - (x[j] - mu) * rs * mgy);
    }
}

void own_layer_norm_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    row_ctx k = {.eps = (float)a->eps};
    row_start(&k, o, in, 2, -1);
    own_parallel(row_units(&k, o), o->numel * COST_CHEAP, OWN_PAR_MIN, 1, layer_norm_bwd_range,
                 &k);
}

/* ---------------------------------------------------------------- rms_norm_gain
 * y = x·r ⊙ w (the gain w in row_ctx's g). */
static void norm_gain_range(const void *c, int64_t r0, int64_t r1)
{
    const row_ctx *k = c;
    for (int64_t r = r0; r < r1; r++) {
        float *restrict y = k->y + r * k->n;
        const float *restrict w = k->g;
        norm_row(k->x + r * k->n, y, k->n, k->eps, NORM_RMS);
        for (int64_t j = 0; j < k->n; j++) y[j] *= w[j];
    }
}

void own_rms_norm_gain_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    row_ctx k = {.eps = (float)a->eps};
    row_start(&k, o, in, 1, -1);
    k.g = in[1]->data;
    own_parallel(row_units(&k, o), own_stream_work(o->numel) * COST_CHEAP, OWN_PAR_MIN, 1,
                 norm_gain_range, &k);
}

/* Both gradients of y = x·r ⊙ w for the cotangent g, per row (h = g ⊙ w):
 *   dx = r·(h − y·mean(h ⊙ y)),  y = x·r;   dw = Σ_rows g ⊙ y
 * dw's sum in fixed blocks of GAIN_BLOCK rows, each block's partial into its
 * own row of the scratch, the blocks then added in order: the same bits at
 * any thread count. */
enum { GAIN_BLOCK = 64, GAIN_PIECE = 256 };

typedef struct gain_ctx {
    const float *x, *w, *g;
    float *dx, *part; /* part [blocks, d] */
    int64_t rows, d;
    float eps;
    bool add; /* dx += the gradient (else dx =) */
} gain_ctx;

static void gain_grads_range(const void *c, int64_t b0, int64_t b1)
{
    const gain_ctx *k = c;
    int64_t d = k->d;
    for (int64_t b = b0; b < b1; b++) {
        float *restrict dw = k->part + b * d;
        for (int64_t j = 0; j < d; j++) dw[j] = 0;
        int64_t end = (b + 1) * GAIN_BLOCK < k->rows ? (b + 1) * GAIN_BLOCK : k->rows;
        for (int64_t r = b * GAIN_BLOCK; r < end; r++) {
            const float *restrict x = k->x + r * d, *restrict g = k->g + r * d,
                                  *restrict w = k->w;
            float *restrict dx = k->dx + r * d;
            float ss = 0, shx = 0;
            for (int64_t j = 0; j < d; j++) {
                ss += x[j] * x[j];
                shx += g[j] * w[j] * x[j];
            }
            float rs = (float)(1.0 / sqrt((double)(ss / (float)d) + (double)k->eps));
            float c2 = rs * rs * (shx / (float)d); /* r·mean(h ⊙ y) */
            if (k->add) /* the row's dx formed, then added: no multiply-add fused
                         * across the two, so the sum rounds as the engine's sum
                         * of a dx of its own (--recompute gives the same bits) */
                for (int64_t j0 = 0; j0 < d; j0 += GAIN_PIECE) {
                    int64_t n = d - j0 < GAIN_PIECE ? d - j0 : GAIN_PIECE;
                    float piece[GAIN_PIECE];
                    for (int64_t j = 0; j < n; j++)
                        piece[j] = rs * (g[j0 + j] * w[j0 + j] - x[j0 + j] * c2);
                    for (int64_t j = 0; j < n; j++) dx[j0 + j] += piece[j];
                }
            else
                for (int64_t j = 0; j < d; j++) dx[j] = rs * (g[j] * w[j] - x[j] * c2);
            for (int64_t j = 0; j < d; j++) dw[j] += g[j] * (x[j] * rs);
        }
    }
}

int own_rms_norm_gain_grads_f32(const mi_tensor *x, const mi_tensor *w, const mi_tensor *g,
                                double eps, mi_tensor *dx, bool add, mi_tensor *dw)
{
    int64_t d = x->shape[x->rank - 1], rows = d ? x->numel / d : 0;
    int64_t blocks = (rows + GAIN_BLOCK - 1) / GAIN_BLOCK;
    gain_ctx k = {.x = x->data, .w = w->data, .g = g->data, .dx = dx->data, .rows = rows,
                  .d = d, .eps = (float)eps, .add = add,
                  .part = malloc(sizeof(float) * (size_t)((blocks ? blocks : 1) * d))};
    if (!k.part) {
        mi_error_set("rms_norm_gain: out of memory for the gain's partial sums (%lld x %lld)",
                     (long long)blocks, (long long)d);
        return -1;
    }
    own_parallel(blocks, own_stream_work(x->numel) * COST_CHEAP, OWN_PAR_MIN, 1,
                 gain_grads_range, &k);
    float *out = dw->data;
    for (int64_t j = 0; j < d; j++) out[j] = 0;
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t j = 0; j < d; j++) out[j] += k.part[b * d + j];
    free(k.part);
    return 0;
}

/* ---------------------------------------------------------------- rms_norm_backward
 * dx = r·(g − y·mean(g ⊙ y)), y = x·r, per row of x. */
static void rms_norm_bwd_range(const void *c, int64_t r0, int64_t r1)
{
    const row_ctx *k = c;
    int64_t d = k->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = k->x + r * d, *restrict g = k->g + r * d;
        float *restrict dx = k->y + r * d;
        float ss = 0, sgx = 0;
        for (int64_t j = 0; j < d; j++) {
            ss += x[j] * x[j];
            sgx += g[j] * x[j];
        }
        float rs = (float)(1.0 / sqrt((double)(ss / (float)d) + (double)k->eps));
        float c2 = rs * rs * (sgx / (float)d); /* r·mean(g ⊙ y) */
        for (int64_t j = 0; j < d; j++) dx[j] = rs * (g[j] - x[j] * c2);
    }
}

void own_rms_norm_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    row_ctx k = {.eps = (float)a->eps};
    row_start(&k, o, in, 2, -1);
    own_parallel(row_units(&k, o), o->numel * COST_CHEAP, OWN_PAR_MIN, 1, rms_norm_bwd_range,
                 &k);
}

/* ================================================================ raw arrays
 * For cms_scan.c's OWN kernel, on its chunk buffers (no tensors, one thread:
 * the op runs a sequence a thread). */
/* s = gelu(a) = a Φ(a), gp = gelu'(a) = Φ(a) + a φ(a) */
void own_gelu_pair_f32(const float *restrict a, float *restrict s, float *restrict gp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = a[i], Phi = f_Phi(x);
        s[i] = x * Phi;
        gp[i] = Phi + x * (0.39894228040143267794f * f_exp_lo(-0.5f * x * x));
    }
}

/* gelu''(a) = φ(a)(2 − a²) */
void own_gelu_second_f32(const float *restrict a, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = a[i];
        y[i] = 0.39894228040143267794f * f_exp_lo(-0.5f * x * x) * (2.0f - x * x);
    }
}

/* ================================================================ EXACT
 * From here on IEEE semantics and no contraction: the same expressions as
 * REF, so the same bits, with AVX-512 and both cores. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-fast-math", "no-trapping-math", "no-math-errno", "fp-contract=off")
#endif

OWN_MAP(neg, COST_CHEAP, -x)
OWN_MAP(abs, COST_CHEAP, fabsf(x))
OWN_MAP(sign, COST_CHEAP, (x > 0) - (x < 0))
OWN_MAP(sqrt, COST_CHEAP, sqrtf(x))
OWN_MAP(rsqrt, COST_CHEAP, 1 / sqrtf(x))
OWN_MAP(square, COST_CHEAP, x *x)
OWN_MAP(reciprocal, COST_CHEAP, 1 / x)
OWN_MAP(relu, COST_CHEAP, x > 0 ? x : 0)
OWN_MAP(clamp, COST_CHEAP, x < lo ? lo : x > hi ? hi : x)
OWN_MAP(add_scalar, COST_CHEAP, x + p)
OWN_MAP(mul_scalar, COST_CHEAP, x *p)
/* dx = g·(1 − y²) and g·y·(1 − y) from the outputs y of tanh and σ. */
OWN_MAP2(tanh_backward, COST_CHEAP, g * (1 - x * x))
OWN_MAP2(sigmoid_backward, COST_CHEAP, g * (x * (1 - x)))

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
