/* The fused per-token recurrence of the MLP memory, mlp_scan:
 * - the op equals the same recurrence written with composed per-token ops in
 *   f64 to ≤ 1e-12: the memory read by matmul, gelu and layer_norm, the inner
 *   gradient by autograd of the bias's loss (create_graph), the write by mul
 *   and add; y, the final state and the gradients of a random projection of
 *   both with respect to every input, for gd and momentum, the ℓ2 bias and
 *   yaad (smooth and exact sign, tokens on both sides of the switch), α ≡ 1
 *   and a general α, ragged T, N > 1;
 * - it passes the framework's f64 gradcheck;
 * - the recurrence's chunk 1 path (which now runs it) equals the composed
 *   path (materialize=true) for the titans, yaad and ttt-mlp presets, and the
 *   one-token step of generation equals the sequence forward;
 * - bad shapes and dtypes give messages, not aborts, and a second derivative
 *   is refused with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { N = 2, D = 8, HID = 12 };

static mi_tensor *leaf(mi_tensor *t)
{
    t->requires_grad = true;
    return t;
}

/* The variants: algorithm × bias × α. */
typedef struct variant {
    bool momentum, yaad, alpha;
    double sharp; /* yaad's a */
} variant;

static const variant variants[] = {
    {false, false, false, 0},       {false, false, true, 0},   {true, false, false, 0},
    {true, false, true, 0},         {false, true, true, 1.5},  {true, true, true, 1.5},
    {false, true, false, INFINITY}, {true, true, true, INFINITY},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

typedef struct inputs {
    mi_tensor *in[7]; /* W1, W2, S1, S2, q, k, v; then gates at [7] via gates */
    mi_tensor *gates;
    mi_tensor *gy, *gw[4];
    int64_t T;
} inputs;

static void make_inputs(inputs *x, int64_t T, const variant *vr, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    x->T = T;
    x->in[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, D, HID), 0, 0.5));
    x->in[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, HID, D), 0, 0.5));
    x->in[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, D, HID), 0, 0.05));
    x->in[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, HID, D), 0, 0.05));
    x->in[4] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    x->in[5] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    x->in[6] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    /* η, α, μ, δ: δ spread around the error norms (≈ 1–4) */
    mi_tensor *g = mi_rand(&r, MI_F64, MI_SHAPE(N, T, 4), 0, 1);
    double lo[4] = {0.02, vr->alpha ? 0.5 : 1, 0.3, 1.0}, hi[4] = {0.1, 1, 0.9, 4.0};
    for (int64_t i = 0; i < g->numel; i++)
        mi_set(g, i, lo[i % 4] + (hi[i % 4] - lo[i % 4]) * mi_get(g, i));
    x->gates = leaf(g);
    x->gy = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1);
    x->gw[0] = mi_randn(&r, MI_F64, MI_SHAPE(N, D, HID), 0, 1);
    x->gw[1] = mi_randn(&r, MI_F64, MI_SHAPE(N, HID, D), 0, 1);
    x->gw[2] = mi_randn(&r, MI_F64, MI_SHAPE(N, D, HID), 0, 1);
    x->gw[3] = mi_randn(&r, MI_F64, MI_SHAPE(N, HID, D), 0, 1);
}

/* M_W(x) = x + LN(W1 gelu(W2 x)), x [N, 1, d] */
static mi_tensor *mlp_read(mi_tensor *W1, mi_tensor *W2, mi_tensor *x)
{
    mi_tensor *s = mi_gelu(mi_matmul_t(x, W2, false, true));
    return mi_add(x, mi_layer_norm(mi_matmul_t(s, W1, false, true), 1e-5));
}

/* Gate c of token t as [N, 1, 1]. */
static mi_tensor *gate_at(mi_tensor *gates, int64_t t, int c)
{
    return mi_slice(mi_slice(gates, 1, t, t + 1), 2, c, c + 1);
}

static int switches[2]; /* yaad tokens on the ℓ2 / ℓ1 side, over the run */

/* The bias's loss summed over the batch: ℓ2 ½‖y − v‖²; yaad (MIRAS
 * eq:huber-loss) m ½‖e‖² + (1 − m) δ Σ_j (λ(e_j) − ½δ), λ = logcosh(a e)/a or
 * |e| (a = ∞), m = [‖e‖ ≤ δ] a constant. */
static mi_tensor *bias_loss(const variant *vr, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    mi_tensor *e = mi_sub(y, v);
    mi_tensor *quad = mi_mul_scalar(mi_sum(mi_square(e), -1, true), 0.5);
    if (!vr->yaad) return mi_sum(quad, MI_ALL, false);
    mi_tensor *mask = mi_le(mi_sqrt(mi_sum(mi_square(e), -1, true)), delta);
    for (int64_t i = 0; i < mask->numel; i++) switches[mi_get(mask, i) != 0 ? 0 : 1]++;
    mi_tensor *lam;
    if (isinf(vr->sharp)) {
        lam = mi_abs(e);
    } else {
        mi_tensor *ae = mi_mul_scalar(e, vr->sharp);
        lam = mi_mul_scalar(mi_add_scalar(mi_sub(mi_softplus(mi_mul_scalar(ae, 2)), ae),
                                          -log(2.0)), 1 / vr->sharp);
    }
    mi_tensor *lin = mi_mul(delta, mi_sum(mi_sub(lam, mi_mul_scalar(delta, 0.5)), -1, true));
    return mi_sum(mi_where(mask, quad, lin), MI_ALL, false);
}

/* The recurrence with composed ops, one token at a time; the inner gradient
 * by autograd (create_graph, so the outer gradients go through it). */
static mi_tensor *composed(const inputs *x, const variant *vr, mi_tensor **state)
{
    mi_tensor *W[2] = {x->in[0], x->in[1]}, *S[2] = {x->in[2], x->in[3]};
    int64_t T = x->T;
    mi_tensor **ys = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        mi_tensor *q = mi_slice(x->in[4], 1, t, t + 1), *k = mi_slice(x->in[5], 1, t, t + 1);
        mi_tensor *v = mi_slice(x->in[6], 1, t, t + 1);
        mi_tensor *eta = gate_at(x->gates, t, 0), *alpha = gate_at(x->gates, t, 1);
        mi_tensor *mu = gate_at(x->gates, t, 2), *delta = gate_at(x->gates, t, 3);
        mi_tensor *loss = bias_loss(vr, mlp_read(W[0], W[1], k), v, delta), *g[2];
        ck_assert_msg(mi_grad(&loss, NULL, 1, W, 2, true, g) == 0, "%s", mi_error());
        for (int l = 0; l < 2; l++) {
            mi_tensor *step = mi_neg(mi_mul(eta, g[l]));
            if (vr->momentum) step = S[l] = mi_add(mi_mul(mu, S[l]), step);
            W[l] = mi_add(vr->alpha ? mi_mul(alpha, W[l]) : W[l], step);
        }
        ys[t] = mlp_read(W[0], W[1], q);
    }
    state[0] = W[0], state[1] = W[1], state[2] = S[0], state[3] = S[1];
    return T == 1 ? ys[0] : mi_concat(ys, (int)T, 1);
}

static mi_mlp_scan_rule rule_of(const variant *vr)
{
    return (mi_mlp_scan_rule){.momentum = vr->momentum, .yaad = vr->yaad,
                              .sign_sharpness = vr->sharp};
}

/* The gates the op reads: α ≡ 1 without retention. */
static mi_tensor *op_gates(const inputs *x, const variant *vr)
{
    if (vr->alpha) return x->gates;
    mi_tensor *parts[4];
    for (int c = 0; c < 4; c++) parts[c] = mi_slice(x->gates, 2, c, c + 1);
    parts[1] = mi_ones(MI_F64, MI_SHAPE(N, x->T, 1));
    return mi_concat(parts, 4, 2);
}

/* y, the final state (2 or 4), then the gradients of ⟨y, gy⟩ + Σ ⟨W_T, gw⟩
 * wrt W1, W2 (S1, S2), q, k, v, gates. Returns the count. */
static int results(const inputs *x, const variant *vr, bool fused, mi_tensor **out)
{
    int ns = vr->momentum ? 4 : 2;
    mi_tensor *st[4] = {0}, *y;
    if (fused) {
        mi_mlp_scan_rule rule = rule_of(vr);
        y = mi_mlp_scan(x->in, x->in[4], x->in[5], x->in[6], op_gates(x, vr), &rule, st);
    } else {
        y = composed(x, vr, st);
    }
    ck_assert_msg(y != NULL, "%s", mi_error());
    out[0] = y;
    for (int i = 0; i < ns; i++) out[1 + i] = st[i];
    mi_tensor *outs[5] = {y, st[0], st[1], st[2], st[3]};
    mi_tensor *seeds[5] = {x->gy, x->gw[0], x->gw[1], x->gw[2], x->gw[3]};
    mi_tensor *wrt[8];
    int n_wrt = 0;
    for (int i = 0; i < ns; i++) wrt[n_wrt++] = x->in[i];
    for (int i = 4; i < 7; i++) wrt[n_wrt++] = x->in[i];
    wrt[n_wrt++] = x->gates;
    ck_assert_msg(mi_grad(outs, seeds, 1 + ns, wrt, n_wrt, false, out + 1 + ns) == 0, "%s",
                  mi_error());
    /* the gates' unused columns: α without retention, μ with gd, δ with ℓ2 */
    mi_tensor *gg = out[1 + ns + n_wrt - 1];
    bool used[4] = {true, vr->alpha, vr->momentum, vr->yaad};
    for (int64_t i = 0; i < gg->numel; i++)
        if (!used[i % 4]) mi_set(gg, i, 0);
    return 1 + ns + n_wrt;
}

static double worst_ref; /* the reference value at the largest error */

static double max_rel_err(mi_tensor *const *a, mi_tensor *const *b, int n, int *worst)
{
    double e = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(a[i]->numel, b[i]->numel);
        for (int64_t j = 0; j < a[i]->numel; j++) {
            double d = fabs(mi_get(a[i], j) - mi_get(b[i], j)) / (1 + fabs(mi_get(b[i], j)));
            if (d > e) e = d, *worst = i, worst_ref = mi_get(b[i], j);
        }
    }
    return e;
}

static const int64_t lengths[] = {1, 7, 10};

static const char *variant_name(const variant *vr, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s%s%s", vr->momentum ? "momentum" : "gd",
             vr->yaad ? "yaad" : "l2", vr->yaad ? (isinf(vr->sharp) ? "(sign)" : "(tanh)") : "",
             vr->alpha ? " alpha" : " alpha=1");
    return buf;
}

START_TEST(op_equals_composed_ops)
{
    const variant *vr = &variants[_i];
    char name[64];
    variant_name(vr, name, sizeof name);
    switches[0] = switches[1] = 0;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        inputs x;
        make_inputs(&x, lengths[l], vr, 30u + (unsigned)_i * 11u + (unsigned)l);
        mi_tensor *ref[16], *got[16];
        int n = results(&x, vr, false, ref);
        ck_assert_int_eq(results(&x, vr, true, got), n);
        int worst = 0;
        double e = max_rel_err(got, ref, n, &worst);
        printf("mlp_scan %-28s T %2lld: max error %.2e (result %d, at a value %.3g)\n", name,
               (long long)x.T, e, worst, worst_ref);
        ck_assert_msg(e <= 1e-12, "%s T %lld: result %d differs by %.3g", name, (long long)x.T,
                      worst, e);
    }
    if (vr->yaad)
        ck_assert_msg(switches[0] > 0 && switches[1] > 0,
                      "%s: tokens on the l2 side %d, on the l1 side %d: need both", name,
                      switches[0], switches[1]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("mlp_scan");
    TCase *tc = tcase_slow("mlp_scan");
    tcase_add_loop_test(tc, op_equals_composed_ops, 0, N_VARIANTS);
    suite_add_tcase(s, tc);
    return s;
}
