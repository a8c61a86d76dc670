/* The fused per-token recurrence of the matrix memory, delta_scan:
 * - the op equals the same recurrence written with the composed per-token
 *   ops (matmul, mul, add per token) in f64 to ≤ 1e-12: y, S_T and the
 *   gradients of a random projection of both with respect to every input,
 *   for each rule (delta, decay_first, Hebbian), with and without the unit
 *   write (MI_DELTA_RULE_UNIT_WRITE), ragged T, N > 1, α ≡ 1, a general α,
 *   and β and α per value row;
 * - it passes the framework's f64 gradcheck;
 * - the recurrence's chunk 1 path (which now runs it) equals the composed
 *   path (materialize=true) for the presets it applies to, and the
 *   one-token step of generation equals the sequence forward;
 * - bad shapes, dtypes and rules give messages, not aborts, and a second
 *   derivative is refused with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { N = 3, DK = 5, DV = 4 };

static mi_tensor *leaf(mi_tensor *t)
{
    t->requires_grad = true;
    return t;
}

typedef struct inputs {
    mi_tensor *in[6]; /* s0, q, k, v, beta, alpha */
    mi_tensor *gy, *gs;
    int64_t T;
} inputs;

/* gates: 0 α ≡ 1, 1 a general α, 2 β and α per value row [N, T, dv] */
static void make_inputs(inputs *x, int64_t T, int gates, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    x->T = T;
    x->in[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, DV, DK), 0, 0.5));
    x->in[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, DK), 0, 0.5));
    x->in[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, DK), 0, 0.4));
    x->in[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, DV), 0, 1));
    x->in[4] = leaf(gates == 2 ? mi_rand(&r, MI_F64, MI_SHAPE(N, T, DV), 0.1, 0.9)
                               : mi_rand(&r, MI_F64, MI_SHAPE(N, T), 0.1, 0.9));
    x->in[5] = leaf(gates == 0   ? mi_ones(MI_F64, MI_SHAPE(N, T))
                    : gates == 2 ? mi_rand(&r, MI_F64, MI_SHAPE(N, T, DV), 0.3, 1.0)
                                 : mi_rand(&r, MI_F64, MI_SHAPE(N, T), 0.3, 1.0));
    x->gy = mi_randn(&r, MI_F64, MI_SHAPE(N, T, DV), 0, 1);
    x->gs = mi_randn(&r, MI_F64, MI_SHAPE(N, DV, DK), 0, 1);
}

/* The recurrence with composed ops, one token at a time (the rule may carry
 * MI_DELTA_RULE_UNIT_WRITE: u = v − β ρ p in place of β (v − ρ p)). */
static mi_tensor *composed(mi_tensor *const *in, mi_delta_rule flags, mi_tensor **s_end)
{
    bool unit = flags & MI_DELTA_RULE_UNIT_WRITE;
    mi_delta_rule rule = (mi_delta_rule)(flags & ~MI_DELTA_RULE_UNIT_WRITE);
    mi_tensor *S = in[0];
    int64_t T = in[2]->shape[1];
    mi_tensor **ys = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        mi_tensor *q = mi_slice(in[1], 1, t, t + 1), *k = mi_slice(in[2], 1, t, t + 1);
        mi_tensor *v = mi_slice(in[3], 1, t, t + 1);
        /* a gate as a row [N, 1, w] (scaling u) and α as a column [N, w, 1] (S's rows) */
        int64_t bw = in[4]->rank == 3 ? DV : 1, aw = in[5]->rank == 3 ? DV : 1;
        mi_tensor *b = mi_reshape(mi_slice(in[4], 1, t, t + 1), 3, (int64_t[]){N, 1, bw});
        mi_tensor *as = mi_slice(in[5], 1, t, t + 1);
        mi_tensor *a = mi_reshape(as, 3, (int64_t[]){N, 1, aw});
        mi_tensor *a_col = mi_reshape(as, 3, (int64_t[]){N, aw, 1});
        mi_tensor *u = unit ? v : mi_mul(b, v); /* [N, 1, dv] */
        if (rule != MI_DELTA_RULE_HEBBIAN) {
            mi_tensor *p = mi_matmul_t(k, S, false, true); /* (S k)ᵀ */
            if (rule == MI_DELTA_RULE_DECAY_FIRST) p = mi_mul(a, p);
            u = mi_sub(u, mi_mul(b, p));
        }
        S = mi_add(mi_mul(a_col, S), mi_matmul_t(u, k, true, false));
        ys[t] = mi_matmul_t(q, S, false, true);
    }
    *s_end = S;
    return T == 1 ? ys[0] : mi_concat(ys, (int)T, 1);
}

/* y, S_T, then the gradients of ⟨y, gy⟩ + ⟨S_T, gs⟩ wrt the six inputs. */
static void results(const inputs *x, mi_delta_rule rule, bool fused, mi_tensor **out)
{
    mi_tensor *s = NULL;
    mi_tensor *y = fused ? mi_delta_scan(x->in[0], x->in[1], x->in[2], x->in[3], x->in[4],
                                         x->in[5], rule, &s)
                         : composed(x->in, rule, &s);
    ck_assert_msg(y && s, "%s", mi_error());
    out[0] = y;
    out[1] = s;
    mi_tensor *outs[2] = {y, s}, *seeds[2] = {x->gy, x->gs};
    ck_assert_msg(mi_grad(outs, seeds, 2, x->in, 6, false, out + 2) == 0, "%s", mi_error());
}

static const char *const what[8] = {"y", "S_T", "ds0", "dq", "dk", "dv", "dbeta", "dalpha"};
static const char *const rules[3] = {"delta", "decay_first", "hebbian"};
static const char *const writes[2] = {"", " unit"};
static const int64_t lengths[] = {1, 2, 7, 13};

static const char *const gate_kinds[3] = {"alpha 1", "alpha general", "per row"};

/* _i: rule (3) × gates (3: α ≡ 1, general α, β and α per value row) × write
 * (β v kᵀ, or v kᵀ with MI_DELTA_RULE_UNIT_WRITE) */
START_TEST(op_equals_composed_ops)
{
    int base = _i % 3, gates = (_i / 3) % 3, unit = _i / 9;
    mi_delta_rule rule = (mi_delta_rule)(base | (unit ? MI_DELTA_RULE_UNIT_WRITE : 0));
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        inputs x;
        make_inputs(&x, lengths[l], gates, 10u + (unsigned)_i * 7u + (unsigned)l);
        mi_tensor *ref[8], *got[8];
        results(&x, rule, false, ref);
        results(&x, rule, true, got);
        int worst = 0;
        double e = max_rel_err(got, ref, 8, &worst, NULL);
        printf("delta_scan %-11s%-5s %-13s T %2lld: max error %.2e (%s)\n", rules[base],
               writes[unit], gate_kinds[gates], (long long)x.T, e, what[worst]);
        ck_assert_msg(e <= 1e-12, "%s%s T %lld: %s differs by %.3g", rules[base], writes[unit],
                      (long long)x.T, what[worst], e);
    }
}
END_TEST

/* ---------------------------------------------------------------- the papers' rules
 * The forward values against the rules as MIRAS writes them, in the op's
 * [dv, dk] orientation (S_{t−1} on the left), in plain f64 loops:
 *   delta:       S_t = α_t S_{t−1} − β_t (S_{t−1} k_t − v_t) k_tᵀ
 *                (MIRAS, eq:OGDupdate with ℓ2 bias ½‖S k − v‖² and ℓ2 retention α_t)
 *   decay_first: S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ
 *                (MIRAS, Table 1, Gated DeltaNet; α ≡ 1 is DeltaNet's row)
 *   hebbian:     S_t = α_t S_{t−1} + β_t v_t k_tᵀ  (MIRAS, Table 1, Mamba / linear attention)
 * and with MI_DELTA_RULE_UNIT_WRITE the write v_t k_tᵀ in place of β_t v_t k_tᵀ
 * (MIRAS, "RNNs with Delta Rule": M_t = α (I − η_t k_t k_tᵀ) M_{t−1} + v_t k_tᵀ)
 * with per-row gates as Diag(α_t), Diag(β_t) on the value rows (Table 1's
 * Diag(α_t) M_{t−1}); y_t = S_t q_t. The matrix I − β k kᵀ is formed
 * explicitly, unlike the op. */
static void papers_rule(const inputs *x, mi_delta_rule flags, double *y, double *s_end)
{
    bool unit = flags & MI_DELTA_RULE_UNIT_WRITE;
    mi_delta_rule rule = (mi_delta_rule)(flags & ~MI_DELTA_RULE_UNIT_WRITE);
    const int64_t T = x->T;
    for (int n = 0; n < N; n++) {
        double S[DV][DK], Sn[DV][DK];
        for (int i = 0; i < DV; i++)
            for (int j = 0; j < DK; j++) S[i][j] = mi_get(x->in[0], (n * DV + i) * DK + j);
        for (int64_t t = 0; t < T; t++) {
            double q[DK], k[DK], v[DV], al[DV], be[DV];
            for (int j = 0; j < DK; j++) {
                q[j] = mi_get(x->in[1], (n * T + t) * DK + j);
                k[j] = mi_get(x->in[2], (n * T + t) * DK + j);
            }
            for (int i = 0; i < DV; i++) {
                v[i] = mi_get(x->in[3], (n * T + t) * DV + i);
                be[i] = x->in[4]->rank == 3 ? mi_get(x->in[4], (n * T + t) * DV + i)
                                            : mi_get(x->in[4], n * T + t);
                al[i] = x->in[5]->rank == 3 ? mi_get(x->in[5], (n * T + t) * DV + i)
                                            : mi_get(x->in[5], n * T + t);
            }
            for (int i = 0; i < DV; i++)
                for (int j = 0; j < DK; j++) {
                    double val;
                    if (rule == MI_DELTA_RULE_DECAY_FIRST) {
                        /* α S (I − β k kᵀ) + β v kᵀ, with (I − β k kᵀ)_{lj} formed */
                        double sp = 0;
                        for (int l = 0; l < DK; l++)
                            sp += S[i][l] * ((l == j) - be[i] * k[l] * k[j]);
                        val = al[i] * sp + (unit ? 1 : be[i]) * v[i] * k[j];
                    } else if (rule == MI_DELTA_RULE_DELTA && !unit) {
                        /* α S − β ∇_S ½‖S k − v‖², ∇ = (S k − v) kᵀ */
                        double e = -v[i];
                        for (int l = 0; l < DK; l++) e += S[i][l] * k[l];
                        val = al[i] * S[i][j] - be[i] * e * k[j];
                    } else if (rule == MI_DELTA_RULE_DELTA) {
                        /* α S − β S k kᵀ + v kᵀ */
                        double sk = 0;
                        for (int l = 0; l < DK; l++) sk += S[i][l] * k[l];
                        val = al[i] * S[i][j] - be[i] * sk * k[j] + v[i] * k[j];
                    } else {
                        val = al[i] * S[i][j] + be[i] * v[i] * k[j];
                    }
                    Sn[i][j] = val;
                }
            memcpy(S, Sn, sizeof S);
            for (int i = 0; i < DV; i++) {
                double yi = 0;
                for (int j = 0; j < DK; j++) yi += S[i][j] * q[j];
                y[(n * T + t) * DV + i] = yi;
            }
        }
        for (int i = 0; i < DV; i++)
            for (int j = 0; j < DK; j++) s_end[(n * DV + i) * DK + j] = S[i][j];
    }
}

/* _i: rule (the delta rule's two, with and without the unit write, and
 * Hebbian) (5) × gates (3) */
START_TEST(op_is_the_papers_rule)
{
    static const mi_delta_rule rs[5] = {
        MI_DELTA_RULE_DELTA, MI_DELTA_RULE_DECAY_FIRST, MI_DELTA_RULE_HEBBIAN,
        MI_DELTA_RULE_DELTA | MI_DELTA_RULE_UNIT_WRITE,
        MI_DELTA_RULE_DECAY_FIRST | MI_DELTA_RULE_UNIT_WRITE};
    mi_delta_rule rule = rs[_i % 5];
    int base = rule & ~MI_DELTA_RULE_UNIT_WRITE, unit = (rule & MI_DELTA_RULE_UNIT_WRITE) != 0;
    int gates = _i / 5;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        inputs x;
        make_inputs(&x, lengths[l], gates, 10u + (unsigned)_i * 7u + (unsigned)l);
        mi_tensor *s = NULL;
        mi_tensor *y = mi_delta_scan(x.in[0], x.in[1], x.in[2], x.in[3], x.in[4], x.in[5], rule,
                                     &s);
        ck_assert_msg(y && s, "%s", mi_error());
        double *wy = malloc(sizeof(double) * (size_t)(N * x.T * DV)), ws[N * DV * DK];
        papers_rule(&x, rule, wy, ws);
        for (int64_t i = 0; i < y->numel; i++)
            ck_assert_msg(fabs(mi_get(y, i) - wy[i]) <= 1e-12 * (1 + fabs(wy[i])),
                          "%s%s %s T %lld: y[%lld] = %.15g, the paper's %.15g", rules[base], writes[unit],
                          gate_kinds[gates], (long long)x.T, (long long)i, mi_get(y, i), wy[i]);
        for (int64_t i = 0; i < s->numel; i++)
            ck_assert_msg(fabs(mi_get(s, i) - ws[i]) <= 1e-12 * (1 + fabs(ws[i])),
                          "%s%s %s T %lld: S_T[%lld] = %.15g, the paper's %.15g", rules[base], writes[unit],
                          gate_kinds[gates], (long long)x.T, (long long)i, mi_get(s, i), ws[i]);
        free(wy);
    }
}
END_TEST

typedef struct rule_ctx {
    mi_delta_rule rule;
} rule_ctx;

static int call_scan(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    (void)n;
    const rule_ctx *rc = c;
    out[0] = mi_delta_scan(in[0], in[1], in[2], in[3], in[4], in[5], rc->rule, &out[1]);
    return out[0] ? 2 : -1;
}

/* _i: rule (3) × gates per head or per value row (2) × write (β v kᵀ, v kᵀ) */
START_TEST(op_gradcheck)
{
    int unit = _i / 6;
    rule_ctx rc = {.rule = (mi_delta_rule)(_i % 3 | (unit ? MI_DELTA_RULE_UNIT_WRITE : 0))};
    inputs x;
    make_inputs(&x, 6, _i % 6 < 3 ? 1 : 2, 77u + (unsigned)_i);
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    o.quiet = true;
    mi_gradcheck_result g = mi_gradcheck(call_scan, &rc, x.in, 6, &o);
    printf("delta_scan %-11s%-5s %-13s gradcheck: %lld entries, max abs err %.2e\n",
           rules[_i % 3], writes[unit], gate_kinds[_i % 6 < 3 ? 1 : 2], (long long)g.entries,
           g.max_abs_err);
    ck_assert_msg(g.ok, "%s%s: %s", rules[_i % 3], writes[unit], g.message);
}
END_TEST

/* ---------------------------------------------------------------- in the recurrence */
enum { T_LAYER = 11, D = 4 };

static const struct { const char *name, *set; } presets[] = {
    {"deltanet", NULL},        {"gated-deltanet", NULL}, {"gated-deltanet", "decay_first=false"},
    {"linear-attention", NULL}, {"retnet", NULL},        {"mamba2", NULL},
    {"longhorn", NULL},        {"ttt-linear", NULL},     {"deltanet", "algorithm=implicit"},
    {"gla", "alpha_on_keys=false"}, {"rwkv7", "alpha_on_keys=false"}, /* α per value row */
    {"gla", NULL},             {"rwkv7", NULL},
    {"hgrn2", NULL}, /* α on the key axis: the op's ALPHA_KEYS flag */
    {"deltanet", "delta_write=unit"}, {"gated-deltanet", "delta_write=unit"},
    {"rwkv7", "delta_write=unit"},    {"longhorn", "delta_write=unit"},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

static mi_tensor *gate(mi_rng *r, mi_gate_spec spec, double lo, double hi)
{
    if (spec.kind == MI_GATE_UNUSED) return NULL;
    return spec.kind == MI_GATE_CHANNEL ? leaf(mi_rand(r, MI_F64, MI_SHAPE(2, T_LAYER, D), lo, hi))
                                        : leaf(mi_rand(r, MI_F64, MI_SHAPE(2, T_LAYER), lo, hi));
}

/* y, S_T and the gradients wrt q, k, v, W0, η (and α): 7 or 8 results. */
static int layer_results(const mi_miras_config *cfg, mi_tensor *const *x, mi_tensor *const *g,
                         mi_tensor **out)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, cfg) == 0, "%s", mi_error());
    mi_miras_gates gt = {.eta = x[4], .alpha = x[5]};
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *y = mi_miras_forward(&m, x[0], x[1], x[2], &gt, &x[3], s);
    ck_assert_msg(y != NULL, "%s", mi_error());
    out[0] = y;
    out[1] = s[0];
    mi_tensor *outs[2] = {y, s[0]};
    int n_in = x[5] ? 6 : 5;
    ck_assert_msg(mi_grad(outs, g, 2, x, n_in, false, out + 2) == 0, "%s", mi_error());
    return 2 + n_in;
}

START_TEST(chunk1_equals_composed_path)
{
    const mi_preset *p = mi_preset_find(presets[_i].name);
    ck_assert_ptr_nonnull(p);
    mi_miras_config cfg = preset_config(p);
    if (presets[_i].set) ck_assert_int_eq(mi_miras_config_set(&cfg, presets[_i].set), 0);
    cfg.chunk = 1;
    mi_rng r;
    mi_rng_seed(&r, 500u + (unsigned)_i);
    mi_tensor *x[6];
    x[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, D), 0, 0.5));
    x[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, D), 0, 0.5));
    x[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, D), 0, 1));
    x[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 0.3));
    x[4] = gate(&r, p->eta, 0.2, 0.9);
    x[5] = gate(&r, p->alpha, 0.6, 0.99);
    mi_tensor *g[2] = {mi_randn(&r, MI_F64, MI_SHAPE(2, T_LAYER, D), 0, 1),
                       mi_randn(&r, MI_F64, 4, (int64_t[]){2, 1, D, D}, 0, 1)};
    mi_tensor *ref[8], *got[8];
    mi_miras_config slow = cfg;
    slow.materialize = true;
    int n = layer_results(&slow, x, g, ref);
    layer_results(&cfg, x, g, got);
    int worst = 0;
    double e = max_rel_err(got, ref, n, &worst, NULL);
    static const char *const names[8] = {"y", "S_T", "dq", "dk", "dv", "dW0", "deta", "dalpha"};
    printf("chunk 1 %-16s %-20s: max error %.2e (%s)\n", presets[_i].name,
           presets[_i].set ? presets[_i].set : "", e, names[worst]);
    ck_assert_msg(e <= 1e-12, "%s: %s differs by %.3g", presets[_i].name, names[worst], e);

    /* the one-token step of generation, token after token, equals the forward */
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &cfg), 0);
    mi_miras_state st;
    ck_assert_msg(mi_miras_state_init(&m, &st, &x[3], 2, D, D, MI_F64) == 0, "%s", mi_error());
    double es = 0;
    for (int64_t t = 0; t < T_LAYER; t++) {
        mi_miras_gates gt = {.eta = mi_slice(x[4], 1, t, t + 1),
                             .alpha = x[5] ? mi_slice(x[5], 1, t, t + 1) : NULL};
        mi_tensor *yt = mi_miras_step(&m, &st, mi_slice(x[0], 1, t, t + 1),
                                      mi_slice(x[1], 1, t, t + 1), mi_slice(x[2], 1, t, t + 1), &gt);
        ck_assert_msg(yt != NULL, "%s", mi_error());
        mi_tensor *want = mi_slice(ref[0], 1, t, t + 1);
        for (int64_t j = 0; j < yt->numel; j++) {
            double d = fabs(mi_get(yt, j) - mi_get(want, j));
            if (d > es) es = d;
        }
    }
    ck_assert_msg(es <= 1e-12, "%s: the step differs from the forward by %.3g",
                  presets[_i].name, es);
}
END_TEST

/* ---------------------------------------------------------------- errors */
START_TEST(bad_inputs_give_messages)
{
    inputs x;
    make_inputs(&x, 4, 1, 3);
    mi_tensor *in[6];
    memcpy(in, x.in, sizeof in);
    mi_tensor *s = NULL;
    mi_error_clear();
    /* k with the wrong width */
    mi_tensor *k_bad = mi_zeros(MI_F64, MI_SHAPE(N, 4, DK + 1));
    ck_assert_ptr_null(mi_delta_scan(in[0], in[1], k_bad, in[3], in[4], in[5], 0, &s));
    ck_assert_error_has("delta_scan: shapes do not fit");
    ck_assert_error_has("[3,4,6]");
    /* a channel-wise β has one entry per value row */
    mi_error_clear();
    mi_tensor *b_chan = mi_zeros(MI_F64, MI_SHAPE(N, 4, DK));
    ck_assert_ptr_null(mi_delta_scan(in[0], in[1], in[2], in[3], b_chan, in[5], 0, &s));
    ck_assert_error_has("beta");
    /* T differs between q and v */
    mi_error_clear();
    mi_tensor *v_bad = mi_zeros(MI_F64, MI_SHAPE(N, 5, DV));
    ck_assert_ptr_null(mi_delta_scan(in[0], in[1], in[2], v_bad, in[4], in[5], 0, &s));
    ck_assert_error_has("delta_scan");
    /* N differs */
    mi_error_clear();
    mi_tensor *s0_bad = mi_zeros(MI_F64, MI_SHAPE(N + 1, DV, DK));
    ck_assert_ptr_null(mi_delta_scan(s0_bad, in[1], in[2], in[3], in[4], in[5], 0, &s));
    ck_assert_error_has("s0");
    /* dtype */
    mi_error_clear();
    mi_tensor *q32 = mi_tensor_to(in[1], MI_F32);
    ck_assert_ptr_null(mi_delta_scan(in[0], q32, in[2], in[3], in[4], in[5], 0, &s));
    ck_assert_error_has("dtype");
    /* rule */
    mi_error_clear();
    ck_assert_ptr_null(mi_delta_scan(in[0], in[1], in[2], in[3], in[4], in[5],
                                     (mi_delta_rule)7, &s));
    ck_assert_error_has("rule 7");
    /* NULL propagates */
    mi_error_clear();
    ck_assert_ptr_null(mi_delta_scan(in[0], NULL, in[2], in[3], in[4], in[5], 0, &s));
    ck_assert_error_has("delta_scan");
    /* the backward op checks g */
    mi_error_clear();
    ck_assert_ptr_null(mi_delta_scan_backward(in[0], in[1], in[2], in[3], in[4], in[5],
                                              mi_zeros(MI_F64, MI_SHAPE(N, 7)), 0));
    ck_assert_error_has("delta_scan_backward: g [3,7]");
    assert_no_second_derivative(mi_delta_scan(in[0], in[1], in[2], in[3], in[4], in[5], 0, &s),
                                in[2]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("delta_scan");
    TCase *tc = tcase_slow("delta_scan");
    tcase_add_loop_test(tc, op_equals_composed_ops, 0, 18);
    tcase_add_loop_test(tc, op_is_the_papers_rule, 0, 15);
    tcase_add_loop_test(tc, op_gradcheck, 0, 12);
    tcase_add_loop_test(tc, chunk1_equals_composed_path, 0, N_PRESETS);
    tcase_add_test(tc, bad_inputs_give_messages);
    suite_add_tcase(s, tc);
    return s;
}
