/* HOPE (src/models/hope/hope.c): against a plain-loop reference of the
 * self-modifying Titans (chunk 1, and two different chunk sizes); gradchecks
 * (f64, tiny) w.r.t. the input and every parameter; causality; parameter
 * lists; f32 runs that stay bounded; bad configurations; the rows on the
 * threads against the tape. HOPE's block in the LM: test_hope_lm.c. */
#include <string.h>

#include "hope_test_util.h"

/* ---------------------------------------------------------------- HOPE */

static void check_hope_rule(int chunk, int memory_chunk, bool adaptive_q, int cms, int rule,
                            bool lms)
{
    mi_hope_config c = hope_config(chunk, memory_chunk, adaptive_q, cms);
    c.rule = rule;
    c.lms = lms;
    mi_hope h;
    make_hope(&h, &c, 21);
    enum { B = 2, T = 8 };
    mi_tensor *x = input(22, B, T, HD_MODEL);
    mi_tensor *y = mi_hope_forward(&h, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert(y->rank == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == HD_MODEL);
    double want[B * T * HD_MODEL];
    ref_hope_titans(&h, x, want);
    mi_tensor *ref = mi_from_buffer(MI_F64, MI_SHAPE(B, T, HD_MODEL), want);
    if (h.has_cms) { /* the CMS after it: its plain-loop reference (Nested Learning, Eq. 30–31) */
        double after[B * T * HD_MODEL];
        ref_cms(&h.cms, ref, after);
        ref = mi_from_buffer(MI_F64, MI_SHAPE(B, T, HD_MODEL), after);
    }
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_msg(fabs(mi_get(y, i) - mi_get(ref, i)) < 1e-12 * (1 + fabs(mi_get(ref, i))),
                      "%s%s chunk %d/%d q %s: y[%lld] = %.15g, reference %.15g",
                      rule == MI_HOPE_EQ28 ? "eq28" : "eq88", lms ? "" : " no lms", chunk,
                      memory_chunk, adaptive_q ? "adaptive" : "static", (long long)i,
                      mi_get(y, i), mi_get(ref, i));
}

/* every rule and both gradient scalings */
static void check_hope_against_reference(int chunk, int memory_chunk, bool adaptive_q, int cms)
{
    for (int rule = MI_HOPE_EQ28; rule <= MI_HOPE_EQ88; rule++) {
        check_hope_rule(chunk, memory_chunk, adaptive_q, cms, rule, true);
        check_hope_rule(chunk, memory_chunk, adaptive_q, cms, rule, false);
    }
}

START_TEST(hope_equals_per_token_loop)
{
    check_hope_against_reference(1, 1, true, 0);
    check_hope_against_reference(1, 1, false, 0);
}
END_TEST

/* out_gate=false: no W_g, and y is the reference's without the gate */
START_TEST(hope_without_out_gate_equals_loop)
{
    mi_hope_config c = hope_config(2, 1, true, 0);
    ck_assert(c.out_gate);
    c.out_gate = false;
    mi_hope h;
    make_hope(&h, &c, 21);
    ck_assert_ptr_null(h.w_gate);
    enum { B = 2, T = 5 };
    mi_tensor *x = input(22, B, T, HD_MODEL);
    mi_tensor *y = mi_hope_forward(&h, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    double want[B * T * HD_MODEL];
    ref_hope_titans(&h, x, want);
    for (int64_t i = 0; i < y->numel; i++)
        ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12 * (1 + fabs(want[i])),
                      "no gate: y[%lld] = %.15g, reference %.15g", (long long)i, mi_get(y, i),
                      want[i]);
}
END_TEST

START_TEST(hope_chunked_equals_loop)
{
    check_hope_against_reference(2, 3, true, 0);   /* segments cut at 2, 3, 4, 6 */
    check_hope_against_reference(3, 1, false, 2);  /* and through a CMS */
    check_hope_against_reference(8, 8, true, 0);   /* one chunk: no update is ever read */
    /* one chunk size, every layer's chunk ending at once: each group's decays
       (the components' head-mean α, the main memory's per head) its own */
    check_hope_against_reference(2, 2, true, 0);
}
END_TEST

START_TEST(hope_params_listed_and_trained)
{
    mi_hope_config c = hope_config(2, 1, true, 2);
    mi_hope a, b;
    make_hope(&a, &c, 31);
    make_hope(&b, &c, 31);
    int n, nb;
    const mi_named_tensor *p = mi_hope_params(&a, &n), *pb = mi_hope_params(&b, &nb);
    /* conv, 5 components × 2 + 2 biases, memory 2, norm, gate, out, CMS 2 × 6 */
    ck_assert_int_eq(n, 1 + 12 + 2 + 3 + 12);
    ck_assert_int_eq(nb, n);
    for (int i = 0; i < n; i++) {
        ck_assert(p[i].tensor->requires_grad);
        ck_assert(p[i].tensor->scope == test_scope);
        ck_assert_str_eq(p[i].name, pb[i].name);
        for (int j = 0; j < i; j++) ck_assert_str_ne(p[i].name, p[j].name);
        for (int64_t e = 0; e < p[i].tensor->numel; e++)
            ck_assert(mi_get(p[i].tensor, e) == mi_get(pb[i].tensor, e));
    }
    ck_assert_str_eq(p[0].name, "conv");
    ck_assert_str_eq(p[n - 1].name, "cms.1.eta_bias");
    ck_assert_int_eq(a.w1[MI_HOPE_MEMORY]->shape[0], HHEADS);
    ck_assert_int_eq(a.eta_bias->numel, HHEADS);
    ck_assert_close(sigm(mi_get(a.eta_bias, 0)), 0.4, 1e-12);
    ck_assert_close(sigm(mi_get(a.alpha_bias, 1)), 0.8, 1e-12);
    /* every parameter gets a gradient from the outer loss */
    mi_tensor *y = mi_hope_forward(&a, input(32, 2, 6, HD_MODEL));
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert_int_eq(mi_backward(mi_sum(mi_square(y), MI_ALL, false)), 0);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p[i].tensor->grad != NULL, "%s has no gradient", p[i].name);
        double s = mi_item(mi_sum(mi_square(p[i].tensor->grad), MI_ALL, false));
        ck_assert_msg(s > 0 && isfinite(s), "%s: |grad|^2 = %g", p[i].name, s);
    }
    /* static q: q_proj in place of q_mem */
    c.adaptive_q = false;
    make_hope(&b, &c, 31);
    p = mi_hope_params(&b, &nb);
    ck_assert_int_eq(nb, n - 1);
    ck_assert_str_eq(p[5].name, "q_proj");
    ck_assert_ptr_null(b.w1[MI_HOPE_Q]);
}
END_TEST

static int hope_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    out[0] = mi_hope_forward(ctx, in[0]);
    return out[0] ? 1 : -1;
}

START_TEST(hope_gradcheck_exact)
{
    mi_hope_config c = hope_config(1, 1, true, 0);
    mi_hope h;
    make_hope(&h, &c, 41);
    int n;
    const mi_named_tensor *p = mi_hope_params(&h, &n);
    gradcheck_params("hope chunk 1", hope_fn, &h, input(42, 2, 5, HD_MODEL), p, n);
}
END_TEST

/* both rules (Eq. 28 through the WY chunk form), and the CMS's Eq. 31 sum */
START_TEST(hope_gradcheck_chunked_with_cms)
{
    for (int rule = MI_HOPE_EQ28; rule <= MI_HOPE_EQ88; rule++) {
        mi_hope_config c = hope_config(2, 3, false, 2);
        c.rule = rule;
        c.cms.rate_mean = rule == MI_HOPE_EQ88;
        c.cms.lms = rule == MI_HOPE_EQ88;
        mi_hope h;
        make_hope(&h, &c, 43);
        int n;
        const mi_named_tensor *p = mi_hope_params(&h, &n);
        gradcheck_params(rule == MI_HOPE_EQ28 ? "hope eq28 chunk 2/3, static q, cms {1,3} sum"
                                              : "hope eq88 chunk 2/3, static q, cms {1,3} mean",
                         hope_fn, &h, input(44, 1, 7, HD_MODEL), p, n);
    }
}
END_TEST

/* The batch's rows on the threads (the default: their record kept from the
 * forward; with recompute, run again in the backward) against the loop
 * recorded on the caller's tape (composed): the output and the gradients of
 * the input and of every parameter equal to rounding, at 3 rows (two
 * threads: an uneven split) and 2; gradients of gradients only composed
 * (the default's fused op, on the threads or at one thread on the tape,
 * refuses them with a message). */
START_TEST(hope_rows_equal_composed)
{
    int threads = mi_threads();
    mi_set_threads(2);
    for (int64_t B = 3; B >= 2; B--) {
        mi_hope_config c[3] = {hope_config(2, 3, true, 2), hope_config(2, 3, true, 2),
                               hope_config(2, 3, true, 2)};
        c[1].composed = true;
        c[2].recompute = true;
        mi_tensor *y[3], *g[3][MI_HOPE_MAX_PARAMS + 1];
        int n = 0;
        for (int k = 0; k < 3; k++) {
            mi_hope h;
            make_hope(&h, &c[k], 45);
            const mi_named_tensor *p = mi_hope_params(&h, &n);
            mi_tensor *wrt[MI_HOPE_MAX_PARAMS + 1];
            wrt[0] = mi_requires_grad(input(46, B, 7, HD_MODEL), true);
            for (int i = 0; i < n; i++) wrt[1 + i] = p[i].tensor;
            y[k] = mi_hope_forward(&h, wrt[0]);
            ck_assert_msg(y[k] != NULL, "%s", mi_error());
            /* a loss whose gradient differs at every output */
            mi_tensor *l = mi_sum_axes(mi_mul(y[k], input(47, B, 7, HD_MODEL)), 7, false);
            ck_assert_msg(mi_grad(&l, NULL, 1, wrt, n + 1, false, g[k]) == 0, "%s", mi_error());
        }
        for (int k = 0; k < 3; k += 2) {
            ck_assert_msg(max_abs_diff(y[k], y[1]) <= 1e-13, "B %lld, case %d: output differs "
                          "by %g", (long long)B, k, max_abs_diff(y[k], y[1]));
            for (int i = 0; i <= n; i++)
                ck_assert_msg(max_abs_diff(g[k][i], g[1][i]) <= 1e-12,
                              "B %lld, case %d: gradient %d differs by %g", (long long)B, k, i,
                              max_abs_diff(g[k][i], g[1][i]));
        }
    }
    for (int k = 0; k < 3; k++) {
        /* k: the default on two threads, composed, the default on one thread */
        bool on_tape = k == 1;
        mi_hope_config c = hope_config(2, 3, true, 0);
        c.composed = k == 1;
        mi_set_threads(k == 2 ? 1 : 2);
        mi_hope h;
        make_hope(&h, &c, 48);
        mi_tensor *x = mi_requires_grad(input(49, 2, 5, HD_MODEL), true), *gx, *gg;
        mi_tensor *l = mi_sum_axes(mi_square(mi_hope_forward(&h, x)), 7, false);
        ck_assert_msg(mi_grad(&l, NULL, 1, &x, 1, true, &gx) == (on_tape ? 0 : -1),
                      "case %d: %s", k, mi_error());
        if (!on_tape) {
            ck_assert_msg(strstr(mi_error(), "no second derivatives"), "%s", mi_error());
            mi_error_clear();
            continue;
        }
        mi_tensor *l2 = mi_sum_axes(mi_square(gx), 7, false);
        ck_assert_msg(mi_grad(&l2, NULL, 1, &x, 1, false, &gg) == 0, "%s", mi_error());
    }
    mi_set_threads(threads);
}
END_TEST

START_TEST(hope_is_causal)
{
    for (int variant = 0; variant < 2; variant++) {
        mi_hope_config c = variant ? hope_config(2, 3, true, 2) : hope_config(1, 1, true, 0);
        mi_hope h;
        make_hope(&h, &c, 51);
        enum { B = 2, T = 7 };
        mi_tensor *x = input(52, B, T, HD_MODEL);
        mi_tensor *y = mi_hope_forward(&h, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        for (int s = 0; s < T; s++) {
            mi_tensor *x2 = mi_tensor_to(x, MI_F64);
            for (int i = 0; i < HD_MODEL; i++)
                mi_set(x2, s * HD_MODEL + i, mi_get(x2, s * HD_MODEL + i) + 0.7);
            mi_tensor *y2 = mi_hope_forward(&h, x2);
            ck_assert_ptr_nonnull(y2);
            double changed = 0;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < HD_MODEL; i++) {
                    double diff = fabs(mi_get(y2, t * HD_MODEL + i) - mi_get(y, t * HD_MODEL + i));
                    if (t < s)
                        ck_assert_msg(diff == 0, "variant %d: y[%d] moved by %g when x[%d] changed",
                                      variant, t, diff, s);
                    if (t == s) changed += diff;
                    int64_t other = (T + t) * HD_MODEL + i;
                    ck_assert(mi_get(y2, other) == mi_get(y, other));
                }
            ck_assert_msg(changed > 0, "y[%d] ignores x[%d]", s, s);
        }
    }
}
END_TEST

/* f32 at the default levels over a longer sequence, exact and chunked, one
 * and two heads: the self-modifying states stay bounded (with unnormalised
 * values or plain GD steps they diverged within ~50 tokens at d = 8). */
START_TEST(hope_f32_defaults_stay_bounded)
{
    for (int variant = 0; variant < 3; variant++) {
        mi_hope_config c = mi_hope_config_default(8, variant == 2 ? 2 : 1);
        c.cms_place = MI_HOPE_CMS_MIXER;
        c.chunk = variant ? 4 : 1;
        c.memory_chunk = variant ? 2 : 1;
        mi_hope h;
        mi_rng r;
        mi_rng_seed(&r, 61 + variant);
        ck_assert_msg(mi_hope_init(&h, &c, MI_F32, &r, test_scope) == 0, "%s", mi_error());
        ck_assert_int_eq(h.cms.config.n_blocks, 3);
        ck_assert_int_eq(h.cms.hidden, 32);
        mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(2, 96, 8), 0, 1);
        mi_tensor *y = mi_hope_forward(&h, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        ck_assert(y->dtype == MI_F32 && y->shape[1] == 96);
        for (int64_t e = 0; e < y->numel; e++)
            ck_assert_msg(isfinite(mi_get(y, e)) && fabs(mi_get(y, e)) < 100,
                          "variant %d: y[%lld] = %g", variant, (long long)e, mi_get(y, e));
    }
}
END_TEST

/* f32, the main memory wiped (its W2 scaled by 1e-4, what a retention α ≈ 0
 * leaves: the hidden activations nearly vanish) at a large inner rate (η 0.3),
 * exact and chunked: the output and every parameter's gradient stay finite
 * and small (|grad|² ≤ 3e5 here). With the hidden layer's step divided by
 * ‖s‖² + 1e-6, memory.w2's |grad|² was 5e14: HOPE's NaN on MQAR (chunk 8). */
START_TEST(hope_f32_wiped_memory_stays_finite)
{
    for (int variant = 0; variant < 2; variant++) {
        mi_hope_config c = mi_hope_config_default(8, 2);
        c.chunk = variant ? 8 : 1;
        c.eta = 0.3;
        c.alpha = 0.97;
        c.cms.n_blocks = 0;
        mi_hope h;
        mi_rng r;
        mi_rng_seed(&r, 71 + variant);
        ck_assert_msg(mi_hope_init(&h, &c, MI_F32, &r, test_scope) == 0, "%s", mi_error());
        mi_tensor *w2 = h.w2[MI_HOPE_MEMORY];
        for (int64_t e = 0; e < w2->numel; e++) mi_set(w2, e, 1e-4 * mi_get(w2, e));
        mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(2, 64, 8), 0, 1);
        mi_tensor *y = mi_hope_forward(&h, x);
        ck_assert_msg(y != NULL, "%s", mi_error());
        for (int64_t e = 0; e < y->numel; e++)
            ck_assert_msg(isfinite(mi_get(y, e)) && fabs(mi_get(y, e)) < 100,
                          "chunk %d: y[%lld] = %g", c.chunk, (long long)e, mi_get(y, e));
        ck_assert_int_eq(mi_backward(mi_sum(mi_square(y), MI_ALL, false)), 0);
        int n;
        const mi_named_tensor *p = mi_hope_params(&h, &n);
        for (int i = 0; i < n; i++) {
            double g2 = mi_item(mi_sum(mi_square(mi_tensor_to(p[i].tensor->grad, MI_F64)), MI_ALL,
                                       false));
            ck_assert_msg(isfinite(g2) && g2 < 1e9, "chunk %d: %s: |grad|^2 = %g", c.chunk,
                          p[i].name, g2);
        }
    }
}
END_TEST

static void expect_hope_error(mi_hope_config c, const char *needle)
{
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_error_clear();
    ck_assert_int_eq(mi_hope_init(&h, &c, MI_F64, &r, test_scope), -1);
    ck_assert_error_has(needle);
    mi_error_clear();
}

START_TEST(hope_bad_configurations)
{
    mi_hope_config c = mi_hope_config_default(HD_MODEL, 3);
    expect_hope_error(c, "heads (3) must divide d_model (4)");
    c = mi_hope_config_default(HD_MODEL, 0);
    expect_hope_error(c, "d_model and heads must be >= 1");
    c = hope_config(0, 1, true, 0);
    expect_hope_error(c, "hope: chunk must be >= 1, got 0");
    c = hope_config(1, 0, true, 0);
    expect_hope_error(c, "hope: memory_chunk must be >= 1, got 0");
    c = hope_config(1, 1, true, 0);
    c.memory_expansion = 0;
    expect_hope_error(c, "hope: memory_expansion must be in [1, 1024], got 0");
    c = hope_config(1, 1, true, 0);
    c.conv_kernel = 0;
    expect_hope_error(c, "hope: conv_kernel must be in [1, 65536], got 0");
    c = hope_config(1, 1, true, 0);
    c.alpha = 1;
    expect_hope_error(c, "hope: alpha must be in (0, 1), got 1");
    c = hope_config(1, 1, true, 2);
    c.cms.chunk[1] = 0;
    expect_hope_error(c, "hope: cms: chunk size C^(2) = 0 must be >= 1");
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 1);
    c = hope_config(1, 1, true, 0);
    ck_assert_int_eq(mi_hope_init(&h, &c, MI_I64, &r, test_scope), -1);
    ck_assert_error_has("f32 or f64");
    mi_error_clear();
    make_hope(&h, &c, 1);
    ck_assert_ptr_null(mi_hope_forward(&h, mi_zeros(MI_F64, MI_SHAPE(2, 3))));
    ck_assert_error_has("hope: x is f64 [2,3]; expected f64 [B, T, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_forward(&h, mi_zeros(MI_F32, MI_SHAPE(1, 3, HD_MODEL))));
    ck_assert_error_has("expected f64");
    mi_error_clear();
    mi_hope_state *st = mi_hope_state_new(&h, 2, test_scope);
    ck_assert_ptr_nonnull(st);
    ck_assert_ptr_null(mi_hope_step(&h, st, mi_zeros(MI_F64, MI_SHAPE(2, 2, HD_MODEL))));
    ck_assert_error_has("hope: step: x is [2,2,4]; expected [2, 1, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_step(&h, st, mi_zeros(MI_F64, MI_SHAPE(3, 1, HD_MODEL))));
    ck_assert_error_has("expected [2, 1, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_hope_state_new(&h, 0, test_scope));
    ck_assert_error_has("batch < 1");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_state_new(&h.cms, 2, test_scope));   /* this HOPE has no CMS */
    ck_assert_error_has("cms: state: needs an initialised CMS");
    mi_error_clear();
    c = hope_config(1, 1, true, 2);
    make_hope(&h, &c, 1);
    mi_cms_state *cs = mi_cms_state_new(&h.cms, 2, test_scope);
    ck_assert_ptr_nonnull(cs);
    ck_assert_ptr_null(mi_cms_step(&h.cms, cs, mi_zeros(MI_F64, MI_SHAPE(2, 3, HD_MODEL))));
    ck_assert_error_has("cms: step: cms: x is f64 [2,3,4]; expected f64 [2, 1, 4]");
    mi_error_clear();
}
END_TEST

START_TEST(hope_config_from_text)
{
    mi_hope_config c = mi_hope_config_default(8, 2);
    const char *good[] = {"chunk=16", "memory_chunk=4", "memory_expansion=2",
                          "component_expansion=3", "adaptive_q=false", "conv_kernel=2",
                          "eta=0.1", "alpha=0.9", "qk_eps=1e-5", "norm_eps=1e-4", "out_scale=0.5",
                          "cms=2,8", "cms.hidden=12", "cms.eta=0.05", "cms.norm_eps=1e-3",
                          "rule=eq88", "lms=false", "cms.rate=sum", "cms.lms=0",
                          "cms_place=mixer"};
    ck_assert(c.rule == MI_HOPE_EQ28 && c.lms && c.cms_place == MI_HOPE_CMS_FFN);
    for (int i = 0; i < 20; i++)
        ck_assert_msg(mi_hope_config_set(&c, good[i]) == 0, "%s: %s", good[i], mi_error());
    ck_assert(c.chunk == 16 && c.memory_chunk == 4 && c.memory_expansion == 2 &&
              c.component_expansion == 3 && !c.adaptive_q && c.conv_kernel == 2);
    ck_assert(c.eta == 0.1 && c.alpha == 0.9 && c.qk_eps == 1e-5 && c.norm_eps == 1e-4 &&
              c.out_scale == 0.5);
    ck_assert(c.cms.n_blocks == 2 && c.cms.chunk[0] == 2 && c.cms.chunk[1] == 8 &&
              c.cms.hidden == 12 && c.cms.eta == 0.05 && c.cms.norm_eps == 1e-3);
    ck_assert(c.rule == MI_HOPE_EQ88 && !c.lms && !c.cms.rate_mean && !c.cms.lms);
    ck_assert_int_eq(c.cms_place, MI_HOPE_CMS_MIXER);
    ck_assert_int_eq(mi_hope_config_set(&c, "rule=eq28"), 0);
    ck_assert_int_eq(mi_hope_config_set(&c, "cms.rate=mean"), 0);
    ck_assert(c.rule == MI_HOPE_EQ28 && c.cms.rate_mean);
    ck_assert(!c.cms.composed); /* the fused cms_scan by default */
    ck_assert_int_eq(mi_hope_config_set(&c, "cms.composed=true"), 0);
    ck_assert(c.cms.composed);
    mi_hope h;
    mi_rng r;
    mi_rng_seed(&r, 3);
    ck_assert_msg(mi_hope_init(&h, &c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    ck_assert_int_eq(h.cms.hidden, 12);
    ck_assert_ptr_nonnull(h.w_q);
    ck_assert_int_eq(mi_hope_config_set(&c, "cms=none"), 0);
    ck_assert_int_eq(c.cms.n_blocks, 0);
    ck_assert_int_eq(mi_hope_config_set(&c, "adaptive_q=1"), 0);
    ck_assert(c.adaptive_q);
    ck_assert(c.out_gate);
    ck_assert_int_eq(mi_hope_config_set(&c, "out_gate=false"), 0);
    ck_assert(!c.out_gate);
    const char *bad[][2] = {{"chunk", "expected KEY=VALUE"}, {"=3", "expected KEY=VALUE"},
                            {"chunk=2.5", "not a whole number"}, {"eta=fast", "not a number"},
                            {"adaptive_q=maybe", "hope: adaptive_q: 'maybe' is not true or false"},
                            {"out_gate=2", "hope: out_gate: '2' is not true or false"},
                            {"cms=1,0", "hope: cms: chunk size C^(2) = 0"},
                            {"heads=2", "unknown key 'heads'"},
                            {"chunk=1e99", "hope: chunk: '1e99' is not a whole number"},
                            {"rule=eq29", "hope: rule must be 'eq28' or 'eq88', got 'eq29'"},
                            {"cms.rate=max", "hope: cms.rate: 'max' is not sum or mean"},
                            {"lms=yes", "hope: lms: 'yes' is not true or false"},
                            {"cms_place=mlp", "hope: cms_place must be 'ffn' or 'mixer'"}};
    for (int i = 0; i < 13; i++) {
        mi_error_clear();
        ck_assert_int_eq(mi_hope_config_set(&c, bad[i][0]), -1);
        ck_assert_error_has(bad[i][1]);
    }
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("hope");
    TCase *tc = tcase_slow("hope");
    tcase_add_test(tc, hope_equals_per_token_loop);
    tcase_add_test(tc, hope_chunked_equals_loop);
    tcase_add_test(tc, hope_without_out_gate_equals_loop);
    tcase_add_test(tc, hope_params_listed_and_trained);
    tcase_add_test(tc, hope_gradcheck_exact);
    tcase_add_test(tc, hope_gradcheck_chunked_with_cms);
    tcase_add_test(tc, hope_rows_equal_composed);
    tcase_add_test(tc, hope_is_causal);
    tcase_add_test(tc, hope_f32_defaults_stay_bounded);
    tcase_add_test(tc, hope_f32_wiped_memory_stays_finite);
    tcase_add_test(tc, hope_bad_configurations);
    tcase_add_test(tc, hope_config_from_text);
    suite_add_tcase(s, tc);
    return s;
}
