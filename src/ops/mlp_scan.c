/* mlp_scan: the MLP memory's per-token recurrence (chunk b = 1, and the
 * one-token step of generation) as one op over the whole sequence, in place
 * of the ~40 small ops a token records when composed; the MLP-memory
 * counterpart of delta_scan.
 *
 * The memory of depth 2 (MIRAS "MIRAS's Variants"; Titans' deep memory;
 * models/miras/memory/mlp.c), with W = (W1 [d, h], W2 [h, d]) and d = dk = dv:
 *   M_W(x) = x + LN(W1 gelu(W2 x))      (gelu in its exact erf form, LN with
 *                                         no affine and eps 1e-5)
 * Per sequence, from W_0 (and S_0), for t = 1..T (read after write):
 *   e_t = ∂ℓ/∂y at y = M_{W_{t−1}}(k_t) against v_t:
 *         ℓ2 (MIRAS, MSE):   e = y − v
 *         yaad (MIRAS eq:huber-loss): e = y − v if ‖y − v‖₂ ≤ δ_t, else
 *         δ_t tanh(a (y − v)) (a = attrs.p, the sign's sharpness; a = ∞: the
 *         exact sign, derivative 0; the switch passes no derivative)
 *   g_t = ∂ℓ/∂W at W_{t−1} (mlp.c's closed form), or with decay_first at
 *         α_t W_{t−1} (recurrence.c's header; e and g_t then read c W, c = α_t):
 *         δ1 = r (e − mean(e) − ẑ mean(e ⊙ ẑ)),  ∂ℓ/∂W1 = δ1 sᵀ,
 *         δ2 = gelu'(a) ⊙ W1ᵀ δ1,                 ∂ℓ/∂W2 = δ2 kᵀ
 *         (a = W2 k, s = gelu(a), ẑ = LN(W1 s), r = 1/√(var(W1 s) + eps))
 *   gd (MIRAS eq:OGDupdate): W_t = α_t W_{t−1} − η_t g_t
 *   momentum (Titans §3.1):  S_t = μ_t S_{t−1} − η_t g_t,  W_t = α_t W_{t−1} + S_t
 *   y_t = M_{W_t}(q_t)
 * The ℓp bias (MIRAS "Alternative Attentional Biases", Variant 1,
 * eq:lp-attentional-bias, bias/lp.c) in place of ℓ2 or yaad:
 *         e = p s(y − v)^(p−2) ⊙ (y − v),  s(x) = √(x² + ε)
 * A read (retention lq or kl, gd only): the state is an accumulator A, the
 * weights are read from it, W = R(A), both where the gradient is taken,
 * g_t = ∂ℓ/∂W at R(A_{t−1}) (R(α_t A_{t−1}) with decay_first), and for y_t
 * (M_{R(A_t)}), and the write is A_t = α_t A_{t−1} − η_t g_t:
 *   lq (Moneta; MIRAS Variant 4, eq:q-norm in retention/lq.c's Frobenius
 *       form), per weight matrix: R(A) = A / (‖A‖_F² + ε)^((q−2)/(2q))
 *   kl (Memora; MIRAS Variant 1, eq:xmodel, retention/kl.c), per row of each
 *       weight: R(L) = c softmax(L), and after every write the boundary
 *       L_t ← log c + log_softmax(L_t) (b = 1: each token its own chunk)
 * The mini-batch rule (MIRAS "Parallelizable Training"; models/miras/
 * recurrence.c), chunk b > 1: the tokens of a segment take their gradients
 * at the state before its first token, g_t = ∇ℓ at R(A_{t'−1}) for t in
 * [t', t''), and write one by one as above; kl's boundary applies at the
 * segment's end only. The segments are the chunks of b tokens, or with the
 * lag token (Memora) each chunk's first token alone, then the rest. The
 * weights of a chunk's tokens are formed one at a time and never kept: the
 * backward recomputes them from the checkpoints below.
 * Inputs: state0 [N, P], the packed state W1, W2 (then S1, S2 with
 * momentum), each row-major, P = 2·d·h (×2 with momentum), h from P;
 * q, k, v [N, T, d]; gates [N, T, 4] = (η, α, μ, δ) per head and token (α ≡ 1
 * for no retention; μ read with momentum, δ with yaad, else ignored, their
 * gradients 0). Attributes (mi_attrs has no fields named for them): index =
 * the flags MI_MLP_SCAN_MOMENTUM | MI_MLP_SCAN_YAAD | MI_MLP_SCAN_DECAY_FIRST
 * | MI_MLP_SCAN_LP | MI_MLP_SCAN_LQ | MI_MLP_SCAN_KL, p = a (yaad) or p (lp),
 * eps = lp's ε, scalar = lq's q or kl's c, lo = lq's ε, window = the
 * chunk b of the mini-batch rule (0 or 1: per token; flag MI_MLP_SCAN_LAG: the
 * lag token). One output,
 * packed [N, T·d + P]: y [N, T, d] then the final state as state0
 * (mi_mlp_scan packs and splits).
 *
 * vjp: the fused op mlp_scan_backward, a reverse-time scan carrying
 * G = ∂L/∂W_t (∂L/∂A_t with a read) and H = ∂L/∂S_t, through the write's
 * Hessian-vector products (the LN, GELU and bias terms; each written out
 * above token_backward in mlp_scan_back_impl.h) and the reads' vjps
 * (mlp_scan_rules_impl.h). The backward starts from the state before every
 * K-th token (K = ⌈√T⌉): a recorded forward (mi_mlp_scan_packed with
 * recording on) keeps these checkpoints in its scope (attrs.data, ⌈T/K⌉
 * states per sequence), otherwise (mi_mlp_scan_backward alone) the backward
 * reruns the writes to form them; it then recomputes one segment of K states
 * at a time from its checkpoint, in scratch from the current scope (released
 * on return): K + 1 state copies a thread, not one per token (T = 512: 24).
 * Keeping them spares the backward a third of its writes, each a pass over
 * the whole state.
 * Each sequence runs on one thread (the result does not depend on the thread
 * count), its matrix-vector products on OpenBLAS (GEMV); with chunk > 1 a
 * segment's tokens take their gradients at one state, so the three products
 * of their inner gradients are GEMMs over the segment (inner_seg), and so are,
 * in the backward, the three products of their chains with it and the three
 * sums of their J (seg_back).
 *
 * Gradients of gradients are not provided: mlp_scan_backward is
 * non-differentiable and the vjp under create_graph fails with a message (the
 * composed recurrence, materialize=true, differentiates to any order). */
#include "mlp_scan_defs.h"
#include "own_mlp_scan.h"

static const char *const ms_names[MS_IN + 1] = {"state0", "q", "k", "v", "gates", "g"};

/* Checks the five inputs (and, for the backward op, g) and the attributes. */
static int ms_check(const char *op, mi_tensor *const *in, int n, const mi_attrs *at)
{
    char s[MS_IN + 1][96];
    for (int i = 0; i < n; i++) {
        if (require_float(op, in, i) != 0) return -1;
        mi_shape_str(s[i], sizeof s[i], in[i]->rank, in[i]->shape);
    }
    for (int i = 1; i < n; i++)
        if (in[i]->dtype != in[0]->dtype) {
            mi_error_set("%s: %s %s and state0 %s differ in dtype", op, ms_names[i], s[i], s[0]);
            return -1;
        }
    int64_t f = at->index;
    if (f < 0 || f >= 2 * MI_MLP_SCAN_LAG ||
        ((f & MI_MLP_SCAN_YAAD) && (f & MI_MLP_SCAN_LP)) ||
        ((f & MI_MLP_SCAN_LQ) && (f & MI_MLP_SCAN_KL)) ||
        ((f & (MI_MLP_SCAN_LQ | MI_MLP_SCAN_KL)) && (f & MI_MLP_SCAN_MOMENTUM))) {
        mi_error_set("%s: flags %lld are not a combination of momentum (1), yaad (2) or lp "
                     "(8), decay_first (4), lq (16) or kl (32) (a read with gd only), lag "
                     "token (64)", op, (long long)f);
        return -1;
    }
    if (at->window < 0 || (at->window > 1 && (f & (MI_MLP_SCAN_DECAY_FIRST | MI_MLP_SCAN_LQ)))) {
        mi_error_set("%s: chunk %lld: the mini-batch rule (chunk > 1) takes no decay_first and "
                     "no lq read (flags %lld)", op, (long long)at->window, (long long)f);
        return -1;
    }
    if ((f & MI_MLP_SCAN_YAAD) && !(at->p > 0)) {
        mi_error_set("%s: yaad's sign sharpness must be > 0 (inf: the exact sign), got %g", op,
                     at->p);
        return -1;
    }
    if ((f & MI_MLP_SCAN_LP) && !(at->p >= 1 && isfinite(at->p) && at->eps > 0 &&
                                  isfinite(at->eps))) {
        mi_error_set("%s: lp needs p >= 1 and eps > 0, got p %g, eps %g", op, at->p, at->eps);
        return -1;
    }
    if ((f & MI_MLP_SCAN_LQ) && !(at->scalar > 1 && isfinite(at->scalar) && at->lo >= 0 &&
                                  isfinite(at->lo))) {
        mi_error_set("%s: lq needs q > 1 and eps >= 0, got q %g, eps %g", op, at->scalar, at->lo);
        return -1;
    }
    if ((f & MI_MLP_SCAN_KL) && !(at->scalar > 0 && isfinite(at->scalar))) {
        mi_error_set("%s: kl needs a scale c > 0, got %g", op, at->scalar);
        return -1;
    }
    const mi_tensor *w = in[0], *q = in[1], *k = in[2], *v = in[3], *g = in[4];
    if (w->rank != 2 || q->rank != 3 || k->rank != 3 || v->rank != 3 || g->rank != 3 ||
        (n > MS_IN && in[MS_IN]->rank != 2)) {
        mi_error_set("%s: ranks: state0 %s must be [N,P], q %s, k %s and v %s [N,T,d], gates %s "
                     "[N,T,4]%s", op, s[0], s[1], s[2], s[3], s[4],
                     n > MS_IN ? ", g [N,T*d+P]" : "");
        return -1;
    }
    int64_t N = w->shape[0], T = k->shape[1], d = k->shape[2], P = w->shape[1];
    int copies = (at->index & MI_MLP_SCAN_MOMENTUM) ? 4 : 2; /* W1, W2 (, S1, S2) */
    bool ok = q->shape[0] == N && k->shape[0] == N && v->shape[0] == N && g->shape[0] == N &&
              q->shape[1] == T && v->shape[1] == T && g->shape[1] == T && q->shape[2] == d &&
              v->shape[2] == d && g->shape[2] == MS_GATES && d >= 1 && T >= 1 &&
              P % (copies * d) == 0 && P >= copies * d;
    if (!ok) {
        mi_error_set("%s: shapes do not fit: state0 %s [N,P] with P = %d·d·h, q %s, k %s and v "
                     "%s [N,T,d] (dk == dv), gates %s [N,T,4]", op, s[0], copies, s[1], s[2],
                     s[3], s[4]);
        return -1;
    }
    if (d > INT_MAX / 2 || P / d > INT_MAX / 2) {
        mi_error_set("%s: d and h must fit an int: state0 %s, k %s", op, s[0], s[2]);
        return -1;
    }
    if (n > MS_IN && (in[MS_IN]->shape[0] != N || in[MS_IN]->shape[1] != T * d + P)) {
        mi_error_set("%s: g %s must be [%lld,%lld] (mlp_scan's output)", op, s[MS_IN],
                     (long long)N, (long long)(T * d + P));
        return -1;
    }
    return 0;
}

static int mlp_scan_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                          int *rank, int64_t *shape)
{
    if (ms_check("mlp_scan", in, n, at) != 0) return -1;
    *rank = 2;
    shape[0] = in[0]->shape[0];
    shape[1] = in[2]->shape[1] * in[2]->shape[2] + in[0]->shape[1];
    *dt = in[0]->dtype;
    return 0;
}

/* Packed gradients per sequence: gstate [P], gq, gk, gv [T·d], ggates [T·4]. */
static int mlp_scan_backward_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                                   int *rank, int64_t *shape)
{
    if (ms_check("mlp_scan_backward", in, n, at) != 0) return -1;
    int64_t T = in[2]->shape[1], d = in[2]->shape[2];
    *rank = 2;
    shape[0] = in[0]->shape[0];
    shape[1] = in[0]->shape[1] + 3 * T * d + T * MS_GATES;
    *dt = in[0]->dtype;
    return 0;
}

#define MS_KERNEL /* f32: also what OWN hands Yaad's bias to (own_mlp_scan.h) */
#define MS_T float
#define MS(x) x##_f32
#include "mlp_scan_rules_impl.h"
#include "mlp_scan_impl.h"
#include "mlp_scan_back_impl.h"
#undef MS_T
#undef MS
#undef MS_KERNEL
#define MS_KERNEL static
#define MS_T double
#define MS(x) x##_f64
#include "mlp_scan_rules_impl.h"
#include "mlp_scan_impl.h"
#include "mlp_scan_back_impl.h"

/* Input i's gradient in mlp_scan_backward's packed output, in i's shape. */
static mi_tensor *ms_grad_part(mi_tensor *packed, mi_tensor *const *in, int i)
{
    int64_t T = in[2]->shape[1], d = in[2]->shape[2];
    int64_t width[MS_IN] = {in[0]->shape[1], T * d, T * d, T * d, T * MS_GATES};
    int64_t start = 0;
    for (int j = 0; j < i; j++) start += width[j];
    mi_tensor *part = mi_slice(packed, 1, start, start + width[i]);
    return mi_reshape(part, in[i]->rank, in[i]->shape);
}

extern const mi_op mi_op_mlp_scan_backward; /* below */

/* The backward op with the node's attributes: attrs.data, the checkpoints
 * the recorded forward kept, spares it the forward's second run. */
static mi_tensor *ms_backward(const mi_node *nd, mi_tensor *g)
{
    if (mi_grad_enabled()) {
        mi_error_set("mlp_scan: no second derivatives (create_graph): use the composed "
                     "per-token ops (materialize=true) to differentiate twice");
        return NULL;
    }
    mi_tensor *const *in = nd->inputs;
    return RUN(&mi_op_mlp_scan_backward, &nd->attrs, in[0], in[1], in[2], in[3], in[4], g);
}

static int mlp_scan_vjp_all(const mi_node *nd, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    mi_tensor *packed = ms_backward(nd, g);
    if (!packed) return -1;
    for (int i = 0; i < MS_IN; i++)
        if (need[i] && !(grads[i] = ms_grad_part(packed, nd->inputs, i))) return -1;
    return 0;
}

static mi_tensor *mlp_scan_vjp(const mi_node *nd, int i, mi_tensor *g)
{
    mi_tensor *packed = ms_backward(nd, g);
    return packed ? ms_grad_part(packed, nd->inputs, i) : NULL;
}

/* Small sizes: gd and momentum, ℓ2, yaad (a smooth sign, and the exact
 * one) and lp, the lq and kl reads, decay_first, T = 1 (the generation step). Gates well inside their ranges; yaad's
 * δ either 0.02 or 50 per token, far below or above the error norms (≈ 1–3),
 * so that both branches occur and no finite difference crosses the switch
 * (it would not be a derivative). */
static int ex_mlp_scan(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int64_t N = 2, T = 4, d = 3, h = 4;
    switch (variant) {
    case 0: a->index = 0; break;
    case 1: a->index = MI_MLP_SCAN_MOMENTUM; break;
    case 2: a->index = MI_MLP_SCAN_YAAD, a->p = 1.5; break;
    case 3: a->index = MI_MLP_SCAN_MOMENTUM | MI_MLP_SCAN_YAAD, a->p = INFINITY; break;
    case 4: a->index = MI_MLP_SCAN_MOMENTUM, N = 1, T = 1, d = 2, h = 3; break;
    case 5: a->index = MI_MLP_SCAN_DECAY_FIRST | MI_MLP_SCAN_YAAD, a->p = 2; break;
    case 6: a->index = MI_MLP_SCAN_DECAY_FIRST | MI_MLP_SCAN_MOMENTUM; break;
    case 7: a->index = MI_MLP_SCAN_LP | MI_MLP_SCAN_LQ, a->p = 3, a->eps = 1e-3, a->scalar = 4,
            a->lo = 1e-6; break;
    case 8: a->index = MI_MLP_SCAN_KL, a->scalar = 3; break;
    case 9: a->index = MI_MLP_SCAN_KL | MI_MLP_SCAN_DECAY_FIRST | MI_MLP_SCAN_LP, a->p = 3,
            a->eps = 1e-3, a->scalar = 3; break;
    /* the mini-batch rule: kl with the lag token, T 7 in chunks of 3 (a last
     * chunk of one token, checkpoints at 0, 3, 6), and momentum in chunks of
     * 2, T 5 (checkpoints at 0 and 4) */
    case 10: a->index = MI_MLP_SCAN_KL | MI_MLP_SCAN_LAG, a->scalar = 3, a->window = 3, T = 7;
             break;
    case 11: a->index = MI_MLP_SCAN_MOMENTUM | MI_MLP_SCAN_LP, a->p = 3, a->eps = 1e-3,
             a->window = 2, T = 5; break;
    default: return 0;
    }
    int64_t copies = a->index & MI_MLP_SCAN_MOMENTUM ? 4 : 2;
    /* Weights of 2 (GELU in its non-linear range, LN's input spread wide)
     * and a small η: with weights of 0.6 and η up to 0.3 the writes were now
     * and then unstable (vjps of 10³-10⁴ for a unit cotangent) and the f32
     * backward lost four digits on 2-4 % of draws (200 draws a variant), by
     * an amount that depended on which OpenBLAS kernel summed the products;
     * here 0-1 % of draws, the mean 1.5e-6. With a read, α near 1 too:
     * near-uniform kl rows amplify rounding (still 4-10 % of draws past
     * 1e-4 with kl) */
    bool read = a->index & (MI_MLP_SCAN_LQ | MI_MLP_SCAN_KL);
    double w = 2;
    in[0] = ex_uniform(r, MI_SHAPE(N, copies * d * h), -w, w);
    in[1] = ex_normal(r, MI_SHAPE(N, T, d));
    in[2] = ex_normal(r, MI_SHAPE(N, T, d));
    in[3] = ex_normal(r, MI_SHAPE(N, T, d));
    /* η, α, μ, δ */
    mi_tensor *g = ex_uniform(r, MI_SHAPE(N, T, MS_GATES), 0, 1);
    if (!g) return 0;
    double lo[MS_GATES - 1] = {0.01, read ? 0.9 : 0.6, 0.2};
    double hi[MS_GATES - 1] = {0.05, 1.0, 0.8};
    for (int64_t i = 0; i < g->numel; i++) {
        int c = (int)(i % MS_GATES);
        double u = mi_get(g, i);
        mi_set(g, i, c == 3 ? (u < 0.5 ? 0.02 : 50) : lo[c] + (hi[c] - lo[c]) * u);
    }
    in[4] = g;
    return MS_IN;
}

static int ex_mlp_scan_backward(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int n = ex_mlp_scan(r, variant, in, a);
    if (n == 0) return 0;
    int64_t N = in[0]->shape[0], T = in[2]->shape[1], d = in[2]->shape[2];
    in[MS_IN] = ex_normal(r, MI_SHAPE(N, T * d + in[0]->shape[1]));
    return MS_IN + 1;
}

/* The matrix–vector, rank-1 and Frobenius products per token, 2·d·h each
 * (mlp_scan_impl.h, mlp_scan_back_impl.h): forward, the write's W2 k, W1 s,
 * W1ᵀ δ1 and its steps δ1 sᵀ, δ2 kᵀ, and the read's W2 q, W1 s (7); backward,
 * the write run twice (checkpoints, then each segment: 10; once, 5, from the
 * checkpoints a recorded forward kept) and
 * token_backward's read (2), W1ᵀ gz, W2ᵀ ga, gz sᵀ, ga qᵀ (4), the four G̃
 * products (4), c W1 gm, c W1ᵀ gz, c W2ᵀ ga (3) and the folds' three rank-1
 * terms and four ⟨·, W⟩ (7): 30 (25). The plain rule's count (momentum's S and the
 * reads' R(A) add elementwise work, not counted). */
static uint64_t ms_flops(mi_tensor *const *in, const mi_attrs *a, uint64_t products)
{
    ms_dims k = ms_dims_of(in, a);
    return products * 2u * (uint64_t)k.d * (uint64_t)k.h * (uint64_t)k.N * (uint64_t)k.T;
}

static uint64_t mlp_scan_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                               const mi_tensor *out)
{
    (void)n;
    (void)out;
    return ms_flops(in, a, 7);
}

static uint64_t mlp_scan_backward_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                        const mi_tensor *out)
{
    (void)n;
    (void)out;
    return ms_flops(in, a, a->data ? 25 : 30); /* the checkpoints kept: the write once */
}

const mi_op mi_op_mlp_scan = {
    .name = "mlp_scan",
    .formula = "W_t = a_t W_{t-1} - eta_t grad l(M_{W_{t-1}}(k_t); v_t) (or with momentum), "
               "y_t = M_{W_t}(q_t), M_W(x) = x + LN(W1 gelu(W2 x))",
    .arity = MS_IN, .flags = MI_OP_NO_GRADGRAD, .shape = mlp_scan_shape, KERNELS(mlp_scan),
    .kernel[MI_BACKEND_OWN][MI_F32] = own_mlp_scan_f32,
    .vjp = mlp_scan_vjp, .vjp_all = mlp_scan_vjp_all, .examples = ex_mlp_scan,
    .flops = mlp_scan_flops};

const mi_op mi_op_mlp_scan_backward = {
    .name = "mlp_scan_backward",
    .formula = "the reverse-time scan of mlp_scan's vjp (packed gradients)",
    .arity = MS_IN + 1, .flags = MI_OP_NONDIFF, .shape = mlp_scan_backward_shape,
    KERNELS(mlp_scan_backward),
    .kernel[MI_BACKEND_OWN][MI_F32] = own_mlp_scan_backward_f32,
    .examples = ex_mlp_scan_backward, .flops = mlp_scan_backward_flops};

/* The rule as attributes: index = the flags, p = yaad's sharpness or lp's
 * p, eps = lp's ε, scalar = lq's q or kl's c, lo = lq's ε, window = the
 * chunk. */
static mi_attrs ms_attrs(const mi_mlp_scan_rule *rule)
{
    bool lq = rule->read == MI_MLP_READ_LQ, kl = rule->read == MI_MLP_READ_KL;
    mi_attrs at = {.index = (rule->momentum ? MI_MLP_SCAN_MOMENTUM : 0) |
                            (rule->yaad ? MI_MLP_SCAN_YAAD : 0) |
                            (rule->lp ? MI_MLP_SCAN_LP : 0) |
                            (rule->decay_first ? MI_MLP_SCAN_DECAY_FIRST : 0) |
                            (lq ? MI_MLP_SCAN_LQ : 0) | (kl ? MI_MLP_SCAN_KL : 0) |
                            (rule->lag_token ? MI_MLP_SCAN_LAG : 0),
                   .p = rule->yaad ? rule->sign_sharpness : rule->lp ? rule->lp_p : 0,
                   .eps = rule->lp ? rule->lp_eps : 0,
                   .scalar = lq ? rule->lq_q : kl ? rule->kl_scale : 0,
                   .lo = lq ? rule->lq_eps : 0, .window = rule->chunk};
    if (rule->read != MI_MLP_READ_STATE && !lq && !kl) at.index = -1; /* refused by ms_check */
    return at;
}

static bool ms_rule_given(const mi_mlp_scan_rule *rule)
{
    if (!rule) mi_error_set("mlp_scan: NULL rule");
    return rule != NULL;
}

mi_tensor *mi_mlp_scan_packed(mi_tensor *state0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                              mi_tensor *gates, const mi_mlp_scan_rule *rule)
{
    if (!ms_rule_given(rule)) return NULL;
    mi_attrs at = ms_attrs(rule);
    mi_tensor *in[MS_IN] = {state0, q, k, v, gates};
    if (call_recorded(in, MS_IN) && ms_check("mlp_scan", in, MS_IN, &at) == 0) {
        /* the backward's checkpoints, kept by the forward (the kernels'
         * attrs.data), in the scope the record lives in */
        ms_dims kd = ms_dims_of(in, &at);
        size_t bytes = mi_dtype_size(state0->dtype) * (size_t)(kd.N * ms_checkpoints(&kd) * kd.P);
        if (!(at.data = mi_scope_alloc(mi_scope_current(), bytes)))
            return mi_error_set("mlp_scan: out of memory for the backward's %zu bytes", bytes),
                   NULL;
    }
    return RUN(&mi_op_mlp_scan, &at, state0, q, k, v, gates);
}

mi_tensor *mi_mlp_scan_backward(mi_tensor *state0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                mi_tensor *gates, mi_tensor *g, const mi_mlp_scan_rule *rule)
{
    if (!ms_rule_given(rule)) return NULL;
    mi_attrs at = ms_attrs(rule);
    return RUN(&mi_op_mlp_scan_backward, &at, state0, q, k, v, gates, g);
}

mi_tensor *mi_mlp_scan(mi_tensor *const *state0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                       mi_tensor *gates, const mi_mlp_scan_rule *rule, mi_tensor **state)
{
    if (!ms_rule_given(rule)) return NULL;
    int n = rule->momentum ? 4 : 2;
    mi_tensor *flat[4];
    for (int i = 0; i < n; i++) {
        /* every part [N, ...] with d·h elements per sequence, as W1 */
        const mi_tensor *w = state0[i], *w1 = state0[0];
        if (!w || w->rank < 1 || w->shape[0] < 1 || w->shape[0] != w1->shape[0] ||
            w->numel != w1->numel) {
            char s[96];
            mi_error_set("mlp_scan: state tensor %d is %s; W1 [N,d,h], W2 [N,h,d]%s: each "
                         "[N, ...] with d·h elements per sequence", i,
                         w ? mi_shape_str(s, sizeof s, w->rank, w->shape) : "NULL",
                         rule->momentum ? ", S1, S2 as W1, W2" : "");
            return NULL;
        }
        if (!(flat[i] = mi_reshape(state0[i], 2, (int64_t[]){w->shape[0], -1}))) return NULL;
    }
    mi_tensor *packed = mi_mlp_scan_packed(mi_concat(flat, n, 1), q, k, v, gates, rule);
    if (!packed) return NULL;
    int64_t N = k->shape[0], T = k->shape[1], d = k->shape[2], at = T * d;
    for (int i = 0; state && i < n; i++) {
        int64_t len = flat[i]->shape[1];
        if (!(state[i] = mi_reshape(mi_slice(packed, 1, at, at + len), state0[i]->rank,
                                    state0[i]->shape)))
            return NULL;
        at += len;
    }
    return mi_reshape(mi_slice(packed, 1, 0, T * d), 3, (int64_t[]){N, T, d});
}
