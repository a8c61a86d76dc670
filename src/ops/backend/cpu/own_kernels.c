/* The project's own vectorised / OpenMP kernels (MI_BACKEND_OWN), f32:
 * broadcasting binary ops, where and comparisons, the scans, and the
 * elementwise MIRAS helpers. The reductions and the row-wise MIRAS helpers
 * are in own_reduce.c. Neither OpenBLAS nor oneDNN 2.6 has these (oneDNN's
 * binary primitive needs a primitive per shape and costs more than the loop
 * at these sizes); what they need is AVX-512 loops over contiguous runs
 * instead of REF's per-element broadcast walk, and both cores.
 *
 * Exactness. This file is built with -ffast-math, but the section marked
 * EXACT below turns it off again (no reciprocal division, no vmaxps for
 * max/min, no FMA contraction, IEEE NaN and signed-zero semantics): those
 * kernels give the same bits as REF. GCC 12 does not always honour that
 * pragma for comparisons (with -fsanitize=undefined it folds x < y into
 * !(x >= y), true for a NaN), so every comparison there also tests NaN on
 * the bits, which no fast-math flag can fold away. Only smooth_sign
 * (libmvec tanhf) and the reductions in own_reduce.c (reassociated sums,
 * accumulated in f32 blocks with f64 totals) differ from REF by rounding.
 *
 * Determinism. Every OWN kernel gives bitwise identical results for any
 * number of threads: elementwise ops and scans split independent outputs;
 * the reductions split their work into blocks fixed by the shape alone
 * (never by the thread count) and combine the blocks' partial results in
 * block order on one thread. No kernel uses an OpenMP reduction clause or
 * atomics. */
#define OWN_VECTORS
#include "own_kernels.h"

#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------- threads */
/* Start of range t of k over [0, n), rounded down to a multiple of align. */
static int64_t own_split(int64_t n, int k, int t, int64_t align)
{
    if (t >= k) return n;
    int64_t b = n / k * t + n % k * t / k;
    return b - b % align;
}

int64_t own_stream_work(int64_t n)
{
    static _Atomic long l2;
    long b = l2;
    if (!b) {
        b = sysconf(_SC_LEVEL2_CACHE_SIZE);
        l2 = b = b > 0 ? b : 1L << 20;
    }
    return n * (int64_t)sizeof(float) > b ? 4 * n : n;
}

void own_parallel(int64_t n, int64_t work, int64_t min_work, int64_t align, own_range_fn fn,
                  const void *ctx)
{
    int nt = 1;
#ifdef _OPENMP
    if (n > 1 && !omp_in_parallel() && work >= min_work * mi_parallel_cost(NULL))
        nt = omp_get_max_threads();
    if (nt > n) nt = (int)n;
#endif
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = 0, k = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        k = omp_get_num_threads();
#endif
        int64_t i0 = own_split(n, k, t, align), i1 = own_split(n, k, t + 1, align);
        if (i0 < i1) fn(ctx, i0, i1);
    }
}

/* ---------------------------------------------------------------- size rules */
/* OWN if allowed and `big`, else the first available of DNNL, BLAS, REF. */
static mi_backend own_pick(unsigned available, bool big)
{
    if (big && (available >> MI_BACKEND_OWN & 1u)) return MI_BACKEND_OWN;
    if (available >> MI_BACKEND_DNNL & 1u) return MI_BACKEND_DNNL;
    if (available >> MI_BACKEND_BLAS & 1u) return MI_BACKEND_BLAS;
    return MI_BACKEND_REF;
}

/* The rules below: OWN from the smallest size from which it was never
 * slower than REF, measured with the kernels called directly (1 thread,
 * median of 101 calls; "n a/b" = REF a ns, OWN b ns per call at n
 * elements). Below it REF wins by the ~10 ns OWN spends planning. The
 * select call itself costs nothing measurable (add [1]+[1] through
 * mi_op_call: 60 ns with only REF allowed and with all backends).
 *
 * Binary ops and comparisons. Same shapes, REF's loop is already
 * vectorised (SSE2): add 256 40/40, 512 60/40, 16384 1340/1140; gt 256
 * 40/50, 512 60/60, 16384 1370/1040. Any broadcast sends REF through its
 * per-element walk: [n/32,32]+[32] 2 50/30, 64 160/40, 16384 30480/1350;
 * [n/32,32]*[n/32,1] 16384 30800/1120; x*scalar 16384 18190/790. */
#define OWN_MIN_BINARY_SAME 512
#define OWN_MIN_BINARY_BCAST 2
mi_backend own_select_binary(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                             unsigned available)
{
    (void)a;
    bool walk = false; /* REF walks when any input broadcasts */
    for (int i = 0; i < n; i++) walk |= in[i]->numel != out->numel;
    return own_pick(available, out->numel >= (walk ? OWN_MIN_BINARY_BCAST : OWN_MIN_BINARY_SAME));
}

/* where: REF always walks (and branches on the condition): same shapes 2
 * 40/40, 64 130/40, 16384 38890/1570. */
#define OWN_MIN_WHERE 2
mi_backend own_select_where(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                            unsigned available)
{
    (void)in, (void)n, (void)a;
    return own_pick(available, out->numel >= OWN_MIN_WHERE);
}

/* Reductions, sum_to and lq_normalize (one per matrix), by input elements.
 * Over the last axis of [n/32,32] OWN wins from n = 2–8: sum 8 40/40, 16384
 * 5550/2950; max 16384 41080/3220; logsumexp 8 100/90, 16384 90451/14860.
 * Over the first axis from 32–128: sum 128 90/70, 16384 3630/650; max 64
 * 70/80, 128 100/90, 16384 6500/2060; sum_to 64 80/80, 128 90/80;
 * logsumexp 32 240/240. lq_normalize (32×32 matrices) 64 70/60, 128 110/60,
 * 16384 10730/1400. */
#define OWN_MIN_REDUCE 128
mi_backend own_select_reduce(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                             unsigned available)
{
    (void)n, (void)a, (void)out;
    return own_pick(available, in[0]->numel >= OWN_MIN_REDUCE);
}

/* Scans, by elements. cumsum over axis 0 of [n/32,32]: 128 40/30, 16384
 * 2070/1190; along the last axis of [n/64,64]: 64 230/240, 128 400/250,
 * 16384 40900/8830; linear_scan with a of x's shape 64 40/40, 16384
 * 2760/1810, with a per-row decay [n/32,1] 64 70/40, 16384 17420/1700. */
#define OWN_MIN_SCAN 128
mi_backend own_select_scan(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                           unsigned available)
{
    (void)in, (void)n, (void)a;
    return own_pick(available, out->numel >= OWN_MIN_SCAN);
}

/* soft_threshold, smooth_abs, smooth_sign: REF's branches and scalar libm
 * calls lose from n = 2–8: soft_threshold 8 30/30, 16384 8920/1560;
 * smooth_abs 8 30/30, 16384 20290/1300; smooth_sign 8 110/40, 16384
 * 201020/3680. */
#define OWN_MIN_ELTWISE 8
mi_backend own_select_eltwise(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                              unsigned available)
{
    (void)in, (void)n, (void)a;
    return own_pick(available, out->numel >= OWN_MIN_ELTWISE);
}

/* sphere_retract: a sum of squares per row, then a scale. Rows of 128 from
 * 32 (50/50; 128 110/50, 16384 8270/2570); rows of 32 gain less (64 60/50,
 * 512 230/190, 16384 6850/5410) and rows of 8 lose ([4,8,8] 150/240). */
#define OWN_MIN_ROWS 32
#define OWN_MIN_ROWS_SHORT 512
mi_backend own_select_rows(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                           unsigned available)
{
    (void)in, (void)n, (void)a;
    int64_t row = out->rank ? out->shape[out->rank - 1] : 1;
    return own_pick(available, out->numel >= (row >= 64 ? OWN_MIN_ROWS
                                              : row >= 16 ? OWN_MIN_ROWS_SHORT
                                                          : INT64_MAX));
}

/* ---------------------------------------------------------------- smooth_sign
 * y = tanh(a·x) (miras.c). Fast math on purpose: GCC calls glibc's AVX-512
 * tanhf (libmvec), ≤ 4 ulp from the scalar tanhf REF uses. */
typedef struct unary_ctx {
    float *y;
    const float *x;
    float p;
} unary_ctx;

static void smooth_sign_range(const void *c, int64_t i0, int64_t i1)
{
    const unary_ctx *k = c;
    const float *restrict x = k->x;
    float *restrict y = k->y;
    const float p = k->p;
    for (int64_t i = i0; i < i1; i++) y[i] = tanhf(p * x[i]);
}

void own_smooth_sign_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    unary_ctx k = {.y = o->data, .x = in[0]->data, .p = (float)a->p};
    own_parallel(o->numel, o->numel * 4, OWN_PAR_MIN, 16, smooth_sign_range, &k);
}

/* ================================================================ EXACT
 * From here on: IEEE semantics and no contraction, so the kernels below
 * give REF's bits (REF is built without -ffast-math, -std=c11: no FMA). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-fast-math", "no-trapping-math", "no-math-errno", "fp-contract=off")
#endif

/* x is a NaN, tested on the bits. */
static inline int f_nan(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/* ---------------------------------------------------------------- the broadcast plan
 * The output of a broadcasting op seen as `rows` runs of n contiguous
 * elements; in each run every input is either contiguous too (step 1) or
 * one repeated element (step 0), and the runs' input offsets follow an
 * odometer over the outer dims. Size-1 dims are dropped and neighbours that
 * every input walks the same way are merged, so [N, D] + [N, D] is one run,
 * [N, D] + [D] is N runs of D (b's step 1, its row stride 0), [B,H,T,D] *
 * [B,H,T,1] is B·H·T runs of D (b's step 0), x + scalar one run. */
typedef struct eplan {
    int nin, nd;                          /* inputs; dims incl. the inner run */
    int64_t n;                            /* inner run length */
    int64_t size[MI_MAX_RANK];            /* dim sizes (the last is n) */
    int64_t st[3][MI_MAX_RANK];           /* each input's stride per dim */
} eplan;

static void eplan_build(eplan *p, const mi_tensor *o, mi_tensor *const *in, int nin)
{
    int64_t own[3][MI_MAX_RANK];
    for (int k = 0; k < nin; k++) mi_strides(in[k]->rank, in[k]->shape, own[k]);
    memset(p->st, 0, sizeof p->st);
    p->nin = nin;
    p->nd = 0;
    for (int d = 0; d < o->rank; d++) {
        if (o->shape[d] == 1) continue;
        int64_t s[3];
        bool merge = p->nd > 0;
        for (int k = 0; k < nin; k++) {
            int dk = d - (o->rank - in[k]->rank);
            s[k] = (dk < 0 || in[k]->shape[dk] == 1) ? 0 : own[k][dk];
            merge = merge && p->st[k][p->nd - 1] == s[k] * o->shape[d];
        }
        if (!merge) p->size[p->nd++] = 1;
        p->size[p->nd - 1] *= o->shape[d];
        for (int k = 0; k < nin; k++) p->st[k][p->nd - 1] = s[k];
    }
    if (p->nd == 0) { /* one element */
        p->nd = 1;
        p->size[0] = 1;
        for (int k = 0; k < nin; k++) p->st[k][0] = 0;
    }
    p->n = p->size[p->nd - 1];
}

typedef struct ectx {
    const eplan *p;
    float *y;
    const float *x[3];
} ectx;

/* A run of n outputs: y[i] = f(a[i·sa], b[i·sb], c[i·sc]), steps 0 or 1
 * (c only for where). */
typedef void (*erun_fn)(float *restrict y, const float *a, const float *b, const float *c,
                        int64_t sa, int64_t sb, int64_t sc, int64_t n);

/* Outputs [e0, e1) of the plan, run by run (the first and last may be
 * partial). Inlined into each op's range function with its run; plans of
 * one or two dims (equal shapes, row and column broadcasts) step the
 * offsets directly, deeper ones by odometer. */
static inline __attribute__((always_inline)) void ewalk(const ectx *k, int64_t e0, int64_t e1,
                                                        erun_fn run)
{
    const eplan *p = k->p;
    const int64_t n = p->n, d = p->nd - 1;
    const int64_t sa = p->st[0][d], sb = p->st[1][d], sc = p->nin > 2 ? p->st[2][d] : 0;
    const float *A = k->x[0], *B = k->x[1], *C = p->nin > 2 ? k->x[2] : NULL;
    int64_t col = e0 % n;
    if (p->nd <= 2) {
        int64_t r = e0 / n;
        const int64_t ra = d ? p->st[0][0] : 0, rb = d ? p->st[1][0] : 0;
        const int64_t rc = d && p->nin > 2 ? p->st[2][0] : 0;
        for (; e0 < e1; e0 += n - col, col = 0, r++) {
            int64_t len = n - col < e1 - e0 ? n - col : e1 - e0;
            run(k->y + e0, A + r * ra + (sa ? col : 0), B + r * rb + (sb ? col : 0),
                C ? C + r * rc + (sc ? col : 0) : NULL, sa, sb, sc, len);
        }
        return;
    }
    /* odometer over the outer dims (input 2's strides are 0 for two inputs) */
    int64_t idx[MI_MAX_RANK], oa = 0, ob = 0, oc = 0;
    for (int64_t i = d - 1, r = e0 / n; i >= 0; i--) {
        idx[i] = r % p->size[i];
        r /= p->size[i];
        oa += idx[i] * p->st[0][i], ob += idx[i] * p->st[1][i], oc += idx[i] * p->st[2][i];
    }
    for (; e0 < e1; e0 += n - col, col = 0) {
        int64_t len = n - col < e1 - e0 ? n - col : e1 - e0;
        run(k->y + e0, A + oa + (sa ? col : 0), B + ob + (sb ? col : 0),
            C ? C + oc + (sc ? col : 0) : NULL, sa, sb, sc, len);
        for (int64_t i = d - 1; i >= 0; i--) {
            oa += p->st[0][i], ob += p->st[1][i], oc += p->st[2][i];
            if (++idx[i] < p->size[i]) break;
            oa -= p->st[0][i] * p->size[i], ob -= p->st[1][i] * p->size[i];
            oc -= p->st[2][i] * p->size[i];
            idx[i] = 0;
        }
    }
}

static void erun_all(const ectx *k, int64_t numel, own_range_fn range)
{
    own_parallel(numel, own_stream_work(numel), OWN_PAR_MIN, 16, range, k);
}

/* ---------------------------------------------------------------- binary ops
 * own_<op>_f32 computes Y = BIN_EXPR(x, y) of x (input 0) and y (input 1),
 * broadcasting, with the expression of binary.c (own_binary_impl.h, once
 * per op; it #undefs BIN_OP and BIN_EXPR after each). */
/* ORD(x, y): neither is a NaN (an IEEE comparison is then false). */
#define ORD(x, y) (!(f_nan(x) | f_nan(y)))
#define BIN_OP add
#define BIN_EXPR(x, y) x + y
#include "own_binary_impl.h"
#define BIN_OP sub
#define BIN_EXPR(x, y) x - y
#include "own_binary_impl.h"
#define BIN_OP mul
#define BIN_EXPR(x, y) x * y
#include "own_binary_impl.h"
#define BIN_OP div
#define BIN_EXPR(x, y) x / y
#include "own_binary_impl.h"
#define BIN_OP maximum
#define BIN_EXPR(x, y) ORD(x, y) && x >= y ? x : y
#include "own_binary_impl.h"
#define BIN_OP minimum
#define BIN_EXPR(x, y) ORD(x, y) && x <= y ? x : y
#include "own_binary_impl.h"
#define BIN_OP gt
#define BIN_EXPR(x, y) ORD(x, y) && x > y ? 1 : 0
#include "own_binary_impl.h"
#define BIN_OP ge
#define BIN_EXPR(x, y) ORD(x, y) && x >= y ? 1 : 0
#include "own_binary_impl.h"
#define BIN_OP lt
#define BIN_EXPR(x, y) ORD(x, y) && x < y ? 1 : 0
#include "own_binary_impl.h"
#define BIN_OP le
#define BIN_EXPR(x, y) ORD(x, y) && x <= y ? 1 : 0
#include "own_binary_impl.h"
#define BIN_OP eq
#define BIN_EXPR(x, y) ORD(x, y) && x == y ? 1 : 0
#include "own_binary_impl.h"

/* ---------------------------------------------------------------- where
 * Y = cond != 0 ? a : b, broadcasting all three: the all-contiguous run
 * and each mix of a repeated cond, a or b its own loop (no branches). */
static inline void where_run(float *restrict Y, const float *restrict C,
                             const float *restrict A, const float *restrict B, int64_t sc,
                             int64_t sa, int64_t sb, int64_t n)
{
    if (sc && sa && sb) {
        for (int64_t i = 0; i < n; i++) Y[i] = C[i] != 0 ? A[i] : B[i];
    } else if (!sc) {
        const float *restrict S = C[0] != 0 ? A : B;
        if (C[0] != 0 ? sa : sb)
            memcpy(Y, S, sizeof(float) * (size_t)n);
        else
            for (int64_t i = 0; i < n; i++) Y[i] = S[0];
    } else if (sa) { /* a contiguous, b one value (a mask fill) */
        const float b = B[0];
        for (int64_t i = 0; i < n; i++) Y[i] = C[i] != 0 ? A[i] : b;
    } else if (sb) {
        const float a = A[0];
        for (int64_t i = 0; i < n; i++) Y[i] = C[i] != 0 ? a : B[i];
    } else {
        const float a = A[0], b = B[0];
        for (int64_t i = 0; i < n; i++) Y[i] = C[i] != 0 ? a : b;
    }
}
static void where_range(const void *c, int64_t e0, int64_t e1) { ewalk(c, e0, e1, where_run); }

void own_where_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)a;
    eplan p;
    eplan_build(&p, o, in, 3);
    ectx k = {.p = &p, .y = o->data, .x = {in[0]->data, in[1]->data, in[2]->data}};
    erun_all(&k, o->numel, where_range);
}

/* ---------------------------------------------------------------- soft_threshold, smooth_abs
 * The elementwise MIRAS helpers of miras.c whose REF expressions are
 * exact in f32 (compare, subtract, sqrt): same bits, vectorised. */
static void soft_threshold_range(const void *c, int64_t i0, int64_t i1)
{
    const unary_ctx *k = c;
    const float *restrict X = k->x;
    float *restrict Y = k->y;
    const float l = k->p;
    for (int64_t i = i0; i < i1; i++) {
        float x = X[i];
        Y[i] = f_nan(x) ? 0.0f : x > l ? x - l : x < -l ? x + l : 0.0f; /* REF: NaN → 0 */
    }
}

void own_soft_threshold_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    unary_ctx k = {.y = o->data, .x = in[0]->data, .p = (float)a->p};
    own_parallel(o->numel, o->numel, OWN_PAR_MIN, 16, soft_threshold_range, &k);
}

static void smooth_abs_range(const void *c, int64_t i0, int64_t i1)
{
    const unary_ctx *k = c;
    const float *restrict X = k->x;
    float *restrict Y = k->y;
    const float eps = k->p;
    for (int64_t i = i0; i < i1; i++) Y[i] = sqrtf(X[i] * X[i] + eps);
}

void own_smooth_abs_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    unary_ctx k = {.y = o->data, .x = in[0]->data, .p = (float)a->eps};
    own_parallel(o->numel, o->numel * 2, OWN_PAR_MIN, 16, smooth_abs_range, &k);
}

/* ---------------------------------------------------------------- scans
 * x seen as [outer, len, inner] around the axis. The recurrence runs
 * sequentially in t for each of the outer·inner independent lanes; the
 * lanes are split across threads, and the innermost loop runs over up to
 * SCAN_BLOCK contiguous lanes of one t (vectorised, and small enough that
 * the previous step's row is still in L1). Same operations in the same
 * order as REF: same bits. */
#define SCAN_BLOCK 1024

enum { SCAN_SUM, SCAN_PROD, SCAN_LINEAR };

typedef struct scan_ctx {
    int kind;
    bool rev;
    int64_t outer, len, inner;
    const float *x, *a;
    float *y;
    /* linear_scan: a's strides in x's frame (0 = broadcast), its step
     * along the axis and whether it is one value per (outer, t) */
    const int64_t *ast, *xshape;
    int ax;
    bool a_scalar;
    /* linear_scan_from: the start state h0 (NULL: zero, h_first = x_first),
     * its strides in x's frame and whether it is one value per outer index */
    const float *h0;
    const int64_t *hst;
    bool h0_scalar;
} scan_ctx;

/* Offset for outer index b (the dims before the axis) of a tensor with
 * strides st in x's frame. */
static int64_t scan_offset(const scan_ctx *k, const int64_t *st, int64_t b)
{
    int64_t off = 0;
    for (int d = k->ax - 1; d >= 0; d--) {
        off += (b % k->xshape[d]) * st[d];
        b /= k->xshape[d];
    }
    return off;
}
static int64_t scan_a_offset(const scan_ctx *k, int64_t b) { return scan_offset(k, k->ast, b); }

/* Lanes [i, i + OWN_W·nv) of outer index b, all t, the state h in nv
 * registers: each step costs one add (or multiply-add) of latency instead
 * of a store and a reload of the previous row. */
static inline __attribute__((always_inline)) void scan_regs(const scan_ctx *k, int kind,
                                                            int64_t b, int64_t i, int nv)
{
    const int64_t len = k->len, inner = k->inner, ta = kind == SCAN_LINEAR ? k->ast[k->ax] : 0;
    const bool rev = k->rev, a_scalar = k->a_scalar;
    const float *X = k->x + b * len * inner + i;
    float *Y = k->y + b * len * inner + i;
    const float *A = kind == SCAN_LINEAR ? k->a + scan_a_offset(k, b) : NULL;
    const float *H0 = kind == SCAN_LINEAR && k->h0 ? k->h0 + scan_offset(k, k->hst, b) : NULL;
    vecf h[4] = {0};
    for (int64_t s = 0; s < len; s++) {
        int64_t t = rev ? len - 1 - s : s;
        const float *x = X + t * inner, *a = kind == SCAN_LINEAR ? A + t * ta : NULL;
        float *y = Y + t * inner;
        for (int v = 0; v < nv; v++) {
            vecf xv = vld(x + OWN_W * v);
            if (s == 0 && !H0) h[v] = xv;
            else if (s == 0 && k->h0_scalar) /* REF's a·h0 + x, h0 one value */
                h[v] = a_scalar ? a[0] * H0[0] + xv : vld(a + i + OWN_W * v) * H0[0] + xv;
            else if (s == 0)
                h[v] = a_scalar ? a[0] * vld(H0 + i + OWN_W * v) + xv
                                : vld(a + i + OWN_W * v) * vld(H0 + i + OWN_W * v) + xv;
            else if (kind == SCAN_SUM) h[v] = h[v] + xv;
            else if (kind == SCAN_PROD) h[v] = h[v] * xv;
            else if (a_scalar) h[v] = a[0] * h[v] + xv;
            else h[v] = vld(a + i + OWN_W * v) * h[v] + xv;
            vst(y + OWN_W * v, h[v]);
        }
    }
}

/* Lanes [i0, i1) of outer index b, all t. A narrow inner block (≤
 * SCAN_REGS lanes) runs four vectors and one at a time in registers; wider
 * ones (and the rest) row by row through memory, which streams. kind is a
 * constant in each inlined copy (see scan_block). */
#define SCAN_REGS 256
static inline __attribute__((always_inline)) void scan_lanes(const scan_ctx *k, int kind,
                                                             int64_t b, int64_t i0, int64_t i1)
{
    if (k->inner <= SCAN_REGS) {
        for (; i0 + 4 * OWN_W <= i1; i0 += 4 * OWN_W) scan_regs(k, kind, b, i0, 4);
        for (; i0 + OWN_W <= i1; i0 += OWN_W) scan_regs(k, kind, b, i0, 1);
        if (i0 == i1) return;
    }
    const int64_t len = k->len, inner = k->inner, n = i1 - i0;
    const float *abase = kind == SCAN_LINEAR ? k->a + scan_a_offset(k, b) : NULL;
    const float *H0 = kind == SCAN_LINEAR && k->h0 ? k->h0 + scan_offset(k, k->hst, b) : NULL;
    for (int64_t s = 0; s < len; s++) {
        int64_t t = k->rev ? len - 1 - s : s;
        const float *restrict x = k->x + (b * len + t) * inner + i0;
        float *restrict h = k->y + (b * len + t) * inner + i0;
        const float *restrict hp = k->rev ? h + inner : h - inner;
        if (s == 0 && H0 && k->h0_scalar) { /* REF's a·h0 + x, h0 one value */
            const float p = H0[0];
            if (k->a_scalar) {
                const float q = abase[t * k->ast[k->ax]] * p;
                for (int64_t i = 0; i < n; i++) h[i] = q + x[i];
            } else {
                const float *restrict at = abase + t * k->ast[k->ax] + i0;
                for (int64_t i = 0; i < n; i++) h[i] = at[i] * p + x[i];
            }
            continue;
        }
        if (s == 0 && H0) hp = H0 + i0; /* then as any later step */
        if (s == 0 && !H0) {
            memcpy(h, x, sizeof(float) * (size_t)n);
        } else if (kind == SCAN_SUM) {
            for (int64_t i = 0; i < n; i++) h[i] = hp[i] + x[i];
        } else if (kind == SCAN_PROD) {
            for (int64_t i = 0; i < n; i++) h[i] = hp[i] * x[i];
        } else if (k->a_scalar) {
            const float at = abase[t * k->ast[k->ax]];
            for (int64_t i = 0; i < n; i++) h[i] = at * hp[i] + x[i];
        } else {
            const float *restrict at = abase + t * k->ast[k->ax] + i0;
            for (int64_t i = 0; i < n; i++) h[i] = at[i] * hp[i] + x[i];
        }
    }
}

static void scan_block(const scan_ctx *k, int64_t b, int64_t i0, int64_t i1)
{
    switch (k->kind) {
    case SCAN_SUM: scan_lanes(k, SCAN_SUM, b, i0, i1); break;
    case SCAN_PROD: scan_lanes(k, SCAN_PROD, b, i0, i1); break;
    default: scan_lanes(k, SCAN_LINEAR, b, i0, i1);
    }
}

/* inner = 1 (the scan runs along the contiguous axis): rows b0 … b0+nb−1
 * (nb ≤ 16) advance together, one t at a time, so that 16 independent
 * recurrences hide the latency of each; every row keeps REF's order. */
static void scan_rows(const scan_ctx *k, int64_t b0, int nb)
{
    const int64_t len = k->len, ta = k->kind == SCAN_LINEAR ? k->ast[k->ax] : 0;
    const float *x = k->x + b0 * len, *ap[16], *hp[16];
    float *y = k->y + b0 * len, h[16];
    for (int r = 0; r < nb; r++) {
        ap[r] = k->kind == SCAN_LINEAR ? k->a + scan_a_offset(k, b0 + r) : NULL;
        hp[r] = k->kind == SCAN_LINEAR && k->h0 ? k->h0 + scan_offset(k, k->hst, b0 + r) : NULL;
    }
    for (int64_t s = 0; s < len; s++) {
        int64_t t = k->rev ? len - 1 - s : s;
        if (s == 0 && hp[0])
            for (int r = 0; r < nb; r++) h[r] = ap[r][t * ta] * hp[r][0] + x[r * len + t];
        else if (s == 0)
            for (int r = 0; r < nb; r++) h[r] = x[r * len + t];
        else if (k->kind == SCAN_SUM)
            for (int r = 0; r < nb; r++) h[r] = h[r] + x[r * len + t];
        else if (k->kind == SCAN_PROD)
            for (int r = 0; r < nb; r++) h[r] = h[r] * x[r * len + t];
        else
            for (int r = 0; r < nb; r++) h[r] = ap[r][t * ta] * h[r] + x[r * len + t];
        for (int r = 0; r < nb; r++) y[r * len + t] = h[r];
    }
}

/* Lanes [l0, l1) of the outer·inner lanes, cut at outer boundaries and
 * into SCAN_BLOCK pieces (inner = 1: groups of 16 rows). */
static void scan_range(const void *c, int64_t l0, int64_t l1)
{
    const scan_ctx *k = c;
    if (k->inner == 1) {
        for (int64_t b = l0; b < l1; b += 16) scan_rows(k, b, l1 - b < 16 ? (int)(l1 - b) : 16);
        return;
    }
    while (l0 < l1) {
        int64_t b = l0 / k->inner, i0 = l0 % k->inner;
        int64_t i1 = k->inner - i0 < l1 - l0 ? k->inner : i0 + (l1 - l0);
        if (i1 - i0 > SCAN_BLOCK) i1 = i0 + SCAN_BLOCK;
        scan_block(k, b, i0, i1);
        l0 += i1 - i0;
    }
}

static void scan_run(scan_ctx *k, const mi_tensor *x, const mi_attrs *at)
{
    int ax = at->axis < 0 ? at->axis + x->rank : at->axis;
    k->ax = ax;
    k->rev = at->reverse;
    k->outer = mi_shape_numel(ax, x->shape);
    k->len = x->shape[ax];
    k->inner = mi_shape_numel(x->rank - ax - 1, x->shape + ax + 1);
    int64_t lanes = k->outer * k->inner;
    /* along the contiguous axis a step costs ~4× a streamed one */
    int64_t work = lanes * k->len * (k->inner == 1 ? 4 : 1);
    own_parallel(lanes, work, OWN_PAR_MIN, k->inner >= 16 || k->inner == 1 ? 16 : 1, scan_range, k);
}

/* y_t = y_{t∓1} + x_t (scan.c's cumsum). */
void own_cumsum_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    scan_ctx k = {.kind = SCAN_SUM, .x = in[0]->data, .y = o->data};
    scan_run(&k, in[0], a);
}

/* y_t = y_{t∓1} · x_t (scan.c's cumprod). */
void own_cumprod_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    scan_ctx k = {.kind = SCAN_PROD, .x = in[0]->data, .y = o->data};
    scan_run(&k, in[0], a);
}

/* h_t = a_t ⊙ h_{t∓1} + x_t (scan.c's linear_scan; with th, linear_scan_from:
 * h_first = a_first ⊙ h0 + x_first). a must be, over the axes after the
 * scan axis, either x's layout or one value (the decay per step, [B,H,T,1]
 * against [B,H,T,D]), and so must h0; any other broadcast goes to REF. */
static void linear_scan_own(mi_tensor *o, const mi_tensor *ta, const mi_tensor *tx,
                            const mi_tensor *th, const mi_attrs *at, mi_tensor *const *in,
                            const mi_op *op)
{
    int ax = at->axis < 0 ? at->axis + tx->rank : at->axis;
    int64_t ast[MI_MAX_RANK], hst[MI_MAX_RANK], own[MI_MAX_RANK], hown[MI_MAX_RANK],
        xst[MI_MAX_RANK];
    mi_strides(ta->rank, ta->shape, own);
    mi_strides(tx->rank, tx->shape, xst);
    if (th) mi_strides(th->rank, th->shape, hown);
    bool full = true, zero = true, h_full = true, h_zero = true;
    for (int d = 0; d < tx->rank; d++) {
        int da = d - (tx->rank - ta->rank), dh = th ? d - (tx->rank - th->rank) : -1;
        ast[d] = (da < 0 || ta->shape[da] == 1) ? 0 : own[da];
        hst[d] = (dh < 0 || th->shape[dh] == 1) ? 0 : hown[dh];
        if (d > ax && tx->shape[d] > 1) {
            full = full && ast[d] == xst[d];
            zero = zero && ast[d] == 0;
            h_full = h_full && hst[d] == xst[d];
            h_zero = h_zero && hst[d] == 0;
        }
    }
    if ((!full && !zero) || (th && !h_full && !h_zero)) {
        own_ref(op, o, in, at);
        return;
    }
    scan_ctx k = {.kind = SCAN_LINEAR, .x = tx->data, .a = ta->data, .y = o->data,
                  .ast = ast, .xshape = tx->shape, .a_scalar = zero,
                  .h0 = th ? th->data : NULL, .hst = hst, .h0_scalar = th && !h_full};
    scan_run(&k, tx, at);
}

void own_linear_scan_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    linear_scan_own(o, in[0], in[1], NULL, at, in, &mi_op_linear_scan);
}

void own_linear_scan_from_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *at)
{
    linear_scan_own(o, in[0], in[1], in[2], at, in, &mi_op_linear_scan_from);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* The target these files were compiled for (meson's cpu option). */
const char *own_isa_name(void)
{
#if defined(__AVX512F__)
    return "avx512f";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2+fma";
#elif defined(__AVX2__)
    return "avx2";
#else
    return "sse2";
#endif
}

/* ---------------------------------------------------------------- FMA peak
 * CHAINS independent chains acc = acc · x + y in vector registers: enough
 * to cover the FMA latency (4 cycles) on two FMA pipes with either register
 * width, few enough to stay in the 16 ymm of AVX2. */
#define CHAINS 12

static float fma_chains(int64_t iters, float x0, float y0)
{
    vecf acc[CHAINS], x, y;
    for (int l = 0; l < OWN_W; l++) x[l] = x0, y[l] = y0;
    for (int i = 0; i < CHAINS; i++)
        for (int l = 0; l < OWN_W; l++) acc[i][l] = (float)(i + l);
    for (int64_t it = 0; it < iters; it++) {
        for (int i = 0; i < CHAINS; i++) acc[i] = acc[i] * x + y;
    }
    vecf s = acc[0];
    for (int i = 1; i < CHAINS; i++) s += acc[i];
    return s[0];
}

/* Seconds for iters steps of every thread's chains. */
static double fma_run(int threads, int64_t iters)
{
    static volatile float x = 0.999999f, y = 1e-7f, sink;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
#pragma omp parallel num_threads(threads)
    {
        float r = fma_chains(iters, x, y);
#pragma omp critical
        sink += r;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

/* The best of FMA_RUNS runs of ≥ 50 ms each: a peak is what the cores can
 * do, and a run the host slowed (a shared machine's neighbours) would
 * understate it, and so overstate any share of it. */
#define FMA_RUNS 5

double own_fma_peak_gflops(int threads)
{
    int nt = threads > 0 ? threads : 1;
    int64_t iters = 1 << 16;
    double s = fma_run(nt, iters);
    while (s < 0.05 && iters < ((int64_t)1 << 40)) s = fma_run(nt, iters *= 4);
    for (int r = 1; r < FMA_RUNS; r++) {
        double t = fma_run(nt, iters);
        s = t < s ? t : s;
    }
    return nt * (double)iters * CHAINS * OWN_W * 2 / s * 1e-9;
}
