/* delta_scan: the matrix memory's per-token recurrence (chunk b = 1, and the
 * one-token step of generation) as one op over the whole sequence, in place
 * of ~10 small ops per token.
 *
 * Per sequence, from S_0 ∈ R^{dv×dk}, for t = 1..T (read after write):
 *   S_t = α_t S_{t−1} + u_t k_tᵀ,   u_t = ω_t v_t − β_t ρ_t S_{t−1} k_t,   y_t = S_t q_t
 * with the rule (attrs.index, mi_delta_rule):
 *   MI_DELTA_RULE_DELTA        ρ_t = 1:   S_t = α_t S_{t−1} − β_t (S_{t−1} k_t − v_t) k_tᵀ
 *   MI_DELTA_RULE_DECAY_FIRST  ρ_t = α_t: S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ
 *   MI_DELTA_RULE_HEBBIAN      ρ_t = 0:   S_t = α_t S_{t−1} + β_t v_t k_tᵀ
 * where the write's scale is ω_t = β_t, or ω_t = 1 with the flag
 * MI_DELTA_RULE_UNIT_WRITE or'd into the rule: the unscaled write of the
 * MIRAS paper's "RNNs with Delta Rule" paragraph, M_t = α (I − η_t k_t k_tᵀ)
 * M_{t−1} + v_t k_tᵀ (decay_first: S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) +
 * v_t k_tᵀ). A matrix memory with ℓ2 or dot bias and ℓ2 retention (the
 * conventions of recurrence_delta.c's header).
 * Inputs s0 [N, dv, dk], q, k [N, T, dk], v [N, T, dv], beta, alpha [N, T]
 * (one per head) or [N, T, dv] (one per value row: row i of S runs a scalar
 * rule of its own with β_{t,i}, α_{t,i}, Diag(α_t) S_{t−1});
 * one output, packed [N, T·dv + dv·dk]: y [N, T, dv] then S_T [N, dv, dk]
 * (mi_delta_scan splits it). With the flag MI_DELTA_RULE_ALPHA_KEYS, alpha
 * [N, T, dk] decays the key axis instead, S_{t−1} Diag(α_t), and ρ_t S_{t−1}
 * k_t reads S_{t−1} (α_t ⊙ k_t) for decay_first (delta_scan_keys_impl.h).
 *
 * vjp (a reverse-time scan, the fused op delta_scan_backward), with
 * G = ∂L/∂S_t carried backwards from ∂L/∂S_T:
 *   G   += gy_t q_tᵀ,          gq_t = S_tᵀ gy_t
 *   gu   = G k_t,              gv_t = ω_t gu,   gβ_t = ⟨gu, v_t − ρ_t p⟩ (⟨gu, −ρ_t p⟩
 *                              with ω = 1),  p = S_{t−1} k_t
 *   gp   = −β_t ρ_t gu,        gk_t = Gᵀ u_t + S_{t−1}ᵀ gp
 *   gα_t = ⟨G, S_{t−1}⟩ (+ ⟨gu, −β_t p⟩ for decay_first)
 *   (channel-wise gates: the same per row, without the sum over rows)
 *   G   ← α_t G + gp k_tᵀ      (∂L/∂S_{t−1}; after t = 1 it is gS_0)
 * The backward kernel recomputes the states S_0..S_{T−1} of one sequence at
 * a time into its own scratch buffer ((T+1)·dv·dk elements with G, from the
 * current scope, released on return, so the next call reuses it):
 * running S_t back to S_{t−1} would divide by α_t (unsafe at α ≈ 0), and the
 * forward keeps nothing beyond its output. Each token is one pass over the
 * rows of G and S_{t−1}: S_t's row, for gq, is α S_{t−1} + u kᵀ's, formed
 * in registers, and G's update follows its reads in the same row.
 *
 * Gradients of gradients are not provided: delta_scan_backward is marked
 * non-differentiable, and delta_scan's vjp under create_graph fails with a
 * message (the composed per-token ops, e.g. the recurrence's
 * materialize=true, differentiate to any order).
 *
 * Kernels: REF in f32 and f64 (delta_scan_impl.h compiled here), and OWN f32,
 * the same loops built with -O3 -ffast-math -march=native
 * (backend/cpu/own_delta_scan.c: the dot products' sums reassociated and
 * fused into FMAs, a few ulp from REF). */
#include "delta_scan_loops.h"
#include "own_delta_scan.h"

#define DS_IN 6

static const char *const ds_names[DS_IN] = {"s0", "q", "k", "v", "beta", "alpha"};

/* Checks the six inputs (and, for the backward op, the output gradient). */
static int ds_check(const char *op, mi_tensor *const *in, int n, const mi_attrs *at)
{
    char s[DS_IN + 1][96];
    for (int i = 0; i < n; i++) {
        if (require_float(op, in, i) != 0) return -1;
        mi_shape_str(s[i], sizeof s[i], in[i]->rank, in[i]->shape);
    }
    for (int i = 1; i < n; i++)
        if (in[i]->dtype != in[0]->dtype) {
            mi_error_set("%s: %s %s and s0 %s differ in dtype", op, i < DS_IN ? ds_names[i] : "g",
                         s[i], s[0]);
            return -1;
        }
    const mi_tensor *s0 = in[0], *q = in[1], *k = in[2], *v = in[3], *b = in[4], *a = in[5];
    if (s0->rank != 3 || q->rank != 3 || k->rank != 3 || v->rank != 3 || b->rank < 2 ||
        b->rank > 3 || a->rank < 2 || a->rank > 3) {
        mi_error_set("%s: ranks: s0 %s must be [N,dv,dk], q %s and k %s [N,T,dk], v %s [N,T,dv], "
                     "beta %s and alpha %s [N,T] or [N,T,dv]", op, s[0], s[1], s[2], s[3], s[4],
                     s[5]);
        return -1;
    }
    int64_t N = s0->shape[0], dv = s0->shape[1], dk = s0->shape[2], T = k->shape[1];
    if (q->shape[0] != N || k->shape[0] != N || v->shape[0] != N || b->shape[0] != N ||
        a->shape[0] != N || q->shape[1] != T || v->shape[1] != T || b->shape[1] != T ||
        a->shape[1] != T || q->shape[2] != dk || k->shape[2] != dk || v->shape[2] != dv ||
        (b->rank == 3 && b->shape[2] != dv) ||
        (a->rank == 3 && a->shape[2] != (at->index & MI_DELTA_RULE_ALPHA_KEYS ? dk : dv)) ||
        (at->index & MI_DELTA_RULE_ALPHA_KEYS && a->rank != 3)) {
        mi_error_set("%s: shapes do not fit: s0 %s [N,dv,dk], q %s and k %s [N,T,dk], v %s "
                     "[N,T,dv], beta %s [N,T] or [N,T,dv] and alpha %s [N,T] or [N,T,dv] (on "
                     "the keys: [N,T,dk])", op, s[0], s[1], s[2], s[3], s[4], s[5]);
        return -1;
    }
    return 0;
}

static int ds_rule_ok(const char *op, const mi_attrs *at)
{
    int64_t flags = MI_DELTA_RULE_ALPHA_KEYS | MI_DELTA_RULE_UNIT_WRITE;
    int64_t rule = at->index & ~flags;
    if (rule < MI_DELTA_RULE_DELTA || rule > MI_DELTA_RULE_HEBBIAN || (at->index & flags) == flags) {
        mi_error_set("%s: rule %lld is not one of delta (0), decay_first (1), hebbian (2), "
                     "each with alpha_keys (+4) or unit_write (+8) or neither (the two together "
                     "have no kernel)", op, (long long)at->index);
        return -1;
    }
    return 0;
}

static int delta_scan_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                            int *rank, int64_t *shape)
{
    if (ds_rule_ok("delta_scan", at) != 0 || ds_check("delta_scan", in, n, at) != 0) return -1;
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2], T = in[2]->shape[1];
    *rank = 2;
    shape[0] = N;
    shape[1] = T * dv + dv * dk;
    *dt = in[0]->dtype;
    return 0;
}




/* ---------------------------------------------------------------- backward
 * Inputs the six of delta_scan and g [N, T·dv + dv·dk] (∂L/∂ the packed
 * output); output packed [N, dv·dk + 2·T·dk + T·dv + T·bw + T·aw] (bw, aw:
 * the gates' widths): gs0, gq, gk, gv, gbeta, galpha in that order. */
static int64_t grad_width(mi_tensor *const *in)
{
    int64_t dv = in[0]->shape[1], dk = in[0]->shape[2], T = in[2]->shape[1];
    return dv * dk + 2 * T * dk + T * dv + T * gate_width(in[4]) + T * gate_width(in[5]);
}

static int delta_scan_backward_shape(mi_tensor *const *in, int n, const mi_attrs *at,
                                     mi_dtype *dt, int *rank, int64_t *shape)
{
    const char *op = "delta_scan_backward";
    if (ds_rule_ok(op, at) != 0 || ds_check(op, in, n, at) != 0) return -1;
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2], T = in[2]->shape[1];
    const mi_tensor *g = in[DS_IN];
    if (g->rank != 2 || g->shape[0] != N || g->shape[1] != T * dv + dv * dk) {
        char s[96];
        mi_error_set("%s: g %s must be [%lld,%lld] (delta_scan's output)", op,
                     mi_shape_str(s, sizeof s, g->rank, g->shape), (long long)N,
                     (long long)(T * dv + dv * dk));
        return -1;
    }
    *rank = 2;
    shape[0] = N;
    shape[1] = grad_width(in);
    *dt = in[0]->dtype;
    return 0;
}

/* The REF kernels, per dtype (delta_scan_impl.h). */
#define DS_KERNEL static
#define DS_T float
#define DS_NAME(x) x##_f32
#include "delta_scan_impl.h"
#undef DS_T
#undef DS_NAME
#define DS_T double
#define DS_NAME(x) x##_f64
#include "delta_scan_impl.h"
#undef DS_T
#undef DS_NAME

/* The slice of input i's gradient in delta_scan_backward's packed output,
 * reshaped to the input's shape. */
static mi_tensor *ds_grad_part(mi_tensor *packed, mi_tensor *const *in, int i)
{
    int64_t dv = in[0]->shape[1], dk = in[0]->shape[2], T = in[2]->shape[1];
    int64_t width[DS_IN] = {dv * dk, T * dk, T * dk, T * dv, T * gate_width(in[4]),
                            T * gate_width(in[5])};
    int64_t start = 0;
    for (int j = 0; j < i; j++) start += width[j];
    mi_tensor *part = mi_slice(packed, 1, start, start + width[i]);
    return mi_reshape(part, in[i]->rank, in[i]->shape);
}

static mi_tensor *ds_backward(const mi_node *nd, mi_tensor *g)
{
    if (mi_grad_enabled()) {
        mi_error_set("delta_scan: no second derivatives (create_graph): use the composed "
                     "per-token ops (materialize=true) to differentiate twice");
        return NULL;
    }
    mi_tensor *const *in = nd->inputs;
    return mi_delta_scan_backward(in[0], in[1], in[2], in[3], in[4], in[5], g,
                                  (mi_delta_rule)nd->attrs.index);
}

static int delta_scan_vjp_all(const mi_node *nd, mi_tensor *g, const bool *need,
                              mi_tensor **grads)
{
    mi_tensor *packed = ds_backward(nd, g);
    if (!packed) return -1;
    for (int i = 0; i < DS_IN; i++)
        if (need[i] && !(grads[i] = ds_grad_part(packed, nd->inputs, i))) return -1;
    return 0;
}

static mi_tensor *delta_scan_vjp(const mi_node *nd, int i, mi_tensor *g)
{
    mi_tensor *packed = ds_backward(nd, g);
    return packed ? ds_grad_part(packed, nd->inputs, i) : NULL;
}

/* Gates well inside (0, 1) (β ≤ 0.9 on unit-scale keys keeps the rule
 * contracting), ragged sizes: each rule; N = 1, T = 1 (the generation step). */
static int ex_delta_scan(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int64_t N = 2, T = 5, dv = 3, dk = 4;
    bool beta_rows = false, alpha_rows = false;
    switch (variant) {
    case 0: a->index = MI_DELTA_RULE_DELTA; break;
    case 1: a->index = MI_DELTA_RULE_DECAY_FIRST; break;
    case 2: a->index = MI_DELTA_RULE_HEBBIAN; break;
    case 3: a->index = MI_DELTA_RULE_DECAY_FIRST, N = 1, T = 1, dv = 2, dk = 3; break;
    case 4: a->index = MI_DELTA_RULE_DECAY_FIRST, beta_rows = alpha_rows = true; break;
    case 5: a->index = MI_DELTA_RULE_DELTA, beta_rows = true; break;
    case 6: a->index = MI_DELTA_RULE_HEBBIAN, alpha_rows = true; break;
    case 7: a->index = MI_DELTA_RULE_DECAY_FIRST | MI_DELTA_RULE_ALPHA_KEYS; break;
    case 8: a->index = MI_DELTA_RULE_DELTA | MI_DELTA_RULE_ALPHA_KEYS, beta_rows = true; break;
    case 9: a->index = MI_DELTA_RULE_HEBBIAN | MI_DELTA_RULE_ALPHA_KEYS; break;
    case 10: a->index = MI_DELTA_RULE_DELTA | MI_DELTA_RULE_UNIT_WRITE; break;
    case 11: a->index = MI_DELTA_RULE_DECAY_FIRST | MI_DELTA_RULE_UNIT_WRITE; break;
    case 12:
        a->index = MI_DELTA_RULE_DECAY_FIRST | MI_DELTA_RULE_UNIT_WRITE;
        beta_rows = alpha_rows = true;
        break;
    /* the key widths DS_DK passes as constants (delta_scan_loops.h) */
    case 13: a->index = MI_DELTA_RULE_DELTA, dk = 16; break;
    case 14:
        a->index = MI_DELTA_RULE_DECAY_FIRST | MI_DELTA_RULE_UNIT_WRITE, dv = 2, dk = 32;
        beta_rows = alpha_rows = true;
        break;
    case 15: a->index = MI_DELTA_RULE_HEBBIAN, T = 3, dv = 2, dk = 64; break;
    default: return 0;
    }
    bool keys = a->index & MI_DELTA_RULE_ALPHA_KEYS;
    in[0] = ex_normal(r, MI_SHAPE(N, dv, dk));
    in[1] = ex_normal(r, MI_SHAPE(N, T, dk));
    in[2] = ex_uniform(r, MI_SHAPE(N, T, dk), -0.5, 0.5);
    in[3] = ex_normal(r, MI_SHAPE(N, T, dv));
    in[4] = beta_rows ? ex_uniform(r, MI_SHAPE(N, T, dv), 0.1, 0.9)
                      : ex_uniform(r, MI_SHAPE(N, T), 0.1, 0.9);
    in[5] = keys         ? ex_uniform(r, MI_SHAPE(N, T, dk), 0.5, 1.0)
            : alpha_rows ? ex_uniform(r, MI_SHAPE(N, T, dv), 0.5, 1.0)
                         : ex_uniform(r, MI_SHAPE(N, T), 0.5, 1.0);
    return DS_IN;
}

static int ex_delta_scan_backward(mi_rng *r, int variant, mi_tensor **in, mi_attrs *a)
{
    int n = ex_delta_scan(r, variant, in, a);
    if (n == 0) return 0;
    int64_t N = in[0]->shape[0], dv = in[0]->shape[1], dk = in[0]->shape[2];
    int64_t T = in[2]->shape[1];
    in[DS_IN] = ex_normal(r, MI_SHAPE(N, T * dv + dv * dk));
    return DS_IN + 1;
}

/* The matrix–vector and rank-1 products per token, each 2·dv·dk: forward
 * S_{t−1} k_t, u_t k_tᵀ and S_t q_t (3); backward (the kernel above) the
 * states' rerun (2), S_tᵀ gy_t and gy_t q_tᵀ (2), G k_t, S_{t−1} k_t and
 * ⟨G, S_{t−1}⟩ (3), Gᵀ u_t and S_{t−1}ᵀ gp (2), gp k_tᵀ (1): 10. The gates'
 * scalings are elementwise and not counted. */
static uint64_t ds_flops(mi_tensor *const *in, uint64_t products)
{
    uint64_t N = (uint64_t)in[0]->shape[0], dv = (uint64_t)in[0]->shape[1];
    uint64_t dk = (uint64_t)in[0]->shape[2], T = (uint64_t)in[2]->shape[1];
    return products * 2u * dv * dk * N * T;
}

static uint64_t delta_scan_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                 const mi_tensor *out)
{
    (void)n;
    (void)a;
    (void)out;
    return ds_flops(in, 3);
}

static uint64_t delta_scan_backward_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                          const mi_tensor *out)
{
    (void)n;
    (void)a;
    (void)out;
    return ds_flops(in, 10);
}

const mi_op mi_op_delta_scan = {
    .name = "delta_scan",
    .formula = "S_t = a_t S_{t-1} + (w_t v_t - b_t rho_t S_{t-1} k_t) k_t^T, y_t = S_t q_t",
    .arity = DS_IN, .flags = MI_OP_NO_GRADGRAD, .shape = delta_scan_shape,
    KERNELS(delta_scan), .kernel[MI_BACKEND_OWN][MI_F32] = own_delta_scan_f32,
    .vjp = delta_scan_vjp, .vjp_all = delta_scan_vjp_all,
    .examples = ex_delta_scan, .flops = delta_scan_flops};

const mi_op mi_op_delta_scan_backward = {
    .name = "delta_scan_backward",
    .formula = "the reverse-time scan of delta_scan's vjp (packed gradients)",
    .arity = DS_IN + 1, .flags = MI_OP_NONDIFF, .shape = delta_scan_backward_shape,
    KERNELS(delta_scan_backward),
    .kernel[MI_BACKEND_OWN][MI_F32] = own_delta_scan_backward_f32, .examples = ex_delta_scan_backward,
    .flops = delta_scan_backward_flops};

mi_tensor *mi_delta_scan_packed(mi_tensor *s0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                mi_tensor *beta, mi_tensor *alpha, mi_delta_rule rule)
{
    mi_attrs at = {.index = rule};
    return RUN(&mi_op_delta_scan, &at, s0, q, k, v, beta, alpha);
}

mi_tensor *mi_delta_scan_backward(mi_tensor *s0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                  mi_tensor *beta, mi_tensor *alpha, mi_tensor *g,
                                  mi_delta_rule rule)
{
    mi_attrs at = {.index = rule};
    return RUN(&mi_op_delta_scan_backward, &at, s0, q, k, v, beta, alpha, g);
}

mi_tensor *mi_delta_scan(mi_tensor *s0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                         mi_tensor *beta, mi_tensor *alpha, mi_delta_rule rule,
                         mi_tensor **state)
{
    mi_tensor *packed = mi_delta_scan_packed(s0, q, k, v, beta, alpha, rule);
    if (!packed) return NULL;
    int64_t N = s0->shape[0], dv = s0->shape[1], dk = s0->shape[2], T = k->shape[1];
    if (state &&
        !(*state = mi_reshape(mi_slice(packed, 1, T * dv, T * dv + dv * dk), 3,
                              (int64_t[]){N, dv, dk})))
        return NULL;
    return mi_reshape(mi_slice(packed, 1, 0, T * dv), 3, (int64_t[]){N, T, dv});
}
