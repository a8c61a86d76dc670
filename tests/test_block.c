/* The MIRAS layer block: shapes for every memory kind, the block against a
 * plain-loop reference of the whole layer (projections, conv, ℓ2 norm, gates,
 * recurrence, RMSNorm, output gate or none, projection; single and multistep),
 * gradcheck of the block w.r.t. x and every parameter, causality, the gate
 * biases' initial levels (also of bounded gates, max·σ) and the mixer's gate
 * overrides. Bad configurations are in test_block_config.c. */
#include <string.h>

#include "block_test_util.h"

/* ---------------------------------------------------------------- shapes */

START_TEST(shapes_for_each_memory_kind)
{
    const char *memories[] = {"vector", "matrix", "mlp"};
    for (int i = 0; i < 3; i++)
        for (int dt = 0; dt < 2; dt++) {
            mi_miras_block_config c = tiny_config(memories[i], "l2", "l2", "gd");
            c.miras.chunk = 2;
            mi_miras_block b;
            make_block(&b, &c, dt ? MI_F64 : MI_F32, 1);
            mi_tensor *y = mi_miras_block_forward(&b, input(2, dt ? MI_F64 : MI_F32, 3, 7));
            ck_assert_msg(y != NULL, "%s: %s", memories[i], mi_error());
            ck_assert_int_eq(y->rank, 3);
            ck_assert(y->shape[0] == 3 && y->shape[1] == 7 && y->shape[2] == DM);
            for (int64_t e = 0; e < y->numel; e++) ck_assert(isfinite(mi_get(y, e)));
            /* W_0: one per head, the memory's shapes behind [heads] */
            int n, ranks[MI_MEMORY_MAX_WEIGHTS];
            int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
            ck_assert_int_eq(b.miras.memory->shapes(&b.miras.config, 2, 2, &n, ranks, shapes), 0);
            ck_assert_int_eq(b.n_w0, n);
            for (int w = 0; w < n; w++) {
                ck_assert_int_eq(b.w0[w]->rank, ranks[w] + 1);
                ck_assert_int_eq(b.w0[w]->shape[0], HEADS);
                for (int d = 0; d < ranks[w]; d++) ck_assert_int_eq(b.w0[w]->shape[d + 1], shapes[w][d]);
            }
        }
}
END_TEST

START_TEST(parameters_are_listed_and_deterministic)
{
    mi_miras_block_config c = tiny_config("mlp", "yaad", "l2", "momentum");
    mi_miras_block a, b;
    make_block(&a, &c, MI_F64, 7);
    make_block(&b, &c, MI_F64, 7);
    int n, nb;
    const mi_named_tensor *p = mi_miras_block_params(&a, &n);
    const mi_named_tensor *pb = mi_miras_block_params(&b, &nb);
    /* q, k, v projections and convs, 4 gates × 3, norm, gate, out, 2 W_0 */
    ck_assert_int_eq(n, 6 + 12 + 3 + 2);
    ck_assert_int_eq(nb, n);
    for (int i = 0; i < n; i++) {
        ck_assert(p[i].tensor->requires_grad);
        ck_assert(p[i].tensor->scope == test_scope);
        ck_assert_str_eq(p[i].name, pb[i].name);
        for (int j = 0; j < i; j++) ck_assert_str_ne(p[i].name, p[j].name);
        for (int64_t e = 0; e < p[i].tensor->numel; e++)
            ck_assert(mi_get(p[i].tensor, e) == mi_get(pb[i].tensor, e));
    }
    ck_assert_str_eq(p[0].name, "q_proj");
    ck_assert_str_eq(p[n - 1].name, "memory.w0.1");
    /* every parameter gets a gradient from the outer loss */
    mi_tensor *y = mi_miras_block_forward(&a, input(8, MI_F64, 2, 5));
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert_int_eq(mi_backward(mi_sum(mi_square(y), MI_ALL, false)), 0);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p[i].tensor->grad != NULL, "%s has no gradient", p[i].name);
        double s = mi_item(mi_sum(mi_square(p[i].tensor->grad), MI_ALL, false));
        ck_assert_msg(s > 0 && isfinite(s), "%s: |grad|^2 = %g", p[i].name, s);
    }
}
END_TEST

/* The gate biases start each gate at its level: σ(b) = η, 1 − σ(b) = α,
 * σ(b) = μ, softplus(b) = δ (the block's defaults: η 0.02, α 0.998). */
START_TEST(gate_biases_start_at_their_levels)
{
    mi_miras_block_config c = mi_miras_block_config_default(DM, HEADS, NULL);
    c.miras.memory = "mlp";
    c.miras.bias = "yaad";
    c.miras.algorithm = "momentum";
    c = mi_miras_block_config_default(DM, HEADS, &c.miras);
    ck_assert_int_eq(c.gate_rank, 32);
    ck_assert_int_eq(c.conv_kernel, 4);
    ck_assert(c.eta.kind == MI_GATE_HEAD && c.alpha.kind == MI_GATE_HEAD &&
              c.mu.kind == MI_GATE_HEAD && c.delta.kind == MI_GATE_HEAD);
    c.delta.value = 2.5;
    mi_miras_block b;
    make_block(&b, &c, MI_F64, 3);
    ck_assert_int_eq(b.head_dim, DM / HEADS);
    for (int64_t h = 0; h < HEADS; h++) {
        double be = mi_get(b.gate_bias[MI_BLOCK_ETA], h), ba = mi_get(b.gate_bias[MI_BLOCK_ALPHA], h);
        double bm = mi_get(b.gate_bias[MI_BLOCK_MU], h), bd = mi_get(b.gate_bias[MI_BLOCK_DELTA], h);
        ck_assert_close(1 / (1 + exp(-be)), 0.02, 1e-12);
        ck_assert_close(1 - 1 / (1 + exp(-ba)), 0.998, 1e-12);
        ck_assert_close(1 / (1 + exp(-bm)), 0.9, 1e-12);
        ck_assert_close(log1p(exp(bd)), 2.5, 1e-12);
    }
    /* the default config uses exactly the gates its components need */
    mi_miras_block_config d = mi_miras_block_config_default(DM, HEADS, NULL);
    ck_assert(d.eta.kind == MI_GATE_HEAD && d.alpha.kind == MI_GATE_HEAD);
    ck_assert(d.mu.kind == MI_GATE_UNUSED && d.delta.kind == MI_GATE_UNUSED);
}
END_TEST

/* Bounded gates η = max σ(b), α = 1 − max σ(b), μ = max σ(b) start at their
 * levels: the biases by the formula (η: logit(0.05 / 0.1) = 0), and at zero
 * gate_up the block's output equals that of the same block with the gates
 * constant at the levels (the forward applies the max, not only the init). */
START_TEST(bounded_gates_start_at_their_levels)
{
    mi_miras_block_config c = tiny_config("mlp", "l2", "l2", "momentum");
    c.eta = (mi_gate_spec){MI_GATE_HEAD, 0.05, 0.1};
    c.alpha = (mi_gate_spec){MI_GATE_HEAD, 0.982, 0.05};
    c.mu = (mi_gate_spec){MI_GATE_HEAD, 0.3, 0.5};
    mi_miras_block b;
    make_block(&b, &c, MI_F64, 3);
    for (int64_t h = 0; h < HEADS; h++) {
        double be = mi_get(b.gate_bias[MI_BLOCK_ETA], h), ba = mi_get(b.gate_bias[MI_BLOCK_ALPHA], h);
        double bm = mi_get(b.gate_bias[MI_BLOCK_MU], h);
        ck_assert_close(be, 0, 1e-15);                       /* 0.05 / (0.1 − 0.05) = 1 */
        ck_assert_close(ba, log(0.018 / (0.05 - 0.018)), 1e-12);
        ck_assert_close(bm, log(0.3 / (0.5 - 0.3)), 1e-12);
        ck_assert_close(0.1 * sigm(be), 0.05, 1e-15);
        ck_assert_close(1 - 0.05 * sigm(ba), 0.982, 1e-12);
        ck_assert_close(0.5 * sigm(bm), 0.3, 1e-12);
    }
    /* the same block with constant gates at the levels, its parameters copied */
    mi_miras_block_config k = c;
    k.eta = (mi_gate_spec){MI_GATE_CONST, 0.05, 0};
    k.alpha = (mi_gate_spec){MI_GATE_CONST, 0.982, 0};
    k.mu = (mi_gate_spec){MI_GATE_CONST, 0.3, 0};
    mi_miras_block kb;
    make_block(&kb, &k, MI_F64, 4);
    for (int g = MI_BLOCK_ETA; g <= MI_BLOCK_MU; g++) {
        ck_assert_ptr_null(kb.gate_up[g]);
        for (int64_t e = 0; e < b.gate_up[g]->numel; e++) mi_set(b.gate_up[g], e, 0);
    }
    int n, nk, copied = 0;
    const mi_named_tensor *p = mi_miras_block_params(&b, &n), *pk = mi_miras_block_params(&kb, &nk);
    for (int i = 0; i < nk; i++)
        for (int j = 0; j < n; j++)
            if (!strcmp(pk[i].name, p[j].name)) {
                ck_assert_int_eq(pk[i].tensor->numel, p[j].tensor->numel);
                for (int64_t e = 0; e < p[j].tensor->numel; e++)
                    mi_set(pk[i].tensor, e, mi_get(p[j].tensor, e));
                copied++;
            }
    ck_assert_int_eq(copied, nk);
    ck_assert_int_eq(n, nk + 9);  /* 3 gates × (down, up, bias) */
    mi_tensor *x = input(5, MI_F64, BT, TT);
    mi_tensor *y = mi_miras_block_forward(&b, x), *want = mi_miras_block_forward(&kb, x);
    ck_assert_msg(y != NULL && want != NULL, "%s", mi_error());
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_msg(fabs(mi_get(y, i) - mi_get(want, i)) < 1e-12 * (1 + fabs(mi_get(want, i))),
                      "y[%lld] = %.15g, with constant gates %.15g", (long long)i, mi_get(y, i),
                      mi_get(want, i));
}
END_TEST

/* ---------------------------------------------------------------- the reference
 * The whole block as plain loops over the parameters' values, for a matrix
 * memory, ℓ2 bias, ℓ2 retention with decay_first (gated DeltaNet) and GD,
 * HEAD gates, S writes per token (α at each token's first write only), with
 * the chunk rule over write positions: every position of a chunk of `cp`
 * positions takes its gradient at ᾱ ⊙ M', M' the state the previous chunk
 * left and ᾱ the decay since then (cp = 1: the exact per-token rule). */
enum { MAXT = 8, MAXC = 16 };

static double P(const mi_tensor *t, int64_t i) { return mi_get(t, i); }
static double silu(double z) { return z / (1 + exp(-z)); }

/* out[t][c] = SiLU(Σ_j w[c][j] (x W)[t − K + 1 + j][c]) for one batch row */
static void ref_branch(const mi_tensor *x, int64_t bb, int64_t T, const mi_tensor *W,
                       const mi_tensor *conv, double out[MAXT][MAXC])
{
    int64_t C = W->shape[1], K = conv->shape[1];
    double proj[MAXT][MAXC];
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            proj[t][c] = 0;
            for (int64_t d = 0; d < DM; d++) proj[t][c] += P(x, (bb * T + t) * DM + d) * P(W, d * C + c);
        }
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t j = 0; j < K; j++) {
                int64_t src = t - K + 1 + j;
                if (src >= 0) s += P(conv, c * K + j) * proj[src][c];
            }
            out[t][c] = silu(s);
        }
}

static void l2n(double *v, int n, double eps)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    for (int i = 0; i < n; i++) v[i] /= sqrt(s + eps);
}

/* pre-activation of gate g at token t, output column j */
static double ref_gate_pre(const mi_miras_block *b, int g, const mi_tensor *x, int64_t bb,
                           int64_t T, int64_t t, int64_t j)
{
    const mi_tensor *D = b->gate_down[g], *U = b->gate_up[g];
    int64_t r = D->shape[1], w = U->shape[1];
    double z = P(b->gate_bias[g], j);
    for (int64_t a = 0; a < r; a++) {
        double low = 0;
        for (int64_t d = 0; d < DM; d++) low += P(x, (bb * T + t) * DM + d) * P(D, d * r + a);
        z += low * P(U, a * w + j);
    }
    return z;
}

/* η = max σ(z), α = 1 − max σ(z) (max 0: 1), as block.c's gates */
static double ref_gate(const mi_gate_spec *s, bool alpha, double z)
{
    double m = s->max > 0 ? s->max : 1;
    return alpha ? 1 - m * sigm(z) : m * sigm(z);
}

static void ref_block(const mi_miras_block *b, const mi_tensor *x, int64_t cp, double *y)
{
    int64_t B = x->shape[0], T = x->shape[1], H = HEADS, hd = b->head_dim, S = b->steps;
    double eps = b->config.qk_eps;
    for (int64_t bb = 0; bb < B; bb++) {
        double q[MAXT][MAXC], k[MAXT][MAXC], v[MAXT][MAXC];
        ref_branch(x, bb, T, b->w_q, b->conv_q, q);
        ref_branch(x, bb, T, b->w_k, b->conv_k, k);
        ref_branch(x, bb, T, b->w_v, b->conv_v, v);
        double o[MAXT][MAXC];
        for (int64_t h = 0; h < H; h++) {
            double M[4][4], M0[4][4], abar = 1;
            for (int i = 0; i < hd; i++)
                for (int j = 0; j < hd; j++) M[i][j] = P(b->w0[0], (h * hd + i) * hd + j);
            for (int64_t t = 0; t < T; t++) {
                for (int64_t s = 0; s < S; s++) {
                    /* channels of step s, head h: s·H·hd + h·hd + j */
                    double kk[4], vv[4];
                    for (int j = 0; j < hd; j++) {
                        kk[j] = k[t][(s * H + h) * hd + j];
                        vv[j] = v[t][(s * H + h) * hd + j];
                    }
                    l2n(kk, (int)hd, eps);
                    double eta = ref_gate(&b->config.eta, false,
                                          ref_gate_pre(b, MI_BLOCK_ETA, x, bb, T, t, s * H + h));
                    double alpha = s == 0 ? ref_gate(&b->config.alpha, true,
                                                     ref_gate_pre(b, MI_BLOCK_ALPHA, x, bb, T, t, h))
                                          : 1;
                    if ((t * S + s) % cp == 0) {  /* a chunk starts */
                        memcpy(M0, M, sizeof M);
                        abar = 1;
                    }
                    abar *= alpha;
                    double e[4];
                    for (int i = 0; i < hd; i++) {  /* e = (ᾱ M') k − v */
                        e[i] = -vv[i];
                        for (int j = 0; j < hd; j++) e[i] += abar * M0[i][j] * kk[j];
                    }
                    for (int i = 0; i < hd; i++)
                        for (int j = 0; j < hd; j++) M[i][j] = alpha * M[i][j] - eta * e[i] * kk[j];
                }
                double qq[4], yy[4], ms = 0;
                for (int j = 0; j < hd; j++) qq[j] = q[t][h * hd + j];
                l2n(qq, (int)hd, eps);
                for (int i = 0; i < hd; i++) {
                    yy[i] = 0;
                    for (int j = 0; j < hd; j++) yy[i] += M[i][j] * qq[j];
                    ms += yy[i] * yy[i] / (double)hd;
                }
                for (int i = 0; i < hd; i++)
                    o[t][h * hd + i] = yy[i] / sqrt(ms + b->config.norm_eps) * P(b->norm_weight, i);
            }
        }
        for (int64_t t = 0; t < T; t++) {
            double gated[MAXC];
            for (int64_t c = 0; c < H * hd; c++) {
                double z = 0;
                if (!b->config.out_gate) { /* HGRN2: the normalised read alone */
                    gated[c] = o[t][c];
                    continue;
                }
                for (int64_t d = 0; d < DM; d++) z += P(x, (bb * T + t) * DM + d) * P(b->w_gate, d * H * hd + c);
                gated[c] = o[t][c] * (b->config.out_gate_sigmoid ? sigm(z) : silu(z));
            }
            for (int64_t d = 0; d < DM; d++) {
                double s = 0;
                for (int64_t c = 0; c < H * hd; c++) s += gated[c] * P(b->w_out, c * DM + d);
                y[(bb * T + t) * DM + d] = s;
            }
        }
    }
}

/* bounded: η = 0.1 σ(·), α = 1 − 0.05 σ(·) (Titans' θ_t = 0.1 σ(·)); out_gate as given */
static void check_plain_loops(bool bounded, bool out_gate, bool sigmoid)
{
    for (int steps = 1; steps <= 2; steps++) {
        mi_miras_block_config c = tiny_config("matrix", "l2", "l2", steps > 1 ? "multistep" : "gd");
        c.out_gate = out_gate;
        c.out_gate_sigmoid = sigmoid;
        c.miras.decay_first = true;
        c.miras.steps = steps;
        c.miras.chunk = steps > 1 ? 3 : 1;  /* 2 chunks of 3 tokens, 6 writes each */
        c.miras.form = MI_FORM_MINIBATCH;   /* the reference's chunk rule */
        if (bounded) {
            c.eta = (mi_gate_spec){MI_GATE_HEAD, 0.05, 0.1};
            c.alpha = (mi_gate_spec){MI_GATE_HEAD, 0.982, 0.05};
        }
        mi_miras_block b;
        make_block(&b, &c, MI_F64, 11);
        ck_assert_int_eq(b.steps, steps);
        ck_assert(out_gate ? b.w_gate != NULL : b.w_gate == NULL);
        /* a non-zero W_0, so its layout is exercised too */
        mi_rng r;
        mi_rng_seed(&r, 12);
        for (int64_t e = 0; e < b.w0[0]->numel; e++) mi_set(b.w0[0], e, mi_rng_normal(&r) * 0.5);
        mi_tensor *x = input(13, MI_F64, BT, 6);
        mi_tensor *y = mi_miras_block_forward(&b, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        double want[BT * 6 * DM];
        ref_block(&b, x, c.miras.chunk * steps, want);
        for (int i = 0; i < BT * 6 * DM; i++)
            ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12 * (1 + fabs(want[i])),
                          "%ssteps %d: y[%d] = %.15g, want %.15g", bounded ? "bounded gates, " : "",
                          steps, i, mi_get(y, i), want[i]);
    }
}

START_TEST(block_matches_plain_loops)
{
    check_plain_loops(false, true, false);
}
END_TEST

START_TEST(bounded_gates_match_plain_loops)
{
    check_plain_loops(true, true, false);
}
END_TEST

/* Without the output gate (as HGRN2's output, RMSNorm(o) W_out) the block has
 * no W_g and y is the normalised read projected; lattice-dec is built so, and
 * the override out_gate=true gives the gate back. With out_gate_sigmoid the
 * gate is σ(x W_g) (hgrn2's preset); out_gate=silu / sigmoid pick the kind. */
START_TEST(block_without_out_gate_matches_plain_loops)
{
    check_plain_loops(false, false, false);
    check_plain_loops(false, true, true); /* σ(x W_g) */
    mi_miras_block_config c = mi_miras_block_config_default(DM, HEADS, NULL);
    ck_assert(c.out_gate);
    ck_assert_int_eq(mi_miras_block_config_preset(&c, "lattice-dec"), 0);
    ck_assert(!c.out_gate);
    ck_assert(!c.out_gate_sigmoid);
    ck_assert_int_eq(mi_miras_block_config_preset(&c, "hgrn2"), 0);
    ck_assert(c.out_gate && c.out_gate_sigmoid); /* hgrn2's gate is σ(x W_g) */
    mi_mixer_options o = mi_mixer_options_default(DM, HEADS);
    const char *ov[] = {"out_gate=true", "out_gate=maybe", "out_gate=silu", "out_gate=sigmoid"};
    o.overrides = ov;
    o.n_overrides = 1;
    mi_mixer m;
    mi_rng r;
    mi_rng_seed(&r, 1);
    ck_assert_msg(mi_mixer_create(&m, "lattice-dec", &o, MI_F64, &r, test_scope) == 0, "%s",
                  mi_error());
    ck_assert(((const mi_miras_block *)m.self)->w_gate != NULL);
    ck_assert(!((const mi_miras_block *)m.self)->config.out_gate_sigmoid);
    for (int i = 3; i >= 2; i--) { /* the gate's kind */
        o.overrides = ov + i;
        ck_assert_msg(mi_mixer_create(&m, "hgrn2", &o, MI_F64, &r, test_scope) == 0, "%s",
                      mi_error());
        ck_assert(((const mi_miras_block *)m.self)->config.out_gate_sigmoid == (i == 3));
    }
    o.overrides = ov;
    o.n_overrides = 0;
    ck_assert_msg(mi_mixer_create(&m, "lattice-dec", &o, MI_F64, &r, test_scope) == 0, "%s",
                  mi_error());
    int n;
    const mi_named_tensor *p = mi_miras_block_params(m.self, &n);
    for (int i = 0; i < n; i++) ck_assert_str_ne(p[i].name, "gate_proj");
    o.overrides = ov + 1;
    o.n_overrides = 1;
    mi_error_clear();
    ck_assert_int_eq(mi_mixer_create(&m, "lattice-dec", &o, MI_F64, &r, test_scope), -1);
    ck_assert_error_has("override: out_gate: 'maybe' is not true, false, silu or sigmoid");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- gradcheck */

static int block_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    out[0] = mi_miras_block_forward(ctx, in[0]);
    return out[0] ? 1 : -1;
}

/* Gradcheck w.r.t. x and every parameter of a block. */
static void gradcheck_block(const char *what, const mi_miras_block_config *c, int64_t B,
                            int64_t T)
{
    mi_miras_block b;
    make_block(&b, c, MI_F64, 21);
    int n;
    const mi_named_tensor *p = mi_miras_block_params(&b, &n);
    gradcheck_params(what, block_fn, &b, input(22, MI_F64, B, T), p, n);
}

START_TEST(gradcheck_gated_deltanet_like)
{
    mi_miras_block_config c = tiny_config("matrix", "l2", "l2", "gd");
    c.miras.decay_first = true;
    c.miras.chunk = 2;
    gradcheck_block("matrix/l2/l2/gd decay_first chunk 2", &c, 2, 5);
}
END_TEST

START_TEST(gradcheck_titans_like)
{
    mi_miras_block_config c = tiny_config("mlp", "l2", "l2", "momentum");
    gradcheck_block("mlp/l2/l2/momentum", &c, 1, 5);
}
END_TEST

/* Yaad: δ far below the error norm (the ℓ1 branch everywhere), then far
 * above it (the ℓ2 branch), never near the switch. */
START_TEST(gradcheck_yaad_with_delta)
{
    const double levels[] = {0.02, 30};
    for (int i = 0; i < 2; i++) {
        mi_miras_block_config c = tiny_config("mlp", "yaad", "l2", "gd");
        c.delta.value = levels[i];
        config_set(&c.miras, "sign_sharpness=10");
        gradcheck_block(i ? "mlp/yaad (l2 branch)" : "mlp/yaad (l1 branch)", &c, 1, 4);
    }
}
END_TEST

START_TEST(gradcheck_channel_gates)
{
    mi_miras_block_config c = tiny_config("matrix", "l2", "l2", "momentum");
    c.eta.kind = c.alpha.kind = c.mu.kind = MI_GATE_CHANNEL;
    gradcheck_block("matrix/l2/l2/momentum, channel-wise eta, alpha, mu", &c, 2, 4);
    /* the MLP memory: one entry per row of each layer */
    c = tiny_config("mlp", "l2", "l2", "momentum");
    c.eta.kind = c.alpha.kind = c.mu.kind = MI_GATE_CHANNEL;
    gradcheck_block("mlp/l2/l2/momentum, channel-wise eta, alpha, mu", &c, 2, 4);
}
END_TEST

/* Bounded gates η = max σ, α = 1 − max σ, μ = max σ, each max < 1, per head
 * and per channel; and Titans' η = 0.1 σ(·) on the deep memory. */
START_TEST(gradcheck_bounded_gates)
{
    mi_miras_block_config c = tiny_config("matrix", "l2", "l2", "momentum");
    c.eta.max = 0.8;    /* level 0.5: σ = 0.625 */
    c.alpha.max = 0.3;  /* level 0.9: σ = 1/3 */
    c.mu.max = 0.7;     /* level 0.6: σ = 6/7 */
    gradcheck_block("matrix/l2/l2/momentum, bounded eta, alpha, mu", &c, 1, 4);
    c.eta.kind = c.alpha.kind = c.mu.kind = MI_GATE_CHANNEL;
    gradcheck_block("matrix/l2/l2/momentum, bounded channel-wise eta, alpha, mu", &c, 1, 4);
    c = tiny_config("mlp", "l2", "l2", "momentum");
    c.eta = (mi_gate_spec){MI_GATE_HEAD, 0.05, 0.1};
    c.alpha.max = 0.3;
    gradcheck_block("mlp/l2/l2/momentum, eta = 0.1 sigmoid", &c, 1, 4);
}
END_TEST

/* DeltaProduct-like (2 writes per token) and HGRN2-like (k = 1 − α, a
 * constant η, channel-wise α, on the value rows and on the key axis). */
START_TEST(gradcheck_multistep_and_hgrn2)
{
    mi_miras_block_config c = tiny_config("matrix", "l2", "l2", "multistep");
    c.miras.decay_first = true;
    c.miras.steps = 2;
    gradcheck_block("matrix/l2/l2/multistep(2)", &c, 1, 4);
    c = tiny_config("matrix", "dot", "l2", "gd");
    c.eta = (mi_gate_spec){MI_GATE_CONST, 1, 0};
    c.alpha = (mi_gate_spec){MI_GATE_CHANNEL, 0.9, 0};
    c.key_is_one_minus_alpha = true;
    mi_miras_block b;
    make_block(&b, &c, MI_F64, 1);
    ck_assert_ptr_null(b.w_k);  /* the k projection is not used */
    ck_assert_ptr_null(b.gate_down[MI_BLOCK_ETA]);
    /* the key's conv runs on α's projection: [H·hd, K] */
    ck_assert(b.conv_k && b.conv_k->shape[0] == c.heads * b.head_dim);
    gradcheck_block("hgrn2-like", &c, 2, 4);
    c.miras.alpha_on_keys = true;   /* HGRN2's decay on the key axis */
    gradcheck_block("hgrn2-like, alpha_on_keys", &c, 2, 4);
}
END_TEST

/* ---------------------------------------------------------------- causality */

/* An encoding objective (Lattice Eq. 6 and 8) takes v as the inner step's
 * input, so the block ℓ2-normalises v as it does k: with the v branch in
 * SiLU's linear range (positive inputs, W_v = 10, identity taps: SiLU(z) = z
 * to 1e-30), scaling W_v by 3 scales v by 3 and must leave the output of a
 * lattice-sim or lattice-enc block unchanged, while a decoding (lattice-dec)
 * block, whose v is the target, changes. */
START_TEST(encoding_bias_normalises_values)
{
    const char *biases[] = {"lattice-sim", "lattice-enc", "lattice-dec"};
    for (int i = 0; i < 3; i++) {
        mi_miras_block_config c = tiny_config("lattice", biases[i], "sphere-forget", "gd");
        c.miras.slots = DM / HEADS;
        mi_miras_block b;
        make_block(&b, &c, MI_F64, 21);
        int64_t K = b.conv_v->shape[1];
        for (int64_t e = 0; e < b.w_v->numel; e++) mi_set(b.w_v, e, 10);
        for (int64_t e = 0; e < b.conv_v->numel; e++) mi_set(b.conv_v, e, e % K == K - 1);
        mi_tensor *x = mi_add_scalar(mi_abs(input(22, MI_F64, BT, TT)), 1);
        mi_tensor *y1 = mi_miras_block_forward(&b, x);
        for (int64_t e = 0; e < b.w_v->numel; e++) mi_set(b.w_v, e, 30);
        mi_tensor *y2 = mi_miras_block_forward(&b, x);
        ck_assert_msg(y1 && y2, "%s: %s", biases[i], mi_error());
        double diff = 0, size = 0;
        for (int64_t e = 0; e < y1->numel; e++) {
            diff = fmax(diff, fabs(mi_get(y1, e) - mi_get(y2, e)));
            size = fmax(size, fabs(mi_get(y1, e)));
        }
        if (i < 2)
            ck_assert_msg(diff <= 1e-10 * size, "%s: |y(3 W_v) − y(W_v)| = %g", biases[i], diff);
        else
            ck_assert_msg(diff > 1e-3 * size, "%s: v is the target, scaling it must matter",
                          biases[i]);
    }
}
END_TEST

START_TEST(output_at_t_ignores_later_inputs)
{
    const char *memories[] = {"matrix", "mlp"};
    for (int mem = 0; mem < 2; mem++)
        for (int chunk = 1; chunk <= 3; chunk += 2) {
            mi_miras_block_config c = tiny_config(memories[mem], "l2", "l2", "momentum");
            c.miras.chunk = chunk;
            mi_miras_block b;
            make_block(&b, &c, MI_F64, 31);
            enum { T = 6 };
            mi_tensor *x = input(32, MI_F64, BT, T);
            mi_tensor *y = mi_miras_block_forward(&b, x);
            ck_assert_msg(y != NULL, "%s", mi_error());
            for (int s = 0; s < T; s++) {
                mi_tensor *x2 = mi_tensor_to(x, MI_F64);
                for (int d = 0; d < DM; d++) mi_set(x2, s * DM + d, mi_get(x2, s * DM + d) + 0.7);
                mi_tensor *y2 = mi_miras_block_forward(&b, x2);
                ck_assert_ptr_nonnull(y2);
                double changed = 0;
                for (int t = 0; t < T; t++)
                    for (int d = 0; d < DM; d++) {
                        double diff = fabs(mi_get(y2, t * DM + d) - mi_get(y, t * DM + d));
                        if (t < s)
                            ck_assert_msg(diff == 0, "%s chunk %d: y[t=%d] moved by %g when x[s=%d] "
                                          "changed", memories[mem], chunk, t, diff, s);
                        if (t == s) changed += diff;
                        /* the other batch row is untouched */
                        ck_assert(mi_get(y2, (T + t) * DM + d) == mi_get(y, (T + t) * DM + d));
                    }
                ck_assert_msg(changed > 0, "y[t=%d] ignores x[t=%d]", s, s);
            }
        }
}
END_TEST

/* ---------------------------------------------------------------- presets */

/* Every preset builds a block that runs and gradchecks. Yaad's δ is moved far below
 * the error norm, away from its ℓ2/ℓ1 switch. */
START_TEST(presets_build_blocks)
{
    int checked = 0;
    for (int i = 0; mi_preset_at(i); i++) {
        const char *name = mi_preset_at(i)->name;
        mi_miras_block b;
        mi_rng r;
        mi_rng_seed(&r, 41);
        ck_assert_msg(mi_miras_block_init_preset(&b, name, DM, HEADS, MI_F64, &r, test_scope) == 0,
                      "%s: %s", name, mi_error());
        mi_tensor *y = mi_miras_block_forward(&b, input(42, MI_F64, BT, TT));
        ck_assert_msg(y != NULL, "%s: %s", name, mi_error());
        ck_assert(y->shape[0] == BT && y->shape[1] == TT && y->shape[2] == DM);
        for (int64_t e = 0; e < y->numel; e++) ck_assert_msg(isfinite(mi_get(y, e)), "%s", name);
        mi_miras_block_config c = mi_miras_block_config_default(DM, HEADS, NULL);
        ck_assert_int_eq(mi_miras_block_config_preset(&c, name), 0);
        c.gate_rank = RANK;
        if (c.delta.kind == MI_GATE_HEAD) c.delta.value = 0.02;
        gradcheck_block(name, &c, 1, 4);
        checked++;
    }
    if (getenv("BLOCK_VERBOSE")) fprintf(stderr, "%d presets checked\n", checked);
}
END_TEST

/* The mixer's overrides "eta_max", "alpha_max", "mu_max" set the gates'
 * ranges, before or after the level ("eta=…" keeps the max); bad values are
 * reported with the key, unreachable levels by the block. */
START_TEST(mixer_overrides_set_gate_ranges)
{
    mi_mixer_options o = mi_mixer_options_default(DM, HEADS);
    const char *ov[] = {"gate_rank=2", "eta_max=0.1", "eta=0.05", "alpha=0.982",
                        "alpha_max=0.05", "mu=head:0.3", "mu_max=0.5"};
    o.overrides = ov;
    o.n_overrides = 7;
    mi_mixer m;
    mi_rng r;
    mi_rng_seed(&r, 1);
    ck_assert_msg(mi_mixer_create(&m, "titans", &o, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    const mi_miras_block *b = m.self;
    ck_assert(b->config.eta.kind == MI_GATE_HEAD && b->config.eta.value == 0.05 &&
              b->config.eta.max == 0.1);
    ck_assert(b->config.alpha.kind == MI_GATE_HEAD && b->config.alpha.value == 0.982 &&
              b->config.alpha.max == 0.05);
    ck_assert(b->config.mu.kind == MI_GATE_HEAD && b->config.mu.value == 0.3 &&
              b->config.mu.max == 0.5);
    ck_assert(b->config.delta.max == 0);
    for (int64_t h = 0; h < HEADS; h++) {
        ck_assert_close(mi_get(b->gate_bias[MI_BLOCK_ETA], h), 0, 1e-15);
        ck_assert_close(1 - 0.05 * sigm(mi_get(b->gate_bias[MI_BLOCK_ALPHA], h)), 0.982, 1e-12);
        ck_assert_close(0.5 * sigm(mi_get(b->gate_bias[MI_BLOCK_MU], h)), 0.3, 1e-12);
    }
    mi_tensor *y = m.forward(m.self, input(2, MI_F64, 1, 3));
    ck_assert_msg(y != NULL, "%s", mi_error());
    for (int64_t e = 0; e < y->numel; e++) ck_assert(isfinite(mi_get(y, e)));
    /* a max alone keeps the preset's level */
    double eta0 = mi_preset_find("titans")->eta.value;
    o.overrides = ov + 1;
    o.n_overrides = 1;
    ck_assert_msg(mi_mixer_create(&m, "titans", &o, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    b = m.self;
    ck_assert(b->config.eta.max == 0.1 && b->config.eta.value == eta0);
    ck_assert(b->config.alpha.max == 0 && b->config.mu.max == 0);
    ck_assert_close(0.1 * sigm(mi_get(b->gate_bias[MI_BLOCK_ETA], 0)), eta0, 1e-15);

    const struct { const char *ov, *needle; } bad[] = {
        {"eta_max=abc", "override: eta_max: 'abc' is not a number"},
        {"alpha_max=", "override: alpha_max: '' is not a number"},
        {"mu_max=0.5x", "override: mu_max: '0.5x' is not a number"},
        {"eta_max=1.5", "gate eta: max 1.5 must be in (0, 1]"},
        {"eta_max=0.004", "gate eta starts at 0.005"},     /* titans' η is out of reach */
        {"alpha_max=0.001", "gate alpha starts at 0.998"},  /* α > 0.999 needed */
        {"delta_max=0.5", "unknown key 'delta_max'"},
    };
    for (int i = 0; i < 7; i++) {
        o.overrides = &bad[i].ov;
        o.n_overrides = 1;
        mi_error_clear();
        ck_assert_msg(mi_mixer_create(&m, "titans", &o, MI_F64, &r, test_scope) == -1,
                      "%s accepted", bad[i].ov);
        ck_assert_error_has(bad[i].needle);
    }
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("block");
    TCase *tc = tcase_slow("block");
    tcase_add_test(tc, shapes_for_each_memory_kind);
    tcase_add_test(tc, parameters_are_listed_and_deterministic);
    tcase_add_test(tc, gate_biases_start_at_their_levels);
    tcase_add_test(tc, bounded_gates_start_at_their_levels);
    tcase_add_test(tc, block_matches_plain_loops);
    tcase_add_test(tc, bounded_gates_match_plain_loops);
    tcase_add_test(tc, block_without_out_gate_matches_plain_loops);
    tcase_add_test(tc, gradcheck_gated_deltanet_like);
    tcase_add_test(tc, gradcheck_titans_like);
    tcase_add_test(tc, gradcheck_yaad_with_delta);
    tcase_add_test(tc, gradcheck_channel_gates);
    tcase_add_test(tc, gradcheck_bounded_gates);
    tcase_add_test(tc, gradcheck_multistep_and_hgrn2);
    tcase_add_test(tc, encoding_bias_normalises_values);
    tcase_add_test(tc, output_at_t_ignores_later_inputs);
    tcase_add_test(tc, presets_build_blocks);
    tcase_add_test(tc, mixer_overrides_set_gate_ranges);
    suite_add_tcase(s, tc);
    return s;
}
