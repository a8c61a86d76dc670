/* MQAR, multi-query associative recall, as Zoology generates it
 * (Arora et al. 2023, zoology/data/associative_recall.py, multiquery_ar).
 * The layout and the order of draws are in tasks.h; the golden
 * checksum in tests/test_tasks.c pins this file's exact output.
 *
 * Gap index. The task's usual statement writes p_i ∝ a·i^(a−1) for i = 1..space and "key j at
 * index 2·g_j"; Zoology draws g from np.arange(space) = 0..space−1 with those
 * p, so g = i − 1. (With g = i the last key would land at the region's last
 * index, whose label would fall past the sequence.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_internal.h"

mi_mqar_config mi_mqar_config_default(void)
{
    return (mi_mqar_config){.vocab = 8192, .seq_len = 64, .pairs = 4, .power_a = 0.01,
                            .passes = 1, .random_non_queries = true};
}

int mi_mqar_check(const mi_mqar_config *c)
{
    if (!c) return mi_error_set("mqar: NULL config"), -1;
    long long V = c->vocab, L = c->seq_len, N = c->pairs, P = c->passes;
    if (L < 2 || L % 2) return mi_error_set("mqar: seq_len L must be even and >= 2, got %lld", L), -1;
    if (N < 1) return mi_error_set("mqar: pairs N must be >= 1, got %lld", N), -1;
    if (P < 1) return mi_error_set("mqar: passes P must be >= 1, got %lld", P), -1;
    if (V <= L)
        return mi_error_set("mqar: needs vocab V > seq_len L, got V = %lld, L = %lld", V, L), -1;
    if (V > ((int64_t)1 << 31)) return mi_error_set("mqar: vocab V = %lld is too large", V), -1;
    if (N > L || P > L || 2 * N * P + 2 * N > L)
        return mi_error_set("mqar: too many pairs: needs 2NP + 2N <= L, got N = %lld, P = %lld, "
                            "L = %lld (2NP + 2N = %lld)", N, P, L,
                            N > L || P > L ? -1LL : 2 * N * P + 2 * N), -1;
    if (!(c->power_a > 0) || !isfinite(c->power_a))
        return mi_error_set("mqar: power_a must be a finite a > 0, got %g", c->power_a), -1;
    return 0;
}

/* Scratch for one example, reused across a batch. */
typedef struct mqar_work {
    int64_t *pool, *keys, *values, *gaps, *seq, *labels;
    double *w;          /* gap weights a·i^(a−1), i = 1..space */
    unsigned char *taken;
} mqar_work;

static void work_free(mqar_work *k)
{
    free(k->pool), free(k->keys), free(k->values), free(k->gaps), free(k->seq), free(k->labels);
    free(k->w), free(k->taken);
}

static int work_new(const mi_mqar_config *c, mqar_work *k)
{
    int64_t V = c->vocab, N = c->pairs, L = c->seq_len, space = (L - 2 * N * c->passes) / 2;
    int64_t pool = V - V / 2; /* holds either range: [1, V/2) or [V/2, V) */
    *k = (mqar_work){0};
    k->pool = malloc(sizeof(int64_t) * (size_t)pool);
    k->keys = malloc(sizeof(int64_t) * (size_t)N);
    k->values = malloc(sizeof(int64_t) * (size_t)N);
    k->gaps = malloc(sizeof(int64_t) * (size_t)N);
    k->seq = malloc(sizeof(int64_t) * (size_t)(L + 1));
    k->labels = malloc(sizeof(int64_t) * (size_t)(L + 1));
    k->w = malloc(sizeof(double) * (size_t)space);
    k->taken = malloc((size_t)space);
    if (!k->pool || !k->keys || !k->values || !k->gaps || !k->seq || !k->labels || !k->w ||
        !k->taken) {
        work_free(k);
        return mi_error_set("mqar: out of memory for vocab %lld", (long long)V), -1;
    }
    for (int64_t i = 1; i <= space; i++)
        k->w[i - 1] = c->power_a * pow((double)i, c->power_a - 1);
    return 0;
}

/* N distinct gaps, one at a time, each with probability w_g / Σ_{not taken} w. */
static void draw_gaps(mi_rng *r, const double *w, unsigned char *taken, int64_t space, int64_t n,
                      int64_t *gaps)
{
    memset(taken, 0, (size_t)space);
    for (int64_t j = 0; j < n; j++) {
        double total = 0;
        for (int64_t g = 0; g < space; g++)
            if (!taken[g]) total += w[g];
        double u = mi_rng_uniform(r) * total, acc = 0;
        int64_t pick = -1;
        for (int64_t g = 0; g < space; g++) {
            if (taken[g]) continue;
            pick = g; /* the last one left, should rounding carry u past the end */
            acc += w[g];
            if (u < acc) break;
        }
        taken[pick] = 1;
        gaps[j] = pick;
    }
}

static void example(const mi_mqar_config *c, mqar_work *k, uint64_t seed, mi_split split,
                    int64_t index, int64_t *inputs, int64_t *targets)
{
    int64_t V = c->vocab, L = c->seq_len, N = c->pairs, P = c->passes;
    int64_t C = 2 * N * P, space = (L - C) / 2;
    mi_rng r;
    mi_task_rng(&r, seed, split, index);
    tasks_choose_distinct(&r, 1, V / 2 - 1, N, k->pool, k->keys);
    tasks_choose_distinct(&r, V / 2, V - V / 2, N, k->pool, k->values);
    draw_gaps(&r, k->w, k->taken, space, N, k->gaps);

    for (int64_t i = 0; i <= L; i++) k->seq[i] = 0, k->labels[i] = MI_IGNORE_INDEX;
    for (int64_t p = 0; p < P; p++)
        for (int64_t j = 0; j < N; j++) {
            k->seq[p * 2 * N + 2 * j] = k->keys[j];
            k->seq[p * 2 * N + 2 * j + 1] = k->values[j];
        }
    for (int64_t j = 0; j < N; j++) {
        k->seq[C + 2 * k->gaps[j]] = k->keys[j];
        k->labels[C + 2 * k->gaps[j] + 1] = k->values[j];
    }
    for (int64_t t = 0; t < L; t++) {
        inputs[t] = k->seq[t];
        targets[t] = k->labels[t + 1];
    }
    if (c->random_non_queries)
        for (int64_t t = 0; t < L; t++)
            if (inputs[t] == 0) inputs[t] = (int64_t)mi_rng_below(&r, (uint64_t)V);
}

int mi_mqar_example(const mi_mqar_config *c, uint64_t seed, mi_split split, int64_t index,
                    int64_t *inputs, int64_t *targets)
{
    if (mi_mqar_check(c) != 0) return -1;
    if (!inputs || !targets) return mi_error_set("mqar: NULL output array"), -1;
    if (index < 0) return mi_error_set("mqar: example index %lld < 0", (long long)index), -1;
    mqar_work k;
    if (work_new(c, &k) != 0) return -1;
    example(c, &k, seed, split, index, inputs, targets);
    work_free(&k);
    return 0;
}

int mi_mqar_batch(const mi_mqar_config *c, uint64_t seed, mi_split split, int64_t first,
                  int64_t batch, mi_tensor **inputs, mi_tensor **targets)
{
    if (mi_mqar_check(c) != 0) return -1;
    if (tasks_batch_new("mqar", first, batch, c->seq_len, inputs, targets) != 0) return -1;
    mqar_work k;
    if (work_new(c, &k) != 0) return *inputs = *targets = NULL, -1;
    int64_t L = c->seq_len;
    for (int64_t b = 0; b < batch; b++)
        example(c, &k, seed, split, first + b, (int64_t *)(*inputs)->data + b * L,
                (int64_t *)(*targets)->data + b * L);
    work_free(&k);
    return 0;
}
