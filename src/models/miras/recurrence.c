/* The MIRAS recurrence, generic over the four components.
 *
 * Per token (chunk b = 1), the MIRAS paper's online gradient descent
 * (eq:OGDupdate) with the retention gate's decay (its Learning-Retaining
 * viewpoint, eq:Viewpoint2-Loss-Premetric, with an ℓ2 local retention):
 *   g_t  = ∇_W ℓ(M_{W}(k_t); v_t)  at W = read(A_{t-1})   (at read(α_t ⊙ A_{t-1})
 *                                                          with decay_first)
 *   u_t  = −η_t ⊙ g_t                 (implicit GD: η_t / (1 + η_t‖k_t‖²), Longhorn;
 *                                      delta_write=unit adds (1 − η_t) v_t k_tᵀ: the
 *                                      delta rule's write v_t k_tᵀ unscaled)
 *   S_t  = μ_t ⊙ S_{t-1} + u_t        (momentum, Titans' surprise; otherwise S_t = u_t)
 *   A_t  = α_t ⊙ A_{t-1} + S_t        (α ≡ 1 for retention "none"; with alpha_on_keys
 *                                      a channel-wise α scales the key axis: A_{t-1} Diag(α_t))
 *   A_t  ← boundary(A_t)              (the non-linear part of the retention gate)
 *   y_t  = M_{read(A_t)}(q_t)         (read after write)
 * read and boundary also see η of the position that wrote the state last
 * (η_t; for A_0 none): the ℓ1 retentions' threshold is λ η_t.
 * A retention whose write is not linear in its state (read_split, the
 * f-divergence gate) reads and projects from A_t and the part of it carried
 * from where the segment's gradients were taken, ᾱ_t ⊙ A_{t'} (below).
 * At b = 1 a combination that no fused op covers (delta_scan, mlp_scan)
 * runs this rule token by token as the body of mi_scan (recurrence_scan.c;
 * scan=composed records the ops of the chunks below instead).
 *
 * Chunked training: for the delta rule (matrix memory, ℓ2 bias, retention
 * none or ℓ2, gd/implicit/multistep) the default form=auto runs each chunk
 * in the exact chunkwise form of "Parallelizing Linear Transformers with the
 * Delta Rule over Sequence Length" (equal to b = 1; delta_chunk_exact).
 * Otherwise, and with form=minibatch, the mini-batch rule (MIRAS
 * "Parallelizable Training", Titans §3.2): the
 * sequence is cut into chunks of b tokens; every token of a chunk takes its
 * gradient at the state left by the previous chunk, W_{t'} = read(A_{t'})
 * (with decay_first at read(ᾱ_t ⊙ A_{t'}), ᾱ_t = Π_{t'<j≤t} α_j), so all b
 * gradients come from one batched evaluation; momentum and decay run inside
 * the chunk as linear scans; the boundary projection applies once, at the
 * chunk's end. With a lag token (Memora) the first token of every chunk runs
 * alone first, and the rest of the chunk takes its gradients at the state
 * that token left. For the multistep algorithm (DeltaProduct) k, v and the
 * gates have `steps` positions per token and y reads the state after each
 * token's last step. With b = 1 a token's steps run one after the other,
 * each taking its gradient at the state the previous step left (the exact
 * rule: DeltaProduct's product of Householder factors); with b > 1 every
 * step of every token of the chunk takes its gradient at the chunk's start.
 * An encoding objective (a bias with .encoding, Lattice Eq. 6 and 8) takes
 * ℓ(E_W(v_t); k_t) in place of ℓ(M_W(k_t); v_t); the read is M_W(q_t). */
#include <string.h>

#include "recurrence_delta.h"
#include "recurrence_mlp.h"
#include "recurrence_run.h"
#include "recurrence_scan.h"

/* The weights' count and shapes for key and value widths dk, dv, and where
 * each weight's rows sit in a channel-wise gate: one entry per output unit
 * (row) of each weight, in the order of the weights (matrix and vector: the
 * dv value channels; MLP: W_1's dv rows, then W_2's h, …). */
static int layout(run *r, int64_t dk, int64_t dv, int *ranks, int64_t (*shapes)[MI_MAX_RANK])
{
    const mi_miras *m = r->m;
    if (m->memory->shapes(&m->config, dk, dv, &r->nw, ranks, shapes) != 0) return -1;
    int64_t at = 0;
    for (int i = 0; i < r->nw; i++) {
        r->unit0[i] = at;
        at += r->units[i] = shapes[i][0];
    }
    return 0;
}

/* α shaped to scale the weight w: as gate_like (a channel-wise α on the value
 * rows), or with alpha_on_keys a channel-wise α [N, n, dk] on the key axis of
 * a matrix memory [N, n', dv, dk]: [N, n, 1, dk], A Diag(α) (HGRN2), or with
 * alpha_both_sides both (below). */
static mi_tensor *alpha_like(const mi_miras_config *c, mi_tensor *a, const mi_tensor *w)
{
    if (a && w && c->alpha_both_sides && a->rank == 3) {
        /* DFW (MIRAS table): (β α'ᵀ) ⊙ A, α = (β, α') [N, n, dv + dk] */
        int64_t dv = w->shape[w->rank - 2], dk = w->shape[w->rank - 1];
        return mi_mul(gate_like(mi_slice(a, 2, 0, dv), w),
                      alpha_like(&(mi_miras_config){.alpha_on_keys = true},
                                 mi_slice(a, 2, dv, dv + dk), w));
    }
    if (!a || !w || !c->alpha_on_keys || a->rank != 3) return gate_like(a, w);
    int64_t shape[MI_MAX_RANK];
    for (int d = 0; d < w->rank; d++) shape[d] = d < 2 ? a->shape[d] : 1;
    shape[w->rank - 1] = a->shape[2];
    return mi_reshape(a, w->rank, shape);
}

/* A channel-wise α on both axes (alpha_both_sides): delta_scan decays one. */
static bool two_sided(const mi_miras *m, const mi_miras_gates *gt)
{
    return m->config.alpha_both_sides && m->retention->uses_alpha && gt->alpha->rank == 3;
}

static mi_tensor *slice_positions(mi_tensor *t, int64_t from, int64_t to)
{
    return t ? mi_slice(t, 1, from, to) : NULL;
}

/* h_t = a_t ⊙ h_{t-1} + x_t over axis 1 starting from h_{-1} = prev. */
static mi_tensor *scan_from(mi_tensor *prev, mi_tensor *a, mi_tensor *x)
{
    return mi_linear_scan_from(a, x, prev, 1, false);
}

/* α's part for weight i shaped to scale w (alpha_like). */
static mi_tensor *alpha_of(const run *r, int i, mi_tensor *a, const mi_tensor *w)
{
    return alpha_like(r->c, gate_part(r, a, i), w);
}

/* W from a state A inside a segment whose carried part is `carried`
 * (read_split), or from A alone. */
static mi_tensor *read_within(const run *r, int i, mi_tensor *carried, mi_tensor *a,
                              mi_tensor *eta)
{
    const mi_retention_kind *ret = r->m->retention;
    return ret->read_split ? ret->read_split(r->c, carried, a) : read_state(r, i, a, eta);
}

/* The state at each token's last step, [N, n/steps, ...], from the state at
 * every step, [N, n, ...]. */
static mi_tensor *last_steps(mi_tensor *a, int steps)
{
    int64_t shape[MI_MAX_RANK + 1];
    shape[0] = a->shape[0];
    shape[1] = a->shape[1] / steps;
    shape[2] = steps;
    memcpy(shape + 3, a->shape + 2, sizeof(int64_t) * (size_t)(a->rank - 2));
    mi_tensor *split = mi_reshape(a, a->rank + 1, shape);
    return mi_squeeze(mi_slice(split, 2, steps - 1, steps), 2);
}

/* Per-token gradients g[i] [N, n, ...] of ℓ(M_W(k_t); v_t) at the weights w
 * ([N, 1, ...] shared by the chunk, or [N, n, ...] per token). */
static int inner_gradients(const run *r, mi_tensor *const *w, mi_tensor *k, mi_tensor *v,
                           mi_tensor *delta, mi_tensor **g)
{
    const mi_miras *m = r->m;
    int64_t n = k->shape[1];
    /* an encoding objective ℓ(E_W(v_t); k_t) swaps the roles of k and v */
    bool enc = m->bias->encoding;
    mi_tensor *(*read)(const mi_miras_config *, mi_tensor *const *, mi_tensor *) =
        enc ? m->memory->encode : m->memory->forward;
    int (*grad)(const mi_miras_config *, mi_tensor *const *, mi_tensor *, mi_tensor *,
                mi_tensor **) = enc ? m->memory->encode_grad : m->memory->grad;
    mi_tensor *x = enc ? v : k, *target = enc ? k : v;
    if (r->c->closed_form && grad && m->bias->error) {
        mi_tensor *y = read(r->c, w, x);
        mi_tensor *e = m->bias->error(r->c, y, target, delta);
        return e ? grad(r->c, w, x, e, g) : -1;
    }
    /* The general path: ∂/∂W of Σ_t ℓ_t with one copy of W per token, so
     * each token's gradient lands in its own slot. Recording is forced on
     * (the inner loop needs it even when the caller's is off) and the result
     * is itself recorded when the caller records (the outer loop trains
     * through it). */
    bool outer = mi_grad_enabled();
    mi_set_grad_enabled(true);
    mi_tensor *wt[MI_MEMORY_MAX_WEIGHTS];
    int rc = 0;
    for (int i = 0; i < r->nw && rc == 0; i++) {
        int64_t shape[MI_MAX_RANK];
        memcpy(shape, w[i]->shape, sizeof shape);
        shape[1] = n;
        wt[i] = mi_broadcast_to(w[i], w[i]->rank, shape);
        if (!wt[i]) rc = -1;
        else if (!wt[i]->requires_grad) wt[i]->requires_grad = true; /* a fresh leaf */
    }
    mi_tensor *loss = rc ? NULL : mi_sum(m->bias->loss(r->c, read(r->c, wt, x), target, delta), MI_ALL, false);
    rc = loss ? mi_grad(&loss, NULL, 1, wt, r->nw, outer, g) : -1;
    mi_set_grad_enabled(outer);
    return rc;
}

/* Whether a position's writes can take the gradients' rank-one factors,
 * ∂ℓ_t/∂W[i] = δ_i x_iᵀ (memory->grad_factors), into the fused update ops
 * (mi_outer_update) in place of their outer products. */
static bool rank_one_writes(const run *r)
{
    const mi_miras *m = r->m;
    return r->c->closed_form && m->bias->error && !m->bias->encoding && m->memory->grad_factors &&
           r->c->delta_write != MI_DELTA_WRITE_UNIT;
}

typedef struct bias_at {
    const run *r;
    mi_tensor *v, *delta;
} bias_at;

/* e = dℓ/dy of the bias against the target v */
static mi_tensor *bias_error(void *ctx, mi_tensor *y)
{
    const bias_at *b = ctx;
    return b->r->m->bias->error(b->r->c, y, b->v, b->delta);
}

int inner_factors(const run *r, mi_tensor *const *w, mi_tensor *k, mi_tensor *v,
                  mi_tensor *delta, mi_tensor **dl, mi_tensor **x)
{
    const mi_memory_kind *mem = r->m->memory;
    bias_at b = {r, v, delta};
    if (mem->grad_factors_of) return mem->grad_factors_of(r->c, w, k, bias_error, &b, dl, x);
    mi_tensor *e = bias_error(&b, mem->forward(r->c, w, k));
    return e ? mem->grad_factors(r->c, w, k, e, dl, x) : -1;
}

/* The delta rule's unit write (delta_write=unit, models.h): the step
 * −β (W k − v) kᵀ becomes −β W k kᵀ + v kᵀ, the step plus (1 − β) v kᵀ, for
 * every position of k, v [N, n, …] with β [N, n(, dv)] (after the algorithm's
 * rate). The matrix memory is one weight, [N, n, dv, dk]. */
static mi_tensor *unit_write(const run *r, mi_tensor *step, mi_tensor *beta, mi_tensor *k,
                             mi_tensor *v)
{
    if (r->c->delta_write != MI_DELTA_WRITE_UNIT) return step;
    mi_tensor *vk = mi_outer(v, k);
    return mi_add(step, mi_mul(gate_of(r, 0, mi_add_scalar(mi_neg(beta), 1), vk), vk));
}

/* Runs positions [p0, p0 + n) of the write sequence as one chunk and writes
 * the outputs for the tokens it completes to *y (y NULL: no read). n is a
 * whole number of tokens (n = k·steps), or n = 1: one step of a multistep
 * token, read when y is given (the token's last step). */
int run_chunk(run *r, mi_tensor *q, mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt,
              int64_t p0, int64_t n, mi_tensor **y)
{
    const mi_miras *m = r->m;
    const mi_miras_config *c = r->c;
    int steps = mi_miras_writes(m);
    mi_tensor *kc = slice_positions(k, p0, p0 + n), *vc = slice_positions(v, p0, p0 + n);
    mi_tensor *eta = slice_positions(gt->eta, p0, p0 + n);
    mi_tensor *alpha = m->retention->uses_alpha ? slice_positions(gt->alpha, p0, p0 + n) : NULL;
    mi_tensor *mu = m->algorithm->uses_mu ? slice_positions(gt->mu, p0, p0 + n) : NULL;
    mi_tensor *delta = m->bias->needs_delta ? slice_positions(gt->delta, p0, p0 + n) : NULL;
    if (!kc || !vc || !eta || (m->retention->uses_alpha && !alpha) ||
        (m->algorithm->uses_mu && !mu) || (m->bias->needs_delta && !delta))
        return -1;
    /* the delta rule's exact chunkwise form (UT transform), equal to chunk 1 */
    int exact = delta_exact_choose(m, alpha);
    if (exact < 0) return -1;
    if (exact) {
        mi_tensor *qc = y ? slice_positions(q, p0 / steps, (p0 + n) / steps) : NULL;
        if ((y && !qc) || delta_chunk_exact(m, &r->a[0], qc, kc, vc, eta, alpha, steps, y) != 0)
            return -1;
        return (r->eta = slice_positions(eta, n - 1, n)) ? 0 : -1;
    }
    if (factored_ok(r, eta, alpha, mu)) {
        mi_tensor *qc = y ? slice_positions(q, p0, p0 + n) : NULL;
        if (y && !qc) return -1;
        if (factored_chunk(r, qc, kc, vc, eta, alpha, mu, delta, n, y) != 0) return -1;
        return (r->eta = slice_positions(eta, n - 1, n)) ? 0 : -1;
    }

    /* the point where the chunk's gradients are taken; ᾱ_t = Π_{j≤t} α_j, for
     * decay_first and for the carried part ᾱ_t ⊙ A_{t'} of a split read */
    const mi_retention_kind *ret = m->retention;
    mi_tensor *wg[MI_MEMORY_MAX_WEIGHTS], *g[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *alpha_bar = c->decay_first || (ret->read_split && alpha) ? mi_cumprod(alpha, 1, false)
                                                                         : NULL;
    for (int i = 0; i < r->nw; i++) {
        mi_tensor *a = c->decay_first ? mi_mul(alpha_of(r, i, alpha_bar, r->a[i]), r->a[i]) : r->a[i];
        if (!(wg[i] = read_state(r, i, a, r->eta))) return -1;
    }
    if (inner_gradients(r, wg, kc, vc, delta, g) != 0) return -1;

    if (m->algorithm->rate) eta = m->algorithm->rate(eta, kc);
    mi_tensor *a_seq[MI_MEMORY_MAX_WEIGHTS], *carried[MI_MEMORY_MAX_WEIGHTS] = {0};
    mi_tensor *neg_eta = mi_neg(eta); /* negate the gate, not the full-size product */
    mi_tensor *eta_end = slice_positions(eta, n - 1, n);
    for (int i = 0; i < r->nw; i++) {
        mi_tensor *step = mi_mul(g[i], gate_of(r, i, neg_eta, g[i]));
        step = unit_write(r, step, eta, kc, vc);
        if (mu) {
            mi_tensor *s = scan_from(r->s[i], gate_of(r, i, mu, g[i]), step);
            r->s[i] = s ? mi_slice(s, 1, n - 1, n) : NULL;
            step = s;
        }
        a_seq[i] = alpha ? scan_from(r->a[i], alpha_of(r, i, alpha, g[i]), step)
                         : mi_add(r->a[i], mi_cumsum(step, 1, false));
        if (a_seq[i] && ret->read_split)
            carried[i] = alpha_bar ? mi_mul(alpha_of(r, i, alpha_bar, g[i]), r->a[i])
                                   : mi_broadcast_to(r->a[i], a_seq[i]->rank, a_seq[i]->shape);
        if (a_seq[i] && has_boundary(ret)) {
            mi_tensor *end = mi_slice(a_seq[i], 1, n - 1, n);
            mi_tensor *last = ret->boundary_split
                                  ? ret->boundary_split(c, mi_slice(carried[i], 1, n - 1, n), end)
                                  : ret->boundary(c, end, gate_of(r, i, eta_end, end));
            a_seq[i] = n > 1 ? mi_concat((mi_tensor *[]){mi_slice(a_seq[i], 1, 0, n - 1), last}, 2, 1)
                             : last;
            /* after the boundary nothing is written yet: the state is all carried */
            if (ret->read_split)
                carried[i] = n > 1 ? mi_concat((mi_tensor *[]){mi_slice(carried[i], 1, 0, n - 1),
                                                               last}, 2, 1)
                                   : last;
        }
        if (!a_seq[i] || (ret->read_split && !carried[i])) return -1;
        r->a[i] = mi_slice(a_seq[i], 1, n - 1, n);
    }
    if (!(r->eta = eta_end)) return -1;

    /* read after write, at the last step of each token */
    if (!y) return 0;
    bool one_step = n < steps;
    mi_tensor *w_read[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *eta_read = steps > 1 && !one_step ? last_steps(eta, steps) : eta;
    for (int i = 0; i < r->nw; i++) {
        mi_tensor *a = a_seq[i], *kept = carried[i];
        if (steps > 1 && !one_step) {
            a = last_steps(a, steps);
            kept = kept ? last_steps(kept, steps) : NULL;
        }
        if (!(w_read[i] = read_within(r, i, kept, a, eta_read))) return -1;
    }
    mi_tensor *qc = one_step ? slice_positions(q, p0 / steps, p0 / steps + 1)
                             : slice_positions(q, p0 / steps, (p0 + n) / steps);
    *y = m->memory->forward(c, w_read, qc);
    return *y ? 0 : -1;
}

int run_tokens(run *r, mi_tensor *q, mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt,
               int64_t t0, int64_t t1, mi_tensor **y)
{
    int steps = mi_miras_writes(r->m);
    if (r->c->chunk == 1 && steps > 1) {
        /* the exact multistep rule: one step at a time */
        for (int s = 0; s < steps; s++)
            if (run_chunk(r, q, k, v, gt, t0 * steps + s, 1, s == steps - 1 ? y : NULL) != 0)
                return -1;
        return 0;
    }
    if (!r->m->retention->lag_token || t1 - t0 == 1)
        return run_chunk(r, q, k, v, gt, t0 * steps, (t1 - t0) * steps, y);
    mi_tensor *part[2] = {0};
    if (run_chunk(r, q, k, v, gt, t0 * steps, steps, y ? &part[0] : NULL) != 0 ||
        run_chunk(r, q, k, v, gt, (t0 + 1) * steps, (t1 - t0 - 1) * steps, y ? &part[1] : NULL) != 0)
        return -1;
    return !y || (*y = mi_concat(part, 2, 1)) ? 0 : -1;
}

static int check_inputs(const mi_miras *m, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                        const mi_miras_gates *gt, int steps)
{
    char a[96], b[96], d[96];
    if (q->rank != 3 || k->rank != 3 || v->rank != 3 || q->shape[0] != k->shape[0] ||
        v->shape[0] != k->shape[0] || k->shape[1] != v->shape[1] ||
        k->shape[1] != q->shape[1] * steps || q->shape[2] != k->shape[2]) {
        mi_error_set("miras: q %s, k %s, v %s must be [N,T,dk], [N,%sT,dk], [N,%sT,dv]",
                     mi_shape_str(a, sizeof a, q->rank, q->shape),
                     mi_shape_str(b, sizeof b, k->rank, k->shape),
                     mi_shape_str(d, sizeof d, v->rank, v->shape), steps > 1 ? "steps·" : "",
                     steps > 1 ? "steps·" : "");
        return -1;
    }
    /* a channel-wise gate: one entry per row of each weight (layout) */
    run lay = {.m = m, .c = &m->config};
    int ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (layout(&lay, k->shape[2], v->shape[2], ranks, shapes) != 0) return -1;
    int64_t units = lay.unit0[lay.nw - 1] + lay.units[lay.nw - 1];
    const mi_tensor *cs = m->config.kl_scale_t;
    if (cs && (cs->rank != 1 || cs->shape[0] != k->shape[0] || cs->dtype != k->dtype)) {
        mi_error_set("miras: the simplex scale kl_scale_t is %s %s; expected %s [%lld], one c "
                     "per sequence", mi_dtype_name(cs->dtype),
                     mi_shape_str(a, sizeof a, cs->rank, cs->shape), mi_dtype_name(k->dtype),
                     (long long)k->shape[0]);
        return -1;
    }
    const char *names[4] = {"eta", "alpha", "mu", "delta"};
    mi_tensor *gs[4] = {gt->eta, gt->alpha, gt->mu, gt->delta};
    bool needed[4] = {true, m->retention->uses_alpha, m->algorithm->uses_mu,
                      m->bias->needs_delta};
    for (int i = 0; i < 4; i++) {
        if (!needed[i]) continue;
        mi_tensor *g = gs[i];
        if (!g) {
            mi_error_set("miras: gate %s is needed by %s/%s/%s and is NULL", names[i],
                         m->bias->name, m->retention->name, m->config.algorithm);
            return -1;
        }
        bool channel = g->rank == 3;
        if (channel && !m->memory->channel_gates && i != 3) {
            mi_error_set("miras: memory '%s' takes one %s per head, not channel-wise",
                         m->memory->name, names[i]);
            return -1;
        }
        /* a channel-wise α on the keys (alpha_on_keys) has dk entries, a channel-wise δ
         * (the bias's threshold) dv, the others one per row of each weight */
        int64_t width = i == 1 && m->config.alpha_on_keys    ? k->shape[2]
                      : i == 1 && m->config.alpha_both_sides ? v->shape[2] + k->shape[2]
                      : i == 3                               ? v->shape[2]
                                                             : units;
        if ((g->rank != 2 && !channel) || g->shape[0] != k->shape[0] || g->shape[1] != k->shape[1] ||
            (channel && g->shape[2] != width)) {
            mi_error_set("miras: gate %s is %s; expected [%lld,%lld] or [%lld,%lld,%lld]",
                         names[i], mi_shape_str(a, sizeof a, g->rank, g->shape),
                         (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[0],
                         (long long)k->shape[1], (long long)width);
            return -1;
        }
    }
    return 0;
}

/* The state before the first token: A_0 = init(W_0) as [N, 1, ...] (W_0
 * shared by the N sequences, or given per sequence with [N] in front), and
 * S_0 = 0 for momentum. */
static int init_run(run *r, mi_tensor *const *w0, int64_t n_seq, int64_t dk, int64_t dv,
                    mi_dtype dt)
{
    const mi_miras *m = r->m;
    int ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (layout(r, dk, dv, ranks, shapes) != 0) return -1;
    for (int i = 0; i < r->nw; i++) {
        /* W0 as [N, 1, ...] */
        int64_t s[MI_MAX_RANK] = {n_seq, 1};
        memcpy(s + 2, shapes[i], sizeof(int64_t) * (size_t)ranks[i]);
        mi_tensor *w = w0[i];
        bool shared = w && w->rank == ranks[i], per_seq = w && w->rank == ranks[i] + 1;
        for (int d = 0; (shared || per_seq) && d < ranks[i]; d++)
            if (w->shape[d + per_seq] != shapes[i][d]) shared = per_seq = false;
        if (!shared && !(per_seq && w->shape[0] == n_seq)) {
            char a[96], b[96];
            mi_error_set("miras: initial weight %d is %s; %s memory needs %s (or [N] in front)", i,
                         w ? mi_shape_str(a, sizeof a, w->rank, w->shape) : "NULL",
                         m->memory->name, mi_shape_str(b, sizeof b, ranks[i], shapes[i]));
            return -1;
        }
        int64_t one[MI_MAX_RANK] = {per_seq ? n_seq : 1, 1};
        memcpy(one + 2, shapes[i], sizeof(int64_t) * (size_t)ranks[i]);
        w = mi_broadcast_to(mi_reshape(w, ranks[i] + 2, one), ranks[i] + 2, s);
        r->a[i] = m->retention->init ? m->retention->init(&m->config, w) : w;
        r->s[i] = m->algorithm->uses_mu ? mi_zeros(dt, ranks[i] + 2, s) : NULL;
        if (!r->a[i]) return -1;
    }
    return 0;
}

mi_tensor *mi_miras_forward(const mi_miras *m, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                            const mi_miras_gates *gates, mi_tensor *const *w0,
                            mi_tensor **final_state)
{
    if (!m || !gates || !w0) {
        mi_error_set("miras: NULL memory, gates or initial weights");
        return NULL;
    }
    if (!q || !k || !v) {
        mi_error_set("miras: q, k or v is NULL");
        return NULL;
    }
    int steps = mi_miras_writes(m);
    if (check_inputs(m, q, k, v, gates, steps) != 0) return NULL;
    int64_t n_seq = k->shape[0], positions = k->shape[1];
    run r = {.m = m, .c = &m->config};
    if (init_run(&r, w0, n_seq, k->shape[2], v->shape[2], v->dtype) != 0) return NULL;
    mi_delta_rule rule;
    bool kernels = m->config.chunk > 1 || m->config.scan != MI_SCAN_BODY;
    if (kernels && !two_sided(m, gates) &&
        delta_fused_choose(m, gates, k->shape[2], v->shape[2], &rule)) {
        mi_tensor *y = delta_fused_scan(m, rule, &r.a[0], q, k, v, gates);
        if (y && final_state) final_state[0] = r.a[0];
        return y;
    }
    mi_mlp_scan_rule mlp_rule;
    if (kernels && mlp_fused_rule(m, gates, &mlp_rule)) {
        mi_tensor *y = mlp_fused_scan(m, &mlp_rule, r.a, r.s, q, k, v, gates);
        for (int i = 0; y && final_state && i < r.nw; i++) final_state[i] = r.a[i];
        return y;
    }
    if (positions > 0 && miras_scan_applies(m)) {
        mi_tensor *y = miras_scan_forward(m, r.nw, r.a, r.s, q, k, v, gates);
        for (int i = 0; y && final_state && i < r.nw; i++) final_state[i] = r.a[i];
        return y;
    }

    int64_t tokens = positions / steps, chunk = m->config.chunk;
    if (miras_chunk_scan_applies(&r, tokens, gates)) {
        mi_tensor *y = miras_chunk_scan_forward(&r, q, k, v, gates);
        for (int i = 0; y && final_state && i < r.nw; i++) final_state[i] = r.a[i];
        return y;
    }
    int64_t n_chunks = (tokens + chunk - 1) / chunk;
    mi_tensor **ys = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)n_chunks);
    if (!ys) return NULL;
    int n_y = 0;
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
        int64_t t1 = t0 + chunk < tokens ? t0 + chunk : tokens;
        if (run_tokens(&r, q, k, v, gates, t0, t1, &ys[n_y++]) != 0) return NULL;
    }
    if (final_state)
        for (int i = 0; i < r.nw; i++) final_state[i] = r.a[i];
    return n_y == 1 ? ys[0] : mi_concat(ys, n_y, 1);
}

/* ---------------------------------------------------------------- one token at a time
 * The chunked rule above, token by token. A segment is a run of positions
 * that take their gradients at one state, a_grad: a chunk of b tokens (with
 * a lag token: its first token alone, then the rest), or with b = 1 one
 * multistep step. Inside a segment each position p does what the chunk's
 * scans do for it:
 *   ᾱ   ← ᾱ · α_p                            (decay_first or a split read; ᾱ = 1 at the
 *                                             segment's start)
 *   g_p  = ∇_W ℓ at W = read(a_grad)        (read(ᾱ ⊙ a_grad) with decay_first)
 *   S    ← μ_p ⊙ S − η_p ⊙ g_p              (momentum; else the step is −η_p g_p)
 *   A    ← α_p ⊙ A + S
 * and at the segment's end A ← boundary(A). y reads A after the token's last
 * position (a split read: A and ᾱ ⊙ a_grad, the part carried from the
 * segment's start). */
int mi_miras_state_init(const mi_miras *m, mi_miras_state *st, mi_tensor *const *w0,
                        int64_t n_seq, int64_t dk, int64_t dv, mi_dtype dt)
{
    if (!m || !st || !w0) return mi_error_set("miras: NULL memory, state or initial weights"), -1;
    run r = {.m = m, .c = &m->config};
    memset(st, 0, sizeof *st);
    if (init_run(&r, w0, n_seq, dk, dv, dt) != 0) return -1;
    st->nw = r.nw;
    for (int i = 0; i < r.nw; i++) st->a[i] = st->a_grad[i] = r.a[i], st->s[i] = r.s[i];
    return 0;
}

/* One write at position p of the token's k, v, gates [N, S, …]. */
static int write_position(const run *r, mi_miras_state *st, mi_tensor *k, mi_tensor *v,
                          const mi_miras_gates *gt, int64_t p)
{
    const mi_miras *m = r->m;
    const mi_miras_config *c = r->c;
    mi_tensor *kp = slice_positions(k, p, p + 1), *vp = slice_positions(v, p, p + 1);
    mi_tensor *eta = slice_positions(gt->eta, p, p + 1);
    mi_tensor *alpha = m->retention->uses_alpha ? slice_positions(gt->alpha, p, p + 1) : NULL;
    mi_tensor *mu = m->algorithm->uses_mu ? slice_positions(gt->mu, p, p + 1) : NULL;
    mi_tensor *delta = m->bias->needs_delta ? slice_positions(gt->delta, p, p + 1) : NULL;
    if (!kp || !vp || !eta || (m->retention->uses_alpha && !alpha) ||
        (m->algorithm->uses_mu && !mu) || (m->bias->needs_delta && !delta))
        return -1;
    bool track = c->decay_first || (m->retention->read_split && alpha);
    if (track && !(st->alpha_bar = st->alpha_bar ? mi_mul(st->alpha_bar, alpha) : alpha))
        return -1;
    mi_tensor *wg[MI_MEMORY_MAX_WEIGHTS], *g[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *dl[MI_MEMORY_MAX_WEIGHTS], *x[MI_MEMORY_MAX_WEIGHTS];
    for (int i = 0; i < r->nw; i++) {
        mi_tensor *a = st->a_grad[i];
        if (c->decay_first) a = mi_mul(alpha_of(r, i, st->alpha_bar, a), a);
        if (!(wg[i] = read_state(r, i, a, st->eta_grad))) return -1;
    }
    bool rank_one = rank_one_writes(r);
    if ((rank_one ? inner_factors(r, wg, kp, vp, delta, dl, x)
                  : inner_gradients(r, wg, kp, vp, delta, g)) != 0)
        return -1;
    if (m->algorithm->rate) eta = m->algorithm->rate(eta, kp);
    mi_tensor *neg_eta = mi_neg(eta); /* negate the gate, not the full-size product */
    for (int i = 0; rank_one && i < r->nw; i++) {
        mi_tensor *b = gate_of(r, i, neg_eta, st->a[i]);
        mi_tensor *al = alpha ? alpha_of(r, i, alpha, st->a[i]) : NULL;
        if (mu) {
            /* S ← μ S − η δ xᵀ, then A ← α A + S */
            st->s[i] = mi_outer_update(st->s[i], gate_of(r, i, mu, st->a[i]), b, dl[i], x[i]);
            st->a[i] = al ? mi_scale_add(st->a[i], al, st->s[i]) : mi_add(st->a[i], st->s[i]);
        } else {
            st->a[i] = mi_outer_update(st->a[i], al, b, dl[i], x[i]); /* A ← α A − η δ xᵀ */
        }
        if (!st->a[i]) return -1;
    }
    for (int i = 0; !rank_one && i < r->nw; i++) {
        mi_tensor *step = mi_mul(g[i], gate_of(r, i, neg_eta, g[i]));
        step = unit_write(r, step, eta, kp, vp);
        if (mu) step = st->s[i] = mi_add(mi_mul(gate_of(r, i, mu, g[i]), st->s[i]), step);
        st->a[i] = alpha ? mi_add(mi_mul(alpha_of(r, i, alpha, g[i]), st->a[i]), step)
                         : mi_add(st->a[i], step);
        if (!st->a[i]) return -1;
    }
    st->eta = eta;
    return 0;
}

static void begin_segment(mi_miras_state *st)
{
    for (int i = 0; i < st->nw; i++) st->a_grad[i] = st->a[i];
    st->alpha_bar = NULL;
    st->eta_grad = st->eta;
}

/* The part of weight i's state carried from the segment's start, ᾱ ⊙ A_{t'}. */
static mi_tensor *stream_carried(const run *r, const mi_miras_state *st, int i)
{
    mi_tensor *a0 = st->a_grad[i];
    return st->alpha_bar ? mi_mul(alpha_of(r, i, st->alpha_bar, a0), a0) : a0;
}

static int end_segment(const run *r, mi_miras_state *st)
{
    const mi_retention_kind *ret = r->m->retention;
    for (int i = 0; i < r->nw && has_boundary(ret); i++) {
        mi_tensor *a = st->a[i];
        st->a[i] = ret->boundary_split ? ret->boundary_split(r->c, stream_carried(r, st, i), a)
                                       : ret->boundary(r->c, a, gate_of(r, i, st->eta, a));
        if (!st->a[i]) return -1;
    }
    /* a split read after the boundary: nothing written since (the next token
     * begins a segment here anyway) */
    if (ret->read_split) begin_segment(st);
    return 0;
}

static mi_tensor *read_token(const run *r, const mi_miras_state *st, mi_tensor *q);

mi_tensor *mi_miras_step(const mi_miras *m, mi_miras_state *st, mi_tensor *q, mi_tensor *k,
                         mi_tensor *v, const mi_miras_gates *gates)
{
    if (!m || !st || !gates || !q || !k || !v) {
        mi_error_set("miras: step: NULL memory, state, gates, q, k or v");
        return NULL;
    }
    int steps = mi_miras_writes(m);
    if (q->rank != 3 || q->shape[1] != 1) {
        char a[96];
        mi_error_set("miras: step: q must be [N, 1, dk] (one token), got %s",
                     mi_shape_str(a, sizeof a, q->rank, q->shape));
        return NULL;
    }
    if (check_inputs(m, q, k, v, gates, steps) != 0) return NULL;
    run r = {.m = m, .c = &m->config};
    int ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (layout(&r, q->shape[2], v->shape[2], ranks, shapes) != 0) return NULL;
    if (r.nw != st->nw) {
        mi_error_set("miras: step: the state has %d weights, the memory %d", st->nw, r.nw);
        return NULL;
    }
    /* the exact chunkwise form is the per-token recurrence: segments of one token */
    int exact = delta_exact_choose(m, m->retention->uses_alpha ? gates->alpha : NULL);
    if (exact < 0) return NULL;
    int64_t b = exact ? 1 : m->config.chunk, j = st->tokens % b;
    bool lag = m->retention->lag_token && b > 1;
    mi_delta_rule rule;
    bool kernels = m->config.scan != MI_SCAN_BODY;
    if (kernels && b == 1 && !two_sided(m, gates) && delta_fused_rule(m, gates, &rule)) {
        mi_tensor *y = delta_fused_scan(m, rule, &st->a[0], q, k, v, gates);
        if (!y) return NULL;
        st->a_grad[0] = st->a[0];
        st->eta = gates->eta;
        st->tokens++;
        return y;
    }
    mi_mlp_scan_rule mlp_rule;
    if (kernels && b == 1 && mlp_fused_rule(m, gates, &mlp_rule)) {
        mi_tensor *y = mlp_fused_scan(m, &mlp_rule, st->a, st->s, q, k, v, gates);
        if (!y) return NULL;
        for (int i = 0; i < st->nw; i++) st->a_grad[i] = st->a[i];
        st->eta = gates->eta;
        st->tokens++;
        return y;
    }
    if (b == 1) {
        mi_tensor *y = miras_token(m, st, q, k, v, gates);
        if (y) st->tokens++;
        return y;
    }
    if (j == 0 || (lag && j == 1)) begin_segment(st);
    for (int p = 0; p < steps; p++)
        if (write_position(&r, st, k, v, gates, p) != 0) return NULL;
    if ((j == b - 1 || (lag && j == 0)) && end_segment(&r, st) != 0) return NULL;
    st->tokens++;
    return read_token(&r, st, q);
}

/* y = M_{read(A)}(q) after the token's writes (a split read: A and the part
 * carried from the segment's start). */
static mi_tensor *read_token(const run *r, const mi_miras_state *st, mi_tensor *q)
{
    const mi_miras *m = r->m;
    mi_tensor *w[MI_MEMORY_MAX_WEIGHTS];
    for (int i = 0; i < r->nw; i++) {
        mi_tensor *kept = m->retention->read_split ? stream_carried(r, st, i) : NULL;
        if ((m->retention->read_split && !kept) ||
            !(w[i] = read_within(r, i, kept, st->a[i], st->eta)))
            return NULL;
    }
    return m->memory->forward(&m->config, w, q);
}

/* The exact per-token rule (b = 1) by the composed ops, one token: each of
 * its positions a segment of its own (the multistep rule: one step at a
 * time), then the read (q NULL: none, and the result is st->a[0]). */
mi_tensor *miras_token(const mi_miras *m, mi_miras_state *st, mi_tensor *q, mi_tensor *k,
                       mi_tensor *v, const mi_miras_gates *gates)
{
    run r = {.m = m, .c = &m->config};
    int ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (layout(&r, k->shape[2], v->shape[2], ranks, shapes) != 0) return NULL;
    for (int p = 0, steps = mi_miras_writes(m); p < steps; p++) {
        begin_segment(st);
        if (write_position(&r, st, k, v, gates, p) != 0 || end_segment(&r, st) != 0) return NULL;
    }
    return q ? read_token(&r, st, q) : st->a[0];
}
