/* What the task generators share: the per-example streams, recall accuracy,
 * batch tensors and distinct draws. */
#include <math.h>

#include "tasks_internal.h"

/* splitmix64's output function (Steele, Lea & Flood 2014). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* h = mix(mix(mix(seed + γ) ^ (split + 1)·c) ^ index): a different
 * xoshiro256** seed for every (seed, split, index). */
void mi_task_rng(mi_rng *r, uint64_t seed, mi_split split, int64_t index)
{
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ ((uint64_t)split + 1) * 0xd1b54a32d192ed03ULL);
    h = mix64(h ^ (uint64_t)index);
    mi_rng_seed(r, h);
}

static int64_t int_at(const mi_tensor *t, int64_t i)
{
    return t->dtype == MI_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* argmax over the last axis of row `row` of logits [B, L, V]; first maximum wins. */
static int64_t argmax_row(const mi_tensor *logits, int64_t row)
{
    int64_t V = logits->shape[2], best = 0;
    if (logits->dtype == MI_F32) {
        const float *x = (const float *)logits->data + row * V;
        for (int64_t v = 1; v < V; v++)
            if (x[v] > x[best]) best = v;
    } else {
        const double *x = (const double *)logits->data + row * V;
        for (int64_t v = 1; v < V; v++)
            if (x[v] > x[best]) best = v;
    }
    return best;
}

double mi_task_accuracy(const mi_tensor *pred, const mi_tensor *targets)
{
    char a[64], b[64];
    if (!pred || !targets) return mi_error_set("accuracy: NULL %s", pred ? "targets" : "pred"), -1;
    if (targets->rank != 2 || (targets->dtype != MI_I64 && targets->dtype != MI_I32))
        return mi_error_set("accuracy: targets must be i32/i64 [B, L], got %s %s",
                            mi_dtype_name(targets->dtype),
                            mi_shape_str(a, sizeof a, targets->rank, targets->shape)), -1;
    bool logits = pred->rank == 3 && mi_dtype_is_float(pred->dtype);
    bool ids = pred->rank == 2 && (pred->dtype == MI_I64 || pred->dtype == MI_I32);
    if ((!logits && !ids) || pred->shape[0] != targets->shape[0] ||
        pred->shape[1] != targets->shape[1] || (logits && pred->shape[2] < 1))
        return mi_error_set("accuracy: pred must be logits [B, L, V] (f32/f64) or predictions "
                            "[B, L] (i32/i64) matching targets %s, got %s %s",
                            mi_shape_str(a, sizeof a, targets->rank, targets->shape),
                            mi_dtype_name(pred->dtype),
                            mi_shape_str(b, sizeof b, pred->rank, pred->shape)), -1;
    int64_t B = targets->shape[0], L = targets->shape[1], counted = 0;
    double sum = 0;
    for (int64_t i = 0; i < B; i++) {
        int64_t labelled = 0, right = 0;
        for (int64_t t = 0; t < L; t++) {
            int64_t y = int_at(targets, i * L + t);
            if (y == MI_IGNORE_INDEX) continue;
            int64_t p = logits ? argmax_row(pred, i * L + t) : int_at(pred, i * L + t);
            labelled++;
            right += p == y;
        }
        if (labelled) {
            sum += (double)right / (double)labelled;
            counted++;
        }
    }
    if (!counted) return mi_error_set("accuracy: no labelled positions in targets"), -1;
    return sum / (double)counted;
}

int tasks_batch_new(const char *who, int64_t first, int64_t batch, int64_t len,
                    mi_tensor **inputs, mi_tensor **targets)
{
    if (!inputs || !targets) return mi_error_set("%s: NULL output pointer", who), -1;
    *inputs = *targets = NULL;
    if (batch < 1) return mi_error_set("%s: batch must be >= 1, got %lld", who, (long long)batch), -1;
    if (first < 0 || first > INT64_MAX - batch)
        return mi_error_set("%s: first example index %lld out of range", who, (long long)first), -1;
    mi_tensor *x = mi_tensor_new(MI_I64, MI_SHAPE(batch, len));
    mi_tensor *y = x ? mi_tensor_new(MI_I64, MI_SHAPE(batch, len)) : NULL;
    if (!y) return mi_error_prefix(who), -1;
    *inputs = x;
    *targets = y;
    return 0;
}

void tasks_choose_distinct(mi_rng *r, int64_t lo, int64_t count, int64_t n, int64_t *pool,
                           int64_t *out)
{
    for (int64_t i = 0; i < count; i++) pool[i] = lo + i;
    for (int64_t j = 0; j < n; j++) {
        int64_t k = j + (int64_t)mi_rng_below(r, (uint64_t)(count - j));
        int64_t tmp = pool[j];
        pool[j] = pool[k];
        pool[k] = tmp;
        out[j] = pool[j];
    }
}
