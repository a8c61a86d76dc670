/* The presets dfw, lightning and mamba (MIRAS tab:memory-perspective-all):
 *   - the memory with gates built as each preset's layer block builds them
 *     equals its update rule written out here with plain f64 loops, at chunk
 *     1 (the fused per-token scan and, with materialize, the composed ops),
 *     at chunk 16 with a short last chunk, and one token at a time;
 *       dfw:       M_t = Diag(β_t) M_{t-1} Diag(α_t) + v_t k_tᵀ
 *       lightning: M_t = γ_h M_{t-1} + v_t k_tᵀ, γ_h = exp(−2^(−8(h+1)/H))
 *       mamba:     M_t = Diag(exp(−Δ_t ⊙ a)) M_{t-1} + (Δ_t ⊙ v_t) k_tᵀ
 *     y_t = M_t q_t; dk ≠ dv, so a decay on the wrong axis cannot pass;
 *   - the layer block gives those gates (Lightning's fixed decays, Mamba's
 *     α from η and its learned a, DFW's dv + dk decays) and is
 *     gradient-checked in f64;
 *   - the combinations the new options cannot run are refused with a message. */
#include <string.h>

#include "harness.h"

enum { N = 4, T = 37, DK = 3, DV = 4, HEADS = 2 };

/* One case's inputs as arrays (the reference) and tensors (the memory). */
typedef struct kase {
    const char *preset;
    double q[N][T][DK], k[N][T][DK], v[N][T][DV], w0[DV][DK];
    double eta[N][T][DV];              /* the write scale per value row (1 but mamba's) */
    double row[N][T][DV], col[N][T][DK]; /* the decay of the value rows and the key columns */
    mi_tensor *tq, *tk, *tv, *tw0;
    mi_miras_gates gates;
} kase;

static double uniform(mi_rng *r, double lo, double hi) { return lo + (hi - lo) * mi_rng_uniform(r); }

static mi_tensor *tensor(const double *x, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_from_buffer(MI_F64, rank, shape, x);
    ck_assert_msg(t != NULL, "%s", mi_error());
    return t;
}

static void make_case(kase *c, const char *preset, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->preset = preset;
    mi_rng r;
    mi_rng_seed(&r, seed);
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            for (int j = 0; j < DK; j++) {
                c->q[n][t][j] = 0.6 * mi_rng_normal(&r);
                c->k[n][t][j] = 0.6 * mi_rng_normal(&r);
            }
            for (int i = 0; i < DV; i++) c->v[n][t][i] = mi_rng_normal(&r);
        }
    for (int i = 0; i < DV; i++)
        for (int j = 0; j < DK; j++) c->w0[i][j] = 0.3 * mi_rng_normal(&r);
    /* the gates, as the block gives them to the memory */
    static double one[N * T], alpha[N * T * (DV + DK)], eta[N * T * DV];
    double rate[DV];
    for (int i = 0; i < DV; i++) rate[i] = uniform(&r, 0.05, 2); /* mamba: −A = exp(a) */
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            one[n * T + t] = 1;
            int h = n % HEADS;
            double gamma = exp(-pow(2, -8.0 * (h + 1) / HEADS));
            for (int i = 0; i < DV; i++) c->eta[n][t][i] = 1, c->row[n][t][i] = 1;
            for (int j = 0; j < DK; j++) c->col[n][t][j] = 1;
            if (!strcmp(preset, "dfw")) {
                for (int i = 0; i < DV; i++) c->row[n][t][i] = uniform(&r, 0.7, 0.99);
                for (int j = 0; j < DK; j++) c->col[n][t][j] = uniform(&r, 0.7, 0.99);
                for (int i = 0; i < DV; i++) alpha[(n * T + t) * (DV + DK) + i] = c->row[n][t][i];
                for (int j = 0; j < DK; j++)
                    alpha[(n * T + t) * (DV + DK) + DV + j] = c->col[n][t][j];
            } else if (!strcmp(preset, "lightning")) {
                for (int i = 0; i < DV; i++) c->row[n][t][i] = gamma;
                alpha[n * T + t] = gamma;
            } else {
                for (int i = 0; i < DV; i++) {
                    double delta = uniform(&r, 0.05, 0.9);
                    c->eta[n][t][i] = eta[(n * T + t) * DV + i] = delta;
                    c->row[n][t][i] = alpha[(n * T + t) * DV + i] = exp(-delta * rate[i]);
                }
            }
        }
    c->tq = tensor(&c->q[0][0][0], MI_SHAPE(N, T, DK));
    c->tk = tensor(&c->k[0][0][0], MI_SHAPE(N, T, DK));
    c->tv = tensor(&c->v[0][0][0], MI_SHAPE(N, T, DV));
    c->tw0 = tensor(&c->w0[0][0], MI_SHAPE(DV, DK));
    bool mamba = !strcmp(preset, "mamba"), dfw = !strcmp(preset, "dfw");
    c->gates.eta = mamba ? tensor(eta, MI_SHAPE(N, T, DV)) : tensor(one, MI_SHAPE(N, T));
    c->gates.alpha = dfw     ? tensor(alpha, MI_SHAPE(N, T, DV + DK))
                   : mamba   ? tensor(alpha, MI_SHAPE(N, T, DV))
                             : tensor(alpha, MI_SHAPE(N, T));
}

/* The rule, one token at a time: M_t[i][j] = row_i M_{t-1}[i][j] col_j +
 * η_i v_i k_j; y_t = M_t q_t. */
static void reference(const kase *c, double y[N][T][DV])
{
    for (int n = 0; n < N; n++) {
        double M[DV][DK];
        memcpy(M, c->w0, sizeof M);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < DV; i++) {
                y[n][t][i] = 0;
                for (int j = 0; j < DK; j++) {
                    M[i][j] = c->row[n][t][i] * M[i][j] * c->col[n][t][j] +
                              c->eta[n][t][i] * c->v[n][t][i] * c->k[n][t][j];
                    y[n][t][i] += M[i][j] * c->q[n][t][j];
                }
            }
    }
}

static void init_memory(mi_miras *m, const char *preset, int chunk, bool materialize)
{
    const mi_preset *p = mi_preset_find(preset);
    ck_assert_msg(p != NULL, "no preset %s", preset);
    mi_miras_config cfg = preset_config(p);
    cfg.chunk = chunk;
    cfg.materialize = materialize;
    ck_assert_msg(mi_miras_init(m, &cfg) == 0, "%s: %s", preset, mi_error());
}

static void expect_equal(const kase *c, mi_tensor *y, double want[N][T][DV], const char *what)
{
    ck_assert_msg(y != NULL, "%s (%s): %s", c->preset, what, mi_error());
    ck_assert_int_eq(y->numel, N * T * DV);
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < DV; i++) {
                double got = mi_get(y, (n * T + t) * DV + i), w = want[n][t][i];
                ck_assert_msg(fabs(got - w) <= 1e-12 * (1 + fabs(w)),
                              "%s (%s): y[%d,%d,%d] = %.15g, want %.15g", c->preset, what, n, t,
                              i, got, w);
            }
}

static const char *const names[] = {"dfw", "lightning", "mamba"};

/* The memory == the rule at chunk 1 (fused and composed), at chunk 16 (two
 * whole chunks and a short one: the dot bias's gradient −v kᵀ does not depend
 * on the state, so the mini-batch rule is this recurrence exactly), and one
 * token at a time (mi_miras_step). */
START_TEST(memory_equals_rule)
{
    kase *c = malloc(sizeof *c);
    ck_assert_ptr_nonnull(c);
    make_case(c, names[_i], 10 + (uint64_t)_i);
    double want[N][T][DV];
    reference(c, want);
    const struct { int chunk; bool materialize; const char *what; } runs[] = {
        {1, false, "chunk 1"}, {1, true, "chunk 1, composed ops"}, {16, false, "chunk 16"},
        {16, true, "chunk 16, one state per token"}};
    for (int r = 0; r < 4; r++) {
        mi_miras m;
        init_memory(&m, c->preset, runs[r].chunk, runs[r].materialize);
        expect_equal(c, mi_miras_forward(&m, c->tq, c->tk, c->tv, &c->gates, &c->tw0, NULL),
                     want, runs[r].what);
    }
    mi_miras m;
    init_memory(&m, c->preset, 1, false);
    mi_miras_state st;
    ck_assert_int_eq(mi_miras_state_init(&m, &st, &c->tw0, N, DK, DV, MI_F64), 0);
    double got[N][T][DV];
    for (int t = 0; t < T; t++) {
        mi_miras_gates g = {.eta = mi_slice(c->gates.eta, 1, t, t + 1),
                            .alpha = mi_slice(c->gates.alpha, 1, t, t + 1)};
        mi_tensor *yt = mi_miras_step(&m, &st, mi_slice(c->tq, 1, t, t + 1),
                                      mi_slice(c->tk, 1, t, t + 1), mi_slice(c->tv, 1, t, t + 1), &g);
        ck_assert_msg(yt != NULL, "%s step %d: %s", c->preset, t, mi_error());
        for (int n = 0; n < N; n++)
            for (int i = 0; i < DV; i++) got[n][t][i] = mi_get(yt, n * DV + i);
    }
    expect_equal(c, tensor(&got[0][0][0], MI_SHAPE(N, T, DV)), want, "one token at a time");
    free(c);
}
END_TEST

/* ---------------------------------------------------------------- the block */
enum { B = 2, BT = 5, DM = 8, BH = 4 };

static void make_block(mi_miras_block *b, const char *preset, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    ck_assert_msg(mi_miras_block_init_preset(b, preset, DM, BH, MI_F64, &r, test_scope) == 0,
                  "%s: %s", preset, mi_error());
}

static mi_tensor *block_input(uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return mi_randn(&r, MI_F64, MI_SHAPE(B, BT, DM), 0, 1);
}

/* Lightning: α of head h is exp(−2^(−8(h+1)/H)) at every token, and no
 * parameter makes it. */
START_TEST(lightning_decays_are_fixed_per_head)
{
    mi_miras_block b;
    make_block(&b, "lightning", 1);
    ck_assert_ptr_null(b.gate_down[MI_BLOCK_ALPHA]);
    ck_assert_ptr_null(b.gate_bias[MI_BLOCK_ALPHA]);
    mi_tensor *g[MI_BLOCK_GATES];
    ck_assert_int_eq(mi_miras_block_gates(&b, block_input(2), g), 0);
    ck_assert_int_eq(g[MI_BLOCK_ALPHA]->rank, 2);
    for (int n = 0; n < B * BH; n++)
        for (int t = 0; t < BT; t++) {
            double want = exp(-pow(2, -8.0 * (n % BH + 1) / BH));
            ck_assert_close(mi_get(g[MI_BLOCK_ALPHA], n * BT + t), want, 1e-15);
        }
    /* H = 4: 1 − 0.779, 0.939, 0.985, 0.996 of the state kept per token */
    ck_assert_close(mi_get(g[MI_BLOCK_ALPHA], 0), exp(-0.25), 1e-15);
    ck_assert_close(mi_get(g[MI_BLOCK_ALPHA], 3 * BT), exp(-1.0 / 256), 1e-15);
}
END_TEST

/* Mamba: α_t = exp(−η_t ⊙ exp(a)) per value channel, a learned per head and
 * channel, starting at (d + 1) a0 with exp(−0.1 a0) = 0.998. */
START_TEST(mamba_decay_is_the_zero_order_hold)
{
    mi_miras_block b;
    make_block(&b, "mamba", 3);
    ck_assert_ptr_null(b.gate_down[MI_BLOCK_ALPHA]);
    ck_assert_ptr_nonnull(b.alpha_a_log);
    int64_t hd = b.head_dim;
    ck_assert_int_eq(b.alpha_a_log->numel, BH * hd);
    double a0 = -log(0.998) / 0.1;
    for (int h = 0; h < BH; h++)
        for (int d = 0; d < hd; d++)
            ck_assert_close(exp(mi_get(b.alpha_a_log, h * hd + d)), a0 * (d + 1), 1e-12);
    /* a learned a: move it off its start, then α must follow it */
    mi_rng r;
    mi_rng_seed(&r, 4);
    for (int64_t e = 0; e < b.alpha_a_log->numel; e++)
        mi_set(b.alpha_a_log, e, mi_get(b.alpha_a_log, e) + uniform(&r, -1, 1));
    mi_tensor *g[MI_BLOCK_GATES];
    ck_assert_int_eq(mi_miras_block_gates(&b, block_input(5), g), 0);
    mi_tensor *eta = g[MI_BLOCK_ETA], *alpha = g[MI_BLOCK_ALPHA];
    ck_assert_int_eq(eta->rank, 3);
    ck_assert_int_eq(alpha->rank, 3);
    ck_assert_int_eq(alpha->shape[2], hd);
    for (int n = 0; n < B * BH; n++)
        for (int t = 0; t < BT; t++)
            for (int d = 0; d < hd; d++) {
                int64_t at = ((int64_t)n * BT + t) * hd + d;
                double rate = exp(mi_get(b.alpha_a_log, (n % BH) * hd + d));
                ck_assert_close(mi_get(alpha, at), exp(-mi_get(eta, at) * rate), 1e-14);
                ck_assert(mi_get(eta, at) > 0 && mi_get(eta, at) < 1);
            }
}
END_TEST

/* DFW: the α gate has dv + dk entries per head and token (β then α), each
 * starting near the preset's level. */
START_TEST(dfw_decays_both_sides)
{
    mi_miras_block b;
    make_block(&b, "dfw", 6);
    mi_tensor *g[MI_BLOCK_GATES];
    ck_assert_int_eq(mi_miras_block_gates(&b, block_input(7), g), 0);
    ck_assert_int_eq(g[MI_BLOCK_ALPHA]->rank, 3);
    ck_assert_int_eq(g[MI_BLOCK_ALPHA]->shape[2], 2 * b.head_dim);
    for (int64_t e = 0; e < g[MI_BLOCK_ALPHA]->numel; e++) {
        double a = mi_get(g[MI_BLOCK_ALPHA], e);
        ck_assert(a > 0.99 && a < 1);
    }
    mi_tensor *y = mi_miras_block_forward(&b, block_input(7));
    ck_assert_msg(y != NULL, "%s", mi_error());
}
END_TEST

static int block_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    out[0] = mi_miras_block_forward(ctx, in[0]);
    return out[0] ? 1 : -1;
}

/* f64 gradcheck of each preset's block w.r.t. x and every parameter, at
 * chunk 1 and 2 (a chunk of 2 and a short last one over 5 tokens). */
START_TEST(block_gradcheck)
{
    for (int chunk = 1; chunk <= 2; chunk++) {
        mi_miras_block_config c = mi_miras_block_config_default(DM, BH, NULL);
        ck_assert_int_eq(mi_miras_block_config_preset(&c, names[_i]), 0);
        c.miras.chunk = chunk;
        c.gate_rank = 2;
        mi_miras_block b;
        mi_rng r;
        mi_rng_seed(&r, 8);
        ck_assert_msg(mi_miras_block_init(&b, &c, MI_F64, &r, test_scope) == 0, "%s",
                      mi_error());
        int np;
        const mi_named_tensor *p = mi_miras_block_params(&b, &np);
        char what[64];
        snprintf(what, sizeof what, "%s block, chunk %d", names[_i], chunk);
        ck_assert(gradcheck_params(what, block_fn, &b, block_input(9), p, np) > 0);
    }
}
END_TEST

/* What the new options cannot do is refused, naming the option (the first
 * message stays until cleared). */
START_TEST(bad_combinations_are_refused)
{
    mi_miras m;
    mi_miras_config c = mi_miras_config_default();  /* l2 bias: the delta rule */
    config_set(&c, "alpha_both_sides=true");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("alpha_both_sides");
    c = mi_miras_config_default();
    config_set(&c, "bias=dot");
    config_set(&c, "alpha_both_sides=true");
    config_set(&c, "alpha_on_keys=true");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("alpha_both_sides");
    config_set(&c, "alpha_on_keys=false");
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);

    mi_miras_block b;
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_miras_block_config bc = mi_miras_block_config_default(DM, BH, NULL);
    ck_assert_int_eq(mi_miras_block_config_preset(&bc, "lightning"), 0);
    bc.eta = (mi_gate_spec){MI_GATE_SLOPES, 8, 0};  /* slopes is α's alone */
    mi_error_clear();
    ck_assert_int_eq(mi_miras_block_init(&b, &bc, MI_F64, &r, test_scope), -1);
    ck_assert_error_has("slopes");
    ck_assert_int_eq(mi_miras_block_config_preset(&bc, "lightning"), 0);
    bc.alpha.value = 0;
    mi_error_clear();
    ck_assert_int_eq(mi_miras_block_init(&b, &bc, MI_F64, &r, test_scope), -1);
    ck_assert_error_has("slopes");
    ck_assert_int_eq(mi_miras_block_config_preset(&bc, "mamba"), 0);
    bc.alpha = (mi_gate_spec){MI_GATE_CONST, 0.9, 0};
    mi_error_clear();
    ck_assert_int_eq(mi_miras_block_init(&b, &bc, MI_F64, &r, test_scope), -1);
    ck_assert_error_has("alpha_zoh");
    /* the key "alpha" takes the kind by name */
    ck_assert_int_eq(mi_miras_block_config_preset(&bc, "retnet"), 0);
    int nf;
    const mi_field *f = mi_miras_block_config_fields(&nf);
    ck_assert_int_eq(mi_fields_set(f, nf, &bc, "block", "alpha=slopes:6"), 0);
    ck_assert_int_eq(bc.alpha.kind, MI_GATE_SLOPES);
    ck_assert(bc.alpha.value == 6);
    /* alpha_zoh is a key too: GLA's channel-wise α from its η */
    ck_assert_int_eq(mi_miras_block_config_preset(&bc, "gla"), 0);
    ck_assert_int_eq(mi_fields_set(f, nf, &bc, "block", "alpha_zoh=true"), 0);
    ck_assert_int_eq(mi_fields_set(f, nf, &bc, "block", "eta=channel:0.2"), 0);
    ck_assert_msg(mi_miras_block_init(&b, &bc, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    ck_assert_ptr_nonnull(b.alpha_a_log);
    ck_assert_ptr_null(b.gate_down[MI_BLOCK_ALPHA]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("presets_decay");
    TCase *tc = tcase_slow("presets_decay");
    tcase_add_loop_test(tc, memory_equals_rule, 0, 3);
    tcase_add_test(tc, lightning_decays_are_fixed_per_head);
    tcase_add_test(tc, mamba_decay_is_the_zero_order_hold);
    tcase_add_test(tc, dfw_decays_both_sides);
    tcase_add_loop_test(tc, block_gradcheck, 0, 3);
    tcase_add_test(tc, bad_combinations_are_refused);
    suite_add_tcase(s, tc);
    return s;
}
