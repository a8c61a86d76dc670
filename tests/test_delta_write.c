/* The delta rule's write form (delta_write = beta | unit). With unit the write
 * is v_t k_tᵀ, not β_t v_t k_tᵀ:
 *   S_t = α_t S_{t−1} (I − β_t k_t k_tᵀ) + v_t k_tᵀ      (decay_first)
 *   S_t = α_t S_{t−1} − β_t S_{t−1} k_t k_tᵀ + v_t k_tᵀ   (otherwise)
 * Every path the recurrence has for it equals a naive per-position loop
 * written here in plain f64 (≤ 1e-12): chunk 1 (the fused delta_scan, and the
 * composed per-token ops with materialize=true), the exact chunkwise (WY)
 * form, the mini-batch rule (against the loop with the gradient taken at the
 * chunk's start) and the one-token step of generation; the gradients of the
 * fused and chunkwise paths equal the composed ops' (which differentiate
 * through the framework's own vjps); the fused model passes the f64
 * gradcheck; unit differs from beta (the option does something); a model
 * that is not the delta rule refuses unit with a message. The presets cover
 * decay_first on and off, α per head and per value row (rwkv7), β per value
 * row with the implicit step (longhorn) and the multistep rule
 * (deltaproduct). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { N = 2, T = 13, D = 4, B = 4 };

typedef struct kase {
    mi_miras_config config;
    int steps, P;
    bool implicit;
    mi_tensor *in[6]; /* q, k, v, W_0, η, α (NULL: none): leaves */
    mi_tensor *gy, *gs;
} kase;

static const struct { const char *name, *set; } cases[] = {
    {"deltanet", NULL},       {"gated-deltanet", NULL}, {"gated-deltanet", "decay_first=false"},
    {"rwkv7", "alpha_on_keys=false"}, {"longhorn", NULL},  {"deltaproduct", NULL},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static mi_tensor *leaf(mi_tensor *t)
{
    if (t) t->requires_grad = true;
    return t;
}

static mi_tensor *gate(mi_rng *r, mi_gate_spec spec, int64_t P, double lo, double hi)
{
    if (spec.kind == MI_GATE_UNUSED) return NULL;
    return leaf(spec.kind == MI_GATE_CHANNEL ? mi_rand(r, MI_F64, MI_SHAPE(N, P, D), lo, hi)
                                             : mi_rand(r, MI_F64, MI_SHAPE(N, P), lo, hi));
}

static void make_case(kase *c, int i, const char *write)
{
    memset(c, 0, sizeof *c);
    const mi_preset *p = mi_preset_find(cases[i].name);
    ck_assert_msg(p != NULL, "no preset %s", cases[i].name);
    c->config = preset_config(p);
    if (cases[i].set) ck_assert_int_eq(mi_miras_config_set(&c->config, cases[i].set), 0);
    char kv[64];
    snprintf(kv, sizeof kv, "delta_write=%s", write);
    ck_assert_msg(mi_miras_config_set(&c->config, kv) == 0, "%s", mi_error());
    c->steps = !strcmp(c->config.algorithm, "multistep") ? c->config.steps : 1;
    c->implicit = !strcmp(c->config.algorithm, "implicit");
    c->P = T * c->steps;
    mi_rng r;
    mi_rng_seed(&r, 900u + (unsigned)i);
    c->in[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 0.5));
    c->in[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, c->P, D), 0, 0.5));
    c->in[2] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(N, c->P, D), 0, 1));
    c->in[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 0.3));
    c->in[4] = gate(&r, p->eta, c->P, 0.2, 0.9);
    c->in[5] = gate(&r, p->alpha, c->P, 0.7, 0.99);
    c->gy = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1);
    c->gs = mi_randn(&r, MI_F64, 4, (int64_t[]){N, 1, D, D}, 0, 1);
}

/* A gate's value for sequence n, position p, row i (1 where there is none). */
static double gate_at(const mi_tensor *g, int n, int64_t P, int64_t p, int i)
{
    if (!g) return 1;
    return g->rank == 3 ? mi_get(g, (n * P + p) * D + i) : mi_get(g, n * P + p);
}

/* The naive loop. Segments of `seg` positions take their gradients at the
 * state S' that the previous segment left (seg = 1: the recurrence itself),
 * with decay_first at ᾱ S', ᾱ the product of α since the segment's start:
 *   e_i  = Σ_j W_ij k_j,   W = S' (or ᾱ S')
 *   S_ij ← α_i S_ij − β_i e_i k_j + ω_i v_i k_j,   ω = β (beta) or 1 (unit)
 * with β = η, or η / (1 + η ‖k‖²) (implicit); y_t = S q_t after each token's
 * last position. */
static void naive(const kase *c, int64_t seg, double *y, double *s_end)
{
    const mi_miras_config *cfg = &c->config;
    bool unit = cfg->delta_write == MI_DELTA_WRITE_UNIT;
    for (int n = 0; n < N; n++) {
        double S[D][D], S0[D][D], abar[D];
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) S[i][j] = mi_get(c->in[3], i * D + j);
        for (int64_t p = 0; p < c->P; p++) {
            if (p % seg == 0) {
                memcpy(S0, S, sizeof S);
                for (int i = 0; i < D; i++) abar[i] = 1;
            }
            double k[D], kk = 0;
            for (int j = 0; j < D; j++) {
                k[j] = mi_get(c->in[1], (n * c->P + p) * D + j);
                kk += k[j] * k[j];
            }
            for (int i = 0; i < D; i++) {
                double eta = gate_at(c->in[4], n, c->P, p, i);
                double alpha = gate_at(c->in[5], n, c->P, p, i);
                double beta = c->implicit ? eta / (1 + eta * kk) : eta;
                double v = mi_get(c->in[2], (n * c->P + p) * D + i);
                abar[i] *= alpha;
                double e = 0;
                for (int j = 0; j < D; j++) e += (cfg->decay_first ? abar[i] : 1) * S0[i][j] * k[j];
                for (int j = 0; j < D; j++)
                    S[i][j] = alpha * S[i][j] - beta * e * k[j] + (unit ? 1 : beta) * v * k[j];
            }
            if (seg == 1) memcpy(S0, S, sizeof S);
            if (p % c->steps != c->steps - 1) continue;
            int64_t t = p / c->steps;
            for (int i = 0; i < D; i++) {
                double acc = 0;
                for (int j = 0; j < D; j++) acc += S[i][j] * mi_get(c->in[0], (n * T + t) * D + j);
                y[(n * T + t) * D + i] = acc;
            }
        }
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) s_end[(n * D + i) * D + j] = S[i][j];
    }
}

static double max_diff(const mi_tensor *t, const double *want)
{
    double e = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        double d = fabs(mi_get(t, i) - want[i]) / (1 + fabs(want[i]));
        if (d > e) e = d;
    }
    return e;
}

/* y, S_T and (grads) the gradients of ⟨y, gy⟩ + ⟨S_T, gs⟩ wrt the inputs. */
static int run(const kase *c, int chunk, int form, bool materialize, bool grads, mi_tensor **out)
{
    mi_miras_config cfg = c->config;
    cfg.chunk = chunk;
    cfg.form = form;
    cfg.materialize = materialize;
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s", mi_error());
    mi_miras_gates g = {.eta = c->in[4], .alpha = c->in[5]};
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *y = mi_miras_forward(&m, c->in[0], c->in[1], c->in[2], &g, &c->in[3], s);
    ck_assert_msg(y != NULL, "%s", mi_error());
    out[0] = y;
    out[1] = s[0];
    int n_in = c->in[5] ? 6 : 5;
    if (!grads) return 2;
    mi_tensor *outs[2] = {y, s[0]}, *seeds[2] = {c->gy, c->gs};
    ck_assert_msg(mi_grad(outs, seeds, 2, c->in, n_in, false, out + 2) == 0, "%s", mi_error());
    return 2 + n_in;
}

/* y token by token through the step of generation. */
static mi_tensor *stepped(const kase *c, int chunk)
{
    mi_miras_config cfg = c->config;
    cfg.chunk = chunk;
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s", mi_error());
    mi_miras_state st;
    ck_assert_msg(mi_miras_state_init(&m, &st, &c->in[3], N, D, D, MI_F64) == 0, "%s",
                  mi_error());
    mi_tensor *ys[T];
    int64_t S = c->steps;
    for (int64_t t = 0; t < T; t++) {
        mi_miras_gates gt = {.eta = mi_slice(c->in[4], 1, t * S, (t + 1) * S),
                             .alpha = c->in[5] ? mi_slice(c->in[5], 1, t * S, (t + 1) * S) : NULL};
        ys[t] = mi_miras_step(&m, &st, mi_slice(c->in[0], 1, t, t + 1),
                              mi_slice(c->in[1], 1, t * S, (t + 1) * S),
                              mi_slice(c->in[2], 1, t * S, (t + 1) * S), &gt);
        ck_assert_msg(ys[t] != NULL, "%s", mi_error());
    }
    return mi_concat(ys, T, 1);
}

static const char *const what[8] = {"y", "S_T", "dq", "dk", "dv", "dW0", "deta", "dalpha"};

/* _i: case × write (beta, unit): the loop is checked on both forms */
START_TEST(every_path_equals_the_loop)
{
    int i = _i / 2;
    const char *write = _i % 2 ? "unit" : "beta";
    kase c;
    make_case(&c, i, write);
    const char *name = cases[i].name, *set = cases[i].set ? cases[i].set : "";
    double *wy = malloc(sizeof(double) * N * T * D), ws[N * D * D];
    double *my = malloc(sizeof(double) * N * T * D), ms[N * D * D];
    naive(&c, 1, wy, ws);
    naive(&c, (int64_t)B * c.steps, my, ms);

    /* chunk 1 through the composed ops: the gradients' reference */
    mi_tensor *ref[8], *got[8];
    int n = run(&c, 1, MI_FORM_AUTO, true, true, ref);
    double e = fmax(max_diff(ref[0], wy), max_diff(ref[1], ws));
    printf("%-5s %-15s %-18s composed b 1: %.2e\n", write, name, set, e);
    ck_assert_msg(e <= 1e-12, "%s %s %s composed: off the loop by %.3g", write, name, set, e);

    /* chunk 1 by default (the fused scan, or per step for multistep) and the
     * exact chunkwise form at b = B: values against the loop, gradients
     * against the composed ops' */
    const struct { int chunk, form; const char *label; } paths[] = {
        {1, MI_FORM_AUTO, "b 1"}, {B, MI_FORM_EXACT, "exact b 4"}, {B, MI_FORM_AUTO, "auto b 4"}};
    for (int p = 0; p < 3; p++) {
        run(&c, paths[p].chunk, paths[p].form, false, true, got);
        double ev = fmax(max_diff(got[0], wy), max_diff(got[1], ws));
        int worst = 0;
        double eg = max_rel_err(got + 2, ref + 2, n - 2, &worst, NULL);
        printf("%-5s %-15s %-18s %-9s: %.2e, gradients %.2e (%s)\n", write, name, set,
               paths[p].label, ev, eg, what[2 + worst]);
        ck_assert_msg(ev <= 1e-12, "%s %s %s %s: off the loop by %.3g", write, name, set,
                      paths[p].label, ev);
        ck_assert_msg(eg <= 1e-12, "%s %s %s %s: %s off the composed ops' by %.3g", write, name,
                      set, paths[p].label, what[2 + worst], eg);
    }

    /* the mini-batch rule against the loop with segments of B tokens, and
     * the composed path of the same rule with one memory per token */
    run(&c, B, MI_FORM_MINIBATCH, false, false, got);
    e = fmax(max_diff(got[0], my), max_diff(got[1], ms));
    printf("%-5s %-15s %-18s minibatch b 4: %.2e\n", write, name, set, e);
    ck_assert_msg(e <= 1e-12, "%s %s %s minibatch: off the loop by %.3g", write, name, set, e);
    run(&c, B, MI_FORM_MINIBATCH, true, false, got);
    e = fmax(max_diff(got[0], my), max_diff(got[1], ms));
    ck_assert_msg(e <= 1e-12, "%s %s %s minibatch materialized: off by %.3g", write, name, set, e);

    /* the step of generation, at b = 1 and with the mini-batch rule */
    e = max_diff(stepped(&c, 1), wy);
    ck_assert_msg(e <= 1e-12, "%s %s %s step: off the loop by %.3g", write, name, set, e);
    mi_miras_config mb = c.config;
    c.config.form = MI_FORM_MINIBATCH;
    e = max_diff(stepped(&c, B), my);
    c.config = mb;
    ck_assert_msg(e <= 1e-12, "%s %s %s minibatch step: off the loop by %.3g", write, name, set,
                  e);
    free(wy);
    free(my);
}
END_TEST

/* unit is another model: y moves */
START_TEST(unit_differs_from_beta)
{
    kase a, u;
    make_case(&a, _i, "beta");
    make_case(&u, _i, "unit");
    mi_tensor *ya[2], *yu[2];
    run(&a, 1, MI_FORM_AUTO, false, false, ya);
    run(&u, 1, MI_FORM_AUTO, false, false, yu);
    int worst = 0;
    double e = max_rel_err(yu, ya, 1, &worst, NULL);
    ck_assert_msg(e > 1e-3, "%s: unit and beta agree to %.3g", cases[_i].name, e);
}
END_TEST

static int call_model(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    const mi_miras *m = ctx;
    mi_miras_gates g = {.eta = in[4], .alpha = n > 5 ? in[5] : NULL};
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];
    out[0] = mi_miras_forward(m, in[0], in[1], in[2], &g, &in[3], s);
    out[1] = out[0] ? s[0] : NULL;
    return out[0] ? 2 : -1;
}

/* f64 gradcheck of the unit write through the fused scan (chunk 1) and the
 * exact chunkwise form (b = B) */
START_TEST(unit_gradcheck)
{
    kase c;
    make_case(&c, _i / 2, "unit");
    c.config.chunk = _i % 2 ? B : 1;
    c.config.form = _i % 2 ? MI_FORM_EXACT : MI_FORM_AUTO;
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &c.config) == 0, "%s", mi_error());
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    o.quiet = true;
    mi_gradcheck_result g = mi_gradcheck(call_model, &m, c.in, c.in[5] ? 6 : 5, &o);
    printf("unit %-15s b %d gradcheck: %lld entries, max abs err %.2e\n", cases[_i / 2].name,
           (int)c.config.chunk, (long long)g.entries, g.max_abs_err);
    ck_assert_msg(g.ok, "%s: %s", cases[_i / 2].name, g.message);
}
END_TEST

START_TEST(unit_needs_the_delta_rule)
{
    static const char *const bad[] = {"titans", "linear-attention", "moneta"};
    for (int i = 0; i < 3; i++) {
        mi_miras_config cfg = preset_config(mi_preset_find(bad[i]));
        ck_assert_int_eq(mi_miras_config_set(&cfg, "delta_write=unit"), 0);
        mi_miras m;
        mi_error_clear();
        ck_assert_int_ne(mi_miras_init(&m, &cfg), 0);
        ck_assert_error_has("delta_write=unit");
    }
    mi_miras_config cfg = preset_config(mi_preset_find("deltanet"));
    mi_error_clear();
    ck_assert_int_ne(mi_miras_config_set(&cfg, "delta_write=half"), 0);
    ck_assert_error_has("delta_write");
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("delta_write");
    TCase *tc = tcase_slow("delta_write");
    tcase_add_loop_test(tc, every_path_equals_the_loop, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, unit_differs_from_beta, 0, N_CASES);
    tcase_add_loop_test(tc, unit_gradcheck, 0, 2 * N_CASES);
    tcase_add_test(tc, unit_needs_the_delta_rule);
    suite_add_tcase(s, tc);
    return s;
}
