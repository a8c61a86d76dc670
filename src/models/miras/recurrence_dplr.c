/* The exact chunkwise form of the delta rule with a channel-wise decay on
 * the key axis (alpha_on_keys: RWKV-7's and GLA's orientation of the decay,
 * gated DeltaNet with channel-wise gates): the state's transition is
 * diagonal plus rank one, Diag(α_t)(I − β_t k_t k_tᵀ).
 *
 * The recurrence (memory S ∈ R^{dv×dk} acting on keys, α_t ∈ (0, 1]^dk,
 * D_t = Diag(α_t)), per token t of a chunk that starts from S_0:
 *   S_t = S_{t−1} D_t (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ      (decay_first)
 *   S_t = S_{t−1} D_t − β_t (S_{t−1} k_t − v_t) k_tᵀ          (otherwise)
 *   y_t = S_t q_t
 * Both are S_t = S_{t−1} D_t + u_t k_tᵀ with
 *   u_t = β_t (v_t − S_{t−1} w_t),   w_t = α_t ⊙ k_t (decay_first) or k_t.    (1)
 * With the cumulative log decay c_t = Σ_{j≤t} log α_j ∈ R^dk (per channel)
 *   S_t = S_0 Diag(e^{c_t}) + Σ_{i≤t} u_i (k_i ⊙ e^{c_t − c_i})ᵀ               (2)
 * and with r_t = c_t (decay_first) or c_{t−1} (c_{−1} = 0), since
 * e^{c_{t−1}} ⊙ w_t = e^{r_t} ⊙ k_t, (1) becomes
 *   u_t + β_t Σ_{i<t} ⟨k_t ⊙ e^{r_t − c_i}, k_i⟩ u_i = β_t (v_t − S_0 (e^{r_t} ⊙ k_t)).  (3)
 * The pairwise factor e^{r_t − c_i} is per channel, so it does not come out
 * of the inner product as the scalar Γ of recurrence_delta.c does; it splits
 * into a factor of t and one of i around a reference c̄ ∈ R^dk:
 *   ⟨k_t ⊙ e^{r_t − c_i}, k_i⟩ = ⟨k_t ⊙ e^{r_t − c̄}, k_i ⊙ e^{c̄ − c_i}⟩        (4)
 * so with the rows K_r = K ⊙ e^{R − c̄}, K_c = K ⊙ e^{c̄ − C}, Q_c = Q ⊙ e^{C − c̄}
 * (the decayed keys of "Gated Linear Attention Transformers with
 * Hardware-Efficient Training", §4, its chunkwise form) the WY representation
 * and UT transform of "Parallelizing Linear Transformers with the Delta Rule
 * over Sequence Length" (§3) hold with these keys, as in the diagonal-plus-
 * low-rank transition of "RWKV-7 "Goose" with Expressive Dynamic State
 * Evolution" (its generalized delta rule):
 *   (I + StrictLower(diag(β) K_r K_cᵀ)) U = diag(β) (V − (K ⊙ e^R) S_0ᵀ)       (5)
 *   Y   = (Q ⊙ e^C) S_0ᵀ + Lower(Q_c K_cᵀ) U                                    (6)
 *   S_n = S_0 Diag(e^{c_n}) + Uᵀ (K ⊙ e^{c_n − C})                               (7)
 * (5) is one unit-lower-triangular solve (tri_solve), the rest matmuls; e^R,
 * e^C and e^{c_n − C} are ≤ 1. A β per value row (Longhorn's) gives each
 * row of S a rule of its own: (5) and (6) batch over the dv rows.
 *
 * Range. The factors of (4) are exponentials of differences to c̄, taken
 * per channel half-way through the chunk's span: c̄ = (r_1 + c_n)/2 (for
 * α ∈ (0, 1]; in general half-way between the largest r_t and the smallest
 * c_t), so with the span Δ = r_1 − c_n = −Σ log α over the chunk (its first
 * token's α excluded with decay_first) every factor lies in [e^{−Δ/2},
 * e^{Δ/2}], and the products that (5) and (6) compute and then mask (i > t)
 * reach e^Δ.
 * A chunk runs as one block while Δ ≤ 60 in f32 (e^60 ≈ 1.1e26, a factor
 * ≈ 3e12 below FLT_MAX for ‖k_t‖‖k_i‖ and the sum over dk; e^{−30} ≈ 1e−13
 * far from subnormal) and Δ ≤ 600 in f64; a chunk that spans more (the
 * chunk keeps less than e^{−60} ≈ 1e−26 of its start on some channel: with
 * α ≥ 0.5 everywhere that is over 86 tokens) runs as its two halves, each
 * checked again, down to single tokens, for which the form holds at any α
 * (no masked products; α is clamped to the smallest normal number before
 * its log). The result is exact at every chunk length; only the block size
 * the solve sees shrinks. */
#include <float.h>
#include <math.h>

#include "recurrence_delta.h"

/* The largest span Δ a block may have (see Range above). */
static double span_limit(mi_dtype dt) { return dt == MI_F64 ? 600 : 60; }

/* The reference c̄ [N, 1, dk] of (4), half-way between the largest r_t and
 * the smallest c_t of each sequence and channel (r_1 and c_n where α ≤ 1),
 * a constant: (4) does not depend on it, so no gradient flows through it.
 * *span gets the largest distance Δ between the two over the block. */
static mi_tensor *reference(const mi_tensor *r, const mi_tensor *c, double *span)
{
    int64_t n_seq = c->shape[0], n = c->shape[1], dk = c->shape[2];
    mi_tensor *ref = mi_zeros(c->dtype, 3, (int64_t[]){n_seq, 1, dk});
    if (!ref) return NULL;
    *span = 0;
    for (int64_t s = 0; s < n_seq; s++)
        for (int64_t j = 0; j < dk; j++) {
            double hi = -HUGE_VAL, lo = HUGE_VAL;
            for (int64_t t = 0; t < n; t++) {
                double rt = mi_get(r, (s * n + t) * dk + j), ct = mi_get(c, (s * n + t) * dk + j);
                hi = rt > hi ? rt : hi;
                lo = ct < lo ? ct : lo;
            }
            mi_set(ref, s * dk + j, (hi + lo) / 2);
            if (hi - lo > *span) *span = hi - lo;
        }
    return ref;
}

/* A constant [n, n] mask: 1 where lo ≤ t − i ≤ hi. */
static mi_tensor *band(mi_dtype dt, int64_t n, int64_t lo, int64_t hi)
{
    mi_tensor *m = mi_zeros(dt, 2, (int64_t[]){n, n});
    if (!m) return NULL;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = t - hi < 0 ? 0 : t - hi; i <= t - lo; i++) {
            if (dt == MI_F64) ((double *)m->data)[t * n + i] = 1;
            else ((float *)m->data)[t * n + i] = 1;
        }
    return m;
}

/* The [N, n, n] matrix of Σ_j a_tj b_ij e^{x_tj − y_ij} over the pairs with
 * t − i ≥ near (t − i ≥ 0 the reads, > 0 the solve): through the factors of
 * (4), ea = a ⊙ e^{x − c̄} and eb = b ⊙ e^{c̄ − y}, where x_t − y_i sums at
 * least one log α, and as ⟨a_t, b_i⟩ where it is empty (x_t = y_i: the
 * diagonal of (6), the first subdiagonal of (5) without decay_first), not as
 * e^{x_t − c̄} e^{c̄ − x_t}, whose gradients in x_t would be two equal terms
 * of opposite sign (costing dα its relative precision at α near 0). */
static mi_tensor *decayed_pairs(mi_tensor *a, mi_tensor *ea, mi_tensor *b, mi_tensor *eb,
                                int64_t near, int64_t empty)
{
    mi_dtype dt = a->dtype;
    int64_t n = a->shape[1];
    mi_tensor *far = band(dt, n, empty + 1, n);
    mi_tensor *sum = far ? mi_mul(mi_matmul_t(ea, eb, false, true), far) : NULL;
    if (near > empty || !sum) return sum;
    mi_tensor *close = band(dt, n, near, empty);
    return close ? mi_add(sum, mi_mul(mi_matmul_t(a, b, false, true), close)) : NULL;
}

/* x [N, n, dv] as the solve's right-hand side [N, g, n, m]: [N, 1, n, dv],
 * or [N, dv, n, 1] with a β per value row (one rule per row of S). */
static mi_tensor *rows_of(mi_tensor *x, bool per_row)
{
    return per_row ? mi_unsqueeze(mi_transpose(x, 1, 2), -1) : mi_unsqueeze(x, 1);
}

static mi_tensor *unrows(mi_tensor *x, bool per_row)
{
    if (!x) return NULL;
    return per_row ? mi_transpose(mi_squeeze(x, -1), 1, 2) : mi_squeeze(x, 1);
}

/* Σ_{j<t} x_j (exclusive) along axis 1 of x [N, n, d], or Σ_{j>t} x_j
 * (reverse): x_t never enters position t, so its gradient there is not a
 * difference of two equal terms (a subtraction c_t − x_t would cost dα
 * its relative precision at α near 0). */
static mi_tensor *cumsum_exclusive(mi_tensor *x, bool reverse)
{
    int64_t n = x->shape[1];
    if (n == 1) return mi_mul_scalar(x, 0);
    mi_tensor *part = reverse ? mi_slice(x, 1, 1, n) : mi_slice(x, 1, 0, n - 1);
    return mi_cumsum(mi_pad(part, 1, reverse ? 0 : 1, reverse ? 1 : 0), 1, reverse);
}

/* One block of n tokens as (5)–(7), or its two halves where its span is
 * over the limit. */
static int dplr_block(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                      mi_tensor *beta, mi_tensor *alpha, bool decay_first, mi_tensor **y)
{
    mi_dtype dt = k->dtype;
    int64_t n_seq = k->shape[0], n = k->shape[1], dk = k->shape[2], dv = v->shape[2];
    double tiny = dt == MI_F64 ? DBL_MIN : FLT_MIN;
    mi_tensor *la = mi_log(mi_clamp(alpha, tiny, HUGE_VAL));
    mi_tensor *c = mi_cumsum(la, 1, false);             /* c_t [N, n, dk] */
    mi_tensor *r = decay_first ? c : cumsum_exclusive(la, false); /* r_t: c_t or c_{t−1} */
    double span = 0;
    mi_tensor *ref = r && c ? reference(r, c, &span) : NULL;
    if (!ref) return -1;
    if (n > 1 && span > span_limit(dt)) {
        int64_t h = n / 2;
        mi_tensor *y0 = NULL, *y1 = NULL;
#define HALF(x, a, b) ((x) ? mi_slice((x), 1, (a), (b)) : NULL)
        if (dplr_block(state, HALF(q, 0, h), HALF(k, 0, h), HALF(v, 0, h), HALF(beta, 0, h),
                       HALF(alpha, 0, h), decay_first, y ? &y0 : NULL) != 0 ||
            dplr_block(state, HALF(q, h, n), HALF(k, h, n), HALF(v, h, n), HALF(beta, h, n),
                       HALF(alpha, h, n), decay_first, y ? &y1 : NULL) != 0)
            return -1;
#undef HALF
        if (y && !(*y = mi_concat((mi_tensor *[]){y0, y1}, 2, 1))) return -1;
        return 0;
    }
    bool per_row = beta->rank == 3;
    mi_tensor *bcol = per_row ? mi_unsqueeze(mi_transpose(beta, 1, 2), -1)
                              : mi_unsqueeze(mi_unsqueeze(beta, 1), -1); /* [N, g, n, 1] */
    mi_tensor *cn = mi_slice(c, 1, n - 1, n);                            /* c_n [N, 1, dk] */
    mi_tensor *kc = mi_mul(k, mi_exp(mi_sub(ref, c)));
    mi_tensor *s0 = mi_reshape(*state, 3, (int64_t[]){n_seq, dv, dk});
    if (!kc || !s0) return -1;

    /* (5): the pseudo-values U [N, g, n, m]; r_t − c_{t−1} is empty without decay_first */
    mi_tensor *kr = mi_mul(k, mi_exp(mi_sub(r, ref)));
    mi_tensor *a = mi_unsqueeze(decayed_pairs(k, kr, k, kc, 1, decay_first ? 0 : 1), 1);
    mi_tensor *ks = mi_matmul_t(mi_mul(k, mi_exp(r)), s0, false, true);
    mi_tensor *u = mi_tri_solve(mi_mul(bcol, a), mi_mul(bcol, rows_of(mi_sub(v, ks), per_row)),
                                false);
    if (!u) return -1;

    /* (6): the reads */
    if (y) {
        mi_tensor *qc = mi_mul(q, mi_exp(mi_sub(c, ref)));
        mi_tensor *att = mi_unsqueeze(decayed_pairs(q, qc, k, kc, 0, 0), 1);
        mi_tensor *qs = mi_matmul_t(mi_mul(q, mi_exp(c)), s0, false, true);
        *y = mi_add(qs, unrows(mi_matmul(att, u), per_row));
        if (!*y) return -1;
    }

    /* (7): the state at the block's end */
    mi_tensor *k_end = mi_mul(k, mi_exp(cumsum_exclusive(la, true))); /* e^{c_n − c_i} */
    mi_tensor *sum = mi_matmul_t(unrows(u, per_row), k_end, true, false);  /* [N, dv, dk] */
    mi_tensor *s_n = mi_add(mi_mul(s0, mi_exp(cn)), sum);
    *state = mi_reshape(s_n, 4, (int64_t[]){n_seq, 1, dv, dk});
    return *state ? 0 : -1;
}

int delta_chunk_dplr(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v, mi_tensor *beta,
                     mi_tensor *alpha, bool decay_first, mi_tensor **y)
{
    if (!*state || !k || !v || !beta || !alpha || (y && !q)) return -1;
    if (alpha->rank != 3 || alpha->shape[2] != k->shape[2] || alpha->shape[1] != k->shape[1] ||
        (y && q->shape[1] != k->shape[1])) {
        mi_error_set("delta_chunk_dplr: α must be [N, n, dk] over the chunk's n tokens, one "
                     "read per token");
        return -1;
    }
    return dplr_block(state, q, k, v, beta, alpha, decay_first, y);
}
