/* Chunked forms that are exact. The Hebbian memories (dot bias: the error
 * does not depend on the state) read a chunk from the gradients' rank-one
 * factors, which must equal both the per-token recurrence and the chunk
 * with one weight copy per token (materialize).
 *
 * The exact chunkwise form of the delta rule (form=auto/exact, chunk b > 1)
 * equals the per-token recurrence (b = 1) in f64 up to rounding: y, the
 * final state, and the gradients of a random projection of both with
 * respect to q, k, v, every gate and the initial state, at b = 2, 3, 16, 64
 * with T a multiple of none of them; for each preset with an exact form and
 * for the ungated-read variant (decay_first false). The mini-batch rule at
 * the same b differs from b = 1 (so the comparison can fail), form=exact
 * refuses a model with no exact form, and the token-by-token step equals
 * the chunked forward. form=auto runs a small state (dk·dv ≤ 48²) through
 * the fused per-token scan, a larger one through the chunkwise form;
 * form=exact always through the latter. */
#include <stdio.h>

#include "harness.h"

enum { N = 2, T = 67, D = 4, S_MAX = 2 };

typedef struct kase {
    const char *name;                 /* a preset */
    const char *set;                  /* a config assignment on top of it, or NULL */
    mi_miras_config config;
    int steps, P;
    mi_tensor *q, *k, *v, *w0, *eta, *alpha; /* leaves that require grad */
    mi_tensor *gy, *gs;                      /* the random projections of y and S_T */
} kase;

/* A gate from its spec: HEAD [N, P] or CHANNEL [N, P, D] in [lo, hi]; α is 1
 * at every step but a token's first (the layer block's multistep α). */
static mi_tensor *gate(mi_rng *r, const kase *c, mi_gate_spec spec, double lo, double hi,
                       bool first_step_only)
{
    if (spec.kind == MI_GATE_UNUSED) return NULL;
    bool channel = spec.kind == MI_GATE_CHANNEL;
    int64_t width = channel ? D : 1, numel = (int64_t)N * c->P * width;
    double *buf = malloc(sizeof(double) * (size_t)numel);
    for (int64_t i = 0; i < numel; i++) {
        int64_t p = (i / width) % c->P;
        buf[i] = first_step_only && p % c->steps ? 1 : lo + (hi - lo) * mi_rng_uniform(r);
    }
    mi_tensor *t = channel ? mi_from_buffer(MI_F64, MI_SHAPE(N, c->P, D), buf)
                           : mi_from_buffer(MI_F64, MI_SHAPE(N, c->P), buf);
    free(buf);
    t->requires_grad = true;
    return t;
}

static mi_tensor *normal(mi_rng *r, int rank, const int64_t *shape, double scale)
{
    mi_tensor *t = mi_randn(r, MI_F64, rank, shape, 0, scale);
    t->requires_grad = true;
    return t;
}

static void make_case(kase *c, const char *name, const char *set, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    const mi_preset *p = mi_preset_find(name);
    ck_assert_msg(p != NULL, "no preset %s", name);
    c->name = name;
    c->set = set;
    c->config = preset_config(p);
    if (set) ck_assert_msg(mi_miras_config_set(&c->config, set) == 0, "%s", mi_error());
    c->steps = !strcmp(c->config.algorithm, "multistep") ? c->config.steps : 1;
    c->P = T * c->steps;
    mi_rng r;
    mi_rng_seed(&r, seed);
    c->q = normal(&r, MI_SHAPE(N, T, D), 0.5);
    /* keys of norm ≈ 1 (the layer block normalises them; β‖k‖² ≤ 2 keeps the
     * rule contracting), not exactly 1, so ‖k‖ enters */
    c->k = normal(&r, MI_SHAPE(N, c->P, D), 0.5);
    c->v = normal(&r, MI_SHAPE(N, c->P, D), 1);
    c->w0 = normal(&r, MI_SHAPE(D, D), 0.3);
    c->eta = gate(&r, c, p->eta, 0.2, 0.9, false);
    c->alpha = gate(&r, c, p->alpha, 0.7, 0.99, c->steps > 1);
    c->gy = mi_randn(&r, MI_F64, MI_SHAPE(N, T, D), 0, 1);
    c->gs = mi_randn(&r, MI_F64, 4, (int64_t[]){N, 1, D, D}, 0, 1);
}

/* y, S_T and the gradients wrt q, k, v, W_0, η, α: out[0..7] (α NULL when unused). */
static int run(const kase *c, int chunk, int form, mi_tensor **out)
{
    mi_miras_config cfg = c->config;
    cfg.chunk = chunk;
    cfg.form = form;
    mi_miras m;
    if (mi_miras_init(&m, &cfg) != 0) return -1;
    mi_miras_gates g = {.eta = c->eta, .alpha = c->alpha};
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS];
    mi_tensor *y = mi_miras_forward(&m, c->q, c->k, c->v, &g, &c->w0, s);
    if (!y) return -1;
    mi_tensor *outs[2] = {y, s[0]}, *seeds[2] = {c->gy, c->gs};
    mi_tensor *in[6] = {c->q, c->k, c->v, c->w0, c->eta, c->alpha};
    int n_in = c->alpha ? 6 : 5;
    out[0] = y;
    out[1] = s[0];
    out[7] = NULL;
    return mi_grad(outs, seeds, 2, in, n_in, false, out + 2);
}

static const char *const what[8] = {"y", "S_T", "dq", "dk", "dv", "dW0", "deta", "dalpha"};

static const struct { const char *name, *set; } cases[] = {
    {"deltanet", NULL},      {"gated-deltanet", NULL}, {"longhorn", NULL},
    {"rwkv7", NULL},         {"deltaproduct", NULL},   {"ttt-linear", NULL},
    {"gated-deltanet", "decay_first=false"}, /* α S − β(S k − v)kᵀ: the gradient at S_{t−1} */
    {"rwkv7", "alpha_on_keys=false"},        /* α per value row: a rule per row of S */
    {"deltaproduct", "steps=3"},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(exact_chunks_equal_the_recurrence)
{
    kase c;
    make_case(&c, cases[_i].name, cases[_i].set, 100u + (unsigned)_i);
    mi_tensor *ref[8], *got[8];
    ck_assert_msg(run(&c, 1, MI_FORM_AUTO, ref) == 0, "%s: %s", c.name, mi_error());
    static const int chunks[] = {2, 3, 16, 64};
    for (int b = 0; b < 4; b++) {
        for (int form = MI_FORM_AUTO; form <= MI_FORM_EXACT; form++) {
            ck_assert_msg(run(&c, chunks[b], form, got) == 0, "%s: %s", c.name, mi_error());
            int worst = 0;
            double e = max_rel_err(got, ref, 8, &worst, NULL);
            printf("exact %-15s %-18s b %2d: max error %.2e (%s)\n", c.name,
                   c.set ? c.set : "", chunks[b], e, what[worst]);
            ck_assert_msg(e <= 1e-12, "%s %s chunk %d: %s differs from chunk 1 by %.3g", c.name,
                          c.set ? c.set : "", chunks[b], what[worst], e);
        }
        /* the mini-batch rule is a different model: the comparison can fail */
        ck_assert_msg(run(&c, chunks[b], MI_FORM_MINIBATCH, got) == 0, "%s", mi_error());
        int worst = 0;
        ck_assert_msg(max_rel_err(got, ref, 8, &worst, NULL) > 1e-4,
                      "%s chunk %d: the mini-batch rule equals the recurrence", c.name, chunks[b]);
    }
}
END_TEST

START_TEST(hebbian_chunks_equal_the_recurrence)
{
    static const char *const hebbian[] = {"linear-attention", "retnet", "mamba2", "gla", "hgrn2"};
    kase c;
    make_case(&c, hebbian[_i], NULL, 200u + (unsigned)_i);
    mi_tensor *ref[8], *got[8], *mat[8];
    ck_assert_msg(run(&c, 1, MI_FORM_AUTO, ref) == 0, "%s: %s", c.name, mi_error());
    static const int chunks[] = {2, 3, 16, 64};
    for (int b = 0; b < 4; b++) {
        int worst = 0;
        c.config.materialize = false;
        ck_assert_msg(run(&c, chunks[b], MI_FORM_AUTO, got) == 0, "%s: %s", c.name, mi_error());
        c.config.materialize = true;
        ck_assert_msg(run(&c, chunks[b], MI_FORM_AUTO, mat) == 0, "%s: %s", c.name, mi_error());
        double e = max_rel_err(got, ref, 8, &worst, NULL);
        ck_assert_msg(e <= 1e-12, "%s chunk %d: %s differs from chunk 1 by %.3g", c.name,
                      chunks[b], what[worst], e);
        e = max_rel_err(got, mat, 8, &worst, NULL);
        ck_assert_msg(e <= 1e-12, "%s chunk %d: %s differs from the materialised chunk by %.3g",
                      c.name, chunks[b], what[worst], e);
    }
}
END_TEST

/* f32, with strong decays (α ∈ [0.05, 0.3]: Π α over a chunk of 64 underflows
 * f32, the ratios γ_t/γ_i do not): the exact form stays finite and close to
 * the f64 recurrence, y, S_T and every gradient. */
static mi_tensor *as_f32(mi_tensor *t, bool leaf)
{
    if (!t) return NULL;
    mi_tensor *c = mi_tensor_to(t, MI_F32);
    c->requires_grad = leaf;
    return c;
}

START_TEST(f32_with_strong_decay)
{
    static const char *const names[] = {"gated-deltanet", "rwkv7"};
    kase c;
    make_case(&c, names[_i], NULL, 300u + (unsigned)_i);
    mi_rng r;
    mi_rng_seed(&r, 9);
    for (int64_t j = 0; j < c.alpha->numel; j++)
        ((double *)c.alpha->data)[j] = 0.05 + 0.25 * mi_rng_uniform(&r);
    mi_tensor *ref[8], *got[8];
    ck_assert_msg(run(&c, 1, MI_FORM_AUTO, ref) == 0, "%s", mi_error());
    kase c32 = c;
    c32.q = as_f32(c.q, true), c32.k = as_f32(c.k, true), c32.v = as_f32(c.v, true);
    c32.w0 = as_f32(c.w0, true), c32.eta = as_f32(c.eta, true), c32.alpha = as_f32(c.alpha, true);
    c32.gy = as_f32(c.gy, false), c32.gs = as_f32(c.gs, false);
    for (int b = 16; b <= 64; b *= 4) {
        ck_assert_msg(run(&c32, b, MI_FORM_EXACT, got) == 0, "%s", mi_error());
        int worst = 0;
        double e = max_rel_err(got, ref, 8, &worst, NULL);
        printf("exact f32 %-15s b %2d: max error %.2e against f64 chunk 1 (%s)\n", c.name, b, e,
               what[worst]);
        ck_assert_msg(e <= 1e-4, "%s f32 chunk %d: %s off by %.3g", c.name, b, what[worst], e);
    }
}
END_TEST

/* The streamed step (decoding) follows the per-token recurrence too. */
START_TEST(step_equals_exact_forward)
{
    kase c;
    make_case(&c, cases[_i].name, cases[_i].set, 200u + (unsigned)_i);
    mi_miras_config cfg = c.config;
    cfg.chunk = 16;
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &cfg), 0);
    mi_miras_gates g = {.eta = c.eta, .alpha = c.alpha};
    mi_tensor *y = mi_miras_forward(&m, c.q, c.k, c.v, &g, &c.w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    mi_miras_state st;
    ck_assert_int_eq(mi_miras_state_init(&m, &st, &c.w0, N, D, D, MI_F64), 0);
    for (int t = 0; t < T; t++) {
        int64_t p0 = (int64_t)t * c.steps, p1 = p0 + c.steps;
        mi_miras_gates gt = {.eta = mi_slice(c.eta, 1, p0, p1),
                             .alpha = c.alpha ? mi_slice(c.alpha, 1, p0, p1) : NULL};
        mi_tensor *yt = mi_miras_step(&m, &st, mi_slice(c.q, 1, t, t + 1),
                                      mi_slice(c.k, 1, p0, p1), mi_slice(c.v, 1, p0, p1), &gt);
        ck_assert_msg(yt != NULL, "%s", mi_error());
        for (int n = 0; n < N; n++)
            for (int i = 0; i < D; i++) {
                double a = mi_get(yt, n * D + i), b = mi_get(y, ((int64_t)n * T + t) * D + i);
                ck_assert_msg(fabs(a - b) <= 1e-12 * (1 + fabs(b)), "%s t %d: step %.15g, "
                              "forward %.15g", c.name, t, a, b);
            }
    }
}
END_TEST

/* Whether gated DeltaNet at chunk 16 with heads of d ran the fused scan. */
static bool ran_the_scan(int64_t d, int form)
{
    mi_miras_config cfg = preset_config(mi_preset_find("gated-deltanet"));
    cfg.chunk = 16;
    cfg.form = form;
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &cfg), 0);
    mi_rng r;
    mi_rng_seed(&r, 7);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(1, 20, d), 0, 0.1);
    x->requires_grad = true;
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(d, d));
    mi_miras_gates g = {.eta = mi_full(MI_F64, MI_SHAPE(1, 20), 0.5),
                        .alpha = mi_full(MI_F64, MI_SHAPE(1, 20), 0.9)};
    mi_tensor *y = mi_miras_forward(&m, x, x, x, &g, &w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    return computed_within(y, "delta_scan", 3);
}

START_TEST(auto_runs_small_states_through_the_scan)
{
    ck_assert(ran_the_scan(4, MI_FORM_AUTO));
    ck_assert(ran_the_scan(48, MI_FORM_AUTO));
    ck_assert(!ran_the_scan(49, MI_FORM_AUTO));
    ck_assert(!ran_the_scan(4, MI_FORM_EXACT));
}
END_TEST

START_TEST(form_key_and_errors)
{
    mi_miras_config c = preset_config(mi_preset_find("titans"));
    ck_assert_int_eq(c.form, MI_FORM_AUTO);
    ck_assert_int_eq(mi_miras_config_set(&c, "form=minibatch"), 0);
    ck_assert_int_eq(c.form, MI_FORM_MINIBATCH);
    ck_assert_int_eq(mi_miras_config_set(&c, "form=auto"), 0);
    ck_assert_int_eq(c.form, MI_FORM_AUTO);
    ck_assert_int_eq(mi_miras_config_set(&c, "form=wy"), -1);
    ck_assert_error_has("form must be");
    mi_error_clear();
    /* asked for explicitly where there is none: an error at init (chunk > 1) */
    ck_assert_int_eq(mi_miras_config_set(&c, "form=exact"), 0);
    ck_assert_int_eq(mi_miras_config_set(&c, "chunk=8"), 0);
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("form=exact");
    ck_assert_error_has("momentum");
    mi_error_clear();
    c.chunk = 1; /* chunk 1 is the recurrence itself: exact for every model */
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    /* auto with no exact form: the mini-batch rule, silently */
    c.chunk = 8;
    c.form = MI_FORM_AUTO;
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    /* a channel-wise α on the key axis has its own chunk form (test_delta_dplr.c) */
    mi_miras_config h = preset_config(mi_preset_find("gla"));
    h.bias = "l2";
    h.decay_first = true;
    h.alpha_on_keys = true;
    h.chunk = 4;
    h.form = MI_FORM_EXACT;
    ck_assert_int_eq(mi_miras_init(&m, &h), 0);
    mi_rng r;
    mi_rng_seed(&r, 3);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(1, 6, D), 0, 0.5);
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));
    mi_miras_gates g = {.eta = mi_full(MI_F64, MI_SHAPE(1, 6), 0.5),
                        .alpha = mi_full(MI_F64, MI_SHAPE(1, 6, D), 0.9)};
    ck_assert_msg(mi_miras_forward(&m, x, x, x, &g, &w0, NULL) != NULL, "%s", mi_error());
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("delta_exact");
    TCase *tc = tcase_slow("exact");
    tcase_add_loop_test(tc, exact_chunks_equal_the_recurrence, 0, N_CASES);
    tcase_add_loop_test(tc, hebbian_chunks_equal_the_recurrence, 0, 5);
    tcase_add_loop_test(tc, step_equals_exact_forward, 0, N_CASES);
    tcase_add_loop_test(tc, f32_with_strong_decay, 0, 2);
    tcase_add_test(tc, form_key_and_errors);
    tcase_add_test(tc, auto_runs_small_states_through_the_scan);
    suite_add_tcase(s, tc);
    return s;
}
