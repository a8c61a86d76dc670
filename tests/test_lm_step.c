/* The language model one token at a time (lm_step.c, mi_miras_step): for
 * every preset at chunk sizes 1, 2 and 3, and for attention, SWA and samba,
 * the logits of mi_lm_step at each position equal mi_lm_forward's on the
 * whole sequence (f64, T a multiple of the chunk), and HOPE's at chunk sizes
 * that do not divide T; a MIRAS model's state keeps one size however many
 * tokens it has read, SWA's too once the window is full, HOPE's after whole
 * chunks, full attention's grows; bad inputs are reported. */
#include "harness.h"

enum { V = 11, DM = 8, HEADS = 2, B = 2, T = 6 };

static mi_lm_config tiny(const char *mixer, const char *override)
{
    mi_lm_config c = mi_lm_config_default();
    c.vocab = V, c.d_model = DM, c.layers = 2, c.heads = HEADS, c.mlp_hidden = 6, c.window = 3;
    strcpy(c.mixer, mixer);
    char buf[256];   /* override: assignments separated by ';' */
    snprintf(buf, sizeof buf, "%s", override ? override : "");
    for (char *save, *a = strtok_r(buf, ";", &save); a; a = strtok_r(NULL, ";", &save))
        ck_assert_msg(mi_lm_config_set(&c, a) == 0, "%s: %s", a, mi_error());
    return c;
}

static mi_tensor *tokens(uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    mi_tensor *t = mi_zeros(MI_I64, MI_SHAPE(B, T));
    for (int64_t i = 0; i < t->numel; i++) ((int64_t *)t->data)[i] = (int64_t)mi_rng_below(&r, V);
    return t;
}

/* max |step logits − forward logits| over every position. */
static double step_vs_forward(const char *mixer, const char *override)
{
    mi_lm_config c = tiny(mixer, override);
    mi_lm lm;
    ck_assert_msg(mi_lm_init(&lm, &c, MI_F64, 7, test_scope) == 0, "%s: %s", mixer, mi_error());
    mi_tensor *tok = tokens(11);
    mi_tensor *full = mi_lm_forward(&lm, tok);                       /* [B, T, V] */
    ck_assert_msg(full != NULL, "%s: %s", mixer, mi_error());
    mi_lm_state *s = mi_lm_state_new(&lm, B);
    ck_assert_msg(s != NULL, "%s: %s", mixer, mi_error());
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        mi_tensor *col = mi_zeros(MI_I64, MI_SHAPE(B));
        for (int64_t b = 0; b < B; b++)
            ((int64_t *)col->data)[b] = ((int64_t *)tok->data)[b * T + t];
        mi_tensor *y = mi_lm_step(&lm, s, col);                      /* [B, V] */
        ck_assert_msg(y != NULL, "%s (%s) step %lld: %s", mixer, override ? override : "",
                      (long long)t, mi_error());
        for (int64_t b = 0; b < B; b++)
            for (int64_t v = 0; v < V; v++) {
                double d = fabs(mi_get(y, b * V + v) - mi_get(full, (b * T + t) * V + v));
                if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
            }
    }
    ck_assert_int_eq(mi_lm_state_tokens(s), T);
    mi_lm_state_free(s);
    return worst;
}

START_TEST(every_preset_steps_like_its_forward)
{
    const char *chunks[] = {NULL, "mixer.chunk=2", "mixer.chunk=3"};
    for (int i = 0; mi_preset_at(i); i++)
        for (int c = 0; c < 3; c++) {
            const char *name = mi_preset_at(i)->name;
            double err = step_vs_forward(name, chunks[c]);
            if (getenv("STEP_VERBOSE"))
                fprintf(stderr, "%s %s: %g\n", name, chunks[c] ? chunks[c] : "", err);
            ck_assert_msg(err < 1e-10, "%s %s: step and forward logits differ by %g", name,
                          chunks[c] ? chunks[c] : "chunk=1", err);
        }
}
END_TEST

/* HOPE at chunk 1 and at chunk sizes that cut T = 6 into unequal pieces,
 * its CMS as the feed-forward or in the mixer, no conv, Eq. 88, q static. */
START_TEST(hope_steps_like_its_forward)
{
    const char *ov[] = {NULL,
                        "mixer.chunk=2;mixer.memory_chunk=3",
                        "mixer.chunk=4;mixer.memory_chunk=2;mixer.cms=5",
                        "mixer.cms_place=mixer;mixer.cms=3",
                        "mixer.conv_kernel=1;mixer.rule=eq88;mixer.adaptive_q=false",
                        "mixer.cms=none;mixer.out_gate=false"};
    for (int i = 0; i < 6; i++) {
        double err = step_vs_forward("hope", ov[i]);
        ck_assert_msg(err < 1e-10, "hope %s: step and forward logits differ by %g",
                      ov[i] ? ov[i] : "", err);
    }
}
END_TEST

START_TEST(baselines_and_hybrids_step_like_their_forward)
{
    const char *specs[] = {"attention", "swa", "swa:2", "samba:gated-deltanet",
                           "samba:titans:2", "titans"};
    const char *ov[] = {NULL, NULL, NULL, NULL, NULL, "mixer.memory.depth=3"};
    for (int i = 0; i < 6; i++) {
        double err = step_vs_forward(specs[i], ov[i]);
        ck_assert_msg(err < 1e-10, "%s: step and forward logits differ by %g", specs[i], err);
    }
}
END_TEST

/* The live state's bytes after `n` tokens. */
static size_t state_bytes_after(const mi_lm *lm, mi_lm_state *s, int n)
{
    mi_scope *step = mi_scope_new("step");
    for (int i = 0; i < n; i++) {
        mi_scope_enter(step);
        mi_tensor *tok = mi_zeros(MI_I64, MI_SHAPE(1));
        ck_assert_msg(mi_lm_step(lm, s, tok) != NULL, "%s", mi_error());
        mi_scope_leave();
        mi_scope_reset(step);
    }
    mi_scope_free(step);
    return mi_lm_state_bytes(s);
}

START_TEST(miras_and_swa_states_keep_their_size_attention_grows)
{
    const char *specs[] = {"gated-deltanet", "titans", "memora", "swa", "attention"};
    for (int i = 0; i < 5; i++) {
        mi_lm_config c = tiny(specs[i], NULL);
        mi_lm lm;
        ck_assert(mi_lm_init(&lm, &c, MI_F32, 1, test_scope) == 0);
        mi_lm_state *s = mi_lm_state_new(&lm, 1);
        size_t early = state_bytes_after(&lm, s, 4), late = state_bytes_after(&lm, s, 100);
        if (strcmp(specs[i], "attention"))
            ck_assert_msg(late == early, "%s: state %zu bytes after 4 tokens, %zu after 104",
                          specs[i], early, late);
        else /* at least the keys and values of the 100 tokens: 2 layers, f32 */
            ck_assert_msg(late - early >= 100 * 2 * 2 * DM * sizeof(float),
                          "attention: %zu -> %zu bytes", early, late);
        mi_lm_state_free(s);
    }
    /* HOPE's state holds its chunks' steps until they end: compare after whole chunks
       of every level (the CMS's slowest is 16) */
    mi_lm_config c = tiny("hope", NULL);
    mi_lm lm;
    ck_assert(mi_lm_init(&lm, &c, MI_F32, 1, test_scope) == 0);
    mi_lm_state *s = mi_lm_state_new(&lm, 1);
    ck_assert_msg(s != NULL, "%s", mi_error());
    size_t early = state_bytes_after(&lm, s, 16), late = state_bytes_after(&lm, s, 96);
    ck_assert_msg(late == early, "hope: state %zu bytes after 16 tokens, %zu after 112", early,
                  late);
    mi_lm_state_free(s);
}
END_TEST

START_TEST(bad_steps_are_reported)
{
    mi_lm_config c = tiny("gated-deltanet", NULL);
    mi_lm lm;
    ck_assert(mi_lm_init(&lm, &c, MI_F32, 1, test_scope) == 0);
    ck_assert_ptr_null(mi_lm_state_new(&lm, 0));
    ck_assert_error_has("batch");
    mi_error_clear();
    mi_lm_state *s = mi_lm_state_new(&lm, 2);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_null(mi_lm_step(&lm, s, mi_zeros(MI_I64, MI_SHAPE(3))));
    ck_assert_error_has("tokens must be");
    mi_error_clear();
    ck_assert_ptr_null(mi_lm_step(&lm, s, mi_zeros(MI_F32, MI_SHAPE(2))));
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_lm_step(&lm, s, mi_zeros(MI_I32, MI_SHAPE(2))));
    mi_lm_state_free(s);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("lm_step");
    TCase *tc = tcase_slow("lm_step");
    tcase_add_test(tc, every_preset_steps_like_its_forward);
    tcase_add_test(tc, baselines_and_hybrids_step_like_their_forward);
    tcase_add_test(tc, hope_steps_like_its_forward);
    tcase_add_test(tc, miras_and_swa_states_keep_their_size_attention_grows);
    tcase_add_test(tc, bad_steps_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
