/* Inputs for the registry-driven backend suites (parity, threads): an op's
 * own examples, converted to a dtype, and the same examples grown to larger,
 * awkward sizes so that vector tails and OpenMP paths run. Header-only
 * (static functions): each suite is one translation unit plus harness.c. */
#ifndef MIRAS_TEST_OP_INPUTS_H
#define MIRAS_TEST_OP_INPUTS_H

#include "harness.h"

typedef struct op_case {
    int n;                          /* 0: no case */
    mi_tensor *in[MI_MAX_INPUTS];
    mi_attrs attrs;
    char what[96];                  /* e.g. "example 0 grown [67,130] [130,33]" */
} op_case;

/* Sizes an example dim may grow to. Odd and non-multiples of 4, 8 and 16,
 * so vector loops have tails; the even list is tried when an op's shape
 * rule wants even sizes (rope). */
static const int64_t sizes_medium[] = {67, 130, 33, 97, 45, 71};
static const int64_t sizes_medium_even[] = {66, 130, 34, 98, 46, 70};
static const int64_t sizes_big[] = {1031, 130, 257, 67, 515, 33};
static const int64_t sizes_big_even[] = {1030, 130, 258, 66, 514, 34};
#define N_SIZES 6

static int64_t numel_mapped(const mi_tensor *t, const int64_t *from, const int64_t *to, int nmap)
{
    int64_t p = 1;
    for (int d = 0; d < t->rank; d++) {
        int64_t s = t->shape[d];
        for (int k = 0; k < nmap; k++)
            if (from[k] == s) s = to[k];
        p *= s;
    }
    return p;
}

static int64_t map_dim(int64_t s, const int64_t *from, const int64_t *to, int nmap)
{
    for (int k = 0; k < nmap; k++)
        if (from[k] == s) return to[k];
    return s;
}

/* The distinct dims ≥ 2 of the shapes: the domain of the size mapping. */
static int map_domain(const mi_tensor *const *shapes, int n, int64_t *from)
{
    int nmap = 0;
    for (int i = 0; i < n; i++)
        for (int d = 0; d < shapes[i]->rank; d++) {
            int64_t s = shapes[i]->shape[d];
            bool seen = s < 2;
            for (int k = 0; k < nmap; k++) seen |= from[k] == s;
            if (!seen) from[nmap++] = s;
        }
    return nmap;
}

static int largest_shape(const mi_tensor *const *shapes, int n, const int64_t *from,
                         const int64_t *to, int nmap)
{
    int worst = 0;
    for (int i = 1; i < n; i++)
        if (numel_mapped(shapes[i], from, to, nmap) >
            numel_mapped(shapes[worst], from, to, nmap))
            worst = i;
    return worst;
}

/* Shrinks the grown dims of t by a common factor so that t would have about
 * cap elements (at least by 10%), keeping sizes odd (or ≡ 2 mod 4). */
static void shrink_towards(const mi_tensor *t, int64_t cap, bool even, const int64_t *from,
                           int64_t *to, int nmap)
{
    int grown = 0;
    for (int d = 0; d < t->rank; d++) grown += map_dim(t->shape[d], from, to, nmap) != t->shape[d];
    double e = (double)numel_mapped(t, from, to, nmap);
    double f = fmin(0.9, pow((double)cap / e, 1.0 / (grown ? grown : 1)));
    for (int k = 0; k < nmap; k++) {
        bool in_t = false;
        for (int d = 0; d < t->rank; d++) in_t |= t->shape[d] == from[k];
        if (!in_t || to[k] == from[k]) continue;
        int64_t s = (int64_t)((double)to[k] * f);
        s = even ? s / 4 * 4 + 2 : s | 1;
        if (s >= to[k]) s = to[k] - 2;
        to[k] = s > from[k] ? s : from[k];
    }
}

/* Grown dims get sizes apart from each other's (so M, N and K stay
 * distinguishable): a repeated size moves up by 2 until it is unique. */
static void keep_apart(const int64_t *from, int64_t *to, int nmap)
{
    for (int k = 0; k < nmap; k++) {
        bool clash = to[k] != from[k];
        while (clash) {
            clash = false;
            for (int j = 0; j < k; j++) clash |= to[j] == to[k];
            if (clash) to[k] += 2;
        }
    }
}

/* Maps each dim of the domain to a size from `sizes`, then shrinks until no
 * shape has more than cap elements. A consistent mapping keeps every
 * equality the shape rule relied on (equal dims, broadcast 1s). Returns
 * the domain's size, 0 when nothing could grow. */
static int plan_map(const mi_tensor *const *shapes, int n, const int64_t *sizes, int64_t cap,
                    int64_t *from, int64_t *to)
{
    int nmap = map_domain(shapes, n, from);
    for (int k = 0; k < nmap; k++)
        to[k] = sizes[k % N_SIZES] > from[k] ? sizes[k % N_SIZES] : from[k];
    for (int iter = 0;; iter++) {
        const mi_tensor *worst = shapes[largest_shape(shapes, n, from, to, nmap)];
        if (numel_mapped(worst, from, to, nmap) <= cap) break;
        if (iter == 64) return 0;
        shrink_towards(worst, cap, sizes[0] % 2 == 0, from, to, nmap);
        keep_apart(from, to, nmap);
    }
    int grown = 0;
    for (int k = 0; k < nmap; k++) grown += to[k] != from[k];
    return grown ? nmap : 0;
}

/* A tensor of the mapped shape whose values are drawn from t's own values
 * (so domains hold: positive inputs stay positive, indices stay in range). */
static mi_tensor *grow(mi_rng *r, const mi_tensor *t, const int64_t *from, const int64_t *to,
                       int nmap)
{
    int64_t shape[MI_MAX_RANK];
    for (int d = 0; d < t->rank; d++) shape[d] = map_dim(t->shape[d], from, to, nmap);
    mi_tensor *g = mi_zeros(t->dtype, t->rank, shape);
    if (!g || t->numel == 0) return g;
    for (int64_t i = 0; i < g->numel; i++)
        mi_set(g, i, mi_get(t, (int64_t)mi_rng_below(r, (uint64_t)t->numel)));
    g->requires_grad = t->requires_grad;
    return g;
}

/* Output dtype and shape of op on (in, a), as mi_apply computes them; -1
 * (error cleared) when the shape rule rejects the call. */
static int out_shape(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a,
                     mi_dtype *dt, int *rank, int64_t *shape)
{
    *dt = MI_F32;
    for (int i = n - 1; i >= 0; i--)
        if (mi_dtype_is_float(in[i]->dtype)) *dt = in[i]->dtype;
    if (op->shape(in, n, a, dt, rank, shape) != 0) {
        mi_error_clear();
        return -1;
    }
    return 0;
}

/* ex grown with one size list: attrs.shape mapped the same way first (sum_to,
 * broadcast_to targets), the original attrs second. 0 when neither fits. */
static int try_grow(const mi_op *op, mi_rng *r, const op_case *ex, const int64_t *sizes,
                    int64_t cap, op_case *out)
{
    /* the inputs and the example's output (its dims mostly come from them) */
    int64_t from[MI_MAX_RANK * (MI_MAX_INPUTS + 1)], to[MI_MAX_RANK * (MI_MAX_INPUTS + 1)];
    const mi_tensor *shapes[MI_MAX_INPUTS + 1];
    mi_tensor out0 = {0};
    mi_dtype dt0;
    memcpy(shapes, ex->in, sizeof(mi_tensor *) * (size_t)ex->n);
    if (out_shape(op, ex->in, ex->n, &ex->attrs, &dt0, &out0.rank, out0.shape) != 0) return 0;
    shapes[ex->n] = &out0;
    int nmap = plan_map(shapes, ex->n + 1, sizes, cap, from, to);
    if (!nmap) return 0;
    *out = *ex;
    for (int i = 0; i < ex->n; i++)
        if (!(out->in[i] = grow(r, ex->in[i], from, to, nmap))) return 0;
    for (int pass = 0; pass < 2; pass++) {
        out->attrs = ex->attrs;
        if (pass == 0)
            for (int d = 0; d < ex->attrs.rank && d < MI_MAX_RANK; d++)
                out->attrs.shape[d] = map_dim(ex->attrs.shape[d], from, to, nmap);
        mi_dtype dt;
        int rank;
        int64_t shape[MI_MAX_RANK];
        if (out_shape(op, out->in, out->n, &out->attrs, &dt, &rank, shape) == 0 &&
            mi_shape_numel(rank, shape) <= 4 * cap)
            return out->n;
    }
    return 0;
}

/* Example `variant` of op (f64, as the descriptor builds it); 0 when none. */
static int op_example(const mi_op *op, mi_rng *r, int variant, op_case *c)
{
    memset(c, 0, sizeof *c);
    if (!op->examples) return 0;
    c->n = op->examples(r, variant, c->in, &c->attrs);
    for (int i = 0; i < c->n; i++)
        if (!c->in[i]) {
            mi_error_clear();
            return c->n = 0;
        }
    snprintf(c->what, sizeof c->what, "example %d", variant);
    return c->n;
}

/* The example grown (scale 0: dims to 33..130, inputs ≤ 2^16 elements;
 * scale 1: dims up to 1031, inputs ≤ 2^19 elements). 0 when the op's shape
 * rule accepts no grown version (e.g. attributes pin a size). */
static int op_example_grown(const mi_op *op, mi_rng *r, const op_case *ex, int scale, op_case *c)
{
    const int64_t *odd = scale ? sizes_big : sizes_medium;
    const int64_t *even = scale ? sizes_big_even : sizes_medium_even;
    int64_t cap = scale ? (int64_t)1 << 19 : (int64_t)1 << 16;
    if (!try_grow(op, r, ex, odd, cap, c) && !try_grow(op, r, ex, even, cap, c)) return 0;
    int len = snprintf(c->what, sizeof c->what, "%s grown", ex->what);
    for (int i = 0; i < c->n && len < (int)sizeof c->what; i++) {
        char b[48];
        len += snprintf(c->what + len, sizeof c->what - (size_t)len, " %s",
                        mi_shape_str(b, sizeof b, c->in[i]->rank, c->in[i]->shape));
    }
    return c->n;
}

/* The shapes `miras-bench ops` times, for the ops it times: inputs
 * N(0, 1), f64 (converted like the examples). */
typedef struct bench_shape {
    const char *op;
    int n;
    int rank[2];
    int64_t shape[2][3];
    mi_attrs attrs;
} bench_shape;

static const bench_shape bench_shapes[] = {
    {"matmul", 2, {2, 2}, {{256, 256}, {256, 256}}, {0}},
    {"matmul", 2, {3, 3}, {{64, 32, 32}, {64, 32, 32}}, {0}},
    {"matmul", 2, {2, 2}, {{257, 130}, {67, 130}}, {.trans_b = true}},
    {"softmax", 1, {2}, {{4096, 128}}, {.axis = -1}},
    {"log_softmax", 1, {2}, {{4096, 128}}, {.axis = -1}},
    {"layer_norm", 1, {2}, {{4096, 128}}, {.eps = 1e-5}},
    {"rms_norm", 1, {2}, {{4096, 128}}, {.eps = 1e-5}},
    {"gelu", 1, {2}, {{4096, 128}}, {0}},
    {"tanh", 1, {2}, {{4096, 128}}, {0}},
    {"sigmoid", 1, {2}, {{4096, 128}}, {0}},
    {"add", 2, {2, 1}, {{4096, 128}, {128}}, {0}},
};
#define N_BENCH_SHAPES ((int)(sizeof bench_shapes / sizeof bench_shapes[0]))

/* Bench shape k if it belongs to op; 0 otherwise. */
static int op_bench_case(const mi_op *op, mi_rng *r, int k, op_case *c)
{
    memset(c, 0, sizeof *c);
    const bench_shape *b = &bench_shapes[k];
    if (strcmp(b->op, op->name) != 0) return 0;
    c->attrs = b->attrs;
    for (int i = 0; i < b->n; i++) {
        c->in[i] = mi_randn(r, MI_F64, b->rank[i], b->shape[i], 0.0, 1.0);
        if (!c->in[i]) return 0;
        c->in[i]->requires_grad = true;
    }
    c->n = b->n;
    snprintf(c->what, sizeof c->what, "bench shape %d", k);
    return c->n;
}

/* c's float inputs converted to dt (requires_grad kept), others shared. */
static op_case op_case_to(const op_case *c, mi_dtype dt)
{
    op_case o = *c;
    for (int i = 0; i < c->n; i++) {
        if (!mi_dtype_is_float(c->in[i]->dtype) || c->in[i]->dtype == dt) continue;
        o.in[i] = mi_tensor_to(c->in[i], dt);
        if (o.in[i]) o.in[i]->requires_grad = c->in[i]->requires_grad;
    }
    return o;
}

/* Whether op has a kernel other than REF for dtype dt (any dtype: dt < 0). */
static bool op_has_backend_kernel(const mi_op *op, int dt)
{
    for (int b = 1; b < MI_BACKEND_COUNT; b++)
        for (int d = 0; d < 2; d++)
            if ((dt < 0 || d == dt) && op->kernel[b][d]) return true;
    return false;
}

/* ---------------------------------------------------------------- bounds
 * How far two backends (parity), or one backend at two thread counts
 * (threads, for a backend that does not promise the same bits), may differ.
 * Exact-arithmetic ops (sums, products, copies, shape and index ops,
 * comparisons, matmul) may differ between backends only by reassociation
 * and FMA contraction: a few ulps per element, nMSE ≈ 1e-14 in f32; the
 * bound 1e-10 (≈ 1e-5 RMS relative error) leaves room for long f32
 * reductions with a different summation order.
 * Transcendental ops may use another approximation of exp/tanh/erf (oneDNN's
 * polynomials, glibc's vector libm under -ffast-math: a few ulps, more near
 * erf's and tanh's flat tails) and normalisations divide by computed sums and
 * square roots: 1e-8 (≈ 1e-4 RMS relative) in f32.
 * f64 backend paths must stay exact libm, so every op
 * gets 1e-20 in f64: only reassociation (≈ 1e-16 relative) is allowed. */
#define NMSE_EXACT_F32 1e-10
#define NMSE_TRANSCENDENTAL_F32 1e-8
#define NMSE_F64 1e-20

static const char *const transcendental[] = {
    "exp", "log", "sqrt", "rsqrt", "pow_scalar", "tanh", "sigmoid", "silu", "gelu", "erf",
    "softplus", "log_sigmoid", "logsumexp", "norm", "softmax", "log_softmax", "cross_entropy",
    "layer_norm", "rms_norm", "l2_normalize", "rope", "attention", "smooth_sign", "smooth_abs",
    "lq_normalize", "sphere_retract", "cms_scan", "mlp_scan",
};

/* An op in the list, or its fused backward ("gelu_backward"). */
static double nmse_bound(const mi_op *op, mi_dtype dt)
{
    if (dt == MI_F64) return NMSE_F64;
    for (size_t i = 0; i < sizeof transcendental / sizeof *transcendental; i++) {
        size_t len = strlen(transcendental[i]);
        if (strncmp(op->name, transcendental[i], len) == 0 &&
            (op->name[len] == '\0' || strcmp(op->name + len, "_backward") == 0))
            return NMSE_TRANSCENDENTAL_F32;
    }
    return NMSE_EXACT_F32;
}

/* Σ(y − ref)² / (Σref² + tiny) over finite reference values; equal values
 * (equal infinities, NaN against NaN) count as agreement, any other
 * disagreement involving a non-finite value gives +inf. */
static double nmse(const mi_tensor *y, const mi_tensor *ref)
{
    double num = 0, den = 0;
    for (int64_t k = 0; k < ref->numel; k++) {
        double r = mi_get(ref, k), v = mi_get(y, k);
        if (r == v || (isnan(r) && isnan(v))) {
            if (isfinite(r)) den += r * r;
            continue;
        }
        if (!isfinite(r) || !isfinite(v)) return INFINITY;
        num += (v - r) * (v - r);
        den += r * r;
    }
    return num / (den + 1e-30);
}

#endif
