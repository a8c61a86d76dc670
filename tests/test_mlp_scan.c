/* The fused per-token recurrence of the MLP memory, mlp_scan:
 * - the op equals the same recurrence written with composed per-token ops in
 *   f64 to ≤ 1e-12: the memory read by matmul, gelu and layer_norm, the inner
 *   gradient by autograd of the bias's loss (create_graph), the write by mul
 *   and add; y, the final state and the gradients of a random projection of
 *   both with respect to every input, for gd and momentum, the ℓ2 bias,
 *   yaad (smooth and exact sign, tokens on both sides of the switch) and ℓp,
 *   the weights as the state or read from it (lq's normalisation, kl's
 *   softmax rows with the log-domain projection after each write), α ≡ 1
 *   and a general α, the gradient at W or at α W (decay_first), ragged T,
 *   N > 1;
 * - it passes the framework's f64 gradcheck;
 * - the backward from the checkpoints a recorded forward keeps equals the
 *   backward alone, which forms them again;
 * - the recurrence's chunk 1 path (which now runs it) equals the composed
 *   path (materialize=true) for the titans, yaad, ttt-mlp, moneta and memora
 *   presets (and variants: no retention, the exact sign, momentum,
 *   decay_first, ℓp with ℓ2 retention, yaad with kl), and the
 *   one-token step of generation equals the sequence forward;
 * - so do the chunks of the mini-batch rule where it runs the op (memora,
 *   titans, ttt-mlp; not yaad's);
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

/* The variants: algorithm × bias × α (× decay_first: the gradient at α W)
 * × the read (the state itself, lq or kl). */
typedef struct variant {
    bool momentum, yaad, alpha;
    double sharp; /* yaad's a */
    bool decay_first, lp;
    mi_mlp_scan_read read;
} variant;

#define LP_P 3.0
#define LP_EPS 1e-4
#define LQ_Q 4.0
#define LQ_EPS 1e-6
#define KL_C 4.0

#define ST MI_MLP_READ_STATE
#define LQ MI_MLP_READ_LQ
#define KL MI_MLP_READ_KL
static const variant variants[] = {
    {false, false, false, 0, false, false, ST},       {false, false, true, 0, false, false, ST},
    {true, false, false, 0, false, false, ST},        {true, false, true, 0, false, false, ST},
    {false, true, true, 1.5, false, false, ST},       {true, true, true, 1.5, false, false, ST},
    {false, true, false, INFINITY, false, false, ST}, {true, true, true, INFINITY, false, false, ST},
    {false, false, true, 0, true, false, ST},         {true, true, true, 1.5, true, false, ST},
    {false, false, true, 0, false, true, ST},         {false, false, true, 0, false, true, LQ},
    {false, false, false, 0, false, false, LQ},       {false, false, true, 0, true, true, LQ},
    {false, false, true, 0, false, false, KL},        {false, false, false, 0, false, true, KL},
    {false, true, true, 1.5, false, false, KL},       {false, false, true, 0, true, false, KL},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

typedef struct inputs {
    mi_tensor *in[7]; /* W1, W2, S1, S2, q, k, v */
    mi_tensor *gates;
    mi_tensor *gy, *gw[4];
    int64_t T;
} inputs;

static void make_inputs(inputs *x, int64_t T, const variant *vr, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    x->T = T;
    /* kl: logits spread enough that the rows are not near uniform, lq: A
     * large enough that R(A) has entries ≈ 0.5 (W1 s nearly constant, and the
     * memory's LayerNorm dividing by a spread near 0, makes the recurrence
     * amplify rounding by 1e3 and more: the composed path itself then moves
     * by 1e-11 for a 1e-15 change of its inputs) */
    double sd = vr->read == MI_MLP_READ_KL ? 1.5 : vr->read == MI_MLP_READ_LQ ? 2.5 : 0.5;
    x->in[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, D, HID), 0, sd));
    x->in[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, HID, D), 0, sd));
    x->in[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, D, HID), 0, 0.05));
    x->in[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, HID, D), 0, 0.05));
    x->in[4] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    x->in[5] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    x->in[6] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    /* η, α, μ, δ: δ spread around the error norms (≈ 1–4); a smaller η with
     * ℓp or a read, whose recurrences amplify rounding more (with η up to 0.1
     * a 1e-15 change of k moves y by up to 1e-12 after 10 tokens, and the
     * gradients by more) */
    mi_tensor *g = mi_rand(&r, MI_F64, MI_SHAPE(N, T, 4), 0, 1);
    bool stiff = vr->lp || vr->read != MI_MLP_READ_STATE;
    double lo[4] = {stiff ? 0.005 : 0.02, vr->alpha ? (vr->read == MI_MLP_READ_KL ? 0.9 : 0.5) : 1,
                    0.3, 1.0};
    double hi[4] = {stiff ? 0.03 : 0.1, 1, 0.9, 4.0};
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
    if (vr->lp) return mi_sum(mi_pow_scalar(mi_smooth_abs(e, LP_EPS), LP_P), MI_ALL, false);
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

/* The weights read from the state: A itself, lq_normalize per matrix, or
 * c softmax per row. */
static mi_tensor *read_of(const variant *vr, mi_tensor *a)
{
    if (vr->read == MI_MLP_READ_LQ) return mi_lq_normalize(a, LQ_Q, MI_LQ_FROBENIUS, LQ_EPS);
    if (vr->read == MI_MLP_READ_KL) return mi_mul_scalar(mi_softmax(a, -1), KL_C);
    return a;
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
        /* the gradient's point: W, or α W with decay_first */
        mi_tensor *at[2] = {W[0], W[1]};
        if (vr->decay_first) at[0] = mi_mul(alpha, W[0]), at[1] = mi_mul(alpha, W[1]);
        at[0] = read_of(vr, at[0]), at[1] = read_of(vr, at[1]);
        mi_tensor *loss = bias_loss(vr, mlp_read(at[0], at[1], k), v, delta), *g[2];
        ck_assert_msg(mi_grad(&loss, NULL, 1, at, 2, true, g) == 0, "%s", mi_error());
        for (int l = 0; l < 2; l++) {
            mi_tensor *step = mi_neg(mi_mul(eta, g[l]));
            if (vr->momentum) step = S[l] = mi_add(mi_mul(mu, S[l]), step);
            W[l] = mi_add(vr->alpha ? mi_mul(alpha, W[l]) : W[l], step);
            if (vr->read == MI_MLP_READ_KL)
                W[l] = mi_add_scalar(mi_log_softmax(W[l], -1), log(KL_C));
        }
        ys[t] = mlp_read(read_of(vr, W[0]), read_of(vr, W[1]), q);
    }
    state[0] = W[0], state[1] = W[1], state[2] = S[0], state[3] = S[1];
    return T == 1 ? ys[0] : mi_concat(ys, (int)T, 1);
}

static mi_mlp_scan_rule rule_of(const variant *vr)
{
    return (mi_mlp_scan_rule){.momentum = vr->momentum, .yaad = vr->yaad, .lp = vr->lp,
                              .decay_first = vr->decay_first, .sign_sharpness = vr->sharp,
                              .lp_p = LP_P, .lp_eps = LP_EPS, .read = vr->read,
                              .lq_q = LQ_Q, .lq_eps = LQ_EPS, .kl_scale = KL_C};
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

static const int64_t lengths[] = {1, 7, 10};

static const char *variant_name(const variant *vr, char *buf, size_t n)
{
    static const char *const reads[] = {"", " lq", " kl"};
    snprintf(buf, n, "%s %s%s%s%s%s", vr->momentum ? "momentum" : "gd",
             vr->yaad ? "yaad" : vr->lp ? "lp" : "l2",
             vr->yaad ? (isinf(vr->sharp) ? "(sign)" : "(tanh)") : "",
             vr->alpha ? " alpha" : " alpha=1", vr->decay_first ? " decay_first" : "",
             reads[vr->read]);
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
        double worst_ref = 0, e = max_rel_err(got, ref, n, &worst, &worst_ref);
        printf("mlp_scan %-40s T %2lld: max error %.2e (result %d, at a value %.3g)\n", name,
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

/* ---------------------------------------------------------------- gradcheck */
typedef struct scan_ctx {
    mi_mlp_scan_rule rule;
} scan_ctx;

static int call_scan(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    (void)n;
    const scan_ctx *sc = c;
    mi_tensor *p = mi_mlp_scan_packed(in[0], in[1], in[2], in[3], in[4], &sc->rule);
    out[0] = p;
    return p ? 1 : -1;
}

/* _i: the variants; yaad's δ either 0.02 or 50 per token, far from the error
 * norms, so that no finite difference crosses the switch. */
START_TEST(op_gradcheck)
{
    const variant *vr = &variants[_i];
    char name[64];
    variant_name(vr, name, sizeof name);
    enum { GN = 2, GT = 5, GD = 3, GH = 4 };
    mi_rng r;
    mi_rng_seed(&r, 90u + (unsigned)_i);
    int64_t P = (vr->momentum ? 4 : 2) * GD * GH;
    mi_tensor *in[5];
    /* the state's spread and η's range as in make_inputs */
    double sd = vr->read == MI_MLP_READ_KL ? 1.5 : vr->read == MI_MLP_READ_LQ ? 2.5 : 0.5;
    bool stiff = vr->lp || vr->read != MI_MLP_READ_STATE;
    in[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(GN, P), 0, sd));
    in[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(GN, GT, GD), 0, 1));
    in[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(GN, GT, GD), 0, 1));
    in[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(GN, GT, GD), 0, 1));
    in[4] = leaf(mi_rand(&r, MI_F64, MI_SHAPE(GN, GT, 4), 0, 1));
    double lo[3] = {stiff ? 0.01 : 0.05, vr->alpha ? 0.5 : 1, 0.2};
    double hi[3] = {stiff ? 0.1 : 0.3, 1, 0.8};
    for (int64_t i = 0; i < in[4]->numel; i++) {
        double u = mi_get(in[4], i);
        int c = (int)(i % 4);
        mi_set(in[4], i, c == 3 ? (u < 0.5 ? 0.02 : 50) : lo[c] + (hi[c] - lo[c]) * u);
    }
    scan_ctx sc = {rule_of(vr)};
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    o.quiet = true;
    mi_gradcheck_result g = mi_gradcheck(call_scan, &sc, in, 5, &o);
    printf("mlp_scan %-40s gradcheck: %lld entries, max abs err %.2e\n", name,
           (long long)g.entries, g.max_abs_err);
    ck_assert_msg(g.ok, "%s: %s", name, g.message);
}
END_TEST

/* A recorded forward keeps the backward's checkpoints (attrs.data); the
 * backward op alone (mi_mlp_scan_backward) forms them again by rerunning the
 * writes. Both give the same gradients of every input (f64, ≤ 1e-12), per
 * token and (where the rule takes chunks: no decay_first, no lq) in chunks
 * of 3 with the lag token, T 11: checkpoints before tokens 0, 4 and 8 per
 * token, 0 and 6 in chunks, the last segment short. A checkpoint kept at the
 * wrong token, or none, moves them by O(1). */
START_TEST(kept_checkpoints_equal_rerun)
{
    const variant *vr = &variants[_i / 2];
    mi_mlp_scan_rule rule = rule_of(vr);
    if (_i % 2) {
        if (vr->decay_first || vr->read == MI_MLP_READ_LQ) return;
        rule.chunk = 3, rule.lag_token = true;
    }
    inputs x;
    make_inputs(&x, 11, vr, 1300u + (unsigned)_i);
    int copies = vr->momentum ? 4 : 2;
    mi_tensor *flat[4];
    for (int i = 0; i < copies; i++) flat[i] = mi_reshape(x.in[i], 2, (int64_t[]){N, -1});
    mi_tensor *in[5] = {leaf(mi_concat(flat, copies, 1)), x.in[4], x.in[5], x.in[6],
                        op_gates(&x, vr)};
    in[4] = leaf(mi_tensor_to(in[4], MI_F64));
    mi_tensor *out = mi_mlp_scan_packed(in[0], in[1], in[2], in[3], in[4], &rule);
    ck_assert_msg(out != NULL, "%s", mi_error());
    mi_rng r;
    mi_rng_seed(&r, 1400u + (unsigned)_i);
    mi_tensor *g = mi_randn(&r, MI_F64, out->rank, out->shape, 0, 1), *kept[5], *rerun[5];
    ck_assert_msg(mi_grad(&out, &g, 1, in, 5, false, kept) == 0, "%s", mi_error());
    mi_tensor *packed = mi_mlp_scan_backward(in[0], in[1], in[2], in[3], in[4], g, &rule);
    ck_assert_msg(packed != NULL, "%s", mi_error());
    int64_t at = 0;
    for (int i = 0; i < 5; i++) {
        int64_t w = kept[i]->numel / N;
        rerun[i] = mi_reshape(mi_slice(packed, 1, at, at + w), kept[i]->rank, kept[i]->shape);
        at += w;
    }
    ck_assert_int_eq(at, packed->shape[1]);
    int worst = 0;
    double e = max_rel_err(kept, rerun, 5, &worst, NULL);
    char name[64];
    variant_name(vr, name, sizeof name);
    printf("mlp_scan %-40s chunk %lld: kept checkpoints against the rerun, max error %.2e\n",
           name, (long long)rule.chunk, e);
    ck_assert_msg(e <= 1e-12, "%s chunk %lld: gradient %d differs by %.3g", name,
                  (long long)rule.chunk, worst, e);
}
END_TEST

/* ---------------------------------------------------------------- in the recurrence */
enum { T_LAYER = 11, LD = 8 };

static const struct { const char *name, *set; } presets[] = {
    {"titans", NULL},
    {"titans", "retention=none"},
    {"yaad", NULL},
    {"yaad", "sign_sharpness=inf"},
    {"yaad", "algorithm=momentum"},
    {"ttt-mlp", NULL},
    {"titans", "decay_first=true"},
    {"yaad", "decay_first=true"},
    {"moneta", NULL},
    {"moneta", "retention=l2"},
    {"memora", NULL},
    {"memora", "bias=yaad"},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

/* A per-head gate [2, T] in [lo, hi), or NULL where the component has none. */
static mi_tensor *layer_gate(mi_rng *r, bool used, double lo, double hi)
{
    return used ? leaf(mi_rand(r, MI_F64, MI_SHAPE(2, T_LAYER), lo, hi)) : NULL;
}

/* x: q, k, v, W1_0, W2_0, η, α, μ, δ (gates NULL where unused); y, W1_T, W2_T
 * and the gradients wrt the non-NULL inputs. Returns the count. */
static int layer_results(const mi_miras_config *cfg, mi_tensor *const *x, mi_tensor *const *g,
                         mi_tensor **out)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, cfg) == 0, "%s", mi_error());
    mi_miras_gates gt = {.eta = x[5], .alpha = x[6], .mu = x[7], .delta = x[8]};
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *y = mi_miras_forward(&m, x[0], x[1], x[2], &gt, &x[3], s);
    ck_assert_msg(y != NULL, "%s", mi_error());
    out[0] = y, out[1] = s[0], out[2] = s[1];
    mi_tensor *outs[3] = {y, s[0], s[1]}, *wrt[9];
    int n_in = 0;
    for (int i = 0; i < 9; i++)
        if (x[i]) wrt[n_in++] = x[i];
    ck_assert_msg(mi_grad(outs, g, 3, wrt, n_in, false, out + 3) == 0, "%s", mi_error());
    return 3 + n_in;
}

/* A layer's inputs x (as layer_results) and cotangents g for m. */
static void layer_inputs(const mi_miras *m, unsigned seed, mi_tensor **x, mi_tensor **g)
{
    int64_t h = (int64_t)m->config.mlp_expansion * LD;
    mi_rng r;
    mi_rng_seed(&r, seed);
    x[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, LD), 0, 1));
    x[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, LD), 0, 1));
    x[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, LD), 0, 1));
    /* kl: spread rows (the kl_init_sd option) and α near 1, as in
     * make_inputs: near-uniform rows make the recurrence amplify rounding */
    bool kl = !strcmp(m->retention->name, "kl");
    double s1 = kl ? 1.5 : 1 / sqrt((double)h), s2 = kl ? 1.5 : 1 / sqrt((double)LD);
    x[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(LD, h), 0, s1));
    x[4] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(h, LD), 0, s2));
    x[5] = layer_gate(&r, true, 0.01, 0.1);
    x[6] = layer_gate(&r, m->retention->uses_alpha, kl ? 0.9 : 0.6, 0.99);
    x[7] = layer_gate(&r, m->algorithm->uses_mu, 0.3, 0.7);
    /* δ around the error norms (≈ 3–5 here): both branches of yaad's switch */
    x[8] = layer_gate(&r, m->bias->needs_delta, 2, 6);
    g[0] = mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, LD), 0, 1);
    g[1] = mi_randn(&r, MI_F64, 4, (int64_t[]){2, 1, LD, h}, 0, 1);
    g[2] = mi_randn(&r, MI_F64, 4, (int64_t[]){2, 1, h, LD}, 0, 1);
}

/* The layer's results by cfg's own path (got) and by the composed ops
 * (materialize=true, ref) on inputs x drawn from seed; returns their count. */
static int both_paths(const mi_miras_config *cfg, unsigned seed, mi_tensor **x, mi_tensor **got,
                      mi_tensor **ref)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, cfg) == 0, "%s", mi_error());
    mi_tensor *g[3];
    layer_inputs(&m, seed, x, g);
    mi_miras_config slow = *cfg;
    slow.materialize = true;
    int n = layer_results(&slow, x, g, ref);
    ck_assert_int_eq(layer_results(cfg, x, g, got), n);
    return n;
}

START_TEST(chunk1_equals_composed_path)
{
    const mi_preset *p = mi_preset_find(presets[_i].name);
    ck_assert_ptr_nonnull(p);
    mi_miras_config cfg = preset_config(p);
    if (presets[_i].set) config_set(&cfg, presets[_i].set);
    cfg.chunk = 1;
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s", mi_error());
    mi_tensor *x[9], *ref[12], *got[12];
    int n = both_paths(&cfg, 700u + (unsigned)_i, x, got, ref);
    int worst = 0;
    double e = max_rel_err(got, ref, n, &worst, NULL);
    printf("chunk 1 %-8s %-20s: max error %.2e (result %d)\n", presets[_i].name,
           presets[_i].set ? presets[_i].set : "", e, worst);
    ck_assert_msg(e <= 1e-12, "%s %s: result %d differs by %.3g", presets[_i].name,
                  presets[_i].set ? presets[_i].set : "", worst, e);

    /* the one-token step of generation, token after token, equals the forward */
    mi_miras_state st;
    ck_assert_msg(mi_miras_state_init(&m, &st, &x[3], 2, LD, LD, MI_F64) == 0, "%s", mi_error());
    double es = 0;
    for (int64_t t = 0; t < T_LAYER; t++) {
        mi_tensor *gs[4];
        for (int i = 0; i < 4; i++) gs[i] = x[5 + i] ? mi_slice(x[5 + i], 1, t, t + 1) : NULL;
        mi_miras_gates gt = {.eta = gs[0], .alpha = gs[1], .mu = gs[2], .delta = gs[3]};
        mi_tensor *yt = mi_miras_step(&m, &st, mi_slice(x[0], 1, t, t + 1),
                                      mi_slice(x[1], 1, t, t + 1), mi_slice(x[2], 1, t, t + 1),
                                      &gt);
        ck_assert_msg(yt != NULL, "%s", mi_error());
        mi_tensor *want = mi_slice(ref[0], 1, t, t + 1);
        for (int64_t j = 0; j < yt->numel; j++) {
            double d = fabs(mi_get(yt, j) - mi_get(want, j));
            if (d > es) es = d;
        }
    }
    printf("step    %-8s %-20s: max error %.2e\n", presets[_i].name,
           presets[_i].set ? presets[_i].set : "", es);
    ck_assert_msg(es <= 1e-12, "%s: the step differs from the forward by %.3g",
                  presets[_i].name, es);
}
END_TEST

/* The mini-batch rule runs as mlp_scan's chunks where the op takes it
 * (Memora's kl read with its lag token, with the ℓ2 and yaad biases; the
 * state itself with the ℓ2 bias: Titans with momentum, TTT-MLP with gd) and
 * equals the composed chunks (materialize=true), values and gradients, at
 * chunks of 2, 3, 4 and 16 over 11 tokens (last chunks of 1, 2, 3 and 11
 * tokens). Yaad's state read keeps the rank-one form. */
START_TEST(chunks_equal_composed_path)
{
    static const int64_t chunks[] = {2, 3, 4, 16};
    static const struct { const char *name, *set; bool op; } cases[] = {
        {"memora", NULL, true}, {"memora", "bias=yaad", true}, {"titans", NULL, true},
        {"ttt-mlp", NULL, true}, {"yaad", NULL, false}};
    int c = _i / 4;
    mi_miras_config cfg = preset_config(mi_preset_find(cases[c].name));
    if (cases[c].set) config_set(&cfg, cases[c].set);
    cfg.chunk = chunks[_i % 4];
    mi_tensor *x[9], *ref[12], *got[12];
    int n = both_paths(&cfg, 900u + (unsigned)_i, x, got, ref);
    ck_assert_msg(computed_within(got[0], "mlp_scan", 4) == cases[c].op,
                  "%s chunk %lld: %s mlp_scan", cases[c].name, (long long)cfg.chunk,
                  cases[c].op ? "not by" : "by");
    int worst = 0;
    double e = max_rel_err(got, ref, n, &worst, NULL);
    printf("chunk %-2lld %-8s %-9s: max error %.2e (result %d)\n", (long long)cfg.chunk,
           cases[c].name, cases[c].set ? cases[c].set : "", e, worst);
    ck_assert_msg(e <= 1e-12, "%s chunk %lld: result %d differs by %.3g", cases[c].name,
                  (long long)cfg.chunk, worst, e);
}
END_TEST

/* ---------------------------------------------------------------- errors */
START_TEST(bad_inputs_give_messages)
{
    variant vr = {.momentum = true, .alpha = true};
    inputs x;
    make_inputs(&x, 4, &vr, 3);
    mi_mlp_scan_rule rule = rule_of(&vr);
    mi_tensor **in = x.in, *st[4];
    mi_error_clear();
    /* k with the wrong width */
    mi_tensor *k_bad = mi_zeros(MI_F64, MI_SHAPE(N, 4, D + 1));
    ck_assert_ptr_null(mi_mlp_scan(in, in[4], k_bad, in[6], x.gates, &rule, st));
    ck_assert_error_has("mlp_scan: shapes do not fit");
    ck_assert_error_has("[2,4,9]");
    /* gates must be [N, T, 4] */
    mi_error_clear();
    mi_tensor *g_bad = mi_zeros(MI_F64, MI_SHAPE(N, 4, 3));
    ck_assert_ptr_null(mi_mlp_scan(in, in[4], in[5], in[6], g_bad, &rule, st));
    ck_assert_error_has("gates [2,4,3]");
    /* T differs between q and v */
    mi_error_clear();
    mi_tensor *v_bad = mi_zeros(MI_F64, MI_SHAPE(N, 5, D));
    ck_assert_ptr_null(mi_mlp_scan(in, in[4], in[5], v_bad, x.gates, &rule, st));
    ck_assert_error_has("mlp_scan");
    /* a packed state whose size is not 4·d·h (momentum) */
    mi_error_clear();
    mi_tensor *w_bad = mi_zeros(MI_F64, MI_SHAPE(N, 4 * D * HID + 1));
    ck_assert_ptr_null(mi_mlp_scan_packed(w_bad, in[4], in[5], in[6], x.gates, &rule));
    ck_assert_error_has("P = 4");
    /* momentum needs S1, S2 */
    mi_error_clear();
    mi_tensor *no_s[4] = {in[0], in[1], NULL, NULL};
    ck_assert_ptr_null(mi_mlp_scan(no_s, in[4], in[5], in[6], x.gates, &rule, st));
    ck_assert_error_has("state tensor 2 is NULL");
    /* W2 with another hidden width than W1 */
    mi_error_clear();
    mi_tensor *w_odd[4] = {in[0], mi_zeros(MI_F64, MI_SHAPE(N, HID + 1, D)), in[2], in[3]};
    ck_assert_ptr_null(mi_mlp_scan(w_odd, in[4], in[5], in[6], x.gates, &rule, st));
    ck_assert_error_has("state tensor 1 is [2,13,8]");
    /* no rule */
    mi_error_clear();
    ck_assert_ptr_null(mi_mlp_scan(in, in[4], in[5], in[6], x.gates, NULL, st));
    ck_assert_error_has("NULL rule");
    /* dtype */
    mi_error_clear();
    mi_tensor *q32 = mi_tensor_to(in[4], MI_F32);
    ck_assert_ptr_null(mi_mlp_scan(in, q32, in[5], in[6], x.gates, &rule, st));
    ck_assert_error_has("dtype");
    /* yaad's sharpness */
    mi_error_clear();
    mi_mlp_scan_rule bad_rule = {.yaad = true, .sign_sharpness = 0};
    mi_tensor *w2[2] = {in[0], in[1]};
    ck_assert_ptr_null(mi_mlp_scan(w2, in[4], in[5], in[6], x.gates, &bad_rule, st));
    ck_assert_error_has("sharpness");
    /* a read needs gd; lp's ε must be > 0 */
    mi_error_clear();
    mi_mlp_scan_rule lq_mom = {.momentum = true, .read = MI_MLP_READ_LQ, .lq_q = 4};
    ck_assert_ptr_null(mi_mlp_scan(in, in[4], in[5], in[6], x.gates, &lq_mom, st));
    ck_assert_error_has("a read with gd only");
    mi_error_clear();
    mi_mlp_scan_rule lp_bad = {.lp = true, .lp_p = 3, .lp_eps = 0};
    ck_assert_ptr_null(mi_mlp_scan(w2, in[4], in[5], in[6], x.gates, &lp_bad, st));
    ck_assert_error_has("lp needs p >= 1 and eps > 0");
    mi_error_clear();
    mi_mlp_scan_rule kl_bad = {.read = MI_MLP_READ_KL, .kl_scale = -1};
    ck_assert_ptr_null(mi_mlp_scan(w2, in[4], in[5], in[6], x.gates, &kl_bad, st));
    ck_assert_error_has("kl needs a scale c > 0");
    /* the mini-batch rule takes neither decay_first nor lq's read */
    mi_error_clear();
    mi_mlp_scan_rule chunk_bad = {.decay_first = true, .chunk = 4};
    ck_assert_ptr_null(mi_mlp_scan(w2, in[4], in[5], in[6], x.gates, &chunk_bad, st));
    ck_assert_error_has("chunk 4: the mini-batch rule (chunk > 1) takes no decay_first");
    mi_error_clear();
    mi_mlp_scan_rule chunk_neg = {.chunk = -2};
    ck_assert_ptr_null(mi_mlp_scan(w2, in[4], in[5], in[6], x.gates, &chunk_neg, st));
    ck_assert_error_has("chunk -2");
    /* NULL propagates */
    mi_error_clear();
    ck_assert_ptr_null(mi_mlp_scan(in, NULL, in[5], in[6], x.gates, &rule, st));
    ck_assert_error_has("mlp_scan");
    /* the backward op checks g */
    mi_error_clear();
    mi_tensor *packed = mi_concat((mi_tensor *[]){mi_reshape(in[0], 2, (int64_t[]){N, -1}),
                                                  mi_reshape(in[1], 2, (int64_t[]){N, -1}),
                                                  mi_reshape(in[2], 2, (int64_t[]){N, -1}),
                                                  mi_reshape(in[3], 2, (int64_t[]){N, -1})},
                                  4, 1);
    ck_assert_ptr_null(mi_mlp_scan_backward(packed, in[4], in[5], in[6], x.gates,
                                            mi_zeros(MI_F64, MI_SHAPE(N, 7)), &rule));
    ck_assert_error_has("mlp_scan_backward: g [2,7]");
    assert_no_second_derivative(mi_mlp_scan(in, in[4], in[5], in[6], x.gates, &rule, st), in[5]);
}
END_TEST

/* The OWN f32 kernels of their own (kl's write and read; with AVX-512 the
 * products with a vector), under kl (Memora) and under momentum (Titans), at widths where
 * rows are whole vectors (AVX-512 16 floats, AVX2 8): d 19, h 32 (W1's 19
 * rows of 32, a full group of 16 and a partial one of 3, whose odd row is
 * left out of kl_rows_back's pairs of rows, and 4 rows at a time with 3
 * left over in the transposed product; W2's 32 rows of 19 go to the scalar
 * loops and the BLAS) and d 32, h 48 (every row in vectors), per
 * token and at Memora's chunk with its lag token. The output, the final
 * state and every input's gradient, against REF in f64: over all of their
 * elements, no further off than REF's own f32 loops (the root mean square of
 * the relative errors within 4× of REF f32's), and no element off by more
 * than f32 rounding can reach here (1e-3: it grows over the tokens' softmax
 * rows to ~1.5e-4 in either kernel; a wrong element is off by O(1)). A bound
 * on the largest error as a multiple of REF's depended on the CPU: one
 * element's rounding, up to 5× REF's largest on a Zen 4, is luck, where the
 * mean over the elements is not. */
START_TEST(own_kernels_match_ref)
{
    static const int64_t dims[2][2] = {{19, 32}, {32, 48}};
    static const int64_t chunks[2] = {1, 4};
    int64_t d = dims[_i / 2 % 2][0], h = dims[_i / 2 % 2][1], C = chunks[_i % 2], n = 2, T = 13;
    bool kl = _i < 4;
    mi_rng r;
    mi_rng_seed(&r, 500u + (unsigned)_i);
    mi_tensor *in[5];
    in[0] = mi_randn(&r, MI_F64, MI_SHAPE(n, 2 * d * h), 0, 1.5);
    for (int i = 1; i < 4; i++) in[i] = mi_randn(&r, MI_F64, MI_SHAPE(n, T, d), 0, 1);
    in[4] = mi_rand(&r, MI_F64, MI_SHAPE(n, T, 4), 0, 1);
    double lo[4] = {0.01, 0.9, 0.5, 0.02}, hi[4] = {0.1, 1, 0.5, 0.02};
    for (int64_t i = 0; i < in[4]->numel; i++)
        mi_set(in[4], i, lo[i % 4] + (hi[i % 4] - lo[i % 4]) * mi_get(in[4], i));
    mi_mlp_scan_rule rule = {.momentum = !kl, .read = kl ? MI_MLP_READ_KL : MI_MLP_READ_STATE,
                             .kl_scale = KL_C, .chunk = C, .lag_token = C > 1};
    mi_tensor *seed = NULL, *res[3][6];  /* OWN f32, REF f32, REF f64 */
    for (int pass = 0; pass < 3; pass++) {
        mi_tensor *x[5], **out = res[pass];
        mi_dtype dt = pass < 2 ? MI_F32 : MI_F64;
        for (int i = 0; i < 5; i++) x[i] = leaf(mi_tensor_to(in[i], dt));
        mi_backends_allow(pass ? 1u << MI_BACKEND_REF : MI_BACKEND_ALL);
        out[0] = mi_mlp_scan_packed(x[0], x[1], x[2], x[3], x[4], &rule);
        ck_assert_msg(out[0] != NULL, "%s", mi_error());
        if (!seed) seed = mi_randn(&r, MI_F64, out[0]->rank, out[0]->shape, 0, 1);
        mi_tensor *s = mi_tensor_to(seed, dt);
        ck_assert_msg(mi_grad(out, &s, 1, x, 5, false, out + 1) == 0, "%s", mi_error());
    }
    mi_backends_allow(MI_BACKEND_ALL);
    int worst = 0, ref_worst = 0;
    double e = max_rel_err(res[0], res[2], 6, &worst, NULL);
    double e_ref = max_rel_err(res[1], res[2], 6, &ref_worst, NULL);
    double rms = rms_rel_err(res[0], res[2], 6), rms_ref = rms_rel_err(res[1], res[2], 6);
    const char *what = kl ? "kl" : "momentum";
    printf("mlp_scan %s own f32 d %lld h %lld chunk %lld: max error %.2e (result %d), REF f32's "
           "%.2e; rms %.2e, REF f32's %.2e\n", what, (long long)d, (long long)h, (long long)C, e,
           worst, e_ref, rms, rms_ref);
    ck_assert_msg(rms <= 4 * rms_ref + 1e-7, "%s d %lld h %lld chunk %lld: rms error %.3g, REF "
                  "f32's %.3g", what, (long long)d, (long long)h, (long long)C, rms, rms_ref);
    ck_assert_msg(e <= 1e-3, "%s d %lld h %lld chunk %lld: result %d off by %.3g", what,
                  (long long)d, (long long)h, (long long)C, worst, e);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("mlp_scan");
    TCase *tc = tcase_slow("mlp_scan");
    tcase_add_loop_test(tc, op_equals_composed_ops, 0, N_VARIANTS);
    tcase_add_loop_test(tc, op_gradcheck, 0, N_VARIANTS);
    tcase_add_loop_test(tc, kept_checkpoints_equal_rerun, 0, 2 * N_VARIANTS);
    tcase_add_loop_test(tc, chunk1_equals_composed_path, 0, N_PRESETS);
    tcase_add_loop_test(tc, chunks_equal_composed_path, 0, 20);
    tcase_add_test(tc, bad_inputs_give_messages);
    tcase_add_loop_test(tc, own_kernels_match_ref, 0, 8);
    suite_add_tcase(s, tc);
    return s;
}
