/* HOPE's block in the LM, both arrangements (cms_place=ffn, the default,
 * and mixer): logits against a hand-composed reference, gradcheck, the
 * one-token step against the forward, parameter names (no MLP by default). */
#include <string.h>

#include "hope_test_util.h"

/* ---------------------------------------------------------------- HOPE's block in the LM
 * The default block is Nested Learning's (§3, Fig. 3): the CMS in place of
 * the MLP, on the residual stream; cms_place=mixer gives the block before it
 * (the CMS on the Titans output inside the mixer, then the SwiGLU MLP). */

enum { LV = 7, LT = 6, LB = 2 };

static mi_lm_config hope_lm(const char *place)
{
    mi_lm_config c = mi_lm_config_default();
    c.vocab = LV, c.d_model = HD_MODEL, c.layers = 2, c.heads = HHEADS, c.mlp_hidden = 6;
    strcpy(c.mixer, "hope");
    const char *ov[] = {"mixer.memory_expansion=2", "mixer.chunk=2", "mixer.eta=0.4",
                        "mixer.alpha=0.8", "mixer.cms=2", "mixer.cms.hidden=4",
                        "mixer.cms.eta=0.4", place};
    for (int i = 0; i < 8 && ov[i]; i++)
        ck_assert_msg(mi_lm_config_set(&c, ov[i]) == 0, "%s: %s", ov[i], mi_error());
    return c;
}

static void make_hope_lm(mi_lm *lm, const mi_lm_config *c, uint64_t seed)
{
    ck_assert_msg(mi_lm_init(lm, c, MI_F64, seed, test_scope) == 0, "%s", mi_error());
    /* unit-size embeddings: the first RMSNorm then bends on the scale of the inputs */
    for (int64_t e = 0; e < lm->embeddings->numel; e++)
        mi_set(lm->embeddings, e, mi_get(lm->embeddings, e) / 0.02);
}

static mi_tensor *lm_tokens(uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    mi_tensor *t = mi_zeros(MI_I64, MI_SHAPE(LB, LT));
    for (int64_t i = 0; i < t->numel; i++) ((int64_t *)t->data)[i] = (int64_t)mi_rng_below(&r, LV);
    return t;
}

/* rows of x [n][d] → RMSNorm(x) ⊙ g */
static void ref_rms(const double *x, int64_t n, int d, const mi_tensor *g, double eps, double *y)
{
    for (int64_t r = 0; r < n; r++) {
        double ms = 0;
        for (int i = 0; i < d; i++) ms += x[r * d + i] * x[r * d + i] / d;
        for (int i = 0; i < d; i++) y[r * d + i] = x[r * d + i] / sqrt(ms + eps) * P(g, i);
    }
}

/* The LM's logits composed by hand from the plain-loop references of the
 * Titans part and of the CMS: per block
 *   ffn:   h = x + Titans(RMSNorm(x) ⊙ g);  x ← CMS(h)   (each level h + MLP(RMSNorm(h) ⊙ γ))
 *   mixer: h = x + CMS(Titans(RMSNorm(x) ⊙ g));  x ← h + SwiGLU(RMSNorm(h) ⊙ g')
 * then (RMSNorm(x) ⊙ g_f) Eᵀ. */
static void ref_lm_logits(const mi_lm *lm, const mi_tensor *tok, double *logits)
{
    enum { N = LB * LT, D = HD_MODEL };
    double x[N * D], u[N * D], y[N * D];
    double eps = lm->config.norm_eps;
    for (int64_t r = 0; r < N; r++)
        for (int i = 0; i < D; i++)
            x[r * D + i] = P(lm->embeddings, ((int64_t *)tok->data)[r] * D + i);
    for (int l = 0; l < lm->config.layers; l++) {
        const mi_lm_block *b = &lm->blocks[l];
        const mi_hope *h = b->mixer.self;
        bool ffn = h->config.cms_place == MI_HOPE_CMS_FFN;
        ref_rms(x, N, D, b->mixer_norm, eps, u);
        ref_hope_titans(h, mi_from_buffer(MI_F64, MI_SHAPE(LB, LT, D), u), y);
        if (!ffn) {
            memcpy(u, y, sizeof u);
            ref_cms(&h->cms, mi_from_buffer(MI_F64, MI_SHAPE(LB, LT, D), u), y);
        }
        for (int64_t e = 0; e < N * D; e++) x[e] += y[e];
        if (ffn) {
            ref_cms(&h->cms, mi_from_buffer(MI_F64, MI_SHAPE(LB, LT, D), x), y);
            memcpy(x, y, sizeof x);
            continue;
        }
        int64_t F = lm->mlp_hidden;
        ref_rms(x, N, D, b->mlp_norm, eps, u);
        for (int64_t r = 0; r < N; r++)
            for (int i = 0; i < D; i++) {
                double o = 0;
                for (int64_t f = 0; f < F; f++) {
                    double g = 0, up = 0;
                    for (int k = 0; k < D; k++) {
                        g += u[r * D + k] * P(b->w_gate, k * F + f);
                        up += u[r * D + k] * P(b->w_up, k * F + f);
                    }
                    o += silu(g) * up * P(b->w_down, f * D + i);
                }
                y[r * D + i] = o;
            }
        for (int64_t e = 0; e < N * D; e++) x[e] += y[e];
    }
    ref_rms(x, N, D, lm->final_norm, eps, u);
    for (int64_t r = 0; r < N; r++)
        for (int v = 0; v < LV; v++) {
            double z = 0;
            for (int i = 0; i < D; i++) z += u[r * D + i] * P(lm->embeddings, v * D + i);
            logits[r * LV + v] = z;
        }
}

START_TEST(hope_lm_block_equals_hand_composition)
{
    const char *places[] = {NULL, "mixer.cms_place=mixer"};
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(places[k]);
        mi_lm lm;
        make_hope_lm(&lm, &c, 51);
        mi_tensor *tok = lm_tokens(52);
        mi_tensor *y = mi_lm_forward(&lm, tok);
        ck_assert_msg(y != NULL, "%s", mi_error());
        double want[LB * LT * LV];
        ref_lm_logits(&lm, tok, want);
        for (int64_t i = 0; i < y->numel; i++)
            ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-11 * (1 + fabs(want[i])),
                          "cms_place=%s: logits[%lld] = %.15g, reference %.15g",
                          k ? "mixer" : "ffn", (long long)i, mi_get(y, i), want[i]);
    }
}
END_TEST

/* The default block has no MLP: no mlp.* parameters, the CMS's under the
 * block (blocks.l.cms.*), none under the mixer; cms_place=mixer the reverse;
 * the loader's lower bound follows. */
START_TEST(hope_lm_default_block_has_no_mlp)
{
    int64_t numel[2];
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(k ? "mixer.cms_place=mixer" : NULL);
        mi_lm lm;
        make_hope_lm(&lm, &c, 53);
        int n, mlp = 0, block_cms = 0, mixer_cms = 0;
        const mi_named_tensor *p = mi_lm_params(&lm, &n);
        for (int i = 0; i < n; i++) {
            mlp += strstr(p[i].name, "mlp") != NULL;
            block_cms += !strncmp(p[i].name, "blocks.1.cms.0.", 15);
            mixer_cms += !strncmp(p[i].name, "blocks.1.mixer.cms.0.", 21);
            for (int j = 0; j < i; j++) ck_assert_str_ne(p[i].name, p[j].name);
        }
        int64_t D = HD_MODEL, mlp_block = D + 3 * D * 6;
        ck_assert_int_eq(mlp, k ? 2 * 4 : 0);
        ck_assert_int_eq(block_cms, k ? 0 : 6);
        ck_assert_int_eq(mixer_cms, k ? 6 : 0);
        ck_assert(!k == (lm.blocks[0].w_gate == NULL && lm.blocks[1].mlp_norm == NULL));
        ck_assert(!k == (lm.blocks[0].mixer.ffn != NULL));
        ck_assert_int_eq(mi_lm_backbone_numel(&c), LV * D + D + (k ? 2 * mlp_block : 0));
        numel[k] = mi_lm_param_numel(&lm);
    }
    /* the same CMS either way: the arrangements differ by the MLPs' parameters */
    ck_assert_int_eq(numel[0] + 2 * (HD_MODEL + 3 * HD_MODEL * 6), numel[1]);
    /* no CMS: the block keeps the MLP whatever cms_place says */
    mi_lm_config c = hope_lm("mixer.cms=none");
    mi_lm lm;
    make_hope_lm(&lm, &c, 54);
    ck_assert_ptr_nonnull(lm.blocks[0].w_gate);
    ck_assert_ptr_null(lm.blocks[0].mixer.ffn);
    /* a bad placement is named, by the loader's bound as by init */
    c = hope_lm(NULL);
    ck_assert_int_eq(mi_lm_config_set(&c, "mixer.cms_place=mlp"), 0);
    mi_error_clear();
    ck_assert_int_eq(mi_lm_backbone_numel(&c), -1);
    ck_assert_error_has("cms_place must be 'ffn' or 'mixer', got 'mlp'");
    mi_error_clear();
    ck_assert_int_eq(mi_lm_init(&lm, &c, MI_F64, 1, test_scope), -1);
    ck_assert_error_has("cms_place must be 'ffn' or 'mixer', got 'mlp'");
    mi_error_clear();
    /* the layer's feed-forward entry refuses a CMS that is not the feed-forward */
    mi_hope_config hc = hope_config(1, 1, true, 1);
    mi_hope h;
    make_hope(&h, &hc, 55);
    ck_assert(!mi_hope_has_ffn(&h));
    ck_assert_ptr_null(mi_hope_ffn_forward(&h, input(1, 1, 2, HD_MODEL)));
    ck_assert_error_has("not the block's feed-forward");
    mi_error_clear();
}
END_TEST

typedef struct lm_ctx {
    const mi_lm *lm;
    mi_tensor *tokens, *targets;
} lm_ctx;

static int lm_loss_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)in, (void)n;
    const lm_ctx *c = ctx;
    out[0] = mi_lm_loss(c->lm, c->tokens, c->targets);
    return out[0] ? 1 : -1;
}

/* f64 central differences through the whole LM, every parameter, both arrangements. */
START_TEST(hope_lm_gradcheck)
{
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(k ? "mixer.cms_place=mixer" : NULL);
        mi_lm lm;
        make_hope_lm(&lm, &c, 56);
        mi_tensor *tok = lm_tokens(57), *tgt = lm_tokens(58);
        lm_ctx ctx = {&lm, tok, tgt};
        int n;
        const mi_named_tensor *p = mi_lm_params(&lm, &n);
        int64_t entries = gradcheck_params(k ? "hope lm, cms_place=mixer" : "hope lm, cms_place=ffn",
                                           lm_loss_fn, &ctx, NULL, p, n);
        ck_assert_int_eq(entries, mi_lm_param_numel(&lm));
    }
}
END_TEST

/* Generation's one-token step gives the full forward's logits at every position. */
START_TEST(hope_lm_step_equals_forward)
{
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = hope_lm(k ? "mixer.cms_place=mixer" : NULL);
        mi_lm lm;
        make_hope_lm(&lm, &c, 59);
        mi_tensor *tok = lm_tokens(60);
        mi_tensor *full = mi_lm_forward(&lm, tok);
        ck_assert_msg(full != NULL, "%s", mi_error());
        mi_lm_state *s = mi_lm_state_new(&lm, LB);
        ck_assert_msg(s != NULL, "%s", mi_error());
        for (int64_t t = 0; t < LT; t++) {
            mi_tensor *col = mi_zeros(MI_I64, MI_SHAPE(LB));
            for (int64_t b = 0; b < LB; b++)
                ((int64_t *)col->data)[b] = ((int64_t *)tok->data)[b * LT + t];
            mi_tensor *y = mi_lm_step(&lm, s, col);
            ck_assert_msg(y != NULL, "step %lld: %s", (long long)t, mi_error());
            for (int64_t b = 0; b < LB; b++)
                for (int64_t v = 0; v < LV; v++) {
                    double want = mi_get(full, (b * LT + t) * LV + v);
                    ck_assert_msg(fabs(mi_get(y, b * LV + v) - want) < 1e-12 * (1 + fabs(want)),
                                  "cms_place=%s t %lld: step %.15g, forward %.15g",
                                  k ? "mixer" : "ffn", (long long)t, mi_get(y, b * LV + v), want);
                }
        }
        ck_assert_int_eq(mi_lm_state_tokens(s), LT);
        mi_lm_state_free(s);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("hope_lm");
    TCase *tc = tcase_slow("hope_lm");
    tcase_add_test(tc, hope_lm_block_equals_hand_composition);
    tcase_add_test(tc, hope_lm_default_block_has_no_mlp);
    tcase_add_test(tc, hope_lm_gradcheck);
    tcase_add_test(tc, hope_lm_step_equals_forward);
    suite_add_tcase(s, tc);
    return s;
}
