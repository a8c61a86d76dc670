/* Synthetic tasks: MQAR's layout, labels, gap distribution and a
 * golden checksum; needle in a haystack; memory capacity; recall accuracy.
 * The byte-level texts are in test_text.c. */
#include <stdio.h>

#include "harness.h"



static int64_t at(const mi_tensor *t, int64_t i) { return ((const int64_t *)t->data)[i]; }

/* FNV-1a (64 bit) over int64 values as little-endian bytes. */
static uint64_t fnv1a(uint64_t h, const int64_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            h ^= ((uint64_t)v[i] >> (8 * b)) & 0xff;
            h *= 0x100000001b3ULL;
        }
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ULL

/* ---------------------------------------------------------------- MQAR */

/* Checks one example without random_non_queries: the kv block tiled P times
 * (keys distinct in [1, V/2), values distinct in [V/2, V)), the query region
 * zero except each key once at an even offset, and a target exactly where a
 * key is read again, holding that key's value. Writes the gaps drawn. */
static void check_mqar_example(const mi_mqar_config *c, const int64_t *x, const int64_t *y,
                               int64_t *gaps)
{
    int64_t V = c->vocab, L = c->seq_len, N = c->pairs, P = c->passes, C = 2 * N * P;
    for (int64_t j = 0; j < N; j++) {
        int64_t k = x[2 * j], v = x[2 * j + 1];
        require_msg(k >= 1 && k < V / 2, "key %lld out of [1, %lld)", (long long)k, (long long)V / 2);
        require_msg(v >= V / 2 && v < V, "value %lld out of [%lld, %lld)", (long long)v,
                      (long long)V / 2, (long long)V);
        for (int64_t i = 0; i < j; i++) {
            require_msg(x[2 * i] != k, "key %lld repeated", (long long)k);
            require_msg(x[2 * i + 1] != v, "value %lld repeated", (long long)v);
        }
        for (int64_t p = 1; p < P; p++) {
            require(x[p * 2 * N + 2 * j] == k);
            require(x[p * 2 * N + 2 * j + 1] == v);
        }
    }
    for (int64_t t = 0; t < C; t++) require(y[t] == MI_IGNORE_INDEX);
    int64_t seen = 0;
    for (int64_t t = C; t < L; t++) {
        if (x[t] == 0) {
            require_msg(y[t] == MI_IGNORE_INDEX, "label at filler position %lld", (long long)t);
            continue;
        }
        require_msg((t - C) % 2 == 0, "query key at odd offset %lld", (long long)(t - C));
        int64_t j = 0;
        while (j < N && x[2 * j] != x[t]) j++;
        require_msg(j < N, "token %lld in the query region is not a key", (long long)x[t]);
        require_msg(y[t] == x[2 * j + 1], "label %lld at %lld, expected value %lld",
                      (long long)y[t], (long long)t, (long long)x[2 * j + 1]);
        for (int64_t s = C; s < t; s++) require_msg(x[s] != x[t], "key queried twice");
        gaps[j] = (t - C) / 2;
        require(gaps[j] < (L - C) / 2);
        seen++;
    }
    ck_assert_int_eq(seen, N);
}

START_TEST(mqar_layout_and_labels)
{
    mi_mqar_config cs[4] = {mi_mqar_config_default(), mi_mqar_config_default(),
                            mi_mqar_config_default(), mi_mqar_config_default()};
    cs[1].seq_len = 256, cs[1].pairs = 16;
    cs[2].vocab = 300, cs[2].seq_len = 128, cs[2].pairs = 8, cs[2].passes = 3;
    cs[3].vocab = 17, cs[3].seq_len = 16, cs[3].pairs = 4; /* 2NP + 2N = L: every gap used */
    for (int i = 0; i < 4; i++) {
        mi_mqar_config c = cs[i];
        c.random_non_queries = false;
        mi_tensor *x, *y;
        ck_assert_int_eq(mi_mqar_batch(&c, 11, MI_SPLIT_TRAIN, 0, 32, &x, &y), 0);
        ck_assert_int_eq(x->dtype, MI_I64);
        require(x->rank == 2 && x->shape[0] == 32 && x->shape[1] == c.seq_len);
        require(y->rank == 2 && y->shape[0] == 32 && y->shape[1] == c.seq_len);
        int64_t gaps[64];
        for (int b = 0; b < 32; b++)
            check_mqar_example(&c, (int64_t *)x->data + b * c.seq_len,
                               (int64_t *)y->data + b * c.seq_len, gaps);
    }
}
END_TEST

/* random_non_queries only replaces the zeros: the same example without it
 * has the same keys, values, query positions and labels. */
START_TEST(mqar_random_non_queries_replaces_only_zeros)
{
    mi_mqar_config on = mi_mqar_config_default(), off = on;
    off.random_non_queries = false;
    require(on.random_non_queries); /* Zoology's default */
    mi_tensor *x1, *y1, *x0, *y0;
    ck_assert_int_eq(mi_mqar_batch(&on, 5, MI_SPLIT_TRAIN, 0, 16, &x1, &y1), 0);
    ck_assert_int_eq(mi_mqar_batch(&off, 5, MI_SPLIT_TRAIN, 0, 16, &x0, &y0), 0);
    int64_t replaced = 0, zeros = 0;
    for (int64_t i = 0; i < x0->numel; i++) {
        require(at(y1, i) == at(y0, i));
        if (at(x0, i) != 0) {
            require(at(x1, i) == at(x0, i));
        } else {
            zeros++;
            require(at(x1, i) >= 0 && at(x1, i) < on.vocab);
            replaced += at(x1, i) != 0;
        }
    }
    ck_assert_int_gt(zeros, 16 * 40);
    ck_assert_int_gt(replaced, zeros - 3); /* 0 comes back with probability 1/V */
}
END_TEST

/* Gaps follow p_i ∝ a·i^(a−1), g = i − 1. With N = 1 a gap's distribution
 * is p itself; with N = 4 (drawn without replacement) small gaps still
 * dominate large ones. */
START_TEST(mqar_gaps_follow_the_power_law)
{
    mi_mqar_config c = mi_mqar_config_default();
    c.random_non_queries = false;
    c.pairs = 1;
    enum { S = 20000 };
    int64_t space = (c.seq_len - 2) / 2; /* 31 */
    double z = 0;
    for (int64_t i = 1; i <= space; i++) z += c.power_a * pow((double)i, c.power_a - 1);
    int64_t hist[64] = {0}, x[64], y[64], g[1];
    for (int64_t n = 0; n < S; n++) {
        ck_assert_int_eq(mi_mqar_example(&c, 3, MI_SPLIT_TRAIN, n, x, y), 0);
        check_mqar_example(&c, x, y, g);
        hist[g[0]]++;
    }
    for (int64_t i = 0; i < space; i++) {
        double p = c.power_a * pow((double)(i + 1), c.power_a - 1) / z;
        double sd = sqrt(S * p * (1 - p));
        require_msg(fabs((double)hist[i] - S * p) < 5 * sd + 1, "gap %lld: %lld draws, expected %.1f",
                      (long long)i, (long long)hist[i], S * p);
    }
    /* p_1 / p_space = space^0.99: the first gap ~30 times the last */
    ck_assert_int_gt(hist[0], 15 * hist[space - 1]);

    c.pairs = 4;
    space = (c.seq_len - 8) / 2; /* 28 */
    int64_t quarter[4] = {0}, g4[4];
    for (int64_t n = 0; n < S / 4; n++) {
        ck_assert_int_eq(mi_mqar_example(&c, 4, MI_SPLIT_TRAIN, n, x, y), 0);
        check_mqar_example(&c, x, y, g4);
        for (int j = 0; j < 4; j++) quarter[g4[j] * 4 / space]++;
    }
    require_msg(quarter[0] > quarter[1] && quarter[1] > quarter[2] && quarter[2] > quarter[3],
                  "quarters %lld %lld %lld %lld", (long long)quarter[0], (long long)quarter[1],
                  (long long)quarter[2], (long long)quarter[3]);
    ck_assert_int_gt(quarter[0], 2 * quarter[3]);

    /* a = 1 is uniform: the quarters are even. */
    c.power_a = 1;
    for (int q = 0; q < 4; q++) quarter[q] = 0;
    for (int64_t n = 0; n < S / 4; n++) {
        ck_assert_int_eq(mi_mqar_example(&c, 4, MI_SPLIT_TRAIN, n, x, y), 0);
        check_mqar_example(&c, x, y, g4);
        for (int j = 0; j < 4; j++) quarter[g4[j] * 4 / space]++;
    }
    for (int q = 0; q < 4; q++) ck_assert_close((double)quarter[q] / S, 0.25, 0.02);
}
END_TEST

START_TEST(mqar_errors)
{
    mi_tensor *x, *y;
    mi_mqar_config c = mi_mqar_config_default();
    c.vocab = 64; /* V = L */
    ck_assert_int_eq(mi_mqar_batch(&c, 0, MI_SPLIT_TRAIN, 0, 2, &x, &y), -1);
    ck_assert_error_has("V > seq_len L");
    ck_assert_error_has("V = 64, L = 64");
    mi_error_clear();
    c = mi_mqar_config_default();
    c.pairs = 17; /* 2NP + 2N = 68 > 64 */
    ck_assert_int_eq(mi_mqar_check(&c), -1);
    ck_assert_error_has("too many pairs");
    ck_assert_error_has("2NP + 2N = 68");
    mi_error_clear();
    c = mi_mqar_config_default();
    c.pairs = 8, c.passes = 3; /* 48 + 16 = 64: fits exactly */
    ck_assert_int_eq(mi_mqar_check(&c), 0);
    c.passes = 4;
    ck_assert_int_eq(mi_mqar_check(&c), -1);
    ck_assert_error_has("2NP + 2N <= L");
    mi_error_clear();
    c = mi_mqar_config_default();
    c.seq_len = 63;
    ck_assert_int_eq(mi_mqar_check(&c), -1);
    ck_assert_error_has("even");
    mi_error_clear();
    c = mi_mqar_config_default();
    c.power_a = 0;
    ck_assert_int_eq(mi_mqar_check(&c), -1);
    ck_assert_error_has("power_a");
    mi_error_clear();
    c = mi_mqar_config_default();
    ck_assert_int_eq(mi_mqar_batch(&c, 0, MI_SPLIT_TRAIN, 0, 0, &x, &y), -1);
    ck_assert_error_has("batch must be >= 1");
    mi_error_clear();
    ck_assert_int_eq(mi_mqar_batch(&c, 0, MI_SPLIT_TRAIN, -1, 2, &x, &y), -1);
    ck_assert_error_has("mqar:");
    mi_error_clear();
    ck_assert_int_eq(mi_mqar_batch(NULL, 0, MI_SPLIT_TRAIN, 0, 2, &x, &y), -1);
    ck_assert_error_has("NULL config");
    mi_error_clear();
}
END_TEST

/* Example i is the same whatever batch holds it; the split and the seed
 * change the stream. */
START_TEST(mqar_streams_are_per_example)
{
    mi_mqar_config c = mi_mqar_config_default();
    mi_tensor *x8, *y8, *x2, *y2, *xv, *yv, *xs, *ys;
    ck_assert_int_eq(mi_mqar_batch(&c, 9, MI_SPLIT_TRAIN, 0, 8, &x8, &y8), 0);
    ck_assert_int_eq(mi_mqar_batch(&c, 9, MI_SPLIT_TRAIN, 3, 2, &x2, &y2), 0);
    ck_assert_mem_eq(x2->data, (int64_t *)x8->data + 3 * 64, 2 * 64 * sizeof(int64_t));
    ck_assert_mem_eq(y2->data, (int64_t *)y8->data + 3 * 64, 2 * 64 * sizeof(int64_t));
    int64_t x[64], y[64];
    ck_assert_int_eq(mi_mqar_example(&c, 9, MI_SPLIT_TRAIN, 7, x, y), 0);
    ck_assert_mem_eq(x, (int64_t *)x8->data + 7 * 64, sizeof x);
    ck_assert_mem_eq(y, (int64_t *)y8->data + 7 * 64, sizeof y);
    ck_assert_int_eq(mi_mqar_batch(&c, 9, MI_SPLIT_VALID, 0, 8, &xv, &yv), 0);
    ck_assert_int_eq(mi_mqar_batch(&c, 10, MI_SPLIT_TRAIN, 0, 8, &xs, &ys), 0);
    for (int b = 0; b < 8; b++) {
        require(memcmp((int64_t *)x8->data + b * 64, (int64_t *)xv->data + b * 64, 64 * 8) != 0);
        require(memcmp((int64_t *)x8->data + b * 64, (int64_t *)xs->data + b * 64, 64 * 8) != 0);
    }
}
END_TEST

/* The golden checksums pin the generator's exact output (every draw and its
 * order, tasks.h): FNV-1a 64 over the inputs then the targets, as int64
 * little-endian bytes. They were computed once from this implementation and
 * agree with tests/gen_tasks_golden.py, an independent Python
 * re-implementation of the documented procedure. If a deliberate change to
 * the generator moves them, update both here and say so in the commit:
 * saved datasets and results made with the old stream no longer reproduce. */
START_TEST(mqar_golden_checksum)
{
    mi_mqar_config c = mi_mqar_config_default(); /* V 8192, L 64, N 4, a 0.01, P 1, rnq */
    mi_tensor *x, *y;
    ck_assert_int_eq(mi_mqar_batch(&c, 1234, MI_SPLIT_TRAIN, 0, 4, &x, &y), 0);
    uint64_t h = fnv1a(fnv1a(FNV_OFFSET, x->data, x->numel), y->data, y->numel);
    require_msg(h == 0xd8c571cb8f696885ULL, "checksum 0x%016llx", (unsigned long long)h);

    c.vocab = 300, c.seq_len = 128, c.pairs = 8, c.passes = 2, c.random_non_queries = false;
    ck_assert_int_eq(mi_mqar_batch(&c, 7, MI_SPLIT_VALID, 5, 3, &x, &y), 0);
    h = fnv1a(fnv1a(FNV_OFFSET, x->data, x->numel), y->data, y->numel);
    require_msg(h == 0xee90f89083e260e2ULL, "checksum 0x%016llx", (unsigned long long)h);
}
END_TEST

/* ---------------------------------------------------------------- accuracy */

START_TEST(accuracy_per_example_then_mean)
{
    /* example 0: 2 labelled, 1 right; example 1: 1 labelled, right;
     * example 2: none labelled (left out) → (0.5 + 1) / 2 */
    int64_t tg[3 * 4] = {-100, 3, -100, 1, 2, -100, -100, -100, -100, -100, -100, -100};
    int64_t pr[3 * 4] = {0, 3, 9, 0, 2, 1, 1, 1, 5, 5, 5, 5};
    mi_tensor *targets = mi_from_buffer(MI_I64, MI_SHAPE(3, 4), tg);
    mi_tensor *pred = mi_from_buffer(MI_I64, MI_SHAPE(3, 4), pr);
    ck_assert_close(mi_task_accuracy(pred, targets), 0.75, 1e-12);
    /* the same through logits (argmax), f32 and f64 */
    mi_tensor *logits = mi_zeros(MI_F64, MI_SHAPE(3, 4, 10));
    for (int i = 0; i < 12; i++) mi_set(logits, i * 10 + pr[i], 1.0);
    ck_assert_close(mi_task_accuracy(logits, targets), 0.75, 1e-12);
    ck_assert_close(mi_task_accuracy(mi_tensor_to(logits, MI_F32), targets), 0.75, 1e-12);
    /* ties go to the first maximum: all-equal logits predict 0 */
    ck_assert_close(mi_task_accuracy(mi_zeros(MI_F32, MI_SHAPE(3, 4, 10)), targets), 0.0, 0);

    ck_assert_close(mi_task_accuracy(pred, mi_zeros(MI_I64, MI_SHAPE(3, 5))), -1, 0);
    ck_assert_error_has("[3,5]");
    mi_error_clear();
    ck_assert_close(mi_task_accuracy(pred, mi_full(MI_I64, MI_SHAPE(3, 4), -100)), -1, 0);
    ck_assert_error_has("no labelled");
    mi_error_clear();
    ck_assert_close(mi_task_accuracy(NULL, targets), -1, 0);
    mi_error_clear();
}
END_TEST

START_TEST(accuracy_on_mqar_targets)
{
    mi_mqar_config c = mi_mqar_config_default();
    mi_tensor *x, *y;
    ck_assert_int_eq(mi_mqar_batch(&c, 2, MI_SPLIT_VALID, 0, 8, &x, &y), 0);
    mi_tensor *pred = mi_tensor_to(y, MI_I64);
    ck_assert_close(mi_task_accuracy(pred, y), 1.0, 0);
    /* break one of the 4 answers in every other example */
    for (int b = 0; b < 8; b += 2)
        for (int64_t t = 0; t < 64; t++)
            if (at(y, b * 64 + t) != MI_IGNORE_INDEX) {
                ((int64_t *)pred->data)[b * 64 + t] = 0;
                break;
            }
    ck_assert_close(mi_task_accuracy(pred, y), (4 * 0.75 + 4 * 1.0) / 8, 1e-12);
}
END_TEST

/* ---------------------------------------------------------------- memory capacity */

START_TEST(capacity_layout)
{
    int64_t Ns[] = {1, 2, 16, 100};
    for (int n = 0; n < 4; n++) {
        mi_capacity_config c = mi_capacity_config_default();
        c.pairs = Ns[n];
        if (n == 3) c.vocab = 204; /* N = V/2 − 2: every key used */
        int64_t N = c.pairs, V = c.vocab, L = mi_capacity_seq_len(&c);
        ck_assert_int_eq(L, 4 * N);
        mi_tensor *x, *y;
        ck_assert_int_eq(mi_capacity_batch(&c, 21, MI_SPLIT_TRAIN, 0, 8, &x, &y), 0);
        require(x->shape[0] == 8 && x->shape[1] == L && y->shape[1] == L);
        for (int b = 0; b < 8; b++) {
            const int64_t *xi = (int64_t *)x->data + b * L, *yi = (int64_t *)y->data + b * L;
            for (int64_t j = 0; j < N; j++) {
                require(xi[2 * j] >= 2 && xi[2 * j] < V / 2);
                require(xi[2 * j + 1] >= V / 2 && xi[2 * j + 1] < V);
                for (int64_t i = 0; i < j; i++) require(xi[2 * i] != xi[2 * j]);
                require(yi[2 * j] == MI_IGNORE_INDEX && yi[2 * j + 1] == MI_IGNORE_INDEX);
            }
            ck_assert_int_eq(xi[2 * N], 1); /* the query marker */
            require(yi[2 * N] == MI_IGNORE_INDEX);
            for (int64_t m = 0; m < N; m++) {
                int64_t t = 2 * N + 1 + 2 * m, j = 0;
                while (j < N && xi[2 * j] != xi[t]) j++;
                require_msg(j < N, "query %lld is not a stored key", (long long)m);
                require(yi[t] == xi[2 * j + 1]);
                for (int64_t s = 2 * N + 1; s < t; s += 2) require(xi[s] != xi[t]);
                if (m + 1 < N) {
                    require(xi[t + 1] == xi[2 * j + 1]); /* the answer is shown next */
                    require(yi[t + 1] == MI_IGNORE_INDEX);
                }
            }
        }
        ck_assert_close(mi_task_accuracy(y, y), 1.0, 0);
    }
    /* the queries come in a shuffled order (not always the stored one) */
    mi_capacity_config c = mi_capacity_config_default();
    int64_t x[64], y[64], N = c.pairs;
    ck_assert_int_eq(mi_capacity_example(&c, 1, MI_SPLIT_TRAIN, 0, x, y), 0);
    bool same = true;
    for (int64_t m = 0; m < N; m++) same = same && x[2 * N + 1 + 2 * m] == x[2 * m];
    require(!same);
}
END_TEST

START_TEST(capacity_errors_and_streams)
{
    mi_capacity_config c = {.vocab = 64, .pairs = 31};
    mi_tensor *x, *y;
    ck_assert_int_eq(mi_capacity_batch(&c, 0, MI_SPLIT_TRAIN, 0, 1, &x, &y), -1);
    ck_assert_error_has("N <= V/2 - 2");
    mi_error_clear();
    c.pairs = 0;
    ck_assert_int_eq(mi_capacity_check(&c), -1);
    ck_assert_error_has("pairs N must be >= 1");
    mi_error_clear();
    c = mi_capacity_config_default();
    mi_tensor *x2, *y2;
    ck_assert_int_eq(mi_capacity_batch(&c, 4, MI_SPLIT_VALID, 0, 4, &x, &y), 0);
    ck_assert_int_eq(mi_capacity_batch(&c, 4, MI_SPLIT_VALID, 2, 1, &x2, &y2), 0);
    ck_assert_mem_eq(x2->data, (int64_t *)x->data + 2 * 64, 64 * sizeof(int64_t));
    ck_assert_mem_eq(y2->data, (int64_t *)y->data + 2 * 64, 64 * sizeof(int64_t));
}
END_TEST

/* ---------------------------------------------------------------- needle in a haystack */

static int64_t count_of(const char *hay, int64_t n, const char *needle)
{
    int64_t c = 0, m = (int64_t)strlen(needle);
    for (int64_t i = 0; i + m <= n; i++) c += memcmp(hay + i, needle, (size_t)m) == 0;
    return c;
}

/* What every flavour shares: the length, the needle once where it says,
 * the question at the end, the tokens equal to the bytes, and the score. */
static void check_niah_common(const mi_niah_config *c, const mi_niah_sample *s)
{
    ck_assert_int_eq(s->length, c->length);
    ck_assert_int_eq((int64_t)strlen(s->prompt), c->length); /* no NUL in the noise flavours */
    require(s->tokens->dtype == MI_I64 && s->tokens->rank == 1 && s->tokens->numel == c->length);
    for (int64_t i = 0; i < c->length; i++) require(at(s->tokens, i) == (uint8_t)s->prompt[i]);
    char needle[160], question[192];
    snprintf(needle, sizeof needle, "The special magic number for %s is: %s.", s->key, s->answer);
    snprintf(question, sizeof question,
             "\nWhat is the special magic number for %s? The special magic number for %s is: ",
             s->key, s->key);
    ck_assert_int_eq(count_of(s->prompt, s->length, needle), 1);
    ck_assert_int_eq(s->needle_length, (int64_t)strlen(needle));
    require(memcmp(s->prompt + s->needle_offset, needle, strlen(needle)) == 0);
    require(s->prompt[s->needle_offset + s->needle_length] == ' ');
    size_t q = strlen(question);
    require(memcmp(s->prompt + c->length - (int64_t)q, question, q) == 0);
    ck_assert_close(s->depth, (double)s->needle_offset / (double)(c->length - (int64_t)q), 1e-15);
    require(s->depth >= 0 && s->depth < 1);
    /* the key is adjective-noun */
    ck_assert_ptr_nonnull(strchr(s->key, '-'));
    /* scoring: up to the terminator */
    char buf[64];
    size_t m = strlen(s->answer);
    snprintf(buf, sizeof buf, "%s.", s->answer); /* right answer, then the terminator: a hit */
    require(mi_niah_exact_match(s, buf, m + 1));
    snprintf(buf, sizeof buf, "%s. The grass", s->answer); /* nothing after it is judged */
    require(mi_niah_exact_match(s, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%s7.", s->answer); /* right answer, then another byte: a miss */
    require(!mi_niah_exact_match(s, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%s %s.", s->answer, s->answer);
    require(!mi_niah_exact_match(s, buf, strlen(buf)));
    require(!mi_niah_exact_match(s, s->answer, m)); /* no terminator generated */
    snprintf(buf, sizeof buf, "%s.", s->answer);
    require(!mi_niah_exact_match(s, buf, m)); /* the terminator cut off */
    buf[m - 1] = buf[m - 1] == 'z' ? 'y' : (char)(buf[m - 1] + 1); /* a wrong last byte */
    require(!mi_niah_exact_match(s, buf, strlen(buf)));
    snprintf(buf, sizeof buf, "%s.", s->answer);
    buf[0] = buf[0] == 'a' ? 'b' : (char)(buf[0] - 1); /* a wrong first byte */
    require(!mi_niah_exact_match(s, buf, strlen(buf)));
    snprintf(buf, sizeof buf, ".%s.", s->answer);
    require(!mi_niah_exact_match(s, buf, strlen(buf)));
    snprintf(buf, sizeof buf, " %s.", s->answer); /* the prompt ends in the space */
    require(!mi_niah_exact_match(s, buf, strlen(buf)));
    require(!mi_niah_exact_match(s, "", 0));
    require(!mi_niah_exact_match(s, ".", 1));
    /* the flavour's cap holds its answer and the terminator */
    require(mi_niah_answer_bytes(c) >= (int64_t)m + 1);
}

START_TEST(niah_passkey)
{
    int64_t lengths[] = {1024, 2048, 4096, 300};
    for (int l = 0; l < 4; l++) {
        mi_niah_config c = mi_niah_config_default();
        c.length = lengths[l];
        int64_t max_sentence = 0, min_sentence = INT64_MAX;
        for (int64_t i = 0; i < 40; i++) {
            mi_niah_sample s;
            ck_assert_int_eq(mi_niah_example(&c, 17, MI_SPLIT_VALID, i, &s), 0);
            check_niah_common(&c, &s);
            /* 7 digits, no leading zero */
            ck_assert_int_eq((int)strlen(s.answer), 7);
            for (int k = 0; k < 7; k++) require(s.answer[k] >= '0' && s.answer[k] <= '9');
            require(s.answer[0] != '0');
            /* at sentence k: k noise sentences (one '.' each) before the needle,
             * and the noise before it is the stream from sentence 0 */
            ck_assert_int_eq(count_of(s.prompt, s.needle_offset, "."), s.sentence);
            require(strncmp(s.prompt, s.sentence ? "The grass is green. The sky" : "The special", 11) == 0);
            require(s.needle_offset == 0 || s.prompt[s.needle_offset - 1] == ' ');
            if (s.sentence > max_sentence) max_sentence = s.sentence;
            if (s.sentence < min_sentence) min_sentence = s.sentence;
            /* the haystack is noise only: "The special" occurs in the needle and the question */
            ck_assert_int_eq(count_of(s.prompt, s.length, "The special"), 2);
        }
        /* random sentences over the haystack: at 1K about 50 places */
        ck_assert_int_gt(max_sentence - min_sentence, lengths[l] / 100);
    }
    /* deterministic per index, different across indices */
    mi_niah_config c = mi_niah_config_default();
    mi_niah_sample a, b, d;
    ck_assert_int_eq(mi_niah_example(&c, 1, MI_SPLIT_VALID, 3, &a), 0);
    ck_assert_int_eq(mi_niah_example(&c, 1, MI_SPLIT_VALID, 3, &b), 0);
    ck_assert_int_eq(mi_niah_example(&c, 1, MI_SPLIT_VALID, 4, &d), 0);
    ck_assert_str_eq(a.prompt, b.prompt);
    ck_assert_str_ne(a.prompt, d.prompt);
}
END_TEST

START_TEST(niah_word_and_uuid)
{
    mi_niah_config c = mi_niah_config_default();
    c.kind = MI_NIAH_WORD;
    c.length = 2048;
    for (int u = 0; u < 2; u++) {
        c.uuid = u;
        for (int64_t i = 0; i < 20; i++) {
            mi_niah_sample s;
            ck_assert_int_eq(mi_niah_example(&c, 8, MI_SPLIT_VALID, i, &s), 0);
            check_niah_common(&c, &s);
            ck_assert_int_eq(count_of(s.prompt, s.needle_offset, "."), s.sentence);
            size_t m = strlen(s.answer);
            if (u) {
                ck_assert_int_eq((int)m, 36);
                for (size_t k = 0; k < m; k++) {
                    bool dash = k == 8 || k == 13 || k == 18 || k == 23;
                    require(dash ? s.answer[k] == '-'
                                   : (s.answer[k] >= '0' && s.answer[k] <= '9') ||
                                         (s.answer[k] >= 'a' && s.answer[k] <= 'f'));
                }
            } else {
                require(m >= 4);
                for (size_t k = 0; k < m; k++) require(s.answer[k] >= 'a' && s.answer[k] <= 'z');
                /* a word the noise never says */
                ck_assert_int_eq(count_of(s.prompt, s.length, s.answer), 1);
            }
        }
    }
}
END_TEST

/* A text of words separated by spaces and newlines, no NUL. */
static uint8_t *words_text(int64_t n)
{
    uint8_t *t = mi_scope_alloc(test_scope, (size_t)n);
    mi_rng r;
    mi_rng_seed(&r, 99);
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = mi_rng_below(&r, 8);
        t[i] = k == 0 ? ' ' : k == 1 && i % 7 == 0 ? '\n' : (uint8_t)('a' + mi_rng_below(&r, 26));
    }
    return t;
}

static void check_niah_text(const mi_niah_config *c, int64_t samples, bool words)
{
    double depth_sum = 0;
    for (int64_t i = 0; i < samples; i++) {
        mi_niah_sample s;
        ck_assert_int_eq(mi_niah_example(c, 5, MI_SPLIT_VALID, i, &s), 0);
        check_niah_common(c, &s);
        ck_assert_int_eq(s.sentence, -1);
        ck_assert_int_eq((int)strlen(s.answer), 7);
        /* the haystack without the needle is one contiguous piece of the text */
        int64_t H = s.length - (int64_t)strlen(strstr(s.prompt, "\nWhat is the special"));
        int64_t W = H - s.needle_length - 1;
        char *plain = mi_scope_alloc(test_scope, (size_t)W);
        memcpy(plain, s.prompt, (size_t)s.needle_offset);
        memcpy(plain + s.needle_offset, s.prompt + s.needle_offset + s.needle_length + 1,
               (size_t)(W - s.needle_offset));
        bool found = false;
        for (int64_t start = 0; start + W <= c->text_size && !found; start++)
            found = memcmp(c->text + start, plain, (size_t)W) == 0;
        require_msg(found, "sample %lld: the haystack is not a window of the text", (long long)i);
        /* no word is split: the needle follows whitespace or starts the haystack */
        if (words && s.needle_offset > 0) {
            char b = s.prompt[s.needle_offset - 1];
            require_msg(b == ' ' || b == '\n', "needle after '%c'", b);
        }
        depth_sum += s.depth;
    }
    if (samples >= 50) ck_assert_close(depth_sum / (double)samples, 0.5, 0.12); /* uniform depth */
}

START_TEST(niah_real_text)
{
    mi_niah_config c = mi_niah_config_default();
    c.kind = MI_NIAH_TEXT;
    c.length = 1024;
    c.text_size = 20000;
    c.text = words_text(c.text_size);
    check_niah_text(&c, 60, true);

    mi_text *t = mi_text_load(SHAKESPEARE);
    ck_assert_msg(t != NULL, "%s", mi_error());
    c.text = t->data;
    c.text_size = t->size;
    c.length = 4096;
    check_niah_text(&c, 8, true);
}
END_TEST

START_TEST(niah_errors)
{
    mi_niah_sample s;
    mi_niah_config c = mi_niah_config_default();
    c.length = 100;
    ck_assert_int_eq(mi_niah_example(&c, 0, MI_SPLIT_VALID, 0, &s), -1);
    ck_assert_error_has("cannot hold the needle");
    mi_error_clear();
    c = mi_niah_config_default();
    c.kind = MI_NIAH_TEXT;
    ck_assert_int_eq(mi_niah_example(&c, 0, MI_SPLIT_VALID, 0, &s), -1);
    ck_assert_error_has("needs a text");
    mi_error_clear();
    c.text = (const uint8_t *)"short text";
    c.text_size = 10;
    ck_assert_int_eq(mi_niah_example(&c, 0, MI_SPLIT_VALID, 0, &s), -1);
    ck_assert_error_has("the text has 10 bytes");
    mi_error_clear();
    c.kind = (mi_niah_kind)7;
    ck_assert_int_eq(mi_niah_check(&c), -1);
    ck_assert_error_has("unknown kind");
    mi_error_clear();
}
END_TEST

/* A NIAH training batch (the train layer's): prompt ++ answer ++ terminator,
 * then '\n' padding; the labels are exactly the answer's bytes and the
 * terminator, each on the position before it. */
START_TEST(niah_training_batch_labels_the_terminator)
{
    const char *kinds[] = {"passkey", "word", "uuid"};
    const int64_t cap[] = {8, 10, 37};
    for (int k = 0; k < 3; k++) {
        mi_run_config rc = mi_run_config_default(MI_TASK_NIAH);
        rc.seq_len = 200;
        snprintf(rc.niah, sizeof rc.niah, "%s", kinds[k]);
        ck_assert_int_eq(mi_run_config_tokens(&rc), 200 + cap[k]);
        mi_run_task t;
        ck_assert_msg(mi_run_task_open(&t, &rc) == 0, "%s", mi_error());
        mi_tensor *x, *y;
        ck_assert_msg(mi_run_task_batch(&t, MI_SPLIT_TRAIN, 5, 3, &x, &y) == 0, "%s", mi_error());
        int64_t L = rc.seq_len, T = L + cap[k];
        ck_assert_int_eq(x->shape[1], T);
        for (int64_t b = 0; b < 3; b++) {
            mi_niah_sample s;
            ck_assert_int_eq(mi_niah_example(&t.niah, rc.seed, MI_SPLIT_TRAIN, 5 + b, &s), 0);
            char want[64];
            int m = snprintf(want, sizeof want, "%s.", s.answer);
            for (int64_t i = 0; i < T; i++) {
                int64_t in = i < L ? (uint8_t)s.prompt[i] : i < L + m ? (uint8_t)want[i - L] : '\n';
                int64_t lab = i >= L - 1 && i < L - 1 + m ? (uint8_t)want[i - L + 1]
                                                          : MI_IGNORE_INDEX;
                require_msg(at(x, b * T + i) == in, "%s row %lld input %lld", kinds[k],
                            (long long)b, (long long)i);
                require_msg(at(y, b * T + i) == lab, "%s row %lld target %lld", kinds[k],
                            (long long)b, (long long)i);
            }
        }
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("tasks");
    TCase *tc = tcase_slow("mqar");
    tcase_add_test(tc, mqar_layout_and_labels);
    tcase_add_test(tc, mqar_random_non_queries_replaces_only_zeros);
    tcase_add_test(tc, mqar_gaps_follow_the_power_law);
    tcase_add_test(tc, mqar_errors);
    tcase_add_test(tc, mqar_streams_are_per_example);
    tcase_add_test(tc, mqar_golden_checksum);
    tcase_add_test(tc, accuracy_per_example_then_mean);
    tcase_add_test(tc, accuracy_on_mqar_targets);
    suite_add_tcase(s, tc);
    tc = tcase_slow("capacity");
    tcase_add_test(tc, capacity_layout);
    tcase_add_test(tc, capacity_errors_and_streams);
    suite_add_tcase(s, tc);
    tc = tcase_slow("niah");
    tcase_add_test(tc, niah_passkey);
    tcase_add_test(tc, niah_word_and_uuid);
    tcase_add_test(tc, niah_real_text);
    tcase_add_test(tc, niah_errors);
    tcase_add_test(tc, niah_training_batch_labels_the_terminator);
    suite_add_tcase(s, tc);
    return s;
}
