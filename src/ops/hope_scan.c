/* hope_scan: HOPE's self-modifying component memories (Nested Learning,
 * §3 "HOPE"; arXiv §8.1–8.2, Eq. 84–91) over a whole sequence as one op, in
 * place of the ~170 ops and the state copies a chunk records when
 * models/hope/hope.c composes them.
 *
 * The components □ ∈ {k, v, q, η, α} (q optional: adaptive_q) are MLPs
 * M_□(x) = [x +] W1_□ gelu(W2_□ x), the residual ones d → h → d, the gates
 * d → h → H; their input layers stacked, S2 = [W2_k; W2_v; (W2_q;) W2_η;
 * W2_α] [P = n_c·h, d]. Per row (a sequence), from the initial states shared
 * by the rows, for each chunk of C tokens [t0, t0 + n), every quantity at the
 * states F in force at the chunk's start (arXiv Eq. 90):
 *   R1  A0 = X S2ᵀ, H0 = gelu(A0)                                     X = x̂ [n, d]
 *   R2  k, v, q = ℓ2norm_head(X + H0_□ W1_□ᵀ)                         per head of hd = d/H
 *   R3  η, α = σ(H0_□ W1_□ᵀ + b_□)                                   [n, H]
 * the op's output y_t = [k | v | (q) | η | α], D = n_r·d + 2H wide. A chunk
 * that ends before T then steps every layer (hope.c's top comment derives it):
 *   S1  k̄ = k/√H, v̄ = v/√H,  KV = [k̄; v̄]
 *   S2  A1 = KV S2ᵀ, H1 = gelu(A1)
 *   S3  e_□ = M_□(k̄) − M_□(v̄) (the self-generated target v̂_□ = M_□(v̄), Eq. 87)
 *   S4  δ = gelu'(A1(k̄)) ⊙ [e_□ W1_□]_□                               (S2's gradient)
 *       factors per layer, with its input u (k̄ for S2, H1_□(k̄) for W1_□):
 *       r = 1/√(‖u‖² + ε), û = u r, g = G r (lms) or G/r, G = δ or e_□
 *   S5  η̄, ᾱ the head means of η, α; β = 1 (Eq. 28) or η̄ (Eq. 88)
 *   U   W_t = ᾱ_t W_{t−1} − (β_t W_{t−1} û_t + η̄_t g_t) û_tᵀ, t in the chunk
 * U is the delta rule exactly, taken in closed form: with dec(a, b) =
 * Π_{a ≤ i < b} ᾱ_i and p_t = β_t W_{t−1} û_t + η̄_t g_t,
 *   W_{t−1} = dec(0, t) F − Σ_{j<t} dec(j+1, t) p_j û_jᵀ, so
 *   p_t = β_t dec(0, t) F û_t + η̄_t g_t − Σ_{j<t} β_t dec(j+1, t) (û_t·û_j) p_j,
 *   W_n = dec(0, n) F − Σ_j dec(j+1, n) p_j û_jᵀ:
 * two products with the state and an n×n substitution a layer, no per-token
 * state. ε is qk_eps for S2 (its input is unit-norm) and hidden_eps for
 * the W1s (nl_mlp.c says why 1). The last chunk makes no step.
 *
 * Inputs: x [N, T, d], s2 [P, d], w1r [n_r, d, h] (k, v, q's W1), w1g [2,
 * H, h] (η, α's), bias [2, H] (b_η, b_α); attrs index = C, axis = 1 for Eq.
 * 88's β (0: Eq. 28), keepdim = lms, eps = qk_eps, p = hidden_eps. A
 * recorded call keeps, per row, the states every chunk after the first starts
 * from (attrs.data); the vjp, the fused op hope_scan_backward, runs the
 * chunks in reverse from them, each chunk's forward again in scratch and its
 * vjp by hand (hope_scan_impl.h). Each row runs on one thread: the result does
 * not depend on the thread count. First-order gradients only (the composed
 * memories, hope's `composed`, differentiate to any order). */
#include "hope_scan_defs.h"

static const char *const hs_names[HS_IN + 1] = {"x", "s2", "w1r", "w1g", "bias", "g"};

static int hs_check(const char *op, mi_tensor *const *in, int n, const mi_attrs *at)
{
    char s[HS_IN + 1][96];
    for (int i = 0; i < n; i++) {
        if (require_float(op, in, i) != 0) return -1;
        mi_shape_str(s[i], sizeof s[i], in[i]->rank, in[i]->shape);
        if (in[i]->dtype != in[0]->dtype)
            return mi_error_set("%s: %s %s and x %s differ in dtype", op, hs_names[i], s[i], s[0]),
                   -1;
    }
    const mi_tensor *x = in[0], *s2 = in[1], *w1r = in[2], *w1g = in[3], *b = in[4];
    if (x->rank != 3 || s2->rank != 2 || w1r->rank != 3 || w1g->rank != 3 || b->rank != 2 ||
        (n > HS_IN && in[HS_IN]->rank != 3))
        return mi_error_set("%s: ranks: x %s must be [N,T,d], s2 %s [P,d], w1r %s [n_r,d,h], w1g "
                            "%s [2,H,h], bias %s [2,H]%s", op, s[0], s[1], s[2], s[3], s[4],
                            n > HS_IN ? ", g [N,T,D]" : ""), -1;
    int64_t d = x->shape[2], nr = w1r->shape[0], hc = w1r->shape[2], H = w1g->shape[1];
    bool ok = (nr == 2 || nr == 3) && w1r->shape[1] == d && w1g->shape[0] == 2 &&
              w1g->shape[2] == hc && b->shape[0] == 2 && b->shape[1] == H && s2->shape[1] == d &&
              s2->shape[0] == (nr + 2) * hc && H >= 1 && d % H == 0;
    if (ok && n > HS_IN)
        ok = in[HS_IN]->shape[0] == x->shape[0] && in[HS_IN]->shape[1] == x->shape[1] &&
             in[HS_IN]->shape[2] == nr * d + 2 * H;
    if (!ok)
        return mi_error_set("%s: shapes do not fit: x %s [N,T,d], s2 %s [(n_r+2)h,d], w1r %s "
                            "[n_r,d,h] with n_r 2 or 3, w1g %s [2,H,h] with H dividing d, bias "
                            "%s [2,H]%s%s", op, s[0], s[1], s[2], s[3], s[4],
                            n > HS_IN ? ", g [N,T,n_r d+2H] " : "", n > HS_IN ? s[HS_IN] : ""),
               -1;
    if (x->shape[1] < 1 || d < 1 || hc < 1 || d > INT_MAX / 4 || s2->shape[0] > INT_MAX / 4)
        return mi_error_set("%s: T, d and h must be >= 1 (and fit an int): x %s, w1r %s", op, s[0],
                            s[2]), -1;
    if (at->index < 1 || at->index > INT_MAX)
        return mi_error_set("%s: chunk C = %lld must be >= 1", op, (long long)at->index), -1;
    if (!(at->eps > 0 && at->p > 0))
        return mi_error_set("%s: eps (%g) and hidden_eps (%g) must be > 0", op, at->eps, at->p),
               -1;
    return 0;
}

static int hope_scan_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                           int *rank, int64_t *shape)
{
    if (hs_check("hope_scan", in, n, at) != 0) return -1;
    *rank = 3;
    shape[0] = in[0]->shape[0], shape[1] = in[0]->shape[1];
    shape[2] = in[2]->shape[0] * in[0]->shape[2] + 2 * in[3]->shape[1];
    *dt = in[0]->dtype;
    return 0;
}

/* Packed gradients: x's, then s2's, w1r's, w1g's and bias's. */
static int hope_scan_backward_shape(mi_tensor *const *in, int n, const mi_attrs *at,
                                    mi_dtype *dt, int *rank, int64_t *shape)
{
    if (hs_check("hope_scan_backward", in, n, at) != 0) return -1;
    *rank = 1;
    shape[0] = 0;
    for (int i = 0; i < HS_IN; i++) shape[0] += in[i]->numel;
    *dt = in[0]->dtype;
    return 0;
}

/* REF: f32 and f64 on the BLAS with libm's erf and exp (unary.c's gelu pair). */

#define HS_KERNEL static
#define HS_T float
#define HS(x) x##_f32
#define HS_GEMM cblas_sgemm
#define HS_GELU_PAIR ref_gelu_pair_f32
#define HS_GELU_SECOND ref_gelu_second_f32
#define HS_SQRT sqrtf
#define HS_EXP expf
#include "hope_scan_impl.h"

#undef HS_T
#undef HS
#undef HS_GEMM
#undef HS_GELU_PAIR
#undef HS_GELU_SECOND
#undef HS_SQRT
#undef HS_EXP
#define HS_T double
#define HS(x) x##_f64
#define HS_GEMM cblas_dgemm
#define HS_GELU_PAIR ref_gelu_pair_f64
#define HS_GELU_SECOND ref_gelu_second_f64
#define HS_SQRT sqrt
#define HS_EXP exp
#include "hope_scan_impl.h"

/* Input i's gradient in the packed output, in i's shape. */
static mi_tensor *hs_grad_part(mi_tensor *packed, mi_tensor *const *in, int i)
{
    int64_t start = 0;
    for (int j = 0; j < i; j++) start += in[j]->numel;
    return mi_reshape(mi_slice(packed, 0, start, start + in[i]->numel), in[i]->rank, in[i]->shape);
}

extern const mi_op mi_op_hope_scan_backward; /* below */

static mi_tensor *hs_backward(const mi_node *nd, mi_tensor *g)
{
    if (mi_grad_enabled()) {
        mi_error_set("hope_scan: no second derivatives (create_graph): use HOPE's composed "
                     "memories (mi_hope_config.composed = true) to differentiate twice");
        return NULL;
    }
    mi_tensor *const *in = nd->inputs;
    return RUN(&mi_op_hope_scan_backward, &nd->attrs, in[0], in[1], in[2], in[3], in[4], g);
}

static int hope_scan_vjp_all(const mi_node *nd, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    mi_tensor *packed = hs_backward(nd, g);
    if (!packed) return -1;
    for (int i = 0; i < HS_IN; i++)
        if (need[i] && !(grads[i] = hs_grad_part(packed, nd->inputs, i))) return -1;
    return 0;
}

static mi_tensor *hope_scan_vjp(const mi_node *nd, int i, mi_tensor *g)
{
    mi_tensor *packed = hs_backward(nd, g);
    return packed ? hs_grad_part(packed, nd->inputs, i) : NULL;
}

/* One chunk and none (C ≥ T), C = 1, a last partial chunk, Eq. 88, plain GD,
 * no q; weights small enough that the steps stay contracting. */
static int ex_hope_scan(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int64_t N = 2, T = 5, d = 4, H = 2, hc = 3, nr = 3;
    *a = (mi_attrs){.index = 2, .keepdim = true, .eps = 1e-3, .p = 1};
    switch (variant) {
    case 0: break;
    case 1: a->index = 1; break;
    case 2: a->index = 3, T = 7, a->axis = 1; break;
    case 3: a->index = 2, a->keepdim = false, nr = 2; break;
    case 4: a->index = 8, N = 1; break;
    case 5: a->index = 4, T = 9, H = 1, hc = 2, a->axis = 1; break;
    default: return 0;
    }
    in[0] = ex_normal(r, MI_SHAPE(N, T, d));
    in[1] = ex_uniform(r, MI_SHAPE((nr + 2) * hc, d), -0.8, 0.8);
    in[2] = ex_uniform(r, MI_SHAPE(nr, d, hc), -0.5, 0.5);
    in[3] = ex_uniform(r, MI_SHAPE(2, H, hc), -0.5, 0.5);
    in[4] = ex_uniform(r, MI_SHAPE(2, H), -1, 1);
    return HS_IN;
}

static int ex_hope_scan_backward(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int n = ex_hope_scan(r, variant, in, a);
    if (n == 0) return 0;
    int64_t D = in[2]->shape[0] * in[0]->shape[2] + 2 * in[3]->shape[1];
    in[HS_IN] = ex_normal(r, MI_SHAPE(in[0]->shape[0], in[0]->shape[1], D));
    return HS_IN + 1;
}

/* The products, 2·m·n·k each: a chunk's reads (R1, R2, R3: n·P·d + n·D·h)
 * and, for a chunk that steps, S2's and S3's (2n·P·d + 3n·D·h) and per layer
 * U's û·û and update (n²·in + n·out·in; F û is the step's read, scaled).
 * The backward counts two products per product: 2× the forward. */
static uint64_t hs_flops(mi_tensor *const *in, const mi_attrs *at, bool backward)
{
    hs_dims k = hs_dims_of(in, at);
    double f = 0;
    for (int64_t j = 0; j < k.n_chunks; j++) {
        int64_t n = k.T - j * k.C < k.C ? k.T - j * k.C : k.C;
        f += (double)(n * k.P * k.d + n * k.D * k.hc);
        if ((j + 1) * k.C >= k.T) continue;
        f += (double)(2 * n * k.P * k.d + 3 * n * k.D * k.hc);
        for (int L = 0; L <= k.nc; L++)
            f += (double)(n * hs_out(&k, L) * hs_in(&k, L) + n * n * hs_in(&k, L));
    }
    return (uint64_t)(2 * f * (double)k.N * (backward ? 2 : 1));
}

static uint64_t hope_scan_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                const mi_tensor *out)
{
    (void)n, (void)out;
    return hs_flops(in, a, false);
}

static uint64_t hope_scan_backward_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                         const mi_tensor *out)
{
    (void)n, (void)out;
    return hs_flops(in, a, true);
}

const mi_op mi_op_hope_scan = {
    .name = "hope_scan",
    .formula = "[k|v|q|eta|alpha]_t = HOPE's component memories at the states of t's chunk; "
               "each chunk's Eq. 28/88 step (Nested Learning, arXiv Eq. 84-91)",
    .arity = HS_IN, .flags = MI_OP_NO_GRADGRAD, .shape = hope_scan_shape, KERNELS(hope_scan),
    .kernel[MI_BACKEND_OWN][MI_F32] = hope_scan_own_f32,
    .vjp = hope_scan_vjp, .vjp_all = hope_scan_vjp_all, .examples = ex_hope_scan,
    .flops = hope_scan_flops};

const mi_op mi_op_hope_scan_backward = {
    .name = "hope_scan_backward",
    .formula = "the reverse chunk scan of hope_scan's vjp (packed gradients)",
    .arity = HS_IN + 1, .flags = MI_OP_NONDIFF, .shape = hope_scan_backward_shape,
    KERNELS(hope_scan_backward), .kernel[MI_BACKEND_OWN][MI_F32] = hope_scan_backward_own_f32,
    .examples = ex_hope_scan_backward, .flops = hope_scan_backward_flops};

static mi_attrs hs_attrs(int64_t chunk, bool eq88, bool lms, double eps, double hidden_eps)
{
    return (mi_attrs){.index = chunk, .axis = eq88, .keepdim = lms, .eps = eps, .p = hidden_eps};
}

mi_tensor *mi_hope_scan(mi_tensor *x, mi_tensor *s2, mi_tensor *w1r, mi_tensor *w1g,
                        mi_tensor *bias, int64_t chunk, bool eq88, bool lms, double eps,
                        double hidden_eps)
{
    mi_attrs at = hs_attrs(chunk, eq88, lms, eps, hidden_eps);
    mi_tensor *in[HS_IN] = {x, s2, w1r, w1g, bias};
    if (call_recorded(in, HS_IN) && hs_check("hope_scan", in, HS_IN, &at) == 0) {
        /* the states the backward starts its chunks from, in the record's scope */
        hs_dims k = hs_dims_of(in, &at);
        size_t bytes = mi_dtype_size(x->dtype) * (size_t)(k.N * hs_saved_elems(&k));
        if (bytes && !(at.data = mi_scope_alloc(mi_scope_current(), bytes)))
            return mi_error_set("hope_scan: out of memory for the backward's %zu bytes", bytes),
                   NULL;
    }
    return RUN(&mi_op_hope_scan, &at, x, s2, w1r, w1g, bias);
}

mi_tensor *mi_hope_scan_backward(mi_tensor *x, mi_tensor *s2, mi_tensor *w1r, mi_tensor *w1g,
                                 mi_tensor *bias, mi_tensor *g, int64_t chunk, bool eq88,
                                 bool lms, double eps, double hidden_eps)
{
    mi_attrs at = hs_attrs(chunk, eq88, lms, eps, hidden_eps);
    return RUN(&mi_op_hope_scan_backward, &at, x, s2, w1r, w1g, bias, g);
}
