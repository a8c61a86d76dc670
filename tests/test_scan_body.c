/* mi_scan, the scan of a body written with ordinary ops:
 * - values and f64 gradients (to carry0, every xs and the body's parameters)
 *   equal the same body unrolled token by token with recording on, for a
 *   gated delta rule (also against mi_delta_scan), an MLP memory taking one
 *   gradient step per token, and a recurrence with outer parameters (also a
 *   scan in a scan's body, a scan inside mi_checkpoint, more carries and
 *   inputs than a node takes, constant carries and inputs, parameters that
 *   are views and functions of leaves); at the
 *   default segment (⌈√T⌉), T not a multiple of it, T = 1, a segment longer
 *   than T, segments of one token;
 * - an f64 central-difference gradcheck of losses through mi_scan;
 * - random bodies of a few elementwise and matmul ops, several seeds;
 * - memory: what the process holds from the system grows with T far less
 *   than for the recorded unroll (T = 64 and T = 1024).
 * Its misuse: test_scan_body_errors.c. */
#include "harness.h"

/* ---------------------------------------------------------------- problems */

typedef struct problem problem;
struct problem {
    mi_scan_fn body;
    void *ctx;
    int n_carry, n_xs, n_ys;
    mi_tensor *carry0[4], *xs[6];
    mi_tensor *params[4];
    int n_params;
    mi_tensor *r_carry[4], *r_ys[4]; /* the loss's random weights */
};

/* one token of xs [N, T, …] as a recorded op: [N, …] */
static mi_tensor *token(mi_tensor *xs, int64_t t)
{
    int64_t shape[MI_MAX_RANK];
    shape[0] = xs->shape[0];
    for (int d = 2; d < xs->rank; d++) shape[d - 1] = xs->shape[d];
    return mi_reshape(mi_slice(xs, 1, t, t + 1), xs->rank - 1, shape);
}

/* The same recurrence unrolled: the body once per token, recording. */
static int unrolled(const problem *p, mi_tensor **carry_out, mi_tensor **ys)
{
    int64_t T = p->xs[0]->shape[1];
    mi_tensor *cur[4], *x[6], *next[4], *y[4];
    mi_tensor **yt = malloc(sizeof *yt * (size_t)(T * (p->n_ys ? p->n_ys : 1)));
    ck_assert_ptr_nonnull(yt);
    for (int i = 0; i < p->n_carry; i++) cur[i] = p->carry0[i];
    for (int64_t t = 0; t < T; t++) {
        for (int j = 0; j < p->n_xs; j++) x[j] = token(p->xs[j], t);
        if (p->body(p->ctx, cur, x, next, y) != 0) {
            free(yt);
            return -1;
        }
        for (int i = 0; i < p->n_carry; i++) cur[i] = next[i];
        for (int j = 0; j < p->n_ys; j++) yt[j * T + t] = y[j];
    }
    for (int i = 0; i < p->n_carry; i++) carry_out[i] = cur[i];
    for (int j = 0; j < p->n_ys; j++) ys[j] = mi_stack(yt + j * T, (int)T, 1);
    free(yt);
    return 0;
}

/* loss = Σ ⟨c_T, r⟩ + Σ ⟨ys, r⟩ */
static mi_tensor *loss_of(const problem *p, bool scan, int segment)
{
    mi_tensor *c[4], *ys[4];
    int rc = scan ? mi_scan(p->body, p->ctx, p->n_carry, p->carry0, p->n_xs, p->xs, p->n_ys,
                            segment, c, ys)
                  : unrolled(p, c, ys);
    if (rc != 0) return NULL;
    mi_tensor *loss = mi_scalar(p->xs[0]->dtype, 0);
    for (int i = 0; i < p->n_carry; i++)
        loss = mi_add(loss, mi_sum(mi_mul(c[i], p->r_carry[i]), MI_ALL, false));
    for (int j = 0; j < p->n_ys; j++)
        loss = mi_add(loss, mi_sum(mi_mul(ys[j], p->r_ys[j]), MI_ALL, false));
    return loss;
}

/* every leaf of the problem: carry0, xs, params */
static int leaves_of(const problem *p, mi_tensor **v)
{
    int n = 0;
    for (int i = 0; i < p->n_carry; i++) v[n++] = p->carry0[i];
    for (int j = 0; j < p->n_xs; j++) v[n++] = p->xs[j];
    for (int k = 0; k < p->n_params; k++) v[n++] = p->params[k];
    return n;
}

static double max_rel_diff(const mi_tensor *a, const mi_tensor *b)
{
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < a->numel; i++) scale = fmax(scale, fabs(mi_get(b, i)));
    for (int64_t i = 0; i < a->numel; i++)
        worst = fmax(worst, fabs(mi_get(a, i) - mi_get(b, i)) / (1 + scale));
    return worst;
}

static void gradcheck_problem(const char *what, problem *p, int segment);

/* mi_scan's loss and gradients equal the unrolled body's to rounding */
static void check_against_unrolled(const char *what, problem *p, int segment)
{
    mi_tensor *w[16], *g_scan[16], *g_ref[16];
    int n = leaves_of(p, w);
    mi_tensor *ls = loss_of(p, true, segment);
    ck_assert_msg(ls != NULL, "%s: %s", what, mi_error());
    ck_assert_msg(mi_grad(&ls, NULL, 1, w, n, false, g_scan) == 0, "%s: %s", what, mi_error());
    mi_tensor *lr = loss_of(p, false, 0);
    ck_assert_msg(lr != NULL, "%s: %s", what, mi_error());
    ck_assert_msg(mi_grad(&lr, NULL, 1, w, n, false, g_ref) == 0, "%s: %s", what, mi_error());
    double l0 = mi_item(lr);
    ck_assert_msg(fabs(mi_item(ls) - l0) <= 1e-12 * (1 + fabs(l0)),
                  "%s (segment %d): loss %.17g, unrolled %.17g", what, segment, mi_item(ls), l0);
    for (int k = 0; k < n; k++) {
        ck_assert_msg(mi_same_shape(g_scan[k], w[k]), "%s: gradient %d's shape", what, k);
        double d = max_rel_diff(g_scan[k], g_ref[k]);
        ck_assert_msg(d <= 1e-12, "%s (segment %d): gradient %d differs by %g", what, segment, k,
                      d);
    }
}

static mi_tensor *randn(mi_rng *r, int rank, const int64_t *shape, double sd)
{
    return mi_requires_grad(mi_randn(r, MI_F64, rank, shape, 0, sd), true);
}

static mi_tensor *uniform(mi_rng *r, int rank, const int64_t *shape, double lo, double hi)
{
    return mi_requires_grad(mi_rand(r, MI_F64, rank, shape, lo, hi), true);
}

/* the loss's weights for the results' shapes */
static void loss_weights(problem *p, mi_rng *r)
{
    mi_tensor *c[4], *ys[4];
    bool was = mi_set_grad_enabled(false);
    ck_assert_msg(unrolled(p, c, ys) == 0, "%s", mi_error());
    mi_set_grad_enabled(was);
    for (int i = 0; i < p->n_carry; i++)
        p->r_carry[i] = mi_randn(r, MI_F64, c[i]->rank, c[i]->shape, 0, 1);
    for (int j = 0; j < p->n_ys; j++)
        p->r_ys[j] = mi_randn(r, MI_F64, ys[j]->rank, ys[j]->shape, 0, 1);
}

/* ---------------------------------------------------------------- (a) gated delta rule
 * Gated DeltaNet (Yang, Kautz, Hatamizadeh, "Gated Delta Networks: Improving
 * Mamba2 with Delta Rule", eq. 10): S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) +
 * β_t v_t k_tᵀ = α_t S_{t−1} + β_t (v_t − α_t S_{t−1} k_t) k_tᵀ, y_t = S_t q_t.
 * carry S [N, dv, dk]; x = q, k [N, dk], v [N, dv], β, α [N]. */
static int delta_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                      mi_tensor **y)
{
    (void)ctx;
    mi_tensor *S = c[0], *q = x[0], *k = x[1], *v = x[2];
    int64_t N = S->shape[0];
    mi_tensor *beta = mi_reshape(x[3], 3, (int64_t[]){N, 1, 1});
    mi_tensor *alpha = mi_reshape(x[4], 3, (int64_t[]){N, 1, 1});
    mi_tensor *aS = mi_mul(S, alpha);
    mi_tensor *k_col = mi_unsqueeze(k, 2); /* [N, dk, 1] */
    mi_tensor *err = mi_sub(mi_unsqueeze(v, 2), mi_matmul(aS, k_col));
    mi_tensor *err2 = mi_reshape(err, 2, (int64_t[]){N, v->shape[1]});
    c_out[0] = mi_add(aS, mi_mul(beta, mi_outer(err2, k)));
    y[0] = mi_reshape(mi_matmul(c_out[0], mi_unsqueeze(q, 2)), 2, (int64_t[]){N, v->shape[1]});
    return 0;
}

static problem delta_problem(uint64_t seed, int64_t N, int64_t T, int64_t dk, int64_t dv)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    problem p = {.body = delta_body, .n_carry = 1, .n_xs = 5, .n_ys = 1};
    p.carry0[0] = randn(&r, MI_SHAPE(N, dv, dk), 0.3);
    p.xs[0] = randn(&r, MI_SHAPE(N, T, dk), 1);
    p.xs[1] = randn(&r, MI_SHAPE(N, T, dk), 0.4);
    p.xs[2] = randn(&r, MI_SHAPE(N, T, dv), 1);
    p.xs[3] = uniform(&r, MI_SHAPE(N, T), 0.1, 0.9);
    p.xs[4] = uniform(&r, MI_SHAPE(N, T), 0.8, 1.0);
    loss_weights(&p, &r);
    return p;
}

START_TEST(delta_rule_equals_unrolled)
{
    int64_t Ts[] = {1, 7, 9, 16, 23};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        problem p = delta_problem(10 + i, 2, Ts[i], 4, 3);
        int segments[] = {0, 1, 2, 5, 100};
        for (size_t s = 0; s < sizeof segments / sizeof *segments; s++)
            check_against_unrolled("delta rule", &p, segments[s]);
    }
}
END_TEST

/* y and S_T equal mi_delta_scan's (decay_first: the same rule, fused) */
START_TEST(delta_rule_equals_delta_scan)
{
    problem p = delta_problem(3, 2, 11, 4, 3);
    mi_tensor *c, *y, *S;
    ck_assert_msg(mi_scan(delta_body, NULL, 1, p.carry0, 5, p.xs, 1, 0, &c, &y) == 0, "%s",
                  mi_error());
    mi_tensor *ref = mi_delta_scan(p.carry0[0], p.xs[0], p.xs[1], p.xs[2], p.xs[3], p.xs[4],
                                   MI_DELTA_RULE_DECAY_FIRST, &S);
    ck_assert_msg(ref != NULL, "%s", mi_error());
    ck_assert(mi_same_shape(y, ref) && mi_same_shape(c, S));
    ck_assert_double_le(max_rel_diff(y, ref), 1e-12);
    ck_assert_double_le(max_rel_diff(c, S), 1e-12);
}
END_TEST

/* ---------------------------------------------------------------- (b) MLP memory
 * Titans (Behrouz, Zhong, Mirrokni, "Titans: Learning to Memorize at Test
 * Time", eq. 12–13 without momentum and decay): M(k) = W2 tanh(W1 k), one
 * gradient step per token on ℓ = ‖M(k_t) − v_t‖², W ← W − η_t ∇_W ℓ, then
 * y_t = M_t(q_t). The gradient by hand: e = M(k) − v, a = tanh(W1 k),
 * ∇W2 = 2 e aᵀ, ∇W1 = ((W2ᵀ 2e) ⊙ (1 − a²)) kᵀ. carry W1 [N, dh, dk],
 * W2 [N, dv, dh]; x = q, k [N, dk], v [N, dv], η [N]. */
static int mlp_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                    mi_tensor **y)
{
    (void)ctx;
    mi_tensor *W1 = c[0], *W2 = c[1], *q = x[0], *k = x[1], *v = x[2];
    int64_t N = W1->shape[0], dv = W2->shape[1];
    mi_tensor *eta = mi_reshape(x[3], 3, (int64_t[]){N, 1, 1});
    mi_tensor *a = mi_tanh(mi_matmul(W1, mi_unsqueeze(k, 2)));          /* [N, dh, 1] */
    mi_tensor *e2 = mi_mul_scalar(mi_sub(mi_matmul(W2, a), mi_unsqueeze(v, 2)), 2); /* [N, dv, 1] */
    mi_tensor *gW2 = mi_matmul_t(e2, a, false, true);                    /* [N, dv, dh] */
    mi_tensor *da = mi_matmul_t(W2, e2, true, false);                    /* [N, dh, 1] */
    mi_tensor *dh = mi_mul(da, mi_sub(mi_ones(MI_F64, 0, NULL), mi_square(a)));
    mi_tensor *gW1 = mi_matmul_t(dh, mi_unsqueeze(k, 2), false, true);  /* [N, dh, dk] */
    c_out[0] = mi_sub(W1, mi_mul(eta, gW1));
    c_out[1] = mi_sub(W2, mi_mul(eta, gW2));
    mi_tensor *out = mi_matmul(c_out[1], mi_tanh(mi_matmul(c_out[0], mi_unsqueeze(q, 2))));
    y[0] = mi_reshape(out, 2, (int64_t[]){N, dv});
    return 0;
}

static problem mlp_problem(uint64_t seed, int64_t N, int64_t T, int64_t dk, int64_t dh, int64_t dv)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    problem p = {.body = mlp_body, .n_carry = 2, .n_xs = 4, .n_ys = 1};
    p.carry0[0] = randn(&r, MI_SHAPE(N, dh, dk), 0.4);
    p.carry0[1] = randn(&r, MI_SHAPE(N, dv, dh), 0.4);
    p.xs[0] = randn(&r, MI_SHAPE(N, T, dk), 1);
    p.xs[1] = randn(&r, MI_SHAPE(N, T, dk), 0.5);
    p.xs[2] = randn(&r, MI_SHAPE(N, T, dv), 1);
    p.xs[3] = uniform(&r, MI_SHAPE(N, T), 0.05, 0.2);
    loss_weights(&p, &r);
    return p;
}

START_TEST(mlp_memory_equals_unrolled)
{
    int64_t Ts[] = {1, 6, 10};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        problem p = mlp_problem(20 + i, 2, Ts[i], 3, 4, 2);
        check_against_unrolled("mlp memory", &p, 0);
        check_against_unrolled("mlp memory", &p, 4);
        check_against_unrolled("mlp memory", &p, 1);
    }
}
END_TEST

/* ---------------------------------------------------------------- (c) outer parameters
 * h_t = tanh(h_{t−1} W + x_t U + b), y_t = h_t V and y'_t = h_t ⊙ x_t: W, U,
 * b, V are leaves the body reads from ctx (its parameters). */
typedef struct rnn {
    mi_tensor *W, *U, *b, *V;
} rnn;

static int rnn_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                    mi_tensor **y)
{
    const rnn *m = ctx;
    c_out[0] = mi_tanh(mi_add(mi_add(mi_matmul(c[0], m->W), mi_matmul(x[0], m->U)), m->b));
    y[0] = mi_matmul(c_out[0], m->V);
    y[1] = mi_mul(c_out[0], x[0]);
    return 0;
}

static problem rnn_problem(rnn *m, uint64_t seed, int64_t N, int64_t T, int64_t d, int64_t e)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    m->W = randn(&r, MI_SHAPE(d, d), 0.5);
    m->U = randn(&r, MI_SHAPE(d, d), 0.5);
    m->b = randn(&r, MI_SHAPE(d), 0.3);
    m->V = randn(&r, MI_SHAPE(d, e), 0.5);
    problem p = {.body = rnn_body, .ctx = m, .n_carry = 1, .n_xs = 1, .n_ys = 2, .n_params = 4,
                 .params = {m->W, m->U, m->b, m->V}};
    p.carry0[0] = randn(&r, MI_SHAPE(N, d), 0.5);
    p.xs[0] = randn(&r, MI_SHAPE(N, T, d), 1);
    loss_weights(&p, &r);
    return p;
}

START_TEST(outer_parameters_equal_unrolled)
{
    rnn m;
    int64_t Ts[] = {1, 5, 12};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        problem p = rnn_problem(&m, 30 + i, 3, Ts[i], 4, 2);
        check_against_unrolled("rnn", &p, 0);
        check_against_unrolled("rnn", &p, 5);
        /* the parameters through mi_backward too: leaf->grad */
        mi_tensor *w[8];
        int n = leaves_of(&p, w);
        mi_zero_grad(w, n);
        mi_tensor *ls = loss_of(&p, true, 0);
        ck_assert_msg(ls && mi_backward(ls) == 0, "%s", mi_error());
        mi_tensor *g[8];
        mi_tensor *lr = loss_of(&p, false, 0);
        ck_assert_msg(mi_grad(&lr, NULL, 1, w, n, false, g) == 0, "%s", mi_error());
        for (int k = 0; k < n; k++) ck_assert_double_le(max_rel_diff(w[k]->grad, g[k]), 1e-12);
    }
}
END_TEST

/* mi_scan used twice in one loss with shared parameters, the second scan
 * starting from the first one's carry */
START_TEST(chained_scans)
{
    rnn m;
    problem p = rnn_problem(&m, 41, 2, 7, 3, 2);
    mi_tensor *c1, *c2, *ys1[2], *ys2[2], *cr, *ysr[2];
    ck_assert_msg(mi_scan(rnn_body, &m, 1, p.carry0, 1, p.xs, 2, 0, &c1, ys1) == 0, "%s",
                  mi_error());
    ck_assert_msg(mi_scan(rnn_body, &m, 1, &c1, 1, p.xs, 2, 3, &c2, ys2) == 0, "%s", mi_error());
    mi_tensor *ls = mi_add(mi_sum(mi_mul(c2, p.r_carry[0]), MI_ALL, false),
                           mi_sum(mi_mul(ys1[0], p.r_ys[0]), MI_ALL, false));
    problem q = p;
    ck_assert_msg(unrolled(&p, &cr, ysr) == 0, "%s", mi_error());
    q.carry0[0] = cr;
    mi_tensor *cr2, *ysr2[2];
    ck_assert_msg(unrolled(&q, &cr2, ysr2) == 0, "%s", mi_error());
    mi_tensor *lr = mi_add(mi_sum(mi_mul(cr2, p.r_carry[0]), MI_ALL, false),
                           mi_sum(mi_mul(ysr[0], p.r_ys[0]), MI_ALL, false));
    mi_tensor *w[8], *gs[8], *gr[8];
    int n = leaves_of(&p, w);
    ck_assert_msg(mi_grad(&ls, NULL, 1, w, n, false, gs) == 0, "%s", mi_error());
    ck_assert_msg(mi_grad(&lr, NULL, 1, w, n, false, gr) == 0, "%s", mi_error());
    ck_assert_double_le(fabs(mi_item(ls) - mi_item(lr)), 1e-12 * (1 + fabs(mi_item(lr))));
    for (int k = 0; k < n; k++) ck_assert_double_le(max_rel_diff(gs[k], gr[k]), 1e-12);
}
END_TEST

/* ---------------------------------------------------------------- many inputs, some constant
 * Four carries and five per-token inputs and a parameter: more than a node
 * takes, so mi_scan packs the smallest of them (three carries) into one input.
 * c_i ← tanh(c_i W + x_i + x_4 ⊙ c_{i+1 mod 4}), y = c_0 ⊙ c_3. */
static int four_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                     mi_tensor **y)
{
    mi_tensor *W = ctx;
    for (int i = 0; i < 4; i++)
        c_out[i] = mi_tanh(mi_add(mi_add(mi_matmul(c[i], W), x[i]), mi_mul(x[4], c[(i + 1) % 4])));
    y[0] = mi_mul(c_out[0], c_out[3]);
    return 0;
}

static problem four_problem(uint64_t seed, int64_t T)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    problem p = {.body = four_body, .n_carry = 4, .n_xs = 5, .n_ys = 1, .n_params = 1};
    p.params[0] = randn(&r, MI_SHAPE(3, 3), 0.5);
    p.ctx = p.params[0];
    for (int i = 0; i < 4; i++) p.carry0[i] = randn(&r, MI_SHAPE(2, 3), 0.5);
    for (int j = 0; j < 5; j++) p.xs[j] = randn(&r, MI_SHAPE(2, T, 3), 0.7);
    loss_weights(&p, &r);
    return p;
}

START_TEST(many_inputs_are_packed)
{
    problem p = four_problem(71, 7);
    check_against_unrolled("four carries", &p, 0);
    check_against_unrolled("four carries", &p, 3);
    gradcheck_problem("four carries", &p, 2);
}
END_TEST

/* The smallest tensors packed, of both groups: x_4 [2, T, 1] (broadcast over
 * the carry's 3 columns) is smaller than a carry at T = 2, so x_4 and two
 * carries share the concatenation. */
START_TEST(carries_and_inputs_packed_together)
{
    mi_rng r;
    mi_rng_seed(&r, 74);
    problem p = four_problem(74, 2);
    p.xs[4] = randn(&r, MI_SHAPE(2, 2, 1), 0.7);
    check_against_unrolled("mixed packing", &p, 0);
    check_against_unrolled("mixed packing", &p, 1);
    gradcheck_problem("mixed packing", &p, 0);
}
END_TEST

/* A second backward pass through the same graph (the first overwrote the
 * kept segment starts with the carries inside the segments) gives the first
 * pass's gradients, equal to the unrolled body's. */
START_TEST(second_backward_equals_first)
{
    for (int segment = 0; segment < 4; segment += 3) {
        problem p = four_problem(75, 11);
        mi_tensor *w[16], *g1[16], *g2[16], *gr[16];
        int n = leaves_of(&p, w);
        mi_tensor *ls = loss_of(&p, true, segment), *lr = loss_of(&p, false, 0);
        ck_assert_msg(ls && mi_grad(&ls, NULL, 1, w, n, false, g1) == 0, "%s", mi_error());
        ck_assert_msg(mi_grad(&ls, NULL, 1, w, n, false, g2) == 0, "%s", mi_error());
        ck_assert_msg(lr && mi_grad(&lr, NULL, 1, w, n, false, gr) == 0, "%s", mi_error());
        for (int k = 0; k < n; k++) {
            ck_assert_double_le(max_rel_diff(g1[k], gr[k]), 1e-12);
            ck_assert_double_le(max_rel_diff(g2[k], gr[k]), 1e-12);
        }
    }
}
END_TEST

/* carries and inputs that do not require grad: the others' gradients are
 * still the unrolled body's */
START_TEST(constant_inputs)
{
    for (int packed = 0; packed < 2; packed++) {
        rnn m;
        problem p = packed ? four_problem(72, 6) : rnn_problem(&m, 73, 2, 6, 3, 2);
        p.carry0[0]->requires_grad = false;
        p.xs[p.n_xs - 1]->requires_grad = false;
        mi_tensor *w[16], *gs[16], *gr[16];
        int n = 0;
        for (int i = 1; i < p.n_carry; i++) w[n++] = p.carry0[i];
        for (int j = 0; j < p.n_xs - 1; j++) w[n++] = p.xs[j];
        for (int k = 0; k < p.n_params; k++) w[n++] = p.params[k];
        mi_tensor *ls = loss_of(&p, true, 0), *lr = loss_of(&p, false, 0);
        ck_assert_msg(ls && mi_grad(&ls, NULL, 1, w, n, false, gs) == 0, "%s", mi_error());
        ck_assert_msg(lr && mi_grad(&lr, NULL, 1, w, n, false, gr) == 0, "%s", mi_error());
        for (int k = 0; k < n; k++) ck_assert_double_le(max_rel_diff(gs[k], gr[k]), 1e-12);
    }
}
END_TEST

/* ---------------------------------------------------------------- parameters with history
 * The rnn's parameters as views and functions of leaves: W and U slices of
 * one leaf θ [2·d·d] reshaped, b = tanh(b_raw), V = 1.5 V_raw; and θ read
 * whole by the body too (y'_t = h_t ⊙ x_t + Σθ²), so that θ's gradient comes
 * both through its views and directly. */
typedef struct derived {
    rnn m;
    mi_tensor *theta, *b_raw, *V_raw;
} derived;

static int derived_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                        mi_tensor **y)
{
    derived *d = ctx;
    if (rnn_body(&d->m, c, x, c_out, y) != 0) return -1;
    y[1] = mi_add(y[1], mi_sum(mi_square(d->theta), MI_ALL, false));
    return 0;
}

START_TEST(parameters_with_history)
{
    for (int segment = 0; segment < 4; segment += 3) {
        mi_rng r;
        mi_rng_seed(&r, 81);
        int64_t dd = 3, N = 2, T = 7;
        derived d;
        d.theta = randn(&r, MI_SHAPE(2 * dd * dd), 0.5);
        d.b_raw = randn(&r, MI_SHAPE(dd), 0.5);
        d.V_raw = randn(&r, MI_SHAPE(dd, 2), 0.5);
        /* recorded in the loss's graph, before the scan */
        d.m.W = mi_reshape(mi_slice(d.theta, 0, 0, dd * dd), 2, (int64_t[]){dd, dd});
        d.m.U = mi_reshape(mi_slice(d.theta, 0, dd * dd, 2 * dd * dd), 2, (int64_t[]){dd, dd});
        d.m.b = mi_tanh(d.b_raw);
        d.m.V = mi_mul_scalar(d.V_raw, 1.5);
        problem p = {.body = derived_body, .ctx = &d, .n_carry = 1, .n_xs = 1, .n_ys = 2,
                     .n_params = 3, .params = {d.theta, d.b_raw, d.V_raw}};
        p.carry0[0] = randn(&r, MI_SHAPE(N, dd), 0.5);
        p.xs[0] = randn(&r, MI_SHAPE(N, T, dd), 1);
        loss_weights(&p, &r);
        check_against_unrolled("parameters with history", &p, segment);
        /* the recorded parameters keep their history */
        ck_assert_ptr_nonnull(d.m.W->node);
        ck_assert_ptr_nonnull(d.m.b->node);
    }
}
END_TEST

/* ---------------------------------------------------------------- scans inside others
 * A body whose step is itself a scan: x_t [N, T2, d] is a sub-sequence the
 * rnn runs over from the carry (by mi_scan or unrolled), y_t = its ys[0]
 * [N, T2, e]; and mi_scan as the function of a mi_checkpoint. */
typedef struct outer_ctx {
    rnn *m;
    bool inner_scan;
} outer_ctx;

static int outer_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                      mi_tensor **y)
{
    const outer_ctx *o = ctx;
    mi_tensor *ys[2];
    problem p = {.body = rnn_body, .ctx = o->m, .n_carry = 1, .n_xs = 1, .n_ys = 2,
                 .carry0 = {c[0]}, .xs = {x[0]}};
    int rc = o->inner_scan ? mi_scan(rnn_body, o->m, 1, c, 1, x, 2, 2, c_out, ys)
                           : unrolled(&p, c_out, ys);
    if (rc != 0) return -1;
    y[0] = ys[0];
    return 0;
}

START_TEST(nested_scans)
{
    rnn m;
    problem p = rnn_problem(&m, 51, 2, 4, 3, 2); /* for the parameters and the start carry */
    mi_rng r;
    mi_rng_seed(&r, 52);
    mi_tensor *X = randn(&r, MI_SHAPE(2, 5, 3, 3), 1); /* N 2, T 5, T2 3, d 3 */
    mi_tensor *wy = mi_randn(&r, MI_F64, MI_SHAPE(2, 5, 3, 2), 0, 1);
    mi_tensor *w[8] = {p.carry0[0], X, m.W, m.U, m.b, m.V}, *g[2][8];
    double loss[2];
    for (int k = 0; k < 2; k++) {
        outer_ctx o = {&m, k == 0};
        mi_tensor *c, *ys;
        problem whole = {.body = outer_body, .ctx = &o, .n_carry = 1, .n_xs = 1, .n_ys = 1,
                         .carry0 = {p.carry0[0]}, .xs = {X}};
        int rc = k == 0 ? mi_scan(outer_body, &o, 1, p.carry0, 1, &X, 1, 0, &c, &ys)
                        : unrolled(&whole, &c, &ys);
        ck_assert_msg(rc == 0, "%s", mi_error());
        mi_tensor *l = mi_add(mi_sum(mi_mul(ys, wy), MI_ALL, false),
                              mi_sum(mi_mul(c, p.r_carry[0]), MI_ALL, false));
        ck_assert_msg(l && mi_grad(&l, NULL, 1, w, 6, false, g[k]) == 0, "%s", mi_error());
        loss[k] = mi_item(l);
    }
    ck_assert_double_le(fabs(loss[0] - loss[1]), 1e-12 * (1 + fabs(loss[1])));
    for (int k = 0; k < 6; k++) ck_assert_double_le(max_rel_diff(g[0][k], g[1][k]), 1e-12);
}
END_TEST

static mi_tensor *checkpointed_scan(void *ctx, mi_tensor *const *in, int n)
{
    (void)n;
    mi_tensor *c, *ys[2];
    if (mi_scan(rnn_body, ctx, 1, in, 1, in + 1, 2, 0, &c, ys) != 0) return NULL;
    return mi_add(mi_sum(ys[0], MI_ALL, false), mi_sum(c, MI_ALL, false));
}

START_TEST(scan_inside_checkpoint)
{
    rnn m;
    problem p = rnn_problem(&m, 61, 2, 6, 3, 2);
    mi_tensor *in[2] = {p.carry0[0], p.xs[0]}, *w[8], *g[2][8];
    int n = leaves_of(&p, w);
    double loss[2];
    for (int k = 0; k < 2; k++) {
        mi_tensor *l = k == 0 ? mi_checkpoint(checkpointed_scan, &m, in, 2)
                              : checkpointed_scan(&m, in, 2);
        ck_assert_msg(l && mi_grad(&l, NULL, 1, w, n, false, g[k]) == 0, "%s", mi_error());
        loss[k] = mi_item(l);
    }
    ck_assert_double_le(fabs(loss[0] - loss[1]), 1e-12 * (1 + fabs(loss[1])));
    for (int k = 0; k < n; k++) ck_assert_double_le(max_rel_diff(g[0][k], g[1][k]), 1e-12);
}
END_TEST

/* ---------------------------------------------------------------- gradcheck */

typedef struct gc_ctx {
    problem *p;
    int segment;
} gc_ctx;

static int scan_loss(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)in, (void)n;
    const gc_ctx *g = ctx;
    out[0] = loss_of(g->p, true, g->segment);
    return out[0] ? 1 : -1;
}

static void gradcheck_problem(const char *what, problem *p, int segment)
{
    mi_tensor *w[16];
    int n = leaves_of(p, w);
    gc_ctx g = {p, segment};
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    for (int k0 = 0; k0 < n; k0 += MI_MAX_INPUTS) {
        int m = n - k0 < MI_MAX_INPUTS ? n - k0 : MI_MAX_INPUTS;
        mi_gradcheck_result r = mi_gradcheck(scan_loss, &g, w + k0, m, &o);
        ck_assert_msg(r.ok, "%s: %s", what, r.message);
        ck_assert_int_gt(r.entries, 0);
    }
}

START_TEST(gradcheck_scans)
{
    problem a = delta_problem(5, 2, 5, 3, 2);
    gradcheck_problem("delta rule", &a, 2);
    problem b = mlp_problem(6, 1, 4, 2, 3, 2);
    gradcheck_problem("mlp memory", &b, 0);
    rnn m;
    problem c = rnn_problem(&m, 7, 2, 5, 3, 2);
    gradcheck_problem("rnn", &c, 3);
}
END_TEST

/* ---------------------------------------------------------------- random bodies
 * A program over registers: r0 = carry 0, r1 = carry 1, r2 = x_t, r3 = a
 * parameter W; each instruction appends op(r_a, r_b) (or op(r_a)). The new
 * carries are the last registers through tanh (bounded), y the one before. */
enum { RAND_OPS = 6, D = 3 };

typedef struct program {
    int op[RAND_OPS], a[RAND_OPS], b[RAND_OPS];
    mi_tensor *W;
} program;

static mi_tensor *instr(int op, mi_tensor *a, mi_tensor *b, mi_tensor *W)
{
    switch (op) {
    case 0: return mi_add(a, b);
    case 1: return mi_mul(a, b);
    case 2: return mi_sub(a, b);
    case 3: return mi_matmul(a, W);
    case 4: return mi_tanh(a);
    case 5: return mi_sigmoid(a);
    case 6: return mi_mul_scalar(a, 0.7);
    default: return mi_exp(mi_mul_scalar(mi_square(a), -1));
    }
}

static int random_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                       mi_tensor **y)
{
    const program *p = ctx;
    mi_tensor *r[4 + RAND_OPS] = {c[0], c[1], x[0], p->W};
    for (int i = 0; i < RAND_OPS; i++) {
        r[4 + i] = instr(p->op[i], r[p->a[i]], r[p->b[i]], p->W);
    }
    c_out[0] = mi_tanh(r[3 + RAND_OPS]);
    c_out[1] = mi_add(mi_mul_scalar(c[1], 0.5), mi_tanh(r[2 + RAND_OPS]));
    y[0] = mi_mul(r[1 + RAND_OPS], x[0]);
    return 0;
}

START_TEST(random_bodies)
{
    for (uint64_t seed = 1; seed <= 6; seed++) {
        mi_rng r;
        mi_rng_seed(&r, 100 + seed);
        program prog;
        for (int i = 0; i < RAND_OPS; i++) {
            prog.op[i] = (int)mi_rng_below(&r, 8);
            /* operands among the registers so far, the parameter W only as a matmul's */
            int have = 4 + i;
            do prog.a[i] = (int)mi_rng_below(&r, (uint64_t)have);
            while (prog.a[i] == 3);
            do prog.b[i] = (int)mi_rng_below(&r, (uint64_t)have);
            while (prog.b[i] == 3);
        }
        prog.W = randn(&r, MI_SHAPE(D, D), 0.6);
        int64_t N = 2, T = 3 + (int64_t)mi_rng_below(&r, 12);
        problem p = {.body = random_body, .ctx = &prog, .n_carry = 2, .n_xs = 1, .n_ys = 1,
                     .n_params = 1, .params = {prog.W}};
        p.carry0[0] = randn(&r, MI_SHAPE(N, D), 0.5);
        p.carry0[1] = randn(&r, MI_SHAPE(N, D), 0.5);
        p.xs[0] = randn(&r, MI_SHAPE(N, T, D), 1);
        loss_weights(&p, &r);
        check_against_unrolled("random body", &p, 0);
        check_against_unrolled("random body", &p, (int)(1 + mi_rng_below(&r, 5)));
    }
}
END_TEST

/* ---------------------------------------------------------------- carries passed through
 * A body that hands carry 0 on as carry 1 and, as a view, as carry 2 (a
 * shift register): the scan's tokens alternate scratch scopes and read the
 * carry the token before left, so a result that is not in its token's scope
 * (the token before's carry 0) must be copied there, or the token after next
 * overwrites it. Its gradient comes back the same way (the nested pass hands
 * back its seed). */
static int passing_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                        mi_tensor **y)
{
    mi_tensor *W = ctx;
    c_out[0] = mi_tanh(mi_add(mi_matmul(c[0], W), x[0]));
    c_out[1] = c[0];
    c_out[2] = mi_reshape(c[0], c[0]->rank, c[0]->shape);
    y[0] = mi_add(mi_mul(c_out[0], c[1]), c[2]);
    return 0;
}

START_TEST(carries_passed_through)
{
    mi_rng r;
    mi_rng_seed(&r, 77);
    int64_t N = 2, T = 11;
    mi_tensor *W = randn(&r, MI_SHAPE(D, D), 0.6);
    problem p = {.body = passing_body, .ctx = W, .n_carry = 3, .n_xs = 1, .n_ys = 1,
                 .n_params = 1, .params = {W}};
    for (int i = 0; i < 3; i++) p.carry0[i] = randn(&r, MI_SHAPE(N, D), 0.5);
    p.xs[0] = randn(&r, MI_SHAPE(N, T, D), 1);
    loss_weights(&p, &r);
    check_against_unrolled("pass-through carries", &p, 0);
    check_against_unrolled("pass-through carries", &p, 3);
}
END_TEST

/* ---------------------------------------------------------------- ys the backward skips
 * A body that leaves its y out when mi_scan says it will not read it (a
 * token run again for its carry in the backward) gives the same values and
 * gradients, and mi_scan does say so. */
typedef struct lazy {
    mi_tensor *W;
    int skipped;
} lazy;

static int lazy_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                     mi_tensor **y)
{
    lazy *l = ctx;
    c_out[0] = mi_tanh(mi_add(mi_matmul(c[0], l->W), x[0]));
    if (!mi_scan_wants_ys()) {
        l->skipped++;
        y[0] = NULL;
        return 0;
    }
    y[0] = mi_mul(mi_sigmoid(c_out[0]), x[0]);
    return 0;
}

START_TEST(ys_skipped_when_not_read)
{
    mi_rng r;
    mi_rng_seed(&r, 91);
    int64_t N = 2, T = 13;
    lazy l = {.W = randn(&r, MI_SHAPE(D, D), 0.6)};
    problem p = {.body = lazy_body, .ctx = &l, .n_carry = 1, .n_xs = 1, .n_ys = 1,
                 .n_params = 1, .params = {l.W}};
    p.carry0[0] = randn(&r, MI_SHAPE(N, D), 0.5);
    p.xs[0] = randn(&r, MI_SHAPE(N, T, D), 1);
    loss_weights(&p, &r);
    check_against_unrolled("lazy ys", &p, 0);
    ck_assert_msg(l.skipped > 0, "mi_scan never ran a token for its carry alone");
    ck_assert(mi_scan_wants_ys()); /* outside a scan: always */
}
END_TEST

/* ---------------------------------------------------------------- f32 */

START_TEST(f32_forward_equals_unrolled)
{
    problem p = delta_problem(8, 2, 9, 4, 3);
    for (int i = 0; i < p.n_carry; i++)
        p.carry0[i] = mi_requires_grad(mi_tensor_to(p.carry0[i], MI_F32), true);
    for (int j = 0; j < p.n_xs; j++)
        p.xs[j] = mi_requires_grad(mi_tensor_to(p.xs[j], MI_F32), true);
    p.r_carry[0] = mi_tensor_to(p.r_carry[0], MI_F32);
    p.r_ys[0] = mi_tensor_to(p.r_ys[0], MI_F32);
    mi_tensor *w[8], *gs[8], *gr[8];
    int n = leaves_of(&p, w);
    mi_tensor *ls = loss_of(&p, true, 0), *lr = loss_of(&p, false, 0);
    ck_assert_msg(ls && lr, "%s", mi_error());
    ck_assert_msg(mi_grad(&ls, NULL, 1, w, n, false, gs) == 0, "%s", mi_error());
    ck_assert_msg(mi_grad(&lr, NULL, 1, w, n, false, gr) == 0, "%s", mi_error());
    ck_assert(gs[0]->dtype == MI_F32);
    ck_assert_double_le(fabs(mi_item(ls) - mi_item(lr)), 1e-4 * (1 + fabs(mi_item(lr))));
    for (int k = 0; k < n; k++) ck_assert_double_le(max_rel_diff(gs[k], gr[k]), 1e-4);
}
END_TEST

/* ---------------------------------------------------------------- recording off */

START_TEST(no_recording_is_a_plain_loop)
{
    problem p = delta_problem(9, 1, 6, 3, 2);
    mi_tensor *c, *y, *cr, *yr;
    bool was = mi_set_grad_enabled(false);
    int rc = mi_scan(delta_body, NULL, 1, p.carry0, 5, p.xs, 1, 0, &c, &y);
    int rr = unrolled(&p, &cr, &yr);
    mi_set_grad_enabled(was);
    ck_assert_msg(rc == 0 && rr == 0, "%s", mi_error());
    ck_assert_ptr_null(c->node);
    ck_assert_ptr_null(y->node);
    ck_assert_double_le(max_rel_diff(c, cr), 1e-12);
    ck_assert_double_le(max_rel_diff(y, yr), 1e-12);
}
END_TEST

/* ---------------------------------------------------------------- memory
 * What the process holds from the system at most over a forward and
 * backward of the delta rule (N 1, dk = dv = 16), at T = 64 and 1024: the
 * unroll keeps every token's record, mi_scan about √(2T) carries and one
 * token's record, besides the inputs, outputs and gradients both hold. */
static size_t peak_bytes(int64_t T, bool scan)
{
    problem p = delta_problem(11, 1, T, 16, 16);
    mi_tensor *w[8], *g[8];
    int n = leaves_of(&p, w);
    mi_scan_release();   /* the scratch the previous calls kept: counted here from nothing */
    size_t base = mi_scope_system_bytes();
    mi_scope_system_peak_reset();
    mi_scope *step = mi_scope_new("step");
    mi_scope_enter(step);
    mi_tensor *l = loss_of(&p, scan, 0);
    ck_assert_msg(l && mi_grad(&l, NULL, 1, w, n, false, g) == 0, "%s", mi_error());
    mi_scope_leave();
    mi_scope_free(step);
    return mi_scope_system_peak() - base;
}

START_TEST(memory_grows_like_sqrt_t)
{
    size_t scan64 = peak_bytes(64, true), scan1024 = peak_bytes(1024, true);
    size_t unroll64 = peak_bytes(64, false), unroll1024 = peak_bytes(1024, false);
    double scan_per_token = ((double)scan1024 - (double)scan64) / 960;
    double unroll_per_token = ((double)unroll1024 - (double)unroll64) / 960;
    printf("scan_body memory: mi_scan %zu -> %zu bytes (T 64 -> 1024, %.0f a token), unrolled "
           "%zu -> %zu (%.0f a token)\n",
           scan64, scan1024, scan_per_token, unroll64, unroll1024, unroll_per_token);
    /* the unroll keeps at least the state-sized tensors of every token (S_t
     * and α S_{t−1}, the outer product, its scaled copy: 4 · dv · dk f64) */
    ck_assert_double_ge(unroll_per_token, 4.0 * 16 * 16 * 8);
    ck_assert_double_le(8 * scan_per_token, unroll_per_token);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("scan_body");
    TCase *tc = tcase_slow("scan_body");
    tcase_add_test(tc, delta_rule_equals_unrolled);
    tcase_add_test(tc, delta_rule_equals_delta_scan);
    tcase_add_test(tc, mlp_memory_equals_unrolled);
    tcase_add_test(tc, outer_parameters_equal_unrolled);
    tcase_add_test(tc, chained_scans);
    tcase_add_test(tc, nested_scans);
    tcase_add_test(tc, many_inputs_are_packed);
    tcase_add_test(tc, carries_and_inputs_packed_together);
    tcase_add_test(tc, second_backward_equals_first);
    tcase_add_test(tc, constant_inputs);
    tcase_add_test(tc, parameters_with_history);
    tcase_add_test(tc, scan_inside_checkpoint);
    tcase_add_test(tc, gradcheck_scans);
    tcase_add_test(tc, random_bodies);
    tcase_add_test(tc, carries_passed_through);
    tcase_add_test(tc, ys_skipped_when_not_read);
    tcase_add_test(tc, f32_forward_equals_unrolled);
    tcase_add_test(tc, no_recording_is_a_plain_loop);
    tcase_add_test(tc, memory_grows_like_sqrt_t);
    suite_add_tcase(s, tc);
    return s;
}
