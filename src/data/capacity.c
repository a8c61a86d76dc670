/* Memory capacity: store N random key→value pairs, then query all of them
 * (layout in tasks.h):
 *
 *   t        0  1  …  2N−2 2N−1  2N  2N+1 2N+2 …  4N−1 | 4N
 *   sequence k1 v1 …  kN   vN    Q   kπ1  vπ1  …  kπN  | vπN
 *   target   ·  ·  …  ·    ·     ·   vπ1  ·    …  vπN
 *
 * The value is the target on the queried key's own position (as in MQAR),
 * and then is shown as the next input, so each query is answered once. */
#include <stdlib.h>

#include "tasks_internal.h"

enum { QUERY = 1, KEY_LO = 2 };

mi_capacity_config mi_capacity_config_default(void)
{
    return (mi_capacity_config){.vocab = 8192, .pairs = 16};
}

int mi_capacity_check(const mi_capacity_config *c)
{
    if (!c) return mi_error_set("capacity: NULL config"), -1;
    long long V = c->vocab, N = c->pairs;
    if (N < 1) return mi_error_set("capacity: pairs N must be >= 1, got %lld", N), -1;
    if (V > ((int64_t)1 << 31)) return mi_error_set("capacity: vocab V = %lld is too large", V), -1;
    if (V < 6 || N > V / 2 - KEY_LO)
        return mi_error_set("capacity: too many pairs: keys come from [2, V/2), so N <= V/2 - 2; "
                            "got N = %lld, V = %lld", N, V), -1;
    return 0;
}

int64_t mi_capacity_seq_len(const mi_capacity_config *c) { return 4 * c->pairs; }

typedef struct capacity_work {
    int64_t *pool, *keys, *values, *perm;
} capacity_work;

static void work_free(capacity_work *k) { free(k->pool), free(k->keys), free(k->values), free(k->perm); }

static int work_new(const mi_capacity_config *c, capacity_work *k)
{
    size_t n = (size_t)c->pairs;
    k->pool = malloc(sizeof(int64_t) * (size_t)(c->vocab / 2 - KEY_LO));
    k->keys = malloc(sizeof(int64_t) * n);
    k->values = malloc(sizeof(int64_t) * n);
    k->perm = malloc(sizeof(int64_t) * n);
    if (!k->pool || !k->keys || !k->values || !k->perm) {
        work_free(k);
        return mi_error_set("capacity: out of memory for vocab %lld", (long long)c->vocab), -1;
    }
    return 0;
}

static void example(const mi_capacity_config *c, capacity_work *k, uint64_t seed, mi_split split,
                    int64_t index, int64_t *inputs, int64_t *targets)
{
    int64_t V = c->vocab, N = c->pairs, half = V / 2;
    mi_rng r;
    mi_task_rng(&r, seed, split, index);
    tasks_choose_distinct(&r, KEY_LO, half - KEY_LO, N, k->pool, k->keys);
    for (int64_t j = 0; j < N; j++) k->values[j] = half + (int64_t)mi_rng_below(&r, (uint64_t)(V - half));
    for (int64_t j = 0; j < N; j++) k->perm[j] = j;
    for (int64_t j = N - 1; j > 0; j--) {
        int64_t m = (int64_t)mi_rng_below(&r, (uint64_t)(j + 1)), tmp = k->perm[j];
        k->perm[j] = k->perm[m];
        k->perm[m] = tmp;
    }
    for (int64_t t = 0; t < 4 * N; t++) targets[t] = MI_IGNORE_INDEX;
    for (int64_t j = 0; j < N; j++) {
        inputs[2 * j] = k->keys[j];
        inputs[2 * j + 1] = k->values[j];
    }
    inputs[2 * N] = QUERY;
    for (int64_t m = 0; m < N; m++) {
        int64_t j = k->perm[m], t = 2 * N + 1 + 2 * m;
        inputs[t] = k->keys[j];
        targets[t] = k->values[j];
        if (m + 1 < N) inputs[t + 1] = k->values[j]; /* the last value is only a target */
    }
}

int mi_capacity_example(const mi_capacity_config *c, uint64_t seed, mi_split split,
                        int64_t index, int64_t *inputs, int64_t *targets)
{
    if (mi_capacity_check(c) != 0) return -1;
    if (!inputs || !targets) return mi_error_set("capacity: NULL output array"), -1;
    if (index < 0) return mi_error_set("capacity: example index %lld < 0", (long long)index), -1;
    capacity_work k;
    if (work_new(c, &k) != 0) return -1;
    example(c, &k, seed, split, index, inputs, targets);
    work_free(&k);
    return 0;
}

int mi_capacity_batch(const mi_capacity_config *c, uint64_t seed, mi_split split,
                      int64_t first, int64_t batch, mi_tensor **inputs, mi_tensor **targets)
{
    if (mi_capacity_check(c) != 0) return -1;
    int64_t L = mi_capacity_seq_len(c);
    if (tasks_batch_new("capacity", first, batch, L, inputs, targets) != 0) return -1;
    capacity_work k;
    if (work_new(c, &k) != 0) return *inputs = *targets = NULL, -1;
    for (int64_t b = 0; b < batch; b++)
        example(c, &k, seed, split, first + b, (int64_t *)(*inputs)->data + b * L,
                (int64_t *)(*targets)->data + b * L);
    work_free(&k);
    return 0;
}
