/* The Samba-style hybrid (MIRAS, "Hybrid Models": the MIRAS layer combined
 * sequentially with sliding-window attention, as in Samba, Ren et al. 2024)
 * against the composition written out here: each sub-layer pre-norm with its
 * own learnable RMSNorm weight and its own residual,
 *   h'  = h  + MIRAS(RMSNorm(h)  ⊙ g_miras),
 *   h'' = h' + SWA(RMSNorm(h')  ⊙ g_swa),
 *   RMSNorm(x) = x / √(mean(x²) + ε)   (Zhang & Sennrich 2019, over the model axis).
 * The norms, weights and residuals are plain f64 loops; the two sub-layers
 * (each checked against its own plain-loop reference in test_block.c and
 * test_attention.c) are rebuilt from the same rng in the same order. */
#include "harness.h"

enum { B = 2, T = 6, DM = 4, HEADS = 2 };

/* x [B, T, DM] ↦ RMSNorm(x) ⊙ g as a new tensor */
static mi_tensor *prenorm(const double *x, const double *g, double eps)
{
    double y[B * T * DM];
    for (int row = 0; row < B * T; row++) {
        double ms = 0;
        for (int c = 0; c < DM; c++) ms += x[row * DM + c] * x[row * DM + c] / DM;
        for (int c = 0; c < DM; c++) y[row * DM + c] = x[row * DM + c] / sqrt(ms + eps) * g[c];
    }
    return mi_from_buffer(MI_F64, MI_SHAPE(B, T, DM), y);
}

static mi_tensor *param(const mi_mixer *m, const char *name)
{
    int n;
    const mi_named_tensor *p = m->params(m->self, &n);
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].name, name)) return p[i].tensor;
    ck_abort_msg("no parameter %s", name);
    return NULL;
}

START_TEST(samba_is_miras_then_swa_each_pre_norm_with_its_residual)
{
    const char *ov[] = {"gate_rank=2", "eta=0.5", "alpha=0.9"};
    mi_mixer_options o = mi_mixer_options_default(DM, HEADS);
    o.overrides = ov;
    o.n_overrides = 3;
    o.out_scale = 0.8;
    o.norm_eps = 0.3; /* large enough that where ε sits shows */
    mi_mixer s, m;
    mi_attention_layer a;
    mi_rng r;
    mi_rng_seed(&r, 5);
    ck_assert_msg(mi_mixer_create(&s, "samba:gated-deltanet:3", &o, MI_F64, &r, test_scope) == 0,
                  "%s", mi_error());
    ck_assert(s.residual_inside);
    mi_rng_seed(&r, 5);
    ck_assert_int_eq(mi_mixer_create(&m, "gated-deltanet", &o, MI_F64, &r, test_scope), 0);
    ck_assert_int_eq(mi_attention_layer_init(&a, DM, HEADS, 3, o.rope_base, o.out_scale, MI_F64, &r,
                                             test_scope), 0);
    /* norm weights away from their initial 1, and different from each other */
    mi_rng_seed(&r, 7);
    double g_miras[DM], g_swa[DM];
    for (int c = 0; c < DM; c++) {
        g_miras[c] = 0.5 + mi_rng_uniform(&r);
        g_swa[c] = 1.5 + mi_rng_uniform(&r);
        mi_set(param(&s, "miras_norm.weight"), c, g_miras[c]);
        mi_set(param(&s, "swa_norm.weight"), c, g_swa[c]);
    }
    mi_rng_seed(&r, 6);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(B, T, DM), 0, 1);
    mi_tensor *y = s.forward(s.self, x);
    ck_assert_msg(y != NULL, "%s", mi_error());

    double h[B * T * DM], h1[B * T * DM], h2[B * T * DM];
    for (int i = 0; i < B * T * DM; i++) h[i] = mi_get(x, i);
    mi_tensor *u = m.forward(m.self, prenorm(h, g_miras, o.norm_eps));
    ck_assert_ptr_nonnull(u);
    for (int i = 0; i < B * T * DM; i++) h1[i] = h[i] + mi_get(u, i);
    mi_tensor *v = mi_attention_layer_forward(&a, prenorm(h1, g_swa, o.norm_eps));
    ck_assert_ptr_nonnull(v);
    for (int i = 0; i < B * T * DM; i++) {
        h2[i] = h1[i] + mi_get(v, i);
        ck_assert_msg(fabs(mi_get(y, i) - h2[i]) <= 1e-13 * (1 + fabs(h2[i])),
                      "y[%d] = %.17g, the composition gives %.17g", i, mi_get(y, i), h2[i]);
    }
    int n;
    const mi_named_tensor *p = s.params(s.self, &n);
    ck_assert_str_eq(p[0].name, "miras_norm.weight");
    ck_assert_str_eq(p[n - 5].name, "swa_norm.weight");
    ck_assert_str_eq(p[n - 1].name, "swa.out_proj");
    /* the window: the mixer spec's ("samba:…:3"), else the options' */
    mi_mixer d;
    o.window = 11;
    ck_assert_int_eq(mi_mixer_create(&d, "samba:titans", &o, MI_F64, &r, test_scope), 0);
    ck_assert_str_eq(d.name, "samba:titans");
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("samba");
    TCase *tc = tcase_slow("samba");
    tcase_add_test(tc, samba_is_miras_then_swa_each_pre_norm_with_its_residual);
    suite_add_tcase(s, tc);
    return s;
}
