/* The library's sampler (mi_sample_token, train/sample.c): greedy, temperature and top-k
 * draw from softmax(logits / T) restricted to the k largest. */
#include "harness.h"

/* Frequency of each token over n draws from one row of logits. */
static void frequencies(const double *logits, int64_t V, double temperature, int64_t top_k,
                        int n, double *freq)
{
    mi_tensor *l = mi_from_buffer(MI_F64, MI_SHAPE(1, V), logits);
    mi_sampler s = {.temperature = temperature, .top_k = top_k};
    mi_rng_seed(&s.rng, 9);
    for (int64_t v = 0; v < V; v++) freq[v] = 0;
    for (int i = 0; i < n; i++) freq[mi_sample_token(l, 0, &s)] += 1.0 / n;
}

START_TEST(temperature_one_draws_the_softmax)
{
    /* the maximum first, so every later token is scaled against it */
    const double logits[3] = {5, 0, 0};
    double f[3], p0 = exp(5.0) / (exp(5.0) + 2);
    frequencies(logits, 3, 1.0, 0, 20000, f);
    ck_assert_close(f[0], p0, 0.005);
    ck_assert_close(f[1], (1 - p0) / 2, 0.005);
}
END_TEST

START_TEST(low_temperature_and_top_k)
{
    const double logits[4] = {0, 2, 1.5, -1};
    double f[4];
    frequencies(logits, 4, 0, 0, 100, f);      /* greedy */
    ck_assert(f[1] > 0.999 && f[0] == 0 && f[2] == 0 && f[3] == 0);
    frequencies(logits, 4, 0.01, 0, 2000, f);  /* nearly greedy */
    ck_assert(f[1] > 0.99);
    frequencies(logits, 4, 1.0, 2, 20000, f);  /* only tokens 1 and 2 */
    ck_assert(f[0] == 0 && f[3] == 0);
    ck_assert_close(f[1], 1 / (1 + exp(-0.5)), 0.01);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("sampling");
    TCase *tc = tcase_slow("sampler");
    tcase_add_test(tc, temperature_one_draws_the_softmax);
    tcase_add_test(tc, low_temperature_and_top_k);
    suite_add_tcase(s, tc);
    return s;
}
