/* Attention one token at a time against a KV cache (attention.c,
 * mi_attention_at):
 *   - mi_attention_at, queries at a first position p0 > 0 of a longer key
 *     list, equals a softmax over the visible keys written here as a loop
 *     (f64, and f32 through the project's kernels, one query per batch
 *     entry and several);
 *   - mi_lm_step's logits equal mi_lm_forward's at every position (f64) for
 *     attention, SWA with windows below and above the cache's first
 *     allocation, and samba, over more tokens than that allocation holds,
 *     with and without mi_lm_state_reserve;
 *   - greedy generation resumed after a prompt read by steps: every logit
 *     equals the forward's over the whole text, every token its argmax, and
 *     mi_generate writes the same tokens;
 *   - the cache grows by at least the keys and values read, SWA's stays one
 *     size; bad states and positions are reported. */
#include "harness.h"

enum { V = 11, DM = 8, HEADS = 2, B = 2 };

/* ---------------------------------------------------------------- mi_attention_at */

/* y[l, t] = Σ_s softmax_s(q·k_s / √d) v_s over s < S with, at p = p0 + t,
 * s ≤ p when causal and s > p − w when w > 0. */
static void naive_attention(const mi_tensor *q, const mi_tensor *k, const mi_tensor *v,
                            bool causal, int64_t w, int64_t p0, double *y)
{
    int rk = q->rank;
    int64_t T = q->shape[rk - 2], d = q->shape[rk - 1], S = k->shape[rk - 2];
    int64_t dv = v->shape[rk - 1], L = q->numel / (T * d);
    for (int64_t l = 0; l < L; l++)
        for (int64_t t = 0; t < T; t++) {
            int64_t p = p0 + t;
            double score[64], m = -INFINITY, z = 0;
            for (int64_t s = 0; s < S; s++) {
                bool seen = (!causal || s <= p) && (w == 0 || s > p - w);
                double dot = 0;
                for (int64_t e = 0; e < d; e++)
                    dot += mi_get(q, (l * T + t) * d + e) * mi_get(k, (l * S + s) * d + e);
                score[s] = seen ? dot / sqrt((double)d) : -INFINITY;
                if (score[s] > m) m = score[s];
            }
            for (int64_t s = 0; s < S; s++) z += score[s] > -INFINITY ? exp(score[s] - m) : 0;
            for (int64_t e = 0; e < dv; e++) {
                double acc = 0;
                for (int64_t s = 0; s < S; s++)
                    if (score[s] > -INFINITY)
                        acc += exp(score[s] - m) / z * mi_get(v, (l * S + s) * dv + e);
                y[(l * T + t) * dv + e] = acc;
            }
        }
}

START_TEST(attention_at_a_first_position_matches_a_loop)
{
    mi_rng r;
    mi_rng_seed(&r, 5);
    const int64_t Ts[] = {1, 3};
    for (int ti = 0; ti < 2; ti++) {
        int64_t T = Ts[ti], S = 9;
        mi_tensor *q = mi_randn(&r, MI_F64, MI_SHAPE(3, T, 4), 0, 1);
        mi_tensor *k = mi_randn(&r, MI_F64, MI_SHAPE(3, S, 4), 0, 1);
        mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(3, S, 2), 0, 1);
        for (int causal = 0; causal < 2; causal++)
            for (int64_t w = 0; w <= 3; w++)
                for (int64_t p0 = 0; p0 <= 7; p0++) {
                    if (w > 0 && p0 + T > S + w - 1) continue; /* rows with no key */
                    double want[3 * 3 * 2];
                    naive_attention(q, k, v, causal, w, p0, want);
                    mi_tensor *y = mi_attention_at(q, k, v, causal, w, p0);
                    ck_assert_msg(y != NULL, "%s", mi_error());
                    mi_tensor *y32 = mi_attention_at(mi_tensor_to(q, MI_F32), mi_tensor_to(k, MI_F32),
                                                     mi_tensor_to(v, MI_F32), causal, w, p0);
                    ck_assert_msg(y32 != NULL, "%s", mi_error());
                    for (int64_t i = 0; i < y->numel; i++) {
                        ck_assert_msg(fabs(mi_get(y, i) - want[i]) < 1e-12,
                                      "T %lld causal %d w %lld p0 %lld [%lld]: %.15g vs %.15g",
                                      (long long)T, causal, (long long)w, (long long)p0,
                                      (long long)i, mi_get(y, i), want[i]);
                        ck_assert_msg(fabs(mi_get(y32, i) - want[i]) < 1e-5,
                                      "f32 T %lld causal %d w %lld p0 %lld [%lld]: %g vs %g",
                                      (long long)T, causal, (long long)w, (long long)p0,
                                      (long long)i, mi_get(y32, i), want[i]);
                    }
                }
    }
}
END_TEST

START_TEST(bad_first_positions_are_reported)
{
    mi_tensor *q = mi_zeros(MI_F64, MI_SHAPE(2, 4)), *k = mi_zeros(MI_F64, MI_SHAPE(5, 4));
    mi_tensor *v = mi_zeros(MI_F64, MI_SHAPE(5, 3));
    ck_assert_ptr_null(mi_attention_at(q, k, v, true, 0, -1));
    ck_assert_error_has("first query's position must be >= 0, got -1");
    mi_error_clear();
    /* the last query at position 6 with a window of 2 reads keys 5 and 6: there are 5 */
    ck_assert_ptr_null(mi_attention_at(q, k, v, true, 2, 5));
    ck_assert_error_has("leaves query rows with no key");
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_attention_at(q, k, v, true, 2, 4));
}
END_TEST

/* ---------------------------------------------------------------- the LM, one token at a time */

static void tiny_lm(mi_lm *lm, const char *mixer)
{
    mi_lm_config c = mi_lm_config_default();
    c.vocab = V, c.d_model = DM, c.layers = 2, c.heads = HEADS, c.mlp_hidden = 6, c.window = 5;
    strcpy(c.mixer, mixer);
    ck_assert_msg(mi_lm_init(lm, &c, MI_F64, 3, test_scope) == 0, "%s: %s", mixer, mi_error());
}

static int64_t tok(const mi_tensor *t, int64_t b, int64_t i)
{
    return ((const int64_t *)t->data)[b * t->shape[1] + i];
}

/* Feeds column i of seq [B, T] to the state; the logits [B, V]. */
static mi_tensor *step_column(const mi_lm *lm, mi_lm_state *s, const mi_tensor *seq, int64_t i)
{
    mi_tensor *col = mi_zeros(MI_I64, MI_SHAPE(B));
    for (int64_t b = 0; b < B; b++) ((int64_t *)col->data)[b] = tok(seq, b, i);
    mi_tensor *y = mi_lm_step(lm, s, col);
    ck_assert_msg(y != NULL, "step %lld: %s", (long long)i, mi_error());
    return y;
}

/* max over b, v of |step logits − forward logits at position i|. */
static double gap(const mi_tensor *step, const mi_tensor *full, int64_t i)
{
    int64_t T = full->shape[1];
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++) {
            double d = fabs(mi_get(step, b * V + v) - mi_get(full, (b * T + i) * V + v));
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        }
    return worst;
}

static const char *const cached[] = {"attention", "swa", "swa:48", "samba:gated-deltanet:5",
                                     "samba:titans:40"};

/* Without a reservation the cache starts at 32 rows and doubles; with one of
 * 45 tokens it starts there and doubles past it. */
START_TEST(steps_past_the_first_allocation_match_the_forward)
{
    enum { T = 80 };
    for (size_t m = 0; m < 2 * sizeof cached / sizeof cached[0]; m++) {
        bool reserve = m % 2;
        const char *spec = cached[m / 2];
        mi_lm lm;
        tiny_lm(&lm, spec);
        mi_rng r;
        mi_rng_seed(&r, 17 + m);
        mi_tensor *seq = mi_zeros(MI_I64, MI_SHAPE(B, T));
        for (int64_t i = 0; i < seq->numel; i++)
            ((int64_t *)seq->data)[i] = (int64_t)mi_rng_below(&r, V);
        mi_tensor *full = mi_lm_forward(&lm, seq);
        ck_assert_msg(full != NULL, "%s: %s", spec, mi_error());
        mi_lm_state *s = mi_lm_state_new(&lm, B);
        ck_assert_msg(s != NULL, "%s: %s", spec, mi_error());
        if (reserve) ck_assert_msg(mi_lm_state_reserve(&lm, s, 45) == 0, "%s", mi_error());
        mi_scope *step = mi_scope_new("step");
        for (int64_t i = 0; i < T; i++) {
            mi_scope_enter(step);
            double g = gap(step_column(&lm, s, seq, i), full, i);
            mi_scope_leave();
            mi_scope_reset(step);
            ck_assert_msg(g <= 1e-10, "%s%s: position %lld: step and forward differ by %g",
                          spec, reserve ? " (45 reserved)" : "", (long long)i, g);
        }
        mi_scope_free(step);
        mi_lm_state_free(s);
    }
}
END_TEST

START_TEST(generation_resumed_after_a_prompt_matches_the_forward)
{
    enum { P = 40, N = 40, T = P + N };
    for (size_t m = 0; m < sizeof cached / sizeof cached[0]; m++) {
        mi_lm lm;
        tiny_lm(&lm, cached[m]);
        mi_rng r;
        mi_rng_seed(&r, 29 + m);
        mi_tensor *seq = mi_zeros(MI_I64, MI_SHAPE(B, T));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < P; i++)
                ((int64_t *)seq->data)[b * T + i] = (int64_t)mi_rng_below(&r, V);
        /* the prompt, then each greedy token fed back */
        mi_lm_state *s = mi_lm_state_new(&lm, B);
        ck_assert_msg(s != NULL, "%s: %s", cached[m], mi_error());
        mi_tensor **logits = mi_scope_alloc(test_scope, sizeof *logits * T);
        for (int64_t i = 0; i < T; i++) {
            logits[i] = step_column(&lm, s, seq, i);
            for (int64_t b = 0; b < B && i + 1 >= P && i + 1 < T; b++) {
                int64_t best = 0;
                for (int64_t v = 1; v < V; v++)
                    if (mi_get(logits[i], b * V + v) > mi_get(logits[i], b * V + best)) best = v;
                ((int64_t *)seq->data)[b * T + i + 1] = best;
            }
        }
        mi_lm_state_free(s);
        mi_tensor *full = mi_lm_forward(&lm, seq);
        ck_assert_msg(full != NULL, "%s: %s", cached[m], mi_error());
        for (int64_t i = 0; i < T; i++) {
            double g = gap(logits[i], full, i);
            ck_assert_msg(g <= 1e-10, "%s: position %lld (prompt %d): step and forward differ "
                          "by %g", cached[m], (long long)i, P, g);
        }
        /* the forward's argmax at every generated position is the token written */
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = P; i < T; i++) {
                int64_t best = 0;
                for (int64_t v = 1; v < V; v++)
                    if (mi_get(full, (b * T + i - 1) * V + v) >
                        mi_get(full, (b * T + i - 1) * V + best))
                        best = v;
                ck_assert_int_eq(best, tok(seq, b, i));
            }
        /* mi_generate (greedy) writes the same continuation */
        int64_t gen[B * T];
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < T; i++) gen[b * T + i] = i < P ? tok(seq, b, i) : -1;
        mi_sampler greedy = {.temperature = 0};
        ck_assert_msg(mi_generate(&lm, gen, B, P, N, &greedy, NULL, NULL) == 0, "%s: %s",
                      cached[m], mi_error());
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = P; i < T; i++) ck_assert_int_eq(gen[b * T + i], tok(seq, b, i));
    }
}
END_TEST

/* ---------------------------------------------------------------- the cache's size */

static size_t bytes_after(const mi_lm *lm, mi_lm_state *s, int n)
{
    mi_scope *step = mi_scope_new("step");
    for (int i = 0; i < n; i++) {
        mi_scope_enter(step);
        ck_assert_msg(mi_lm_step(lm, s, mi_zeros(MI_I64, MI_SHAPE(1))) != NULL, "%s", mi_error());
        mi_scope_leave();
        mi_scope_reset(step);
    }
    mi_scope_free(step);
    return mi_lm_state_bytes(s);
}

START_TEST(the_cache_holds_what_was_read_and_the_ring_keeps_its_size)
{
    mi_lm lm;
    tiny_lm(&lm, "attention");
    mi_lm_state *s = mi_lm_state_new(&lm, 1);
    size_t early = bytes_after(&lm, s, 10), late = bytes_after(&lm, s, 300);
    /* keys and values of 300 more tokens, 2 layers, f64 */
    ck_assert_msg(late - early >= 300 * 2 * 2 * DM * sizeof(double),
                  "attention: %zu bytes after 10 tokens, %zu after 310", early, late);
    mi_lm_state_free(s);

    tiny_lm(&lm, "swa:48");
    s = mi_lm_state_new(&lm, 1);
    early = bytes_after(&lm, s, 48), late = bytes_after(&lm, s, 300);
    ck_assert_msg(late == early, "swa:48: %zu bytes after 48 tokens, %zu after 348", early, late);
    mi_lm_state_free(s);
}
END_TEST

START_TEST(bad_states_are_reported)
{
    mi_lm lm;
    tiny_lm(&lm, "attention");
    const mi_attention_layer *a = lm.blocks[0].mixer.self;
    mi_attention_state st;
    ck_assert_int_eq(mi_attention_state_init(a, &st, 0, test_scope), -1);
    ck_assert_error_has("batch < 1");
    mi_error_clear();
    ck_assert_int_eq(mi_attention_state_init(a, &st, 2, test_scope), 0);
    ck_assert_ptr_null(mi_attention_layer_step(a, &st, mi_zeros(MI_F64, MI_SHAPE(3, 1, DM))));
    ck_assert_error_has("the state is for 2 sequences");
    mi_error_clear();
    ck_assert_ptr_null(mi_attention_layer_step(a, &st, mi_zeros(MI_F32, MI_SHAPE(2, 1, DM))));
    ck_assert_error_has("dtype");
    mi_error_clear();
    mi_attention_state blank = {0};
    ck_assert_ptr_null(mi_attention_layer_step(a, &blank, mi_zeros(MI_F64, MI_SHAPE(2, 1, DM))));
    ck_assert_error_has("mi_attention_state_init");
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_attention_layer_step(a, &st, mi_zeros(MI_F64, MI_SHAPE(2, 1, DM))));
    ck_assert_int_eq(st.t, 1);
    ck_assert_int_eq(mi_attention_state_reserve(a, &blank, 4), -1);
    ck_assert_error_has("mi_attention_state_init");
    mi_error_clear();
    mi_lm_state *s = mi_lm_state_new(&lm, 1);
    ck_assert_int_eq(mi_lm_state_reserve(&lm, s, -1), -1);
    ck_assert_error_has("tokens < 0");
    mi_error_clear();
    mi_lm_state_free(s);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("kv_cache");
    TCase *tc = tcase_slow("kv_cache");
    tcase_add_test(tc, attention_at_a_first_position_matches_a_loop);
    tcase_add_test(tc, bad_first_positions_are_reported);
    tcase_add_test(tc, steps_past_the_first_allocation_match_the_forward);
    tcase_add_test(tc, generation_resumed_after_a_prompt_matches_the_forward);
    tcase_add_test(tc, the_cache_holds_what_was_read_and_the_ring_keeps_its_size);
    tcase_add_test(tc, bad_states_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
