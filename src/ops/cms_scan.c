/* cms_scan: one level of the continuum memory system (Nested Learning,
 * Eq. 30–31) over a whole sequence as one op, in place of the ~10–25 ops a
 * chunk records when the level is composed (models/cms.c, nl_mlp.c) and of
 * the per-chunk weight copies those leave on the tape.
 *
 * Per sequence, from θ_0 = (W1 [d, h], W2 [h, d]) shared by the batch, with
 * the chunks of C tokens [t0, t0 + C):
 *   a_t = W2 u_t,  s_t = gelu(a_t) (exact erf form),  y_t = W1 s_t      (the read, Eq. 30's block)
 * every token read with the weights its chunk started with; after each FULL
 * chunk that ends before T (Eq. 31's update; the last chunk, partial or
 * not, makes none: nothing would read it):
 *   e_t = y_t − v_t,  δ_t = gelu'(a_t) ⊙ W1ᵀ e_t
 *   W1 ← W1 − Σ_t c1_t e_t s_tᵀ,   W2 ← W2 − Σ_t c2_t δ_t u_tᵀ
 *   c1_t = η_t/(‖s_t‖² + hidden_eps), c2_t = η_t/(‖u_t‖² + eps) (lms), c1 = c2 = η_t (not)
 * Inputs u, v [B, T, d], eta [B, T] (the rate as used: σ(·), over C for a
 * mean), w1 [d, h], w2 [h, d]; output y [B, T, d] (the level's memory read,
 * without the block's residual). Attributes (mi_attrs has no fields named
 * for them): index = C, keepdim = lms, eps = eps, p = hidden_eps.
 *
 * vjp: the fused op cms_scan_backward, a reverse scan over the chunks with
 * G = ∂L/∂W_j carried backwards (cms_scan_impl.h's chunk_backward writes
 * each term out; gelu'' = φ(a)(2 − a²)). It needs every token's activations
 * (a, s, gelu'(a), y, m, the rates: T·(4h + d + 4) numbers) and every K-th
 * chunk's weights (K = ⌈√n_chunks⌉, checkpoints: ⌈n/K⌉ + 1 weight copies a
 * thread, T = 256, C = 1: 17, not 256). A recorded forward (mi_cms_scan
 * with recording on) keeps the activations and the weights after the last
 * step, per sequence, in its scope (attrs.data), and the backward forms each
 * checkpoint from the next by undoing the steps between them, W += Pᵀ Z;
 * otherwise (mi_cms_scan_backward alone) the backward reruns the scan into
 * scratch from the current scope, released on return. A chunk's weights
 * are never formed again: with its
 * segment's checkpoint W and the m tokens' steps since, W_j = W − Pᵀ Z
 * (P = c e or c δ, Z = s or u, from the kept acts), each product with W_j is
 * one with W plus a rank-m correction (equal to rounding; at C = 1 this
 * replaced a weight copy and two rank-1 updates per token).
 * Each sequence runs on one thread (so the result does not depend on the
 * thread count), its products on OpenBLAS (GEMM; GEMV and GER at one token a
 * chunk), or in the OWN f32 kernel on own_small_gemm.c's loops for a few
 * tokens (cs_small_gemm) and oneDNN's sgemm above (gemm_thread_f32). At C = 1
 * the forward (and the backward's rerun) takes a segment of tokens at once
 * (cms_scan_impl.h's tokens_forward): W2 u for all of them as one product,
 * each token's reads through the same rank-i
 * corrections, and the weights stepped once per segment by two rank-n
 * products instead of two rank-1 updates per token; the backward likewise
 * keeps the segment's terms of G (G + Aᵀ B) until its first token and takes
 * the products with G for all its tokens at once (grad_pre), each token
 * adding the later tokens' terms.
 *
 * Gradients of gradients are not provided: cms_scan_backward is
 * non-differentiable and the vjp under create_graph fails with a message (the
 * composed level, cms.c with `composed`, differentiates to any order). */
#include <cblas.h>
#include <limits.h>

#include "blas.h"
#include "own_unary.h"
#include "scan_threads.h"

#define CS_IN 5
#define CS_PRAGMA_(x) _Pragma(#x)
#define CS_PRAGMA(x) CS_PRAGMA_(x)

static const char *const cs_names[CS_IN + 1] = {"u", "v", "eta", "w1", "w2", "g"};

typedef struct cs_dims {
    int64_t B, T, d, h, C;
    bool lms;
    double eps, heps;
    bool w1t; /* W1 and its gradient held transposed, [h, d] (CS_W1T) */
} cs_dims;

static cs_dims cs_dims_of(mi_tensor *const *in, const mi_attrs *at)
{
    return (cs_dims){.B = in[0]->shape[0], .T = in[0]->shape[1], .d = in[0]->shape[2],
                     .h = in[3]->shape[1], .C = at->index, .lms = at->keepdim, .eps = at->eps,
                     .heps = at->p};
}

/* Checks the five inputs (and, for the backward op, g) and the attributes. */
static int cs_check(const char *op, mi_tensor *const *in, int n, const mi_attrs *at)
{
    char s[CS_IN + 1][96];
    for (int i = 0; i < n; i++) {
        if (require_float(op, in, i) != 0) return -1;
        mi_shape_str(s[i], sizeof s[i], in[i]->rank, in[i]->shape);
    }
    for (int i = 1; i < n; i++)
        if (in[i]->dtype != in[0]->dtype) {
            mi_error_set("%s: %s %s and u %s differ in dtype", op, cs_names[i], s[i], s[0]);
            return -1;
        }
    const mi_tensor *u = in[0], *v = in[1], *eta = in[2], *w1 = in[3], *w2 = in[4];
    if (u->rank != 3 || v->rank != 3 || eta->rank != 2 || w1->rank != 2 || w2->rank != 2 ||
        (n > CS_IN && in[CS_IN]->rank != 3)) {
        mi_error_set("%s: ranks: u %s and v %s must be [B,T,d], eta %s [B,T], w1 %s [d,h], "
                     "w2 %s [h,d]%s", op, s[0], s[1], s[2], s[3], s[4],
                     n > CS_IN ? ", g [B,T,d]" : "");
        return -1;
    }
    int64_t B = u->shape[0], T = u->shape[1], d = u->shape[2], h = w1->shape[1];
    bool ok = v->shape[0] == B && v->shape[1] == T && v->shape[2] == d && eta->shape[0] == B &&
              eta->shape[1] == T && w1->shape[0] == d && w2->shape[0] == h && w2->shape[1] == d;
    if (n > CS_IN)
        ok = ok && in[CS_IN]->shape[0] == B && in[CS_IN]->shape[1] == T &&
             in[CS_IN]->shape[2] == d;
    if (!ok) {
        mi_error_set("%s: shapes do not fit: u %s and v %s [B,T,d], eta %s [B,T], w1 %s [d,h], "
                     "w2 %s [h,d]%s%s", op, s[0], s[1], s[2], s[3], s[4],
                     n > CS_IN ? ", g " : "", n > CS_IN ? s[CS_IN] : "");
        return -1;
    }
    if (T < 1 || d < 1 || h < 1 || d > INT_MAX / 2 || h > INT_MAX / 2) {
        mi_error_set("%s: T, d and h must be >= 1 (and fit an int): u %s, w1 %s", op, s[0], s[3]);
        return -1;
    }
    if (at->index < 1 || at->index > INT_MAX) {
        mi_error_set("%s: chunk C = %lld must be >= 1", op, (long long)at->index);
        return -1;
    }
    if (at->keepdim && !(at->eps > 0 && at->p > 0)) {
        mi_error_set("%s: with lms, eps (%g) and hidden_eps (%g) must be > 0", op, at->eps,
                     at->p);
        return -1;
    }
    return 0;
}

static int cms_scan_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                          int *rank, int64_t *shape)
{
    if (cs_check("cms_scan", in, n, at) != 0) return -1;
    copy_shape(rank, shape, in[0]);
    *dt = in[0]->dtype;
    return 0;
}

/* Packed gradients: gu, gv [B·T·d] each, geta [B·T], gw1 [d·h], gw2 [h·d]. */
static int cms_scan_backward_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                                   int *rank, int64_t *shape)
{
    if (cs_check("cms_scan_backward", in, n, at) != 0) return -1;
    const mi_tensor *u = in[0];
    *rank = 1;
    shape[0] = 2 * u->numel + u->shape[0] * u->shape[1] + 2 * in[3]->numel;
    *dt = u->dtype;
    return 0;
}

/* The elements of n tokens' acts and of one thread's chunk buffers
 * (cms_scan_impl.h's act and buf). */
static int64_t cs_act_elems(int64_t n, int64_t d, int64_t h) { return n * (4 * h + d + 4); }
static int64_t cs_buf_elems(int64_t C, int64_t d, int64_t h) { return C * (7 * h + 4 * d); }
/* A segment's steps of m tokens, p1 [m, d] and p2 [m, h], the [C, 2m]
 * scratch of the corrections, its gradient terms A1 [2m, d], B1 [2m, h],
 * A2 [m, h] and their products pre [m, 2d + 2h] (cms_scan_impl.h's steps,
 * grad and grad_pre). */
static int64_t cs_steps_elems(int64_t m, int64_t C, int64_t d, int64_t h)
{
    return m * (d + h) + 2 * C * m + m * (2 * d + 3 * h) + m * (2 * d + 2 * h);
}
/* What the forward keeps for the backward, per sequence: its T tokens' acts
 * and the weights after its last step (W1 then W2). */
static int64_t cs_saved_elems(int64_t T, int64_t d, int64_t h)
{
    return cs_act_elems(T, d, h) + 2 * d * h;
}
/* tokens_forward's scratch for n tokens: p1, p2, gram, tmp. */
static int64_t cs_tokens_elems(int64_t n, int64_t d, int64_t h) { return n * (d + h + n + 1); }


/* W1 held transposed (cms_scan_impl.h's mm_w1) for a chunk of more than one
 * token: the library GEMMs ran a chunk's read y = s W1ᵀ faster from W1ᵀ
 * (below); at one token the forms are close. */
#define CS_W1T(C) ((C) > 1)
#define CS_SMALL_GEMM(...) false
#define CS_T float
#define CS(x) x##_f32
#define CS_GEMM cblas_sgemm
#define CS_GEMV cblas_sgemv
#define CS_GER cblas_sger
#define CS_GELU_PAIR ref_gelu_pair_f32
#define CS_GELU_SECOND ref_gelu_second_f32
#include "cms_scan_impl.h"

/* own_small_gemm.c's products where they beat gemm_thread_f32: up to 8
 * tokens (a product's rows, or a step's rank) where oneDNN's sgemm runs its
 * AVX2 kernels, one token (a product with a vector, a rank-1 step) where it
 * runs AVX-512's. One level, B 16, T 256, d 128, h 512, 2 threads, ms a
 * forward / backward on AMD EPYC family 25 model 17 (Zen 4), 8 tokens → 1:
 * C = 4 25.5 / 52.9 → 19.6 / 43.5 (again 28.6 / 57.3 → 19.1 / 42.4), C = 1
 * 23.9 / 55.7 → 23.6 / 55.6, C = 16 (no product that small) 18.4 / 45.9;
 * with oneDNN and OpenBLAS held to AVX2 and these loops built for
 * x86-64-v3, 8 → 1 made C = 4 slower, 22.9 / 49.9 → 36.2 / 68.3. */
static bool cs_own_loops(int64_t tokens)
{
    return tokens <= 1 || (tokens <= OWN_SMALL_GEMM_MAX && !gemm_thread_f32_avx512());
}

static bool cs_small_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc)
{
    return cs_own_loops(ta ? K : M) &&
           own_small_gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* W1 held transposed, W1ᵀ [h, d], where a chunk's products run on oneDNN's
 * sgemm, as W1 [d, h] where they run in own_small_gemm.c's loops
 * (cs_own_loops, as cs_small_gemm chooses). The chunk's read y = s W1ᵀ, 16
 * tokens, d 128, h 512, one thread on AMD EPYC Zen 4: 41 µs from W1, 19 µs
 * from W1ᵀ; m = e W1 20 → 25 µs. One level (B 16, T 256, 2 threads, alternating, the
 * least of five), ms a forward / backward, in two windows: C = 16 20.3 / 51.2
 * → 18.2 / 47.1 and 18.2 / 45.3 → 16.2 / 42.4, C = 4 22.8 / 50.8 → 20.1 /
 * 43.5 and 19.4 / 43.1 → 18.9 / 43.0; with oneDNN and OpenBLAS held to AVX2
 * C = 16 24.4 / 59.8 → 18.0 / 48.3, but the loops (C = 4 there, and C = 1)
 * slower from W1ᵀ: C = 4 23.6 / 50.2 → 30.7 / 65.0. */
static bool cs_w1_transposed(int64_t C) { return !cs_own_loops(C); }

/* OWN (f32): the same with own_unary.c's vectorised gelu (within a few ulp),
 * own_small_gemm.c's products for a few tokens (cs_small_gemm) and oneDNN's
 * sgemm for the others (gemm_thread_f32: its kernels for this CPU's ISA,
 * 1.1–2.6× OpenBLAS's at a chunk's sizes) */
#undef CS
#undef CS_GEMM
#undef CS_GELU_PAIR
#undef CS_GELU_SECOND
#undef CS_SMALL_GEMM
#define CS(x) x##_own_f32
#define CS_GEMM gemm_thread_f32
#define CS_GELU_PAIR own_gelu_pair_f32
#define CS_GELU_SECOND own_gelu_second_f32
#define CS_SMALL_GEMM cs_small_gemm
#undef CS_W1T
#define CS_W1T cs_w1_transposed
#include "cms_scan_impl.h"
#undef CS_SMALL_GEMM
#define CS_SMALL_GEMM(...) false
#undef CS_W1T
#define CS_W1T(C) ((C) > 1)
#undef CS_T
#undef CS
#undef CS_GEMM
#undef CS_GEMV
#undef CS_GER
#undef CS_GELU_PAIR
#undef CS_GELU_SECOND
#define CS_T double
#define CS(x) x##_f64
#define CS_GEMM cblas_dgemm
#define CS_GEMV cblas_dgemv
#define CS_GER cblas_dger
#define CS_GELU_PAIR ref_gelu_pair_f64
#define CS_GELU_SECOND ref_gelu_second_f64
#include "cms_scan_impl.h"

/* Input i's gradient in cms_scan_backward's packed output, in i's shape. */
static mi_tensor *cs_grad_part(mi_tensor *packed, mi_tensor *const *in, int i)
{
    int64_t start = 0;
    for (int j = 0; j < i; j++) start += in[j]->numel;
    mi_tensor *part = mi_slice(packed, 0, start, start + in[i]->numel);
    return mi_reshape(part, in[i]->rank, in[i]->shape);
}

extern const mi_op mi_op_cms_scan_backward; /* below */

/* The backward op with the node's attributes: attrs.data, what the forward
 * kept, spares it the forward's second run. */
static mi_tensor *cs_backward(const mi_node *nd, mi_tensor *g)
{
    if (mi_grad_enabled()) {
        mi_error_set("cms_scan: no second derivatives (create_graph): use the composed CMS "
                     "level (mi_cms_config.composed = true) to differentiate twice");
        return NULL;
    }
    mi_tensor *const *in = nd->inputs;
    return RUN(&mi_op_cms_scan_backward, &nd->attrs, in[0], in[1], in[2], in[3], in[4], g);
}

static int cms_scan_vjp_all(const mi_node *nd, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    mi_tensor *packed = cs_backward(nd, g);
    if (!packed) return -1;
    for (int i = 0; i < CS_IN; i++)
        if (need[i] && !(grads[i] = cs_grad_part(packed, nd->inputs, i))) return -1;
    return 0;
}

static mi_tensor *cms_scan_vjp(const mi_node *nd, int i, mi_tensor *g)
{
    mi_tensor *packed = cs_backward(nd, g);
    return packed ? cs_grad_part(packed, nd->inputs, i) : NULL;
}

/* Ragged sizes: C = 1, a last partial chunk (C = 2, 3 with T = 5, 7), plain
 * GD, one chunk (no update), B = T = 1, a chunk of 12 tokens. Rates small
 * enough that the scan stays contracting when the parity suite grows the
 * sizes (to d, h ~ 1000):
 * normalised steps with η ≤ 0.2; plain GD, whose step scales with ‖u‖² and
 * ‖s‖², with η ≤ 0.002 and small inputs and weights. */
static int ex_cms_scan(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int64_t B = 2, T = 5, d = 3, h = 4;
    a->keepdim = true, a->eps = 1e-6, a->p = 1;
    switch (variant) {
    case 0: a->index = 1; break;
    case 1: a->index = 2; break;
    case 2: a->index = 3, a->keepdim = false, T = 7; break;
    case 3: a->index = 4, T = 4; break;
    case 4: a->index = 1, B = 1, T = 1; break;
    case 5: a->index = 2, a->keepdim = false, d = 2, h = 5; break;
    case 6: a->index = 12, T = 26; break; /* past own_small_gemm's 8 tokens: W1ᵀ held */
    default: return 0;
    }
    bool gd = !a->keepdim;
    in[0] = gd ? ex_uniform(r, MI_SHAPE(B, T, d), -0.5, 0.5) : ex_normal(r, MI_SHAPE(B, T, d));
    in[1] = ex_normal(r, MI_SHAPE(B, T, d));
    in[2] = ex_uniform(r, MI_SHAPE(B, T), gd ? 5e-4 : 0.02, gd ? 2e-3 : 0.2);
    in[3] = ex_uniform(r, MI_SHAPE(d, h), gd ? -0.15 : -0.5, gd ? 0.15 : 0.5);
    in[4] = ex_uniform(r, MI_SHAPE(h, d), gd ? -0.15 : -0.5, gd ? 0.15 : 0.5);
    return CS_IN;
}

static int ex_cms_scan_backward(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int n = ex_cms_scan(r, variant, in, a);
    if (n == 0) return 0;
    in[CS_IN] = ex_normal(r, 3, in[0]->shape);
    return CS_IN + 1;
}

/* The recurrence's products, 2·d·h each, as written in the header (not the
 * kernel's reorganisation into rank-m corrections): every token's read W2 u_t,
 * W1 s_t (2); a token of an updating chunk (every full chunk ending before T:
 * C·⌊(T − 1)/C⌋ tokens) also W1ᵀ e_t and its terms of the two rank-C steps (3).
 * The backward counts two products per forward product (one for each
 * operand's gradient) and the forward rerun (3× the forward), or, from what
 * the forward kept, the two products that undo a token's step instead. */
static uint64_t cs_flops(mi_tensor *const *in, const mi_attrs *at, bool backward)
{
    cs_dims k = cs_dims_of(in, at);
    uint64_t up = k.C > 0 && k.T > 0 ? (uint64_t)(k.C * ((k.T - 1) / k.C)) : 0;
    uint64_t products = 2u * (uint64_t)k.T + 3u * up;
    if (backward) products = at->data ? 2u * products + 2u * up : 3u * products;
    return products * 2u * (uint64_t)k.d * (uint64_t)k.h * (uint64_t)k.B;
}

static uint64_t cms_scan_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                               const mi_tensor *out)
{
    (void)n;
    (void)out;
    return cs_flops(in, a, false);
}

static uint64_t cms_scan_backward_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                        const mi_tensor *out)
{
    (void)n;
    (void)out;
    return cs_flops(in, a, true);
}

const mi_op mi_op_cms_scan = {
    .name = "cms_scan",
    .formula = "y_t = W1_j gelu(W2_j u_t) for t in chunk j; W_{j+1} = W_j - sum_t c_t grad "
               "1/2|W1 gelu(W2 u_t) - v_t|^2 (Nested Learning Eq. 31)",
    .arity = CS_IN, .flags = MI_OP_NO_GRADGRAD, .shape = cms_scan_shape, KERNELS(cms_scan),
    .kernel[MI_BACKEND_OWN][MI_F32] = cms_scan_own_f32,
    .vjp = cms_scan_vjp, .vjp_all = cms_scan_vjp_all, .examples = ex_cms_scan,
    .flops = cms_scan_flops};

const mi_op mi_op_cms_scan_backward = {
    .name = "cms_scan_backward",
    .formula = "the reverse chunk scan of cms_scan's vjp (packed gradients)",
    .arity = CS_IN + 1, .flags = MI_OP_NONDIFF, .shape = cms_scan_backward_shape,
    KERNELS(cms_scan_backward), .kernel[MI_BACKEND_OWN][MI_F32] = cms_scan_backward_own_f32,
    .examples = ex_cms_scan_backward, .flops = cms_scan_backward_flops};

mi_tensor *mi_cms_scan(mi_tensor *u, mi_tensor *v, mi_tensor *eta, mi_tensor *w1, mi_tensor *w2,
                       int64_t chunk, bool lms, double eps, double hidden_eps)
{
    mi_attrs at = {.index = chunk, .keepdim = lms, .eps = eps, .p = hidden_eps};
    mi_tensor *in[CS_IN] = {u, v, eta, w1, w2};
    if (call_recorded(in, CS_IN) && cs_check("cms_scan", in, CS_IN, &at) == 0) {
        /* the backward's acts and end weights, kept by the forward (the kernels' attrs.data),
           in the scope the record lives in */
        int64_t B = u->shape[0], T = u->shape[1], d = u->shape[2], h = w1->shape[1];
        size_t bytes = mi_dtype_size(u->dtype) * (size_t)(B * cs_saved_elems(T, d, h));
        if (!(at.data = mi_scope_alloc(mi_scope_current(), bytes)))
            return mi_error_set("cms_scan: out of memory for the backward's %zu bytes", bytes),
                   NULL;
    }
    return RUN(&mi_op_cms_scan, &at, u, v, eta, w1, w2);
}

mi_tensor *mi_cms_scan_backward(mi_tensor *u, mi_tensor *v, mi_tensor *eta, mi_tensor *w1,
                                mi_tensor *w2, mi_tensor *g, int64_t chunk, bool lms, double eps,
                                double hidden_eps)
{
    mi_attrs at = {.index = chunk, .keepdim = lms, .eps = eps, .p = hidden_eps};
    return RUN(&mi_op_cms_scan_backward, &at, u, v, eta, w1, w2, g);
}
