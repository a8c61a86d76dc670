/* The exact chunkwise form of the delta rule: chunks of b tokens computed
 * in parallel, equal to the b = 1 recurrence up to rounding.
 *
 * The recurrence (memory S ∈ R^{dv×dk} acting on keys, M(k) = S k; read after
 * write), per write position t:
 *   S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ      (decay_first: gated DeltaNet)
 *   S_t = α_t S_{t−1} − β_t (S_{t−1} k_t − v_t) k_tᵀ          (otherwise)
 *   y_t = S_t q_t
 * β_t = η_t (gd) or η_t / (1 + η_t ‖k_t‖²) (implicit, Longhorn); α ≡ 1 with
 * retention none. Both rules are S_t = α_t S_{t−1} + u_t k_tᵀ with
 *   u_t = β_t (v_t − ρ_t S_{t−1} k_t),   ρ_t = α_t (decay_first) or 1,
 * and with delta_write=unit (the write v_t k_tᵀ unscaled, models.h)
 *   u_t = v_t − β_t ρ_t S_{t−1} k_t.
 * In a chunk that starts from S_0, with γ_t = Π_{j≤t} α_j:
 *   S_t = γ_t S_0 + Σ_{i≤t} (γ_t/γ_i) u_i k_iᵀ                                        (1)
 * and with r_t = ρ_t γ_{t−1} (γ_t with decay_first, γ_{t−1} otherwise)
 *   u_t + β_t Σ_{i<t} (r_t/γ_i) (k_tᵀ k_i) u_i = β_t (v_t − r_t S_0 k_t)
 * (unit write: = v_t − β_t r_t S_0 k_t, the left side the same).
 * With the rows of U, V, K, Q as matrices this is the WY representation and
 * UT transform of "Parallelizing Linear Transformers with the Delta Rule
 * over Sequence Length" (§3, its chunkwise parallel form), with the decays
 * of "Gated Delta Networks" (the gated delta rule's chunkwise form):
 *   (I + StrictLower(diag(β) (Γʳ ⊙ K Kᵀ))) U = diag(β) (V − diag(r) K S_0ᵀ)             (2)
 *                                  (unit write: = V − diag(β) diag(r) K S_0ᵀ)
 *   Y   = diag(γ) Q S_0ᵀ + (Lower(Γ ⊙ Q Kᵀ)) U                                            (3)
 *   S_n = γ_n S_0 + Uᵀ diag(γ_n/γ) K                                                      (4)
 * with Γʳ_ti = r_t/γ_i (i < t) and Γ_ti = γ_t/γ_i (i ≤ t). (2) is one
 * unit-lower-triangular solve (the tri_solve op, so the pseudo-values U =
 * T (V − diag(r) K S_0ᵀ), T the UT transform's matrix, are never formed as T);
 * the rest are matmuls. The ratios are exp of differences of the cumulative
 * log decay c_t = Σ_{j≤t} log α_j, masked to i ≤ t before the exp (so no
 * ratio overflows, and no γ underflows over a long chunk): Γ_ti = exp(c_t −
 * c_i), r_t = exp(c_t) or exp(c_t − log α_t). α is clamped to the smallest
 * normal number before its log (α = 0 exactly would give −∞ − (−∞)).
 *
 * Channel-wise gates (Longhorn's β per value channel; RWKV-7's α per value
 * row, as the MIRAS table writes it, Diag(α_t) S_{t−1}) scale the rows of S
 * while (I − β k kᵀ) acts on its columns: each row of S runs a scalar delta
 * rule of its own, so (2)–(4) batch over the dv rows (a solve per row with
 * one column). A channel-wise α on the key axis (alpha_on_keys, S Diag(α))
 * does not commute with k kᵀ: those chunks take the diagonal-plus-low-rank
 * form of recurrence_dplr.c (one write per token; multistep keeps the
 * mini-batch rule).
 *
 * Multistep (DeltaProduct's Householder products): the same rule over the
 * write positions (steps per token); y is read after each token's last
 * position p(t), so (3) takes rows p(t) of γ and Γ and the mask i ≤ p(t). */
#include <float.h>
#include <math.h>

#include "recurrence_delta.h"

const char *delta_exact_missing(const mi_miras *m)
{
    if (m->memory->rule != MI_MEMORY_RULE_MATRIX) return "it needs memory=matrix";
    if (m->bias->rule != MI_BIAS_RULE_RESIDUAL) return "it needs bias=l2";
    if (m->retention->rule != MI_RETENTION_RULE_DECAY) return "it needs retention none or l2";
    if (!m->algorithm->delta_rule)
        return m->algorithm->uses_mu ? "momentum has no delta-rule form"
                                     : "the learning algorithm has no delta-rule form";
    return NULL;
}

int delta_exact_choose(const mi_miras *m, const mi_tensor *alpha)
{
    const mi_miras_config *c = &m->config;
    if (c->form == MI_FORM_MINIBATCH || c->chunk <= 1) return 0;
    const char *why = delta_exact_missing(m);
    if (!why && c->alpha_on_keys && alpha && alpha->rank == 3 && m->algorithm->multistep)
        why = "a channel-wise decay on the key axis (alpha_on_keys) has its chunkwise form for "
              "one write per token only, not multistep";
    if (!why && c->alpha_on_keys && alpha && alpha->rank == 3 && c->delta_write == MI_DELTA_WRITE_UNIT)
        why = "a channel-wise decay on the key axis (alpha_on_keys) has its chunkwise form for "
              "the write beta v k^T only, not delta_write=unit";
    if (!why) return 1;
    if (c->form != MI_FORM_EXACT) return 0;
    mi_error_set("miras: form=exact: no exact chunkwise form for %s/%s/%s/%s: %s (form=auto "
                 "falls back to the mini-batch rule)", m->memory->name, m->bias->name,
                 m->retention->name, c->algorithm, why);
    return -1;
}

/* x [N, n, dv] in the solve's layout [N, g, n, m]: [N, 1, n, dv] for scalar
 * gates, [N, dv, n, 1] (one delta rule per row of S) for channel-wise ones. */
static mi_tensor *to_rows(mi_tensor *x, bool channel)
{
    if (!x) return NULL;
    return channel ? mi_unsqueeze(mi_transpose(x, 1, 2), -1) : mi_unsqueeze(x, 1);
}

static mi_tensor *from_rows(mi_tensor *x, bool channel)
{
    if (!x) return NULL;
    return channel ? mi_transpose(mi_squeeze(x, -1), 1, 2) : mi_squeeze(x, 1);
}

/* A gate [N, n] or [N, n, dv] as a column [N, 1, n, 1] or [N, dv, n, 1]. */
static mi_tensor *gate_column(mi_tensor *g)
{
    if (!g) return NULL;
    return g->rank == 3 ? mi_unsqueeze(mi_transpose(g, 1, 2), -1)
                        : mi_unsqueeze(mi_unsqueeze(g, 1), -1);
}

/* Rows p(t) = t·steps + steps − 1 of a column [N, g, n, 1]: [N, g, n/steps, 1]. */
static mi_tensor *last_rows(mi_tensor *x, int steps)
{
    if (!x || steps == 1) return x;
    int64_t shape[4] = {x->shape[0], x->shape[1], x->shape[2] / steps, steps};
    return mi_slice(mi_reshape(x, 4, shape), 3, steps - 1, steps);
}

/* A constant [rows, cols] mask: 1 where i < limit(t), limit(t) = t (strict
 * lower) or (t + 1)·steps (position i written by token t's last step). */
static mi_tensor *mask(mi_dtype dt, int64_t rows, int64_t cols, int steps, bool strict)
{
    mi_tensor *m = mi_zeros(dt, 2, (int64_t[]){rows, cols});
    if (!m) return NULL;
    for (int64_t t = 0; t < rows; t++) {
        int64_t limit = strict ? t : (t + 1) * steps;
        for (int64_t i = 0; i < limit && i < cols; i++) {
            if (dt == MI_F64) ((double *)m->data)[t * cols + i] = 1;
            else ((float *)m->data)[t * cols + i] = 1;
        }
    }
    return m;
}

/* exp(a_t − b_i) where the mask is 1, the mask's 0 elsewhere:
 * a [N, g, rows, 1], b [N, g, n, 1], mask [rows, n]. */
static mi_tensor *ratios(mi_tensor *a, mi_tensor *b, mi_tensor *msk)
{
    mi_tensor *d = mi_sub(a, mi_transpose(b, 2, 3));
    return mi_mul(mi_exp(mi_mul(d, msk)), msk);
}

/* β: the algorithm's rate η' (η, or Longhorn's implicit step η / (1 + η‖k‖²)) */
static mi_tensor *delta_beta(const mi_miras *m, mi_tensor *k, mi_tensor *eta)
{
    return m->algorithm->rate ? m->algorithm->rate(eta, k) : eta;
}

static int chunk_wy(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                    mi_tensor *beta, mi_tensor *alpha, bool decay_first, bool unit, int steps,
                    mi_tensor *ks, const delta_wy_decays *dec, mi_tensor **y);

int delta_chunk_exact(const mi_miras *m, mi_tensor **state, mi_tensor *q, mi_tensor *k,
                      mi_tensor *v, mi_tensor *eta, mi_tensor *alpha, int steps, mi_tensor **y)
{
    if (!k || !eta) return -1;
    if (m->config.alpha_on_keys && alpha && alpha->rank == 3)
        return delta_chunk_dplr(state, q, k, v, delta_beta(m, k, eta), alpha,
                                m->config.decay_first, y);
    mi_tensor *beta = delta_beta(m, k, eta);
    if (!beta) return -1;
    return chunk_wy(state, q, k, v, beta, alpha, m->config.decay_first,
                    m->config.delta_write == MI_DELTA_WRITE_UNIT, steps, NULL, NULL, y);
}

int delta_chunk_wy(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v, mi_tensor *beta,
                   mi_tensor *alpha, bool decay_first, int steps, mi_tensor *ks,
                   const delta_wy_decays *dec, mi_tensor **y)
{
    return chunk_wy(state, q, k, v, beta, alpha, decay_first, false, steps, ks, dec, y);
}

int delta_wy_decays_of(mi_tensor *alpha, bool decay_first, delta_wy_decays *dec)
{
    if (!alpha) return -1;
    int64_t n = alpha->shape[1];
    mi_dtype dt = alpha->dtype;
    double tiny = dt == MI_F64 ? DBL_MIN : FLT_MIN;
    mi_tensor *strict = mask(dt, n, n, 1, true);
    mi_tensor *la = mi_log(mi_clamp(gate_column(alpha), tiny, HUGE_VAL));
    mi_tensor *cum = mi_cumsum(la, 2, false);
    mi_tensor *cr = decay_first ? cum : mi_sub(cum, la), *cn = mi_slice(cum, 2, n - 1, n);
    *dec = (delta_wy_decays){.cum = cum,
                             .gamma_r = mi_exp(cr),
                             .ratio_r = strict ? ratios(cr, cum, strict) : NULL,
                             .gamma_n = mi_exp(cn),
                             .to_end = mi_exp(mi_sub(cn, cum))};
    return dec->gamma_r && dec->ratio_r && dec->gamma_n && dec->to_end ? 0 : -1;
}

static int chunk_wy(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                    mi_tensor *beta, mi_tensor *alpha, bool decay_first, bool unit, int steps,
                    mi_tensor *ks, const delta_wy_decays *dec, mi_tensor **y)
{
    mi_tensor *s0 = *state;
    if (!s0 || !k || !v || (y && !q)) return -1;
    mi_dtype dt = k->dtype;
    int64_t n_seq = k->shape[0], n = k->shape[1], dv = v->shape[2], dk = k->shape[2];
    int64_t nt = n / steps;
    bool channel = (beta && beta->rank == 3) || (alpha && alpha->rank == 3);
    if (beta && !(beta = gate_column(beta))) return -1;   /* NULL: β ≡ 1 */

    /* the decays: c_t = Σ_{j≤t} log α_j and the ratios of (2)–(4), the
       reads' (3) only where y is asked for */
    delta_wy_decays own = {0};
    if (alpha && !dec) {
        if (delta_wy_decays_of(alpha, decay_first, &own) != 0) return -1;
        dec = &own;
    }
    mi_tensor *reads = y ? mask(dt, nt, n, steps, false) : NULL, *gamma_y = NULL, *ratio_y = NULL;
    if (y && !reads) return -1;
    if (y && alpha) {
        mi_tensor *cy = last_rows(dec->cum, steps);
        gamma_y = mi_exp(cy);
        ratio_y = ratios(cy, dec->cum, reads);
        if (!gamma_y || !ratio_y) return -1;
    }

    /* (2): the pseudo-values U [N, g, n, m] */
    mi_tensor *s0m = mi_squeeze(s0, 1);                         /* [N, dv, dk] */
    mi_tensor *k4 = mi_unsqueeze(k, 1);                         /* [N, 1, n, dk] */
    mi_tensor *kk = mi_matmul_t(k4, k4, false, true);           /* K Kᵀ [N, 1, n, n] */
    mi_tensor *lower = alpha ? mi_mul(dec->ratio_r, kk) : kk;
    if (beta) lower = mi_mul(beta, lower);
    ks = to_rows(ks ? ks : mi_matmul_t(k, s0m, false, true), channel); /* K S_0ᵀ */
    if (alpha) ks = mi_mul(dec->gamma_r, ks);
    mi_tensor *rhs = mi_sub(to_rows(v, channel), unit && beta ? mi_mul(beta, ks) : ks);
    if (beta && !unit) rhs = mi_mul(beta, rhs);
    mi_tensor *u = mi_tri_solve(lower, rhs, false);
    if (!u) return -1;

    /* (3): the reads */
    if (y) {
        mi_tensor *q4 = mi_unsqueeze(q, 1);
        mi_tensor *qk = mi_matmul_t(q4, k4, false, true);      /* Q Kᵀ [N, 1, nt, n] */
        mi_tensor *att = mi_mul(qk, alpha ? ratio_y : reads);
        mi_tensor *qs = to_rows(mi_matmul_t(q, s0m, false, true), channel);
        if (alpha) qs = mi_mul(gamma_y, qs);
        *y = from_rows(mi_add(qs, mi_matmul(att, u)), channel);
        if (!*y) return -1;
    }

    /* (4): the state at the chunk's end, [N, 1, dv, dk]: γ_n ⊙ S_0 + Σ_t ũ_tᵀ k_t
     * (ũ_t = u_t ⊙ to_end_t) as one product into γ_n ⊙ S_0, one pass over the
     * state (mi_matmul_acc_gated); the product's rows [N, g, r, dk] are the
     * state's [N, 1, dv, dk] (g·r = dv) */
    mi_tensor *w = alpha ? mi_mul(u, dec->to_end) : u;
    if (!w) return -1;
    int64_t g = w->shape[1], r = w->shape[3];
    mi_tensor *c = mi_reshape(s0, 4, (int64_t[]){s0->shape[0], g, r, dk});
    mi_tensor *end = alpha ? mi_matmul_acc_gated(c, dec->gamma_n, w, k4, true, false, 1)
                           : mi_matmul_acc(c, w, k4, true, false, 1);
    *state = mi_reshape(end, 4, (int64_t[]){n_seq, 1, dv, dk});
    return *state ? 0 : -1;
}

/* ---------------------------------------------------------------- the fused per-token path
 * With b = 1 (and in the one-token step of generation) a matrix memory with
 * bias l2 or dot, retention none or l2 (one α per head) and gd or implicit GD
 * is one delta_scan op over the sequence, not ~10 ops per token:
 *   S_t = α_t S_{t−1} − β_t (S_{t−1} k_t − v_t) k_tᵀ        (l2)
 *   S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ      (l2, decay_first)
 *   S_t = α_t S_{t−1} + β_t v_t k_tᵀ                         (dot: Hebbian)
 * (delta_write=unit: v_t k_tᵀ in place of β_t v_t k_tᵀ in the two l2 rules)
 * with β_t = η_t, or η_t / (1 + η_t ‖k_t‖²) for implicit, and α ≡ 1 for
 * retention none; y_t = S_t q_t. Gates per head [N, T] or per value row
 * [N, T, dv] (Diag(α_t) S_{t−1}), or α per key channel [N, T, dk]
 * (alpha_on_keys: S_{t−1} Diag(α_t), the op's ALPHA_KEYS flag). Momentum,
 * multistep and every other component keep the
 * composed path, and so does materialize=true (the tests' reference). Not
 * differentiable twice. The components are known by the rules they declare
 * (components.h: matrix, residual or hebbian, decay), a user's as a built-in's. */
bool delta_fused_rule(const mi_miras *m, const mi_miras_gates *gt, mi_delta_rule *rule)
{
    const mi_miras_config *c = &m->config;
    bool l2 = m->bias->rule == MI_BIAS_RULE_RESIDUAL, dot = m->bias->rule == MI_BIAS_RULE_HEBBIAN;
    if (c->materialize || m->memory->rule != MI_MEMORY_RULE_MATRIX || (!l2 && !dot) ||
        m->retention->rule != MI_RETENTION_RULE_DECAY ||
        !m->algorithm->delta_rule || m->algorithm->multistep)
        return false;
    *rule = dot ? MI_DELTA_RULE_HEBBIAN
                : c->decay_first ? MI_DELTA_RULE_DECAY_FIRST : MI_DELTA_RULE_DELTA;
    bool keys = m->retention->uses_alpha && c->alpha_on_keys && gt->alpha->rank == 3;
    bool unit = c->delta_write == MI_DELTA_WRITE_UNIT;
    if (keys && unit) return false; /* no kernel: the composed per-token ops */
    if (keys) *rule = (mi_delta_rule)(*rule | MI_DELTA_RULE_ALPHA_KEYS);
    if (unit) *rule = (mi_delta_rule)(*rule | MI_DELTA_RULE_UNIT_WRITE);
    return true;
}

/* The exact chunkwise form and the per-token scan compute the same
 * recurrence; which is faster depends on the state's size. One BENCH layer
 * of gated DeltaNet (B 4, H 4, T 512, forward + backward, one thread),
 * per-token scan against chunks of 16 / 64, ms: heads of 16: 4.6 against
 * 6.8 / 8.1 (the scan's REF loops); of 32: 8.5 (OWN loops) against 11.7 /
 * 12.5; of 48 and 64 the scan's REF loops took 25.7 and 44.0 against 17.2
 * and 21.5, and the OWN loops are about 1.5 times faster than REF, so even
 * near 48 and behind at 64. The scan also keeps only its inputs and output
 * for the backward (34 against 74 MB at heads of 32). */
#define DELTA_SCAN_MAX_STATE (48 * 48)

bool delta_fused_choose(const mi_miras *m, const mi_miras_gates *gt, int64_t dk, int64_t dv,
                        mi_delta_rule *rule)
{
    const mi_miras_config *c = &m->config;
    /* A Hebbian chunk (dot bias: the gradient −v kᵀ does not read the state)
     * is the recurrence itself at any chunk size. With channel-wise gates
     * (GLA's and HGRN2's key-side decay, Mamba's per-channel step) its only
     * other form keeps a copy of the state per token, so the scan runs it
         * whatever the state's size (one layer as above, chunks of 16: Mamba
     * 231 ms and 161 MB through the copies, 34 ms and 48 MB through the
     * scan). With gates per head the chunked linear attention of
     * recurrence.c is faster than the scan (linear attention: 25 against
     * 34 ms). */
    bool hebbian = m->bias->rule == MI_BIAS_RULE_HEBBIAN;
    bool channels = (gt->eta && gt->eta->rank == 3) || (gt->alpha && gt->alpha->rank == 3);
    bool scan_chunks = hebbian ? channels
                               : dk * dv <= DELTA_SCAN_MAX_STATE && !delta_exact_missing(m);
    if (c->chunk > 1 && (c->form != MI_FORM_AUTO || m->algorithm->multistep || !scan_chunks))
        return false;
    return delta_fused_rule(m, gt, rule);
}

/* The tokens of q, k, v and the gates from the state *a [N, 1, dv, dk],
 * which is replaced by the state after the last token; y [N, T, dv]. */
mi_tensor *delta_fused_scan(const mi_miras *m, mi_delta_rule rule, mi_tensor **a, mi_tensor *q,
                            mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt)
{
    int64_t n_seq = k->shape[0], n = k->shape[1], dk = k->shape[2], dv = v->shape[2];
    mi_tensor *beta = delta_beta(m, k, gt->eta);
    mi_tensor *alpha = m->retention->uses_alpha ? gt->alpha
                                                : mi_ones(v->dtype, 2, (int64_t[]){n_seq, n});
    mi_tensor *s0 = mi_reshape(*a, 3, (int64_t[]){n_seq, dv, dk}), *s_end = NULL;
    mi_tensor *y = mi_delta_scan(s0, q, k, v, beta, alpha, rule, &s_end);
    if (!y || !(*a = mi_reshape(s_end, 4, (int64_t[]){n_seq, 1, dv, dk}))) return NULL;
    return y;
}
