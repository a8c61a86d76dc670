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
 *   s_lo = max_j (P_j/c')^(1/p) − Δ_j   (term j alone reaches c' there)
 *   s_hi = (Σ_j P_j / c')^(1/p)         (every y_j ≥ s)
 *
 * Each round takes a Newton step from s_lo, s ← s + (r − 1)/m with
 * r = (φ/c')^(1/p) = h(root)/h(s) and m = Σ_j ω_j/y_j = h'/h, ω the
 * softmax of log(P_j y_j^(−p)): h concave and s left of the root, the step
 * lands left of it again, never past it. Then the geometric midpoint
 * √(s_lo s_hi) replaces s_lo if it is left of the root (φ ≥ c'), s_hi if
 * not, halving log(s_hi/s_lo), so a Newton step that starts on a steep
 * stretch of h cannot stall. The rounds run, unrecorded, until a Newton
 * step moves s by less than the dtype's rounding (64 at most); then one
 * recorded Newton step from that s gives s to the graph: at the root its
 * derivative is the implicit one, ds/dθ = −(∂φ/∂θ)/(∂φ/∂s), so gradients
 * flow through ζ without the rounds. W = c · softmax_j(D_j − p log y_j),
 * whose rows sum to c whatever the solver's residual. */
#include <float.h>
#include <math.h>

#include "models.h"

enum { SOLVER_ROUNDS = 64 };

static mi_tensor *fdiv_init(const mi_miras_config *c, mi_tensor *w0)
{
    return mi_add_scalar(mi_log_softmax(w0, -1), log(c->kl_scale));
}

/* W from a state with nothing written (U = 0): g(−ζ) is one number per row,
 * so W = c · softmax(L). */
static mi_tensor *fdiv_read(const mi_miras_config *c, mi_tensor *l)
{
    return mi_mul_scalar(mi_softmax(l, -1), c->kl_scale);
}

static double power_of(const mi_miras_config *c)
{
    return c->f_div == MI_F_DIV_INVERSE ? 1 : 2;
}

/* log(P_j y_j^(−p)) = D_j − p log(s + Δ_j) */
static mi_tensor *power_logits(mi_tensor *d, mi_tensor *delta, mi_tensor *s, double p)
{
    return mi_sub(d, mi_mul_scalar(mi_log(mi_add(s, delta)), p));
}

/* One Newton step on h = φ^(−1/p): s + (r − 1)/m, r = (φ/c')^(1/p),
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

/* The rounds of the header's solver on values alone, in a scope of their
 * own: s [.., 1] left of the root to rounding, unrecorded. NULL on error. */
static mi_tensor *solve_rounds(mi_tensor *d, mi_tensor *delta, double p, double log_target)
{
    bool f64 = d->dtype == MI_F64;
    double tiny = f64 ? DBL_MIN : FLT_MIN, eps = f64 ? DBL_EPSILON : FLT_EPSILON;
    mi_scope *outer = mi_scope_current(), *tmp = mi_scope_new("f-div-solver");
    if (!tmp) return mi_error_set("f-div: out of memory"), NULL;
    bool recording = mi_set_grad_enabled(false);
    mi_scope_enter(tmp);
    mi_tensor *per_term = mi_exp(mi_mul_scalar(mi_add_scalar(d, -log_target), 1 / p));
    mi_tensor *lo = mi_clamp(mi_max(mi_sub(per_term, delta), -1, true), tiny, INFINITY);
    mi_tensor *hi = mi_exp(mi_mul_scalar(mi_add_scalar(mi_logsumexp(d, -1, true), -log_target),
                                         1 / p));
    mi_tensor *target = mi_scalar(d->dtype, log_target);
    for (int round = 0; round < SOLVER_ROUNDS && lo && hi; round++) {
        mi_tensor *next = mi_minimum(mi_maximum(newton_step(d, delta, lo, p, log_target), lo), hi);
        mi_tensor *moved = mi_max(mi_div(mi_sub(next, lo), next), MI_ALL, false);
        mi_tensor *mid = mi_sqrt(mi_mul(next, hi));
        mi_tensor *left = mi_ge(mi_logsumexp(power_logits(d, delta, mid, p), -1, true), target);
        if (!moved || !left) lo = NULL;
        else if (mi_get(moved, 0) <= eps) lo = next;
        else {
            lo = mi_where(left, mid, next);
            hi = mi_where(left, hi, mid);
            continue;
        }
        break;
    }
    mi_scope_leave();
    mi_scope_enter(outer);
    mi_tensor *s = lo ? mi_detach(lo) : NULL;
    mi_scope_leave();
    mi_scope_free(tmp);
    mi_set_grad_enabled(recording);
    return s;
}

/* log(W/c) per row, the logits of W = c · softmax, from the carried part D
 * and the state L = D + U: MIRAS eq:generalf-divergence,
 * W = exp(D) ⊙ g(U − ζ), normalised per row. */
static mi_tensor *fdiv_logits(const mi_miras_config *c, mi_tensor *d, mi_tensor *l)
{
    /* exp: W = exp(D) exp(U − ζ) = c · softmax(D + U), ζ = logsumexp(D + U) − log c */
    if (c->f_div == MI_F_DIV_EXP) return l;
    double p = power_of(c), log_target = log(c->kl_scale) - p * log(p);
    mi_tensor *u = mi_sub(l, d);
    bool recording = mi_set_grad_enabled(false);
    mi_tensor *u_max = mi_max(u, -1, true);
    mi_tensor *pole = u_max ? mi_detach(u_max) : NULL; /* a constant: no kink in the graph */
    mi_set_grad_enabled(recording);
    mi_tensor *delta = mi_sub(pole, u); /* Δ_j = max U − U_j */
    if (!delta) return NULL;
    mi_tensor *s = solve_rounds(d, delta, p, log_target);
    if (!s) return NULL;
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
    .uses_alpha = true, .lag_token = true,
};
