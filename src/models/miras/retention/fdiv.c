/* f-divergence retention over a scaled simplex (MIRAS "Alternative Retention
 * Gates", Variant 1, eq:generalf-divergence):
 *
 *   W_t = W_{t-1} ⊙ g(−ζ_t − η_t ∇ℓ(W_{t-1}; k_t, v_t)),   Σ_j (W_t)_ij = c
 *
 * the minimiser of ⟨W − W_{t-1}, ∇ℓ⟩ + (1/η_t) D_f(W, W_{t-1}) over the
 * weights whose rows lie on the simplex scaled by c (config kl_scale), with
 * D_f(W, W') = Σ W' f(W/W') and g the inverse of f'; ζ_t, the multiplier of
 * the row sums, makes each row sum to c. The config f_div picks g:
 *
 *   exp             g(u) = exp(u)         f(τ) = τ log τ         KL: Memora (retention kl)
 *   inverse         g(u) = 1/(1 − u)      f(τ) = τ − 1 − log τ   reverse KL, KL(W_{t-1} ‖ W)
 *   inverse-square  g(u) = 1/(1 − u/2)²   f(τ) = 2(√τ − 1)²      squared Hellinger, 2Σ(√W − √W')²
 *
 * (f(τ) = τ log τ gives g(u) = exp(u − 1); the constant goes into ζ.) The
 * last two are the α-divergences of index 0 and ½, g(u) = (1 − u/p)^(−p)
 * with p = 1 and 2: positive for u < p and → ∞ as u → p, so every row has
 * a ζ and every weight stays positive. (Index > 1, e.g. χ², gives a g that
 * reaches 0, and weights that leave the positive orthant: not offered.)
 *
 * The gate α decays the log-weights first, as Memora does (eq:xmodel, with
 * (1 − λ_t) = α_t):
 *
 *   W_t = W_{t-1}^α_t ⊙ g(−ζ_t − η_t ∇ℓ(W_{t-1}; k_t, v_t))
 *
 * With α ≡ 1 this is eq:generalf-divergence for every g; with g = exp it is
 * eq:xmodel for every α. For the other g the paper gives no global
 * retention; the power W^α (a decay toward the uniform row) is this
 * library's extension of it.
 *
 * State, as kl's: L = log W after every boundary, L_0 = log c +
 * log_softmax(W_0) (W_0 read as logits). Inside a segment (a chunk, or the
 * lag token) the linear part runs as for kl, L_t = α_t L_{t-1} − η_t ∇ℓ, so
 * L_t = D_t + U_t with D_t = ᾱ_t L_{t'} carried from the segment's start and
 * U_t the segment's summed step, and
 *
 *   W_t = exp(D_t) ⊙ g(U_t − ζ_t)   (read_split; boundary_split gives log W_t)
 *
 * With b = 1, D_t = α_t log W_{t-1} and U_t = −η_t ∇ℓ(W_{t-1}): the rule
 * above. With b > 1 a chunk's summed step goes through g once (the
 * mini-batch rule of "Parallelizable Training", with kl's lag token).
 *
 * The normaliser ζ, per row. exp has the closed form ζ = logsumexp(D + U)
 * − log c, so W = c · softmax(D + U) = c · softmax(L): kl's read exactly.
 * For g(u) = (1 − u/p)^(−p), with P = exp(D) and y_j = p − U_j + ζ,
 * W_j = P_j (y_j/p)^(−p) and ζ solves
 *
 *   φ = Σ_j P_j y_j^(−p) = c p^(−p) =: c',   every y_j > 0.
 *
 * φ falls with ζ; h = φ^(−1/p) (a weighted power mean of the y_j of order
 * −p) rises and is concave. Measured from the pole, y_j = s + Δ_j with
 * Δ_j = max U − U_j ≥ 0 and s > 0 (so a weight near the pole keeps its
 * precision), the root lies in
 *
 *   s_lo = the larger of max_j (P_j/c')^(1/p) − Δ_j (term j alone reaches c'
 *          there) and s_hi − Σ_j π_j Δ_j, π = P/ΣP (the power mean of the y_j
 *          is below their mean)
 *   s_hi = (Σ_j P_j / c')^(1/p)   (every y_j ≥ s)
 *
 * Each round takes a Newton step from s_lo, s ← s + (r − 1)/m with
 * r = (φ/c')^(1/p) = h(root)/h(s) and m = Σ_j ω_j/y_j = h'/h, ω the
 * softmax of log(P_j y_j^(−p)): h concave and s left of the root, the step
 * lands left of it again, never past it. While the steps are large, the
 * geometric midpoint √(s s_hi) then replaces s if it is left of the root
 * (φ ≥ c'), s_hi if not, halving log(s_hi/s), so a start on a steep stretch
 * of h, where Newton steps only double s, takes a few rounds, not dozens.
 * The rounds run on the values, row by row in double, until a Newton step
 * moves s by less than rounding (64 at most; at most 7 in the tests); then one
 * Newton step from that s, as recorded ops, gives s to the graph: at the
 * root its derivative is the implicit one, ds/dθ = −(∂φ/∂θ)/(∂φ/∂s), so
 * gradients flow through ζ without the rounds. W = c · softmax_j(D_j −
 * p log y_j), whose rows sum to c whatever the solver's residual. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "components.h"

typedef struct fdiv_params {
    int g;  /* MI_F_DIV_* (models.h) */
} fdiv_params;

/* Index = the enum's value (models.h). */
static const char *const f_divs[] = {"exp", "inverse", "inverse-square", NULL};

static const mi_field fdiv_fields[] = {
    MI_FIELD_CHOICE_AT(fdiv_params, "f_div", g, "exp", f_divs,
                       "f-div: g, the inverse of f' (exp: KL)"),
};

enum { SOLVER_ROUNDS = 64 }; /* at most; a few in practice */

static mi_tensor *fdiv_init(const mi_miras_config *c, mi_tensor *w0)
{
    return mi_add_scalar(mi_log_softmax(w0, -1), log(c->kl_scale));
}

/* W from a state with nothing written (U = 0): g(−ζ) is one number per row,
 * so W = c · softmax(L). */
static mi_tensor *fdiv_read(const mi_miras_config *c, mi_tensor *l, mi_tensor *eta)
{
    return mi_mul_scalar(mi_softmax(l, -1), c->kl_scale);
}

static int g_of(const mi_miras_config *c)
{
    fdiv_params p;
    memcpy(&p, &c->retention_params, sizeof p);
    return p.g;
}

static double power_of(const mi_miras_config *c)
{
    return g_of(c) == MI_F_DIV_INVERSE ? 1 : 2;
}

/* log(P_j y_j^(−p)) = D_j − p log(s + Δ_j) */
static mi_tensor *power_logits(mi_tensor *d, mi_tensor *delta, mi_tensor *s, double p)
{
    return mi_sub(d, mi_mul_scalar(mi_log(mi_add(s, delta)), p));
}

/* One Newton step on h = φ^(−1/p), as ops: s + (r − 1)/m, r = (φ/c')^(1/p),
 * m = Σ_j ω_j / y_j. */
static mi_tensor *newton_step(mi_tensor *d, mi_tensor *delta, mi_tensor *s, double p,
                              double log_target)
{
    mi_tensor *y = mi_add(s, delta);
    mi_tensor *logits = mi_sub(d, mi_mul_scalar(mi_log(y), p));
    mi_tensor *lse = mi_logsumexp(logits, -1, true);
    mi_tensor *r = mi_exp(mi_mul_scalar(mi_add_scalar(lse, -log_target), 1 / p));
    mi_tensor *m = mi_sum(mi_div(mi_exp(mi_sub(logits, lse)), y), -1, true);
    return mi_add(s, mi_div(mi_add_scalar(r, -1), m));
}

/* log φ(s) = logsumexp_j (d_j − p log(s + Δ_j)) for one row, and with m
 * non-NULL m = Σ_j ω_j / y_j there; t holds n terms of scratch. */
static double row_log_phi(const double *d, const double *delta, int64_t n, double s, double p,
                          double *t, double *m)
{
    double top = -INFINITY, z = 0, zm = 0;
    for (int64_t j = 0; j < n; j++) {
        t[j] = d[j] - p * log(s + delta[j]);
        if (t[j] > top) top = t[j];
    }
    for (int64_t j = 0; j < n; j++) {
        double e = exp(t[j] - top);
        z += e;
        if (m) zm += e / (s + delta[j]);
    }
    if (m) *m = zm / z;
    return top + log(z);
}

/* The header's solver for one row, in double: s > 0 with φ(s) = c', left
 * of the root to rounding. */
static double row_solve(const double *d, const double *delta, int64_t n, double p,
                        double log_target, double *t)
{
    double lo = DBL_MIN, top = -INFINITY, z = 0, mean_delta = 0;
    for (int64_t j = 0; j < n; j++) {
        lo = fmax(lo, exp((d[j] - log_target) / p) - delta[j]);
        top = fmax(top, d[j]);
    }
    for (int64_t j = 0; j < n; j++) {
        double e = exp(d[j] - top);
        z += e;
        mean_delta += e * delta[j];
    }
    double hi = exp((top + log(z) - log_target) / p);
    lo = fmax(lo, hi - mean_delta / z);
    for (int round = 0; round < SOLVER_ROUNDS; round++) {
        double m, r = exp((row_log_phi(d, delta, n, lo, p, t, &m) - log_target) / p);
        double next = fmin(fmax(lo + (r - 1) / m, lo), hi);
        if (next - lo <= DBL_EPSILON * next) return next;
        if (next - lo < 1e-3 * next) { /* Newton is close: it converges quadratically */
            lo = next;
            continue;
        }
        double mid = sqrt(next * hi);
        if (row_log_phi(d, delta, n, mid, p, t, NULL) >= log_target) lo = mid;
        else lo = next, hi = mid;
    }
    return lo;
}

/* s and the pole max_j U_j of every row, [.., 1] in d's dtype, from the
 * values of d and u (same shape) alone: constants of the graph. */
static int solve_rows(mi_tensor *d, mi_tensor *u, double p, double log_target, mi_tensor **s,
                      mi_tensor **pole)
{
    mi_tensor *d64 = d->dtype == MI_F64 ? d : mi_tensor_to(d, MI_F64);
    mi_tensor *u64 = u->dtype == MI_F64 ? u : mi_tensor_to(u, MI_F64);
    if (!d64 || !u64) return -1;
    int64_t n = u->shape[u->rank - 1], rows = u->numel / n;
    const double *dv = d64->data, *uv = u64->data;
    double *delta = malloc(sizeof(double) * (size_t)n * 2); /* Δ, then scratch */
    double *out = malloc(sizeof(double) * (size_t)rows * 2);
    if (!delta || !out) {
        free(delta), free(out);
        return mi_error_set("f-div: out of memory"), -1;
    }
    for (int64_t row = 0; row < rows; row++) {
        const double *dr = dv + row * n, *ur = uv + row * n;
        double top = -INFINITY;
        for (int64_t j = 0; j < n; j++) top = fmax(top, ur[j]);
        for (int64_t j = 0; j < n; j++) delta[j] = top - ur[j];
        out[row] = row_solve(dr, delta, n, p, log_target, delta + n);
        out[rows + row] = top;
    }
    int64_t shape[MI_MAX_RANK];
    memcpy(shape, u->shape, sizeof shape);
    shape[u->rank - 1] = 1;
    mi_tensor *s64 = mi_from_buffer(MI_F64, u->rank, shape, out);
    mi_tensor *pole64 = mi_from_buffer(MI_F64, u->rank, shape, out + rows);
    free(delta), free(out);
    *s = s64 ? mi_tensor_to(s64, d->dtype) : NULL;
    *pole = pole64 ? mi_tensor_to(pole64, d->dtype) : NULL;
    return *s && *pole ? 0 : -1;
}

/* log(W/c) per row, the logits of W = c · softmax, from the carried part D
 * and the state L = D + U: MIRAS eq:generalf-divergence,
 * W = exp(D) ⊙ g(U − ζ), normalised per row. */
static mi_tensor *fdiv_logits(const mi_miras_config *c, mi_tensor *d, mi_tensor *l)
{
    /* exp: W = exp(D) exp(U − ζ) = c · softmax(D + U), ζ = logsumexp(D + U) − log c */
    if (g_of(c) == MI_F_DIV_EXP) return l;
    /* nothing written (the read right after a boundary): g(−ζ) is one number per row */
    if (d == l) return l;
    double p = power_of(c), log_target = log(c->kl_scale) - p * log(p);
    mi_tensor *u = mi_sub(l, d), *s, *pole;
    if (u && d->numel != u->numel) d = mi_broadcast_to(d, u->rank, u->shape);
    if (!u || !d || solve_rows(d, u, p, log_target, &s, &pole) != 0) return NULL;
    mi_tensor *delta = mi_sub(pole, u); /* Δ_j = max U − U_j, the max a constant: no kink */
    s = newton_step(d, delta, s, p, log_target); /* recorded: the implicit derivative */
    return power_logits(d, delta, s, p);
}

static mi_tensor *fdiv_read_split(const mi_miras_config *c, mi_tensor *carried, mi_tensor *l)
{
    return mi_mul_scalar(mi_softmax(fdiv_logits(c, carried, l), -1), c->kl_scale);
}

/* L ← log W_t, the state the next segment starts from */
static mi_tensor *fdiv_boundary_split(const mi_miras_config *c, mi_tensor *carried, mi_tensor *l)
{
    return mi_add_scalar(mi_log_softmax(fdiv_logits(c, carried, l), -1), log(c->kl_scale));
}

const mi_retention_kind mi_retention_fdiv = {
    .name = "f-div",
    .formula = "W_t = W_{t-1}^alpha_t * g(-zeta_t - eta_t grad), rows summing to c",
    .init = fdiv_init, .read = fdiv_read,
    .read_split = fdiv_read_split, .boundary_split = fdiv_boundary_split,
    .uses_alpha = true, .lag_token = true, MI_PARAMS(fdiv_params, fdiv_fields),
};
