/* The rank-one chunk form of mi_miras_forward's chunked rule (see
 * recurrence.c's header for the rule, and the section below for the form). */
#include "recurrence_run.h"

/* ---------------------------------------------------------------- rank-one chunks
 * For a memory of matrices whose per-token gradients are rank one,
 * g_t = δ_t x_tᵀ (memory->grad_factors), a linear retention (no read, no
 * boundary) and gd or momentum, every state inside the chunk is
 *   A_t = c_t A_prev + d_t S_prev + Σ_{i≤t} C_{t,i} δ_i x_iᵀ
 * with c_t = ᾱ_t, d_t = Σ_{j≤t} (ᾱ_t/ᾱ_j) μ̄_j and C_{t,i} = −η_i Ac_{t,i}, where
 * Ac is the n×n matrix of the two scans (momentum over j, then retention)
 * run on the identity, so no per-token copy of W is built: a layer's
 * product with u_t is c_t A_prev u_t + d_t S_prev u_t + ((C ⊙ U Xᵀ) Δ)_t
 * (chunked linear attention), and the chunk's end state is one matmul.
 * A read that scales each weight, W_t = s(‖A_t‖²)·A_t (Moneta's ℓq
 * normalisation in the Frobenius form), multiplies each layer's product by s_t,
 * with ‖A_t‖² from the same factors (factored_sq_norm). */
typedef struct factored {
    mi_tensor *a[MI_MEMORY_MAX_WEIGHTS], *s[MI_MEMORY_MAX_WEIGHTS]; /* [N, out, in] */
    mi_tensor *c, *d;                        /* [N, n, 1] (c NULL: 1; d NULL: no momentum) */
    mi_tensor *coef;                         /* C, [N, n, n] */
    mi_tensor *delta[MI_MEMORY_MAX_WEIGHTS], *x[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *scale[MI_MEMORY_MAX_WEIGHTS]; /* s_t [N, n, 1] (NULL: W = A) */
} factored;

static mi_tensor *factored_linear(void *ctx, int l, mi_tensor *u)
{
    factored *f = ctx;
    mi_tensor *out = mi_matmul_t(u, f->a[l], false, true);
    if (f->c) out = mi_mul(f->c, out);
    if (f->d) out = mi_add(out, mi_mul(f->d, mi_matmul_t(u, f->s[l], false, true)));
    mi_tensor *att = mi_mul(f->coef, mi_matmul_t(u, f->x[l], false, true));
    out = mi_add(out, mi_matmul(att, f->delta[l]));
    return f->scale[l] ? mi_mul(f->scale[l], out) : out;
}

static bool scaled_read(const run *r)
{
    const mi_retention_kind *ret = r->m->retention;
    return ret->read && ret->read_is_scale && ret->read_scale && ret->read_is_scale(r->c);
}

/* ‖A_t‖_F² of one weight at every token of the chunk, [N, n, 1], from the
 * dual form A_t = B_t + Σ_{i≤t} C_{t,i} δ_i x_iᵀ with B_t = c_t A + d_t S:
 *   ‖A_t‖² = ‖B_t‖² + 2 Σ_i C_{t,i} δ_iᵀ B_t x_i + Σ_{i,j} C_{t,i} C_{t,j} (δ_i·δ_j)(x_i·x_j)
 * where ‖B_t‖² = c_t²‖A‖² + 2 c_t d_t ⟨A, S⟩ + d_t²‖S‖² and δ_iᵀ B_t x_i =
 * c_t δ_iᵀ A x_i + d_t δ_iᵀ S x_i: n×n Gram matrices, no n×out×in tensor. */
static mi_tensor *factored_sq_norm(const factored *f, int l)
{
    mi_tensor *A = f->a[l], *S = f->s[l], *D = f->delta[l], *X = f->x[l];
    uint32_t mat = (1u << 1) | (1u << 2);
    mi_tensor *gram = mi_mul(mi_matmul_t(D, D, false, true), mi_matmul_t(X, X, false, true));
    mi_tensor *sq = mi_sum(mi_mul(mi_matmul(f->coef, gram), f->coef), -1, true);
    /* δ_iᵀ A x_i for every i, [N, n, 1] */
    mi_tensor *hA = mi_sum(mi_mul(mi_matmul(D, A), X), -1, true);
    mi_tensor *cross = mi_matmul(f->coef, hA), *bb = mi_sum_axes(mi_square(A), mat, true);
    if (f->c) {
        cross = mi_mul(f->c, cross);
        bb = mi_mul(mi_square(f->c), bb);
    }
    if (f->d) {
        mi_tensor *hS = mi_sum(mi_mul(mi_matmul(D, S), X), -1, true);
        cross = mi_add(cross, mi_mul(f->d, mi_matmul(f->coef, hS)));
        mi_tensor *as = mi_sum_axes(mi_mul(A, S), mat, true);
        if (f->c) as = mi_mul(f->c, as);
        bb = mi_add(bb, mi_add(mi_mul_scalar(mi_mul(f->d, as), 2),
                               mi_mul(mi_square(f->d), mi_sum_axes(mi_square(S), mat, true))));
    }
    return mi_add(mi_add(bb, mi_mul_scalar(cross, 2)), sq);
}

bool factored_ok(const run *r, const mi_tensor *eta, const mi_tensor *alpha,
                        const mi_tensor *mu)
{
    const mi_miras *m = r->m;
    const mi_miras_config *c = r->c;
    /* one token of a matrix memory is one outer product: cheaper than the
     * factors' coefficient scans */
    if (eta->shape[1] == 1 && m->memory->rule == MI_MEMORY_RULE_MATRIX) return false;
    return !c->materialize && c->closed_form && m->memory->grad_factors &&
           m->memory->forward_linear && m->bias->error && !m->bias->encoding &&
           (!m->retention->read || scaled_read(r)) && !has_boundary(m->retention) &&
           !m->retention->lag_token &&
           !c->decay_first && c->delta_write == MI_DELTA_WRITE_BETA &&
           m->algorithm->factored &&
           eta->rank == 2 && (!alpha || alpha->rank == 2) && (!mu || mu->rank == 2);
}

/* A constant [N, rows, cols] with ones at (i, i + shift) for i < ones (ones = 1 with
 * shift = col: a single one at (0, col)). */
static mi_tensor *unit(mi_dtype dt, int64_t n_seq, int64_t rows, int64_t cols, int64_t ones,
                       int64_t shift)
{
    mi_tensor *e = mi_zeros(dt, 3, (int64_t[]){n_seq, rows, cols});
    if (!e) return NULL;
    for (int64_t b = 0; b < n_seq; b++)
        for (int64_t i = 0; i < ones; i++) {
            int64_t at = (b * rows + i) * cols + i + shift;
            if (dt == MI_F64) ((double *)e->data)[at] = 1;
            else ((float *)e->data)[at] = 1;
        }
    return e;
}

int factored_chunk(run *r, mi_tensor *qc, mi_tensor *kc, mi_tensor *vc, mi_tensor *eta,
                          mi_tensor *alpha, mi_tensor *mu, mi_tensor *delta, int64_t n,
                          mi_tensor **y)
{
    const mi_miras *m = r->m;
    const mi_miras_config *c = r->c;
    int64_t n_seq = kc->shape[0];
    factored f = {0};
    /* the factors of the gradients at the chunk's start, W = read(A) */
    mi_tensor *w[MI_MEMORY_MAX_WEIGHTS];
    for (int i = 0; i < r->nw; i++)
        if (!(w[i] = read_state(r, i, r->a[i], r->eta))) return -1;
    if (inner_factors(r, w, kc, vc, delta, f.delta, f.x) != 0) return -1;
    /* The coefficients: the two scans run on coordinates over the basis
     * (step_0 … step_{n−1}, S_prev, A_prev), each from the coordinates of the
     * state the previous chunk left: S_t = μ_t S_{t−1} + step_t from e_{S_prev},
     * A_t = α_t A_{t−1} + S_t from e_{A_prev}. Columns [0, n) of A's row t are
     * C_{t,·}/(−η), column n is d_t, column n + 1 is c_t. */
    mi_dtype dt = kc->dtype;
    int64_t nb = n + 2;
    mi_tensor *sf = unit(dt, n_seq, n, nb, n, 0);
    if (mu) sf = mi_linear_scan_from(mi_unsqueeze(mu, -1), sf, unit(dt, n_seq, 1, nb, 1, n), 1,
                                     false);
    mi_tensor *h0 = unit(dt, n_seq, 1, nb, 1, n + 1);
    mi_tensor *af = alpha ? mi_linear_scan_from(mi_unsqueeze(alpha, -1), sf, h0, 1, false)
                          : mi_add(h0, mi_cumsum(sf, 1, false));
    mi_tensor *neg_eta = mi_reshape(mi_neg(eta), 3, (int64_t[]){n_seq, 1, n});
    f.coef = mi_mul(mi_slice(af, 2, 0, n), neg_eta);
    if (!f.coef) return -1;
    f.d = mu ? mi_slice(af, 2, n, n + 1) : NULL;
    f.c = alpha ? mi_slice(af, 2, n + 1, n + 2) : NULL;
    for (int i = 0; i < r->nw; i++) {
        f.a[i] = mi_squeeze(r->a[i], 1);
        f.s[i] = mu ? mi_squeeze(r->s[i], 1) : NULL;
        if (!f.a[i] || (mu && !f.s[i])) return -1;
        if (y && scaled_read(r) &&
            !(f.scale[i] = m->retention->read_scale(c, factored_sq_norm(&f, i))))
            return -1;
    }
    /* the read, before the state moves on */
    if (y && !(*y = m->memory->forward_linear(c, factored_linear, &f, qc))) return -1;
    /* the end of the chunk: A_end = c A + d S + Δᵀ diag(C_{n−1,·}) X, likewise S_end */
    mi_tensor *last = mi_reshape(mi_slice(f.coef, 1, n - 1, n), 3, (int64_t[]){n_seq, n, 1});
    mi_tensor *s_end = mu ? mi_slice(sf, 1, n - 1, n) : NULL;
    mi_tensor *s_last = mu ? mi_reshape(mi_mul(mi_slice(s_end, 2, 0, n), neg_eta), 3,
                                        (int64_t[]){n_seq, n, 1})
                           : NULL;
    mi_tensor *c_last = alpha ? mi_reshape(mi_slice(f.c, 1, n - 1, n), 2, (int64_t[]){n_seq, 1})
                              : NULL;
    mi_tensor *d_last = mu ? mi_reshape(mi_slice(f.d, 1, n - 1, n), 2, (int64_t[]){n_seq, 1})
                           : NULL;
    mi_tensor *mu_last = mu ? mi_reshape(mi_slice(s_end, 2, n, n + 1), 2, (int64_t[]){n_seq, 1})
                            : NULL;
    /* each product into its gated state (mi_matmul_acc_gated), the states as
     * f's [N, out, in]: one pass over a state each, forward and backward */
    for (int i = 0; i < r->nw; i++) {
        mi_tensor *a = f.a[i], *s = f.s[i], *end;
        mi_tensor *pa = mi_mul(f.delta[i], last);
        if (mu) {
            mi_tensor *sum = mi_matmul_acc_gated(s, gate_like(d_last, s), pa, f.x[i], true, false, 1);
            mi_tensor *s_new = mi_matmul_acc_gated(s, gate_like(mu_last, s),
                                                   mi_mul(f.delta[i], s_last), f.x[i], true,
                                                   false, 1);
            if (!(r->s[i] = mi_reshape(s_new, r->s[i]->rank, r->s[i]->shape))) return -1;
            end = c_last ? mi_scale_add(a, gate_like(c_last, a), sum) : mi_add(a, sum);
        } else {
            end = c_last ? mi_matmul_acc_gated(a, gate_like(c_last, a), pa, f.x[i], true, false, 1)
                         : mi_matmul_acc(a, pa, f.x[i], true, false, 1);
        }
        if (!(r->a[i] = mi_reshape(end, r->a[i]->rank, r->a[i]->shape))) return -1;
    }
    return 0;
}
