/* The attention baselines: multi-head causal softmax attention with RoPE
 * against a naive O(T²) loop written here (full and windowed), SWA with a
 * window ≥ T equal to attention, gradcheck w.r.t. the input and every
 * weight, causality, the op's f32 vjp against the composed one, and the
 * attention/swa mixers' spec errors. */
#include "harness.h"

enum { B = 2, T = 7, D = 8, H = 2, HD = D / H, MAXT = 8 };

static mi_tensor *input(uint64_t seed, mi_dtype dt, int64_t b, int64_t t, int64_t d)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return mi_randn(&r, dt, MI_SHAPE(b, t, d), 0, 1);
}

static void make_layer(mi_attention_layer *a, int64_t d, int64_t heads, int64_t window,
                       double base, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    ck_assert_msg(mi_attention_layer_init(a, d, heads, window, base, 0.7, MI_F64, &r,
                                          test_scope) == 0, "%s", mi_error());
}

/* ---------------------------------------------------------------- the naive loop */

static double W(const mi_tensor *w, int64_t r, int64_t c) { return mi_get(w, r * w->shape[1] + c); }

/* y [B·T·D] for x [B, T, D] by the definition: per head, project, rotate
 * (pairs (i, i + hd/2), angle t·base^(−2i/hd)), score every s allowed for
 * t, softmax, mix the values, project back. */
static void naive_attention(const mi_attention_layer *a, const mi_tensor *x, double *y)
{
    int64_t nb = x->shape[0], nt = x->shape[1], d = a->d_model, nh = a->heads,
            hd = a->head_dim, h2 = hd / 2, win = a->window;
    for (int64_t b = 0; b < nb; b++) {
        double q[MAXT][D], k[MAXT][D], v[MAXT][D], o[MAXT][D];
        for (int64_t t = 0; t < nt; t++)
            for (int64_t c = 0; c < d; c++) {
                q[t][c] = k[t][c] = v[t][c] = 0;
                for (int64_t e = 0; e < d; e++) {
                    double xe = mi_get(x, (b * nt + t) * d + e);
                    q[t][c] += xe * W(a->w_q, e, c);
                    k[t][c] += xe * W(a->w_k, e, c);
                    v[t][c] += xe * W(a->w_v, e, c);
                }
            }
        for (int64_t t = 0; t < nt; t++)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t i = 0; i < h2; i++) {
                    double th = (double)t * pow(a->rope_base, -2.0 * (double)i / (double)hd);
                    double *qq = q[t] + h * hd, *kk = k[t] + h * hd;
                    double q0 = qq[i], q1 = qq[i + h2], k0 = kk[i], k1 = kk[i + h2];
                    qq[i] = q0 * cos(th) - q1 * sin(th);
                    qq[i + h2] = q0 * sin(th) + q1 * cos(th);
                    kk[i] = k0 * cos(th) - k1 * sin(th);
                    kk[i + h2] = k0 * sin(th) + k1 * cos(th);
                }
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < nt; t++) {
                double score[MAXT], mx = -INFINITY, z = 0;
                for (int64_t s = 0; s <= t; s++) {
                    score[s] = -INFINITY;
                    if (win > 0 && s <= t - win) continue;
                    double dot = 0;
                    for (int64_t i = 0; i < hd; i++) dot += q[t][h * hd + i] * k[s][h * hd + i];
                    score[s] = dot / sqrt((double)hd);
                    if (score[s] > mx) mx = score[s];
                }
                for (int64_t s = 0; s <= t; s++) z += exp(score[s] - mx);
                for (int64_t i = 0; i < hd; i++) {
                    o[t][h * hd + i] = 0;
                    for (int64_t s = 0; s <= t; s++)
                        o[t][h * hd + i] += exp(score[s] - mx) / z * v[s][h * hd + i];
                }
            }
        for (int64_t t = 0; t < nt; t++)
            for (int64_t e = 0; e < d; e++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++) s += o[t][c] * W(a->w_out, c, e);
                y[(b * nt + t) * d + e] = s;
            }
    }
}

START_TEST(attention_matches_a_naive_loop)
{
    const int64_t windows[] = {0, 1, 3, T};
    const double bases[] = {10000, 3};
    for (int w = 0; w < 4; w++)
        for (int bi = 0; bi < 2; bi++) {
            mi_attention_layer a;
            make_layer(&a, D, H, windows[w], bases[bi], 1 + (uint64_t)w);
            mi_tensor *x = input(2, MI_F64, B, T, D);
            mi_tensor *y = mi_attention_layer_forward(&a, x);
            ck_assert_msg(y != NULL, "%s", mi_error());
            ck_assert(y->rank == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == D);
            double want[B * T * D];
            naive_attention(&a, x, want);
            for (int i = 0; i < B * T * D; i++)
                ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12 * (1 + fabs(want[i])),
                              "window %lld base %g: y[%d] = %.15g, want %.15g",
                              (long long)windows[w], bases[bi], i, mi_get(y, i), want[i]);
        }
    /* f32 agrees with f64 */
    mi_attention_layer a;
    make_layer(&a, D, H, 0, 10000, 5);
    mi_tensor *x = input(6, MI_F64, B, T, D);
    mi_tensor *y64 = mi_attention_layer_forward(&a, x);
    mi_rng r;
    mi_rng_seed(&r, 5);
    mi_attention_layer a32;
    ck_assert_int_eq(mi_attention_layer_init(&a32, D, H, 0, 10000, 0.7, MI_F32, &r, test_scope), 0);
    mi_tensor *y32 = mi_attention_layer_forward(&a32, mi_tensor_to(x, MI_F32));
    ck_assert_msg(y32 != NULL, "%s", mi_error());
    for (int64_t i = 0; i < y64->numel; i++) ck_assert_close(mi_get(y32, i), mi_get(y64, i), 1e-5);
}
END_TEST

/* The same weights (the same seed: swa and attention draw alike) with a
 * window ≥ T give the same output; a shorter window agrees only where it
 * covers the whole prefix (t < W). */
START_TEST(swa_with_window_at_least_t_is_attention)
{
    mi_mixer_options o = mi_mixer_options_default(D, H);
    mi_mixer att, swa, wide, narrow;
    mi_rng r;
    mi_rng_seed(&r, 9);
    ck_assert_msg(mi_mixer_create(&att, "attention", &o, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    mi_rng_seed(&r, 9);
    ck_assert_int_eq(mi_mixer_create(&swa, "swa:7", &o, MI_F64, &r, test_scope), 0);
    mi_rng_seed(&r, 9);
    ck_assert_int_eq(mi_mixer_create(&wide, "swa:100", &o, MI_F64, &r, test_scope), 0);
    mi_rng_seed(&r, 9);
    ck_assert_int_eq(mi_mixer_create(&narrow, "swa:3", &o, MI_F64, &r, test_scope), 0);
    ck_assert_str_eq(swa.name, "swa:7");
    ck_assert_int_eq(((mi_attention_layer *)swa.self)->window, 7);
    ck_assert_int_eq(((mi_attention_layer *)att.self)->window, 0);
    mi_tensor *x = input(10, MI_F64, B, T, D);
    mi_tensor *ya = att.forward(att.self, x), *ys = swa.forward(swa.self, x);
    mi_tensor *yw = wide.forward(wide.self, x), *yn = narrow.forward(narrow.self, x);
    ck_assert(ya && ys && yw && yn);
    double far = 0;
    for (int64_t i = 0; i < ya->numel; i++) {
        ck_assert(mi_get(ys, i) == mi_get(ya, i));
        ck_assert(mi_get(yw, i) == mi_get(ya, i));
        int64_t t = (i / D) % T;
        if (t < 3) ck_assert(mi_get(yn, i) == mi_get(ya, i));
        else far += fabs(mi_get(yn, i) - mi_get(ya, i));
    }
    ck_assert_msg(far > 1e-6, "a window of 3 changed nothing at t >= 3");
    /* the default window is the options' */
    o.window = 5;
    mi_mixer dflt;
    ck_assert_int_eq(mi_mixer_create(&dflt, "swa", &o, MI_F64, &r, test_scope), 0);
    ck_assert_int_eq(((mi_attention_layer *)dflt.self)->window, 5);
    ck_assert_int_eq(mi_mixer_options_default(D, H).window, 64);
}
END_TEST

/* ---------------------------------------------------------------- gradcheck */

static int layer_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    out[0] = mi_attention_layer_forward(ctx, in[0]);
    return out[0] ? 1 : -1;
}

START_TEST(gradcheck_input_and_weights)
{
    const int64_t windows[] = {0, 2};
    for (int w = 0; w < 2; w++) {
        mi_attention_layer a;
        make_layer(&a, 4, 2, windows[w], 10000, 11);
        mi_tensor *x = mi_requires_grad(input(12, MI_F64, 2, 5, 4), true);
        mi_tensor *in[5] = {x, a.w_q, a.w_k, a.w_v, a.w_out};
        mi_gradcheck_result r = mi_gradcheck(layer_fn, &a, in, 5, NULL);
        ck_assert_msg(r.ok, "window %lld: %s", (long long)windows[w], r.message);
        ck_assert_int_eq(r.entries, (2 * 5 * 4) * (2 * 5 * 4 + 4 * 16));
    }
}
END_TEST

START_TEST(output_at_t_ignores_later_inputs)
{
    for (int64_t window = 0; window <= 2; window += 2) {
        mi_attention_layer a;
        make_layer(&a, D, H, window, 10000, 13);
        mi_tensor *x = input(14, MI_F64, B, T, D);
        mi_tensor *y = mi_attention_layer_forward(&a, x);
        for (int s = 0; s < T; s++) {
            mi_tensor *x2 = mi_tensor_to(x, MI_F64);
            for (int d = 0; d < D; d++) mi_set(x2, s * D + d, mi_get(x2, s * D + d) - 0.9);
            mi_tensor *y2 = mi_attention_layer_forward(&a, x2);
            double changed = 0;
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++) {
                    double diff = fabs(mi_get(y2, t * D + d) - mi_get(y, t * D + d));
                    if (t < s) ck_assert_msg(diff == 0, "y[%d] moved when x[%d] changed", t, s);
                    if (t == s) changed += diff;
                    ck_assert(mi_get(y2, (T + t) * D + d) == mi_get(y, (T + t) * D + d));
                }
            ck_assert(changed > 0);
        }
    }
}
END_TEST

/* ---------------------------------------------------------------- errors */

static void expect_mixer_error(const char *spec, const mi_mixer_options *o, const char *needle)
{
    mi_mixer m;
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_error_clear();
    ck_assert_int_eq(mi_mixer_create(&m, spec, o, MI_F64, &r, test_scope), -1);
    ck_assert_error_has(needle);
    mi_error_clear();
}

START_TEST(bad_specs_are_reported)
{
    mi_mixer_options o = mi_mixer_options_default(D, H);
    expect_mixer_error("swa:0", &o, "mixer 'swa:0': window '0' is not a whole number >= 1");
    expect_mixer_error("swa:4x", &o, "window '4x' is not a whole number");
    expect_mixer_error("attention:4", &o, "attention takes no ':' argument");
    expect_mixer_error("transformer", &o, "mixer: unknown spec 'transformer' (known: attention, "
                                          "swa[:W], samba:<preset>[:W], hope, linear-attention");
    const char *ov[] = {"chunk=16"};
    o.overrides = ov;
    o.n_overrides = 1;
    expect_mixer_error("attention", &o, "takes no overrides (got 'chunk=16')");
    o = mi_mixer_options_default(6, 2);
    expect_mixer_error("attention", &o, "head_dim 3 (d_model 6 / heads 2) must be even for RoPE");
    o = mi_mixer_options_default(8, 3);
    expect_mixer_error("swa", &o, "heads (3) must be >= 1 and divide d_model (8)");
    o = mi_mixer_options_default(D, H);
    o.window = 0;
    expect_mixer_error("swa", &o, "window must be >= 1, got 0");

    mi_attention_layer a;
    make_layer(&a, D, H, 0, 10000, 1);
    ck_assert_ptr_null(mi_attention_layer_forward(&a, mi_zeros(MI_F64, MI_SHAPE(1, 3, D + 2))));
    ck_assert_error_has("attention: x is f64 [1,3,10]; expected f64 [B, T, 8]");
    mi_error_clear();
    mi_rng r;
    mi_rng_seed(&r, 1);
    ck_assert_int_eq(mi_attention_layer_init(&a, D, H, 0, 10000, 1, MI_I64, &r, test_scope), -1);
    ck_assert_error_has("f32 or f64");
    mi_error_clear();
    /* the [B, T, H, D] layout: heads that differ, a rank too low */
    mi_tensor *q = mi_zeros(MI_F32, MI_SHAPE(1, 4, 2, 8)), *k3 = mi_zeros(MI_F32, MI_SHAPE(1, 4, 3, 8));
    ck_assert_ptr_null(mi_attention_bthd(q, k3, k3, true, 0));
    ck_assert_error_has("attention: batch or head dims differ: q [1,4,2,8] k [1,4,3,8]");
    mi_error_clear();
    ck_assert_ptr_null(mi_rope_bthd(mi_zeros(MI_F32, MI_SHAPE(4, 8)), 10000, false));
    ck_assert_error_has("rope: x must be [..., T, H, D], got [4,8]");
    mi_error_clear();
}
END_TEST

/* The op's f32 output and gradients with OWN allowed (the forward, and the
 * vjp's probabilities, recomputed a block at a time, and its products, in
 * blocks of 64 query rows over the keys each block reads, on oneDNN's sgemm) equal REF's and the composed vjp's
 * (q kᵀ, the mask, softmax), and so do they with oneDNN left out (the
 * products on OpenBLAS): causal, causal with a window, a window alone
 * with T ≠ S, queries from position 3 of 9 keys, no mask, on 6 batch
 * entries split over two threads; then the same masks over two and three
 * blocks of rows (a last block of 22 rows, queries from position 130 of 200
 * keys). */
START_TEST(own_vjp_matches_ref_and_composed)
{
    static const struct {
        int64_t t, s;
        bool causal;
        int64_t window, start;
    } cases[] = {{40, 40, true, 0, 0}, {40, 40, true, 5, 0}, {40, 48, false, 6, 0},
                 {6, 9, true, 0, 3}, {64, 33, false, 0, 0}, {150, 150, true, 0, 0},
                 {150, 150, true, 20, 0}, {100, 130, false, 30, 0}, {70, 200, true, 0, 130},
                 {150, 150, false, 0, 0}};
    int threads = mi_threads();
    mi_set_threads(2);
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        mi_rng r;
        mi_rng_seed(&r, 40 + (uint64_t)c);
        mi_tensor *in[3] = {mi_randn(&r, MI_F32, MI_SHAPE(3, 2, cases[c].t, 8), 0, 1),
                            mi_randn(&r, MI_F32, MI_SHAPE(3, 2, cases[c].s, 8), 0, 1),
                            mi_randn(&r, MI_F32, MI_SHAPE(3, 2, cases[c].s, 5), 0, 1)};
        mi_tensor *w = mi_randn(&r, MI_F32, MI_SHAPE(3, 2, cases[c].t, 5), 0, 1);
        /* every backend; REF alone; OWN with its products on OpenBLAS (no oneDNN) */
        const unsigned allow[3] = {MI_BACKEND_ALL, 1u << MI_BACKEND_REF,
                                   MI_BACKEND_ALL & ~(1u << MI_BACKEND_DNNL)};
        mi_tensor *g[3][3], *y[3];
        for (int p = 0; p < 3; p++) {
            mi_backends_allow(allow[p]);
            for (int i = 0; i < 3; i++) mi_requires_grad(in[i], true);
            y[p] = mi_attention_at(in[0], in[1], in[2], cases[c].causal, cases[c].window,
                                   cases[c].start);
            mi_tensor *loss = mi_sum(mi_mul(y[p], w), MI_ALL, false);
            ck_assert_msg(loss && mi_grad(&loss, NULL, 1, in, 3, false, g[p]) == 0, "%s",
                          mi_error());
        }
        mi_backends_allow(MI_BACKEND_ALL);
        for (int p = 0; p < 3; p += 2) {
            int worst;
            double e = max_rel_err(y + p, y + 1, 1, &worst, NULL);
            ck_assert_msg(e <= 1e-5, "case %d, backends %d: output differs by %g", c, p, e);
            e = max_rel_err(g[p], g[1], 3, &worst, NULL);
            ck_assert_msg(e <= 1e-4, "case %d, backends %d: gradient of input %d differs by %g",
                          c, p, worst, e);
        }
    }
    mi_set_threads(threads);
}
END_TEST

/* [..., T, H, D] ↔ [..., H, T, D] */
static mi_tensor *swap_th(mi_tensor *x)
{
    return mi_permute(x, (const int[]){0, 2, 1, 3});
}

/* attention and rope on [B, T, H, D] (mi_attention_bthd, mi_rope_bthd) equal
 * the [B, H, T, D] ops on the transposed tensors, outputs and gradients,
 * with every backend (OWN's kernels read the heads' rows H apart) and with
 * REF alone (the vjp through the transposed layout): causal, causal with a
 * window, over one and three blocks of 64 query rows, 3 heads. */
START_TEST(bthd_layout_matches_heads_first)
{
    static const struct {
        int64_t t;
        int64_t window;
    } cases[] = {{40, 0}, {40, 7}, {150, 0}, {150, 30}};
    int threads = mi_threads();
    mi_set_threads(2);
    const unsigned allow[2] = {MI_BACKEND_ALL, 1u << MI_BACKEND_REF};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
        for (int p = 0; p < 2; p++) {
            mi_rng r;
            mi_rng_seed(&r, 70 + (uint64_t)c);
            int64_t nt = cases[c].t;
            mi_tensor *in[3] = {mi_randn(&r, MI_F32, MI_SHAPE(2, nt, 3, 8), 0, 1),
                                mi_randn(&r, MI_F32, MI_SHAPE(2, nt, 3, 8), 0, 1),
                                mi_randn(&r, MI_F32, MI_SHAPE(2, nt, 3, 5), 0, 1)};
            mi_tensor *w = mi_randn(&r, MI_F32, MI_SHAPE(2, nt, 3, 5), 0, 1);
            mi_backends_allow(allow[p]);
            mi_tensor *g[2][3], *y[2];
            for (int form = 0; form < 2; form++) {
                for (int i = 0; i < 3; i++) mi_requires_grad(in[i], true);
                if (form == 0) {
                    mi_tensor *q = mi_rope_bthd(in[0], 10000, false);
                    mi_tensor *k = mi_rope_bthd(in[1], 10000, false);
                    y[0] = mi_attention_bthd(q, k, in[2], true, cases[c].window);
                } else {
                    mi_tensor *q = mi_rope(swap_th(in[0]), 10000, false);
                    mi_tensor *k = mi_rope(swap_th(in[1]), 10000, false);
                    y[1] = swap_th(mi_attention(q, k, swap_th(in[2]), true, cases[c].window));
                }
                mi_tensor *loss = mi_sum(mi_mul(y[form], w), MI_ALL, false);
                ck_assert_msg(loss && mi_grad(&loss, NULL, 1, in, 3, false, g[form]) == 0, "%s",
                              mi_error());
            }
            mi_backends_allow(MI_BACKEND_ALL);
            int worst;
            double e = max_rel_err(y, y + 1, 1, &worst, NULL);
            ck_assert_msg(e <= 1e-5, "case %d, backends %d: output differs by %g", c, p, e);
            e = max_rel_err(g[0], g[1], 3, &worst, NULL);
            ck_assert_msg(e <= 1e-5, "case %d, backends %d: gradient of input %d differs by %g",
                          c, p, worst, e);
        }
    mi_set_threads(threads);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tcase_slow("attention");
    tcase_add_test(tc, attention_matches_a_naive_loop);
    tcase_add_test(tc, swa_with_window_at_least_t_is_attention);
    tcase_add_test(tc, gradcheck_input_and_weights);
    tcase_add_test(tc, output_at_t_ignores_later_inputs);
    tcase_add_test(tc, own_vjp_matches_ref_and_composed);
    tcase_add_test(tc, bthd_layout_matches_heads_first);
    tcase_add_test(tc, bad_specs_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
