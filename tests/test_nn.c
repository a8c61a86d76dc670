/* nn ops: forward values against naive loops written here (softmax,
 * log-softmax, cross entropy with ignored rows, one-hot, the normalisations,
 * causal conv1d and its weight gradient, rope, attention and its mask,
 * embedding), a few gradients by hand, the registry checks of every nn op,
 * and every error path. */
#include "harness.h"

static mi_rng rng;
static void seed(uint64_t s) { mi_rng_seed(&rng, s); }
static mi_tensor *randn(int rank, const int64_t *shape)
{
    return mi_randn(&rng, MI_F64, rank, shape, 0.0, 1.0);
}

/* Asserts y (any float dtype) equals want[] within tol. */
static void assert_values(const mi_tensor *y, const double *want, int64_t n, double tol,
                          const char *what)
{
    ck_assert_msg(y != NULL, "%s: %s", what, mi_error());
    ck_assert_int_eq(y->numel, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(mi_get(y, i) - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s[%lld] = %.15g, expected %.15g", what, (long long)i, mi_get(y, i),
                      want[i]);
}

/* Asserts that op returned NULL with a message containing both needles. */
#define ck_assert_fails(call, needle1, needle2)                                   \
    do {                                                                          \
        mi_error_clear();                                                         \
        ck_assert_msg((call) == NULL, "%s did not fail", #call);                 \
        ck_assert_error_has(needle1);                                             \
        ck_assert_error_has(needle2);                                             \
        mi_error_clear();                                                         \
    } while (0)

/* ---------------------------------------------------------------- softmax */
static void naive_softmax(const mi_tensor *x, int axis, bool log_form, double *out)
{
    int64_t outer = 1, n = x->shape[axis], inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->shape[d];
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += exp(mi_get(x, (p * n + i) * inner + q));
            for (int64_t i = 0; i < n; i++) {
                double v = mi_get(x, (p * n + i) * inner + q);
                out[(p * n + i) * inner + q] = log_form ? v - log(s) : exp(v) / s;
            }
        }
}

START_TEST(softmax_matches_naive)
{
    seed(1);
    mi_tensor *x = randn(MI_SHAPE(3, 4, 5));
    double want[60];
    for (int axis = -1; axis < 3; axis++) {
        int ax = axis < 0 ? 2 : axis;
        naive_softmax(x, ax, false, want);
        assert_values(mi_softmax(x, axis), want, 60, 1e-14, "softmax");
        assert_values(mi_softmax(mi_tensor_to(x, MI_F32), axis), want, 60, 1e-6, "softmax f32");
        naive_softmax(x, ax, true, want);
        assert_values(mi_log_softmax(x, axis), want, 60, 1e-14, "log_softmax");
        assert_values(mi_log_softmax(mi_tensor_to(x, MI_F32), axis), want, 60, 1e-6,
                      "log_softmax f32");
    }
}
END_TEST

/* Shifted by 1000 (exp overflows without the max shift): same values. */
START_TEST(softmax_is_shift_stable)
{
    double v[4] = {1000.0, 1001.0, 999.5, 1000.25}, s[4] = {0, 1, -0.5, 0.25}, want[4];
    mi_tensor *x = mi_from_buffer(MI_F64, MI_SHAPE(4), v);
    naive_softmax(mi_from_buffer(MI_F64, MI_SHAPE(4), s), 0, false, want);
    assert_values(mi_softmax(x, 0), want, 4, 1e-13, "softmax");
    assert_values(mi_softmax(mi_tensor_to(x, MI_F32), 0), want, 4, 1e-6, "softmax f32");
    naive_softmax(mi_from_buffer(MI_F64, MI_SHAPE(4), s), 0, true, want);
    assert_values(mi_log_softmax(mi_tensor_to(x, MI_F32), 0), want, 4, 1e-5, "log_softmax f32");
}
END_TEST

START_TEST(softmax_errors)
{
    mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(2, 3));
    ck_assert_fails(mi_softmax(x, 2), "softmax", "axis 2 out of range for rank 2");
    ck_assert_fails(mi_log_softmax(x, -3), "log_softmax", "axis -3");
    ck_assert_fails(mi_softmax(mi_arange(MI_I64, 3), 0), "softmax", "i64");
    ck_assert_fails(mi_log_softmax(mi_scalar(MI_F64, 1.0), 0), "log_softmax", "rank 0");
    ck_assert_fails(mi_softmax(NULL, 0), "softmax", "NULL");
}
END_TEST

/* ---------------------------------------------------------------- cross entropy */
static double naive_cross_entropy(const mi_tensor *x, const int64_t *t, int64_t ignore)
{
    int64_t n = x->shape[0], c = x->shape[1], count = 0;
    double total = 0;
    for (int64_t r = 0; r < n; r++) {
        if (t[r] == ignore) continue;
        double s = 0;
        for (int64_t j = 0; j < c; j++) s += exp(mi_get(x, r * c + j));
        total += -(mi_get(x, r * c + t[r]) - log(s));
        count++;
    }
    return count ? total / (double)count : 0.0;
}

START_TEST(cross_entropy_matches_naive_with_ignored_rows)
{
    seed(2);
    mi_tensor *x = mi_requires_grad(randn(MI_SHAPE(6, 5)), true);
    int64_t t[6] = {4, -100, 0, 2, -100, 1};
    int32_t t32[6] = {4, -100, 0, 2, -100, 1};
    mi_tensor *ti = mi_from_buffer(MI_I64, MI_SHAPE(6), t);
    double want = naive_cross_entropy(x, t, -100);
    mi_tensor *l = mi_cross_entropy(x, ti, -100);
    ck_assert_msg(l != NULL, "%s", mi_error());
    ck_assert_int_eq(l->rank, 0);
    ck_assert_close(mi_item(l), want, 1e-13);
    ck_assert_close(mi_item(mi_cross_entropy(x, mi_from_buffer(MI_I32, MI_SHAPE(6), t32), -100)),
                    want, 1e-13);
    ck_assert_close(mi_item(mi_cross_entropy(mi_tensor_to(x, MI_F32), ti, -100)), want, 1e-5);
    /* ignore_index that is a real class: rows with target 2 drop out */
    ck_assert_close(mi_item(mi_cross_entropy(x, mi_from_buffer(MI_I64, MI_SHAPE(6),
                                                               (int64_t[]){4, 3, 0, 2, 2, 1}),
                                             2)),
                    naive_cross_entropy(x, (int64_t[]){4, 3, 0, 2, 2, 1}, 2), 1e-13);

    /* dL/dx = (softmax(x) − onehot) / count on counted rows, 0 on ignored */
    mi_tensor *g;
    ck_assert_int_eq(mi_grad(&l, NULL, 1, &x, 1, false, &g), 0);
    double sm[30];
    naive_softmax(x, 1, false, sm);
    for (int r = 0; r < 6; r++)
        for (int j = 0; j < 5; j++) {
            double w = t[r] == -100 ? 0.0 : (sm[r * 5 + j] - (j == t[r])) / 4.0;
            ck_assert_close(mi_get(g, r * 5 + j), w, 1e-14);
        }
}
END_TEST

START_TEST(cross_entropy_all_ignored_is_zero)
{
    seed(3);
    mi_tensor *x = mi_requires_grad(randn(MI_SHAPE(3, 4)), true);
    mi_tensor *t = mi_from_buffer(MI_I64, MI_SHAPE(3), (int64_t[]){-1, -1, -1});
    mi_tensor *l = mi_cross_entropy(x, t, -1), *g;
    ck_assert_msg(l != NULL, "%s", mi_error());
    ck_assert(mi_item(l) == 0.0);
    ck_assert_int_eq(mi_grad(&l, NULL, 1, &x, 1, false, &g), 0);
    for (int i = 0; i < 12; i++) ck_assert(mi_get(g, i) == 0.0);
}
END_TEST

START_TEST(cross_entropy_errors)
{
    mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(4, 5));
    mi_tensor *t = mi_from_buffer(MI_I64, MI_SHAPE(4), (int64_t[]){0, 5, 1, -100});
    ck_assert_fails(mi_cross_entropy(x, t, -100), "cross_entropy", "target 5 at position 1");
    ck_assert_fails(mi_cross_entropy(x, t, -100), "5 classes", "cross_entropy");
    mi_tensor *tn = mi_from_buffer(MI_I32, MI_SHAPE(4), (int32_t[]){0, -2, 1, 1});
    ck_assert_fails(mi_cross_entropy(x, tn, -100), "cross_entropy", "target -2");
    ck_assert_fails(mi_cross_entropy(x, mi_zeros(MI_F64, MI_SHAPE(4)), -100), "cross_entropy",
                    "targets must be i32 or i64, got f64");
    ck_assert_fails(mi_cross_entropy(x, mi_zeros(MI_I64, MI_SHAPE(3)), -100), "cross_entropy",
                    "targets [3] do not match logits [4,5]");
    ck_assert_fails(mi_cross_entropy(mi_zeros(MI_F64, MI_SHAPE(4)), mi_zeros(MI_I64, MI_SHAPE(4)),
                                     -100),
                    "cross_entropy", "logits must be [N, C]");
    ck_assert_fails(mi_cross_entropy(mi_zeros(MI_I64, MI_SHAPE(4, 5)), t, -100), "cross_entropy",
                    "input 0");
}
END_TEST

/* ---------------------------------------------------------------- one_hot */
START_TEST(one_hot_values_and_errors)
{
    mi_tensor *t = mi_from_buffer(MI_I32, MI_SHAPE(2, 2), (int32_t[]){2, -1, 0, 2});
    mi_tensor *y = mi_one_hot(t, 3, -1, MI_F32);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert_int_eq(y->dtype, MI_F32);
    ck_assert_int_eq(y->rank, 3);
    ck_assert_int_eq(y->shape[2], 3);
    double want[12] = {0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    assert_values(y, want, 12, 0, "one_hot");
    ck_assert_fails(mi_one_hot(t, 2, -1, MI_F64), "one_hot", "target 2 at position 0");
    ck_assert_fails(mi_one_hot(t, 0, -1, MI_F64), "one_hot", "classes must be >= 1, got 0");
    ck_assert_fails(mi_one_hot(t, 3, -1, MI_I64), "one_hot", "output dtype must be f32 or f64");
    ck_assert_fails(mi_one_hot(mi_zeros(MI_F64, MI_SHAPE(2)), 3, -1, MI_F64), "one_hot",
                    "targets must be i32 or i64, got f64");
}
END_TEST

/* ---------------------------------------------------------------- normalisations */
START_TEST(norms_have_their_moments)
{
    seed(4);
    mi_tensor *x = mi_add_scalar(mi_mul_scalar(randn(MI_SHAPE(3, 2, 7)), 3.0), 1.5);
    const double eps = 1e-3;
    mi_tensor *ln = mi_layer_norm(x, eps), *rn = mi_rms_norm(x, eps), *l2 = mi_l2_normalize(x, eps);
    ck_assert_msg(ln && rn && l2, "%s", mi_error());
    for (int r = 0; r < 6; r++) {
        double mu = 0, var = 0, ms = 0, ym = 0, yv = 0, rs = 0, ls = 0;
        for (int j = 0; j < 7; j++) mu += mi_get(x, r * 7 + j) / 7;
        for (int j = 0; j < 7; j++) {
            double v = mi_get(x, r * 7 + j);
            var += (v - mu) * (v - mu) / 7;
            ms += v * v / 7;
        }
        for (int j = 0; j < 7; j++) {
            double v = mi_get(x, r * 7 + j), a = mi_get(ln, r * 7 + j),
                   b = mi_get(rn, r * 7 + j), c = mi_get(l2, r * 7 + j);
            ck_assert_close(a, (v - mu) / sqrt(var + eps), 1e-13);
            ck_assert_close(b, v / sqrt(ms + eps), 1e-13);
            ck_assert_close(c, v / sqrt(7 * ms + eps), 1e-13);
            ym += a / 7;
            yv += a * a / 7;
            rs += b * b / 7;
            ls += c * c;
        }
        ck_assert_close(ym, 0.0, 1e-13);
        ck_assert_close(yv, var / (var + eps), 1e-13);
        ck_assert_close(rs, ms / (ms + eps), 1e-13);
        ck_assert_close(ls, 7 * ms / (7 * ms + eps), 1e-13);
    }
    /* f32 agrees */
    mi_tensor *ln32 = mi_layer_norm(mi_tensor_to(x, MI_F32), eps);
    for (int i = 0; i < 42; i++) ck_assert_close(mi_get(ln32, i), mi_get(ln, i), 1e-5);
}
END_TEST

START_TEST(norm_errors)
{
    mi_tensor *s = mi_scalar(MI_F64, 2.0), *x = mi_ones(MI_F64, MI_SHAPE(2, 3));
    ck_assert_fails(mi_layer_norm(s, 1e-5), "layer_norm", "at least one axis, got shape []");
    ck_assert_fails(mi_rms_norm(x, -1.0), "rms_norm", "eps must be finite and >= 0, got -1");
    ck_assert_fails(mi_l2_normalize(mi_ones(MI_I32, MI_SHAPE(3)), 0), "l2_normalize", "i32");
    ck_assert_fails(mi_l2_normalize(x, INFINITY), "l2_normalize", "eps");
}
END_TEST

/* ---------------------------------------------------------------- conv1d */
static void naive_conv(const mi_tensor *x, const mi_tensor *w, double *y)
{
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], K = w->shape[1];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                double s = 0;
                for (int64_t j = 0; j < K; j++)
                    if (t - K + 1 + j >= 0)
                        s += mi_get(w, c * K + j) * mi_get(x, (b * T + t - K + 1 + j) * C + c);
                y[(b * T + t) * C + c] = s;
            }
}

START_TEST(conv1d_causal_matches_naive)
{
    seed(5);
    mi_tensor *x = randn(MI_SHAPE(2, 7, 5)), *w = randn(MI_SHAPE(5, 4));
    double want[70];
    naive_conv(x, w, want);
    mi_tensor *y = mi_conv1d_causal(x, w);
    assert_values(y, want, 70, 1e-14, "conv1d_causal");
    ck_assert(y->rank == 3 && y->shape[0] == 2 && y->shape[1] == 7 && y->shape[2] == 5);
    assert_values(mi_conv1d_causal(mi_tensor_to(x, MI_F32), mi_tensor_to(w, MI_F32)), want, 70,
                  1e-5, "conv1d_causal f32");
    /* K longer than T */
    mi_tensor *x2 = randn(MI_SHAPE(1, 3, 3)), *w2 = randn(MI_SHAPE(3, 5));
    double want2[9];
    naive_conv(x2, w2, want2);
    assert_values(mi_conv1d_causal(x2, w2), want2, 9, 1e-14, "conv1d_causal K > T");
}
END_TEST

/* mi_conv1d_causal_tail over stretches of 2, 1, 3 and 1 rows from a zero tail
 * gives the whole sequence's conv, row for row. */
START_TEST(conv1d_causal_tail_in_stretches)
{
    seed(7);
    mi_tensor *x = randn(MI_SHAPE(2, 7, 5)), *w = randn(MI_SHAPE(5, 4));
    double want[70];
    naive_conv(x, w, want);
    mi_tensor *tail = mi_zeros(MI_F64, MI_SHAPE(2, 3, 5)), *parts[4];
    const int64_t cut[5] = {0, 2, 3, 6, 7};
    for (int i = 0; i < 4; i++) {
        parts[i] = mi_conv1d_causal_tail(mi_slice(x, 1, cut[i], cut[i + 1]), w, &tail);
        ck_assert_ptr_nonnull(parts[i]);
        ck_assert(tail->rank == 3 && tail->shape[1] == 3);
    }
    assert_values(mi_concat(parts, 4, 1), want, 70, 1e-14, "conv1d_causal_tail");
}
END_TEST

START_TEST(conv1d_causal_wgrad_matches_naive)
{
    seed(6);
    const int64_t B = 2, T = 7, C = 5, K = 4;
    mi_tensor *g = randn(MI_SHAPE(2, 7, 5)), *x = randn(MI_SHAPE(2, 7, 5));
    double want[20] = {0};
    for (int64_t c = 0; c < C; c++)
        for (int64_t j = 0; j < K; j++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < T; t++)
                    if (t - K + 1 + j >= 0)
                        want[c * K + j] += mi_get(g, (b * T + t) * C + c) *
                                           mi_get(x, (b * T + t - K + 1 + j) * C + c);
    mi_tensor *dw = mi_conv1d_causal_wgrad(g, x, K);
    assert_values(dw, want, 20, 1e-13, "conv1d_causal_wgrad");
    ck_assert(dw->rank == 2 && dw->shape[0] == C && dw->shape[1] == K);
    /* and it is the gradient of ⟨g, conv(x, w)⟩ with respect to w */
    mi_tensor *w = mi_requires_grad(randn(MI_SHAPE(5, 4)), true), *gw;
    mi_tensor *y = mi_conv1d_causal(x, w);
    ck_assert_int_eq(mi_grad(&y, &g, 1, &w, 1, false, &gw), 0);
    assert_values(gw, want, 20, 1e-13, "conv1d_causal dw");
}
END_TEST

START_TEST(conv1d_errors)
{
    mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(2, 7, 5));
    ck_assert_fails(mi_conv1d_causal(x, mi_zeros(MI_F64, MI_SHAPE(4, 4))), "conv1d_causal",
                    "got w [4,4] for x [2,7,5]");
    ck_assert_fails(mi_conv1d_causal(x, mi_zeros(MI_F64, MI_SHAPE(5, 0))), "conv1d_causal",
                    "K >= 1");
    ck_assert_fails(mi_conv1d_causal(mi_zeros(MI_F64, MI_SHAPE(7, 5)),
                                     mi_zeros(MI_F64, MI_SHAPE(5, 4))),
                    "conv1d_causal", "x must be [B, T, C], got [7,5]");
    ck_assert_fails(mi_conv1d_causal_wgrad(x, mi_zeros(MI_F64, MI_SHAPE(2, 6, 5)), 4),
                    "conv1d_causal_wgrad", "got g [2,7,5] and x [2,6,5]");
    ck_assert_fails(mi_conv1d_causal_wgrad(x, x, 0), "conv1d_causal_wgrad",
                    "K must be >= 1, got 0");
}
END_TEST

/* ---------------------------------------------------------------- rope */
START_TEST(rope_matches_naive_and_inverts)
{
    seed(7);
    const int64_t L = 2, T = 5, D = 6, h = 3;
    const double base = 100.0;
    mi_tensor *x = randn(MI_SHAPE(2, 5, 6));
    double want[60];
    for (int64_t l = 0; l < L; l++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < h; i++) {
                double th = (double)t * pow(base, -2.0 * (double)i / (double)D);
                int64_t o = (l * T + t) * D;
                double a = mi_get(x, o + i), b = mi_get(x, o + i + h);
                want[o + i] = a * cos(th) - b * sin(th);
                want[o + i + h] = a * sin(th) + b * cos(th);
            }
    mi_tensor *y = mi_rope(x, base, false);
    assert_values(y, want, 60, 1e-14, "rope");
    assert_values(mi_rope(mi_tensor_to(x, MI_F32), base, false), want, 60, 1e-6, "rope f32");
    double orig[60];
    for (int i = 0; i < 60; i++) orig[i] = mi_get(x, i);
    assert_values(mi_rope(y, base, true), orig, 60, 1e-14, "rope inverse");
    assert_values(mi_rope(mi_rope(x, base, true), base, false), orig, 60, 1e-14,
                  "rope after inverse");
    /* position 0 is left alone */
    for (int i = 0; i < 6; i++) ck_assert(mi_get(y, i) == mi_get(x, i));
}
END_TEST

START_TEST(rope_errors)
{
    ck_assert_fails(mi_rope(mi_zeros(MI_F64, MI_SHAPE(2, 4, 5)), 1e4, false), "rope",
                    "D must be even and >= 2, got [2,4,5]");
    ck_assert_fails(mi_rope(mi_zeros(MI_F64, MI_SHAPE(6)), 1e4, false), "rope",
                    "x must be [..., T, D], got [6]");
    ck_assert_fails(mi_rope(mi_zeros(MI_F64, MI_SHAPE(3, 4)), 0.0, false), "rope",
                    "base must be finite and > 0, got 0");
}
END_TEST

/* ---------------------------------------------------------------- attention */
static bool naive_masked(int64_t t, int64_t s, bool causal, int64_t window)
{
    return (causal && s > t) || (window > 0 && s <= t - window);
}

/* q [L, T, D], k [L, S, D], v [L, S, Dv] (L = product of leading dims). */
static void naive_attention(const mi_tensor *q, const mi_tensor *k, const mi_tensor *v,
                            bool causal, int64_t window, double *out)
{
    int r = q->rank;
    int64_t T = q->shape[r - 2], D = q->shape[r - 1], S = k->shape[r - 2], Dv = v->shape[r - 1];
    int64_t L = q->numel / (T * D);
    double p[64];
    for (int64_t l = 0; l < L; l++)
        for (int64_t t = 0; t < T; t++) {
            double m = -INFINITY, z = 0;
            for (int64_t s = 0; s < S; s++) {
                double dot = 0;
                for (int64_t e = 0; e < D; e++)
                    dot += mi_get(q, (l * T + t) * D + e) * mi_get(k, (l * S + s) * D + e);
                p[s] = naive_masked(t, s, causal, window) ? -INFINITY : dot / sqrt((double)D);
                if (p[s] > m) m = p[s];
            }
            for (int64_t s = 0; s < S; s++) z += p[s] = exp(p[s] - m);
            for (int64_t e = 0; e < Dv; e++) {
                double acc = 0;
                for (int64_t s = 0; s < S; s++) acc += p[s] / z * mi_get(v, (l * S + s) * Dv + e);
                out[(l * T + t) * Dv + e] = acc;
            }
        }
}

START_TEST(attention_matches_naive)
{
    static const struct {
        int64_t t, s;
        bool causal;
        int64_t window;
    } cases[] = {{7, 7, true, 0}, {7, 7, true, 3}, {7, 7, false, 0}, {5, 8, false, 2},
                 {6, 4, true, 0}, {6, 4, true, 3}, {1, 1, true, 1},  {7, 7, false, 3}};
    seed(8);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t T = cases[c].t, S = cases[c].s;
        mi_tensor *q = randn(4, (int64_t[]){2, 3, T, 5});
        mi_tensor *k = randn(4, (int64_t[]){2, 3, S, 5});
        mi_tensor *v = randn(4, (int64_t[]){2, 3, S, 3});
        double want[6 * 8 * 3];
        naive_attention(q, k, v, cases[c].causal, cases[c].window, want);
        mi_tensor *y = mi_attention(q, k, v, cases[c].causal, cases[c].window);
        assert_values(y, want, 6 * T * 3, 1e-13, "attention");
        ck_assert(y->rank == 4 && y->shape[2] == T && y->shape[3] == 3);
        assert_values(mi_attention(mi_tensor_to(q, MI_F32), mi_tensor_to(k, MI_F32),
                                   mi_tensor_to(v, MI_F32), cases[c].causal, cases[c].window),
                      want, 6 * T * 3, 1e-5, "attention f32");
    }
}
END_TEST

START_TEST(attention_window_at_least_t_is_causal)
{
    seed(9);
    mi_tensor *q = randn(MI_SHAPE(2, 6, 4)), *k = randn(MI_SHAPE(2, 6, 4)),
              *v = randn(MI_SHAPE(2, 6, 3));
    mi_tensor *c = mi_attention(q, k, v, true, 0);
    for (int64_t w = 6; w <= 9; w += 3) {
        mi_tensor *y = mi_attention(q, k, v, true, w);
        for (int i = 0; i < 36; i++) ck_assert(mi_get(y, i) == mi_get(c, i));
    }
    /* window 1 with causal: each query sees only its own key */
    mi_tensor *y1 = mi_attention(q, k, v, true, 1);
    for (int i = 0; i < 36; i++) ck_assert_close(mi_get(y1, i), mi_get(v, i), 1e-15);
}
END_TEST

/* The gradient recomputes P with ops: check it against the closed form on
 * one causal case (dv = Pᵀ g). */
START_TEST(attention_value_gradient)
{
    seed(10);
    mi_tensor *q = randn(MI_SHAPE(4, 3)), *k = randn(MI_SHAPE(4, 3));
    mi_tensor *v = mi_requires_grad(randn(MI_SHAPE(4, 2)), true), *g = randn(MI_SHAPE(4, 2)), *dv;
    mi_tensor *y = mi_attention(q, k, v, true, 0);
    ck_assert_int_eq(mi_grad(&y, &g, 1, &v, 1, false, &dv), 0);
    /* P from the naive loop with v = identity columns */
    double want[8] = {0};
    for (int s = 0; s < 4; s++) {
        mi_tensor *e = mi_zeros(MI_F64, MI_SHAPE(4, 1));
        mi_set(e, s, 1.0);
        double col[4];
        naive_attention(q, k, e, true, 0, col); /* col[t] = P[t, s] */
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < 2; j++) want[s * 2 + j] += col[t] * mi_get(g, t * 2 + j);
    }
    assert_values(dv, want, 8, 1e-13, "attention dv");
}
END_TEST

START_TEST(attention_mask_matches_naive)
{
    static const int64_t windows[] = {0, 1, 2, 9};
    for (int c = 0; c < 2; c++)
        for (int wi = 0; wi < 4; wi++) {
            mi_tensor *m = mi_attention_mask(MI_F32, 5, 6, c, windows[wi]);
            ck_assert_msg(m != NULL, "%s", mi_error());
            ck_assert(m->dtype == MI_F32 && m->rank == 2 && m->shape[0] == 5 && m->shape[1] == 6);
            for (int t = 0; t < 5; t++)
                for (int s = 0; s < 6; s++) {
                    double e = mi_get(m, t * 6 + s);
                    if (naive_masked(t, s, c, windows[wi])) ck_assert(isinf(e) && e < 0);
                    else ck_assert(e == 0.0);
                }
        }
}
END_TEST

START_TEST(attention_errors)
{
    mi_tensor *q = mi_zeros(MI_F64, MI_SHAPE(2, 4, 3)), *k = mi_zeros(MI_F64, MI_SHAPE(2, 5, 3)),
              *v = mi_zeros(MI_F64, MI_SHAPE(2, 5, 2));
    ck_assert_fails(mi_attention(q, mi_zeros(MI_F64, MI_SHAPE(2, 5, 4)), v, true, 0), "attention",
                    "q and k head dims differ (or are 0): q [2,4,3] k [2,5,4]");
    ck_assert_fails(mi_attention(q, k, mi_zeros(MI_F64, MI_SHAPE(2, 4, 2)), true, 0),
                    "attention", "k and v lengths differ: k [2,5,3] v [2,4,2]");
    ck_assert_fails(mi_attention(q, mi_zeros(MI_F64, MI_SHAPE(3, 5, 3)), v, true, 0),
                    "attention", "batch dims differ");
    ck_assert_fails(mi_attention(q, mi_zeros(MI_F64, MI_SHAPE(5, 3)), v, true, 0), "attention",
                    "of one rank >= 2");
    ck_assert_fails(mi_attention(q, k, v, true, -1), "attention", "window must be >= 0, got -1");
    ck_assert_fails(mi_attention(mi_zeros(MI_F64, MI_SHAPE(2, 7, 3)), k, v, false, 2),
                    "attention", "window 2 leaves query rows with no key");
    ck_assert_fails(mi_attention(q, k, mi_zeros(MI_F32, MI_SHAPE(2, 5, 2)), true, 0),
                    "attention", "dtypes differ");
    ck_assert_fails(mi_attention_mask(MI_I32, 3, 3, true, 0), "attention_mask", "i32");
    ck_assert_fails(mi_attention_mask(MI_F64, -1, 3, true, 0), "attention_mask", "negative");
    ck_assert_fails(mi_attention_mask(MI_F64, 3, 3, true, -2), "attention_mask",
                    "window must be >= 0");
}
END_TEST

/* ---------------------------------------------------------------- embedding */
START_TEST(embedding_gathers_rows)
{
    seed(11);
    mi_tensor *table = randn(MI_SHAPE(5, 3));
    int32_t ix[6] = {4, 0, 0, 2, 1, 4};
    mi_tensor *idx = mi_from_buffer(MI_I32, MI_SHAPE(2, 3), ix);
    mi_tensor *y = mi_embedding(table, idx);
    ck_assert_msg(y != NULL, "%s", mi_error());
    ck_assert(y->rank == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 3);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 3; j++) ck_assert(mi_get(y, i * 3 + j) == mi_get(table, ix[i] * 3 + j));
    mi_tensor *y0 = mi_embedding(table, mi_from_buffer(MI_I64, 0, NULL, (int64_t[]){3}));
    ck_assert_msg(y0 && y0->rank == 1 && y0->shape[0] == 3, "%s", mi_error());
    ck_assert(mi_get(y0, 2) == mi_get(table, 11));
    /* d⟨G, y⟩/d table: row r collects G at every position that picked r */
    mi_requires_grad(table, true);
    mi_tensor *ye = mi_embedding(table, idx), *G = randn(MI_SHAPE(2, 3, 3)), *dt;
    ck_assert_int_eq(mi_grad(&ye, &G, 1, &table, 1, false, &dt), 0);
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 3; j++) {
            double want = 0;
            for (int i = 0; i < 6; i++)
                if (ix[i] == r) want += mi_get(G, i * 3 + j);
            ck_assert_close(mi_get(dt, r * 3 + j), want, 1e-14);
        }
    ck_assert_fails(mi_embedding(table, mi_zeros(MI_F64, MI_SHAPE(2))), "embedding",
                    "indices must be i32 or i64, got f64");
    ck_assert_fails(mi_embedding(mi_zeros(MI_F64, MI_SHAPE(5)), idx), "embedding",
                    "table must be [V, D], got [5]");
    ck_assert_fails(mi_embedding(NULL, idx), "embedding", "NULL");
}
END_TEST

/* ---------------------------------------------------------------- registry checks */
static const char *const nn_ops[] = {"softmax",       "log_softmax",         "cross_entropy",
                                     "one_hot",       "layer_norm",          "rms_norm",
                                     "l2_normalize",  "conv1d_causal",       "conv1d_causal_wgrad",
                                     "rope",          "attention",           "attention_mask"};

START_TEST(nn_op_passes_checks)
{
    const mi_op *op = mi_op_find(nn_ops[_i]);
    ck_assert_msg(op != NULL, "%s is not registered", nn_ops[_i]);
    mi_op_check_result r = mi_op_check(op, 99u + (unsigned)_i);
    ck_assert_msg(r.ok, "%s", r.message);
}
END_TEST

/* cross_entropy's gradient, unrecorded in f32 with OWN (one pass), equals
 * the ops' (REF alone, and recorded with every backend): 300 rows of 70
 * classes that two threads split, every 7th row ignored, a seed of 0.5. */
START_TEST(cross_entropy_gradient_in_one_pass_matches_the_ops)
{
    mi_rng r;
    mi_rng_seed(&r, 61);
    mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(300, 70), 0, 3);
    mi_tensor *t = mi_zeros(MI_I64, MI_SHAPE(300)), *seed = mi_scalar(MI_F32, 0.5), *g[3];
    for (int64_t i = 0; i < 300; i++)
        ((int64_t *)t->data)[i] = i % 7 == 2 ? -100 : (int64_t)mi_rng_below(&r, 70);
    int threads = mi_threads();
    mi_set_threads(2);
    for (int c = 0; c < 3; c++) {
        mi_backends_allow(c == 1 ? 1u << MI_BACKEND_REF : MI_BACKEND_ALL);
        mi_requires_grad(x, true);
        mi_tensor *loss = mi_cross_entropy(x, t, -100);
        ck_assert_msg(loss && mi_grad(&loss, &seed, 1, &x, 1, c == 2, &g[c]) == 0, "%s",
                      mi_error());
    }
    mi_backends_allow(MI_BACKEND_ALL);
    mi_set_threads(threads);
    for (int c = 1; c < 3; c++) {
        int worst;
        double e = max_rel_err(g, g + c, 1, &worst, NULL);
        ck_assert_msg(e <= 1e-5, "against %s: the gradient differs by %g",
                      c == 1 ? "REF" : "the recorded ops", e);
    }
    ck_assert(mi_get(g[0], 2 * 70 + 5) == 0); /* an ignored row */
}
END_TEST

/* rms_norm_gain equals rms_norm(x) ⊙ w, and its gradients, unrecorded in
 * f32 with OWN (one pass, the gain's sum in fixed blocks of rows), equal the
 * ops' (REF alone, and recorded with every backend), over 300 rows (five
 * blocks) that two threads split; then its shape errors. */
START_TEST(rms_norm_gain_matches_its_ops)
{
    mi_rng r;
    mi_rng_seed(&r, 57);
    mi_tensor *in[2] = {mi_randn(&r, MI_F32, MI_SHAPE(3, 100, 48), 0, 1.5),
                        mi_randn(&r, MI_F32, MI_SHAPE(48), 1, 0.3)};
    mi_tensor *w = mi_randn(&r, MI_F32, MI_SHAPE(3, 100, 48), 0, 1), *g[3][2], *y[3];
    int threads = mi_threads();
    mi_set_threads(2);
    for (int c = 0; c < 3; c++) {
        mi_backends_allow(c == 1 ? 1u << MI_BACKEND_REF : MI_BACKEND_ALL);
        for (int i = 0; i < 2; i++) mi_requires_grad(in[i], true);
        y[c] = mi_rms_norm_gain(in[0], in[1], 1e-5);
        mi_tensor *loss = mi_sum(mi_mul(y[c], w), MI_ALL, false);
        ck_assert_msg(loss && mi_grad(&loss, NULL, 1, in, 2, c == 2, g[c]) == 0, "%s",
                      mi_error());
    }
    mi_backends_allow(MI_BACKEND_ALL);
    mi_set_threads(threads);
    mi_tensor *composed = mi_mul(mi_rms_norm(in[0], 1e-5), in[1]);
    int worst;
    ck_assert_msg(max_rel_err(y, &composed, 1, &worst, NULL) <= 1e-6, "y differs");
    for (int c = 1; c < 3; c++) {
        double e = max_rel_err(g[0], g[c], 2, &worst, NULL);
        ck_assert_msg(e <= 1e-5, "against %s: the gradient of input %d differs by %g",
                      c == 1 ? "REF" : "the recorded ops", worst, e);
    }
    ck_assert_ptr_null(mi_rms_norm_gain(in[0], mi_ones(MI_F32, MI_SHAPE(47)), 1e-5));
    ck_assert_error_has("rms_norm_gain: the gain must be f32 [48] for x f32 [3,100,48], got "
                        "f32 [47]");
    mi_error_clear();
}
END_TEST

/* Where x already has a gradient when rms_norm_gain's vjp runs (x ⊙ a is
 * recorded after the norm, so its vjp runs first), the norm's dx is added
 * into that gradient in the same pass (vjp_all_into, unrecorded f32 with
 * OWN); x's gradient equals REF's, where the engine adds the two. */
START_TEST(rms_norm_gain_adds_into_the_gradient_so_far)
{
    mi_rng r;
    mi_rng_seed(&r, 58);
    mi_tensor *in[2] = {mi_randn(&r, MI_F32, MI_SHAPE(3, 100, 48), 0, 1.5),
                        mi_randn(&r, MI_F32, MI_SHAPE(48), 1, 0.3)};
    mi_tensor *a = mi_randn(&r, MI_F32, MI_SHAPE(3, 100, 48), 0, 1);
    mi_tensor *w = mi_randn(&r, MI_F32, MI_SHAPE(3, 100, 48), 0, 1), *g[2][2];
    for (int c = 0; c < 2; c++) {
        mi_backends_allow(c == 1 ? 1u << MI_BACKEND_REF : MI_BACKEND_ALL);
        for (int i = 0; i < 2; i++) mi_requires_grad(in[i], true);
        mi_tensor *y = mi_rms_norm_gain(in[0], in[1], 1e-5), *z = mi_mul(in[0], a);
        mi_tensor *loss = mi_add(mi_sum(mi_mul(y, w), MI_ALL, false), mi_sum(z, MI_ALL, false));
        ck_assert_msg(loss && mi_grad(&loss, NULL, 1, in, 2, false, g[c]) == 0, "%s",
                      mi_error());
    }
    mi_backends_allow(MI_BACKEND_ALL);
    int worst;
    double e = max_rel_err(g[0], g[1], 2, &worst, NULL);
    ck_assert_msg(e <= 1e-5, "against REF: the gradient of input %d differs by %g", worst, e);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_slow("forward");
    tcase_add_test(tc, softmax_matches_naive);
    tcase_add_test(tc, softmax_is_shift_stable);
    tcase_add_test(tc, cross_entropy_matches_naive_with_ignored_rows);
    tcase_add_test(tc, cross_entropy_all_ignored_is_zero);
    tcase_add_test(tc, one_hot_values_and_errors);
    tcase_add_test(tc, norms_have_their_moments);
    tcase_add_test(tc, conv1d_causal_matches_naive);
    tcase_add_test(tc, conv1d_causal_tail_in_stretches);
    tcase_add_test(tc, conv1d_causal_wgrad_matches_naive);
    tcase_add_test(tc, rope_matches_naive_and_inverts);
    tcase_add_test(tc, attention_matches_naive);
    tcase_add_test(tc, attention_window_at_least_t_is_causal);
    tcase_add_test(tc, attention_value_gradient);
    tcase_add_test(tc, attention_mask_matches_naive);
    tcase_add_test(tc, embedding_gathers_rows);
    suite_add_tcase(s, tc);
    tc = tcase_slow("errors");
    tcase_add_test(tc, softmax_errors);
    tcase_add_test(tc, cross_entropy_errors);
    tcase_add_test(tc, norm_errors);
    tcase_add_test(tc, conv1d_errors);
    tcase_add_test(tc, rope_errors);
    tcase_add_test(tc, attention_errors);
    tcase_add_test(tc, rms_norm_gain_matches_its_ops);
    tcase_add_test(tc, rms_norm_gain_adds_into_the_gradient_so_far);
    tcase_add_test(tc, cross_entropy_gradient_in_one_pass_matches_the_ops);
    suite_add_tcase(s, tc);
    tc = tcase_slow("gradcheck");
    tcase_add_loop_test(tc, nn_op_passes_checks, 0, (int)(sizeof nn_ops / sizeof nn_ops[0]));
    suite_add_tcase(s, tc);
    return s;
}
