/* The fused continuum-memory level, cms_scan (Nested Learning Eq. 30–31):
 * - the op equals the same level written with the composed ops (a loop of
 *   mi_nl_mlp_read and mi_nl_mlp_step over the chunks, as cms.c's composed
 *   path) in f64 to ≤ 1e-12: y and the gradients of a random projection of y
 *   with respect to u, v, η, W1 and W2, at C ∈ {1, 3, 4} with T not a
 *   multiple of C (a last partial chunk that makes no update), B = 2, with
 *   and without the normalised (lms) step;
 * - it passes the framework's f64 gradcheck against central differences;
 * - its backward from what the recorded forward kept equals the backward
 *   that runs the forward again, in f64 and f32;
 * - mi_cms_forward gives the same output and gradients fused and composed
 *   (cms.composed), and the fused level records one op where the composed
 *   one records one per chunk;
 * - bad shapes, dtypes and attributes give messages, not aborts, and a
 *   second derivative is refused with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { B = 2, D = 4, H = 6 };
#define EPS 1e-6
#define HIDDEN_EPS MI_NL_MLP_HIDDEN_EPS

static mi_tensor *leaf(mi_tensor *t)
{
    t->requires_grad = true;
    return t;
}

typedef struct inputs {
    mi_tensor *in[5]; /* u, v, eta, w1, w2 */
    mi_tensor *gy;
    int64_t T, C;
    bool lms;
} inputs;

static void make_inputs(inputs *x, int64_t T, int64_t C, bool lms, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    x->T = T, x->C = C, x->lms = lms;
    x->in[0] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(B, T, D), 0, 1));
    x->in[1] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(B, T, D), 0, 1));
    x->in[2] = leaf(mi_rand(&r, MI_F64, MI_SHAPE(B, T), 0.1, lms ? 0.6 : 0.3));
    x->in[3] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(D, H), 0, 0.5));
    x->in[4] = leaf(mi_randn(&r, MI_F64, MI_SHAPE(H, D), 0, 0.5));
    x->gy = mi_randn(&r, MI_F64, MI_SHAPE(B, T, D), 0, 1);
}

/* The level with composed ops, chunk by chunk (cms.c's composed path):
 * read with the chunk's weights, then Eq. 31's step after a full chunk that
 * ends before T. */
static mi_tensor *composed(mi_tensor *const *in, int64_t C, bool lms)
{
    int64_t T = in[0]->shape[1], n_chunks = (T + C - 1) / C;
    mi_tensor **ys = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)n_chunks);
    mi_tensor *w1 = in[3], *w2 = in[4];
    for (int64_t j = 0; j < n_chunks; j++) {
        int64_t t0 = j * C, t1 = t0 + C < T ? t0 + C : T;
        mi_tensor *uc = mi_slice(in[0], 1, t0, t1);
        ys[j] = mi_nl_mlp_read(w1, w2, false, uc);
        ck_assert_msg(ys[j] != NULL, "%s", mi_error());
        if (t1 == T) break;
        ck_assert_msg(mi_nl_mlp_step(w1, w2, false, uc, mi_slice(in[1], 1, t0, t1),
                                     mi_slice(in[2], 1, t0, t1), lms, EPS, HIDDEN_EPS, &w1,
                                     &w2) == 0,
                      "%s", mi_error());
    }
    return n_chunks == 1 ? ys[0] : mi_concat(ys, (int)n_chunks, 1);
}

/* y, then the gradients of ⟨y, gy⟩ wrt the five inputs. */
static void results(const inputs *x, bool fused, mi_tensor **out)
{
    mi_tensor *y = fused ? mi_cms_scan(x->in[0], x->in[1], x->in[2], x->in[3], x->in[4], x->C,
                                       x->lms, EPS, HIDDEN_EPS)
                         : composed(x->in, x->C, x->lms);
    ck_assert_msg(y != NULL, "%s", mi_error());
    out[0] = y;
    ck_assert_msg(mi_grad(&y, (mi_tensor *[]){x->gy}, 1, x->in, 5, false, out + 1) == 0, "%s",
                  mi_error());
}

static const char *const what[6] = {"y", "du", "dv", "deta", "dw1", "dw2"};
static const int64_t chunks[] = {1, 3, 4};
static const int64_t lengths[] = {7, 10, 1};

/* _i: chunk (3) × lms (2) */
START_TEST(op_equals_composed_ops)
{
    int64_t C = chunks[_i % 3];
    bool lms = _i / 3 == 0;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        inputs x;
        make_inputs(&x, lengths[l], C, lms, 20u + (unsigned)_i * 5u + (unsigned)l);
        mi_tensor *ref[6], *got[6];
        results(&x, false, ref);
        results(&x, true, got);
        int worst = 0;
        double e = max_rel_err(got, ref, 6, &worst, NULL);
        printf("cms_scan C %lld %-6s T %2lld: max error %.2e (%s)\n", (long long)C,
               lms ? "lms" : "gd", (long long)x.T, e, what[worst]);
        ck_assert_msg(e <= 1e-12, "C %lld %s T %lld: %s differs by %.3g", (long long)C,
                      lms ? "lms" : "gd", (long long)x.T, what[worst], e);
        /* the gradients are not all zero (the check would be vacuous) */
        for (int i = 1; i < 6; i++) {
            double s = 0;
            for (int64_t j = 0; j < got[i]->numel; j++) s += fabs(mi_get(got[i], j));
            if ((i != 2 && i != 3) || x.T > C) /* dv, deta: only through an update */
                ck_assert_msg(s > 0, "%s is zero", what[i]);
        }
    }
}
END_TEST

typedef struct scan_ctx {
    int64_t C;
    bool lms;
} scan_ctx;

static int call_scan(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    (void)n;
    const scan_ctx *sc = c;
    out[0] = mi_cms_scan(in[0], in[1], in[2], in[3], in[4], sc->C, sc->lms, EPS, HIDDEN_EPS);
    return out[0] ? 1 : -1;
}

/* _i: chunk (3) × lms (2), T = 7 */
START_TEST(op_gradcheck)
{
    scan_ctx sc = {.C = chunks[_i % 3], .lms = _i / 3 == 0};
    inputs x;
    make_inputs(&x, 7, sc.C, sc.lms, 90u + (unsigned)_i);
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    o.quiet = true;
    mi_gradcheck_result g = mi_gradcheck(call_scan, &sc, x.in, 5, &o);
    printf("cms_scan C %lld %-3s gradcheck: %lld entries, max abs err %.2e\n", (long long)sc.C,
           sc.lms ? "lms" : "gd", (long long)g.entries, g.max_abs_err);
    ck_assert_msg(g.ok, "C %lld: %s", (long long)sc.C, g.message);
}
END_TEST

/* ---------------------------------------------------------------- in the CMS */
static int count_nodes(mi_tensor *y, const char *op)
{
    /* the graph's DOT names every recorded op once per node */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(mi_graph_dot(f, &y, 1), 0);
    fclose(f);
    int n = 0;
    char needle[64];
    snprintf(needle, sizeof needle, "label=\"%s\"", op);
    for (char *p = buf; (p = strstr(p, needle)) != NULL; p++) n++;
    free(buf);
    return n;
}

/* y and the gradients of ⟨y, g⟩ wrt x and every parameter. */
static int cms_results(const mi_cms *m, mi_tensor *x, mi_tensor *g, mi_tensor **out,
                       mi_tensor **y_out)
{
    int n;
    const mi_named_tensor *p = mi_cms_params(m, &n);
    mi_tensor *wrt[1 + MI_CMS_MAX_PARAMS];
    wrt[0] = x;
    for (int i = 0; i < n; i++) wrt[1 + i] = p[i].tensor;
    mi_tensor *y = mi_cms_forward(m, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    out[0] = y;
    *y_out = y;
    ck_assert_msg(mi_grad(&y, &g, 1, wrt, 1 + n, false, out + 1) == 0, "%s", mi_error());
    return 2 + n;
}

/* _i: rate (sum, mean) × lms */
START_TEST(cms_forward_fused_equals_composed)
{
    mi_cms_config c = mi_cms_config_default(D);
    c.hidden = H;
    c.rate_mean = _i & 1;
    c.lms = !(_i & 2);
    /* plain GD's step grows with the weights: at 0.2 the summed steps of a chunk of 4
       amplified rounding ~100-fold (differences ~1e-12 with any order of the sums),
       at 0.1 they stay ~1e-14 */
    c.eta = c.lms ? 0.4 : 0.1;
    ck_assert_int_eq(mi_cms_config_chunks(&c, "1,3,4"), 0);
    mi_rng r;
    mi_rng_seed(&r, 300u + (unsigned)_i);
    mi_cms fused;
    ck_assert_msg(mi_cms_init(&fused, &c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    mi_cms comp = fused; /* the same parameters */
    comp.config.composed = true;
    mi_tensor *x = leaf(mi_randn(&r, MI_F64, MI_SHAPE(B, 10, D), 0, 1));
    mi_tensor *g = mi_randn(&r, MI_F64, MI_SHAPE(B, 10, D), 0, 1);
    mi_tensor *ref[2 + MI_CMS_MAX_PARAMS], *got[2 + MI_CMS_MAX_PARAMS], *y_ref, *y_got;
    int n = cms_results(&comp, x, g, ref, &y_ref);
    ck_assert_int_eq(cms_results(&fused, x, g, got, &y_got), n);
    int worst = 0;
    double e = max_rel_err(got, ref, n, &worst, NULL);
    printf("cms {1,3,4} %s %s T 10: fused vs composed max error %.2e (result %d)\n",
           c.rate_mean ? "mean" : "sum", c.lms ? "lms" : "gd", e, worst);
    ck_assert_msg(e <= 1e-12, "result %d differs by %.3g", worst, e);
    /* one cms_scan per level fused; none, and one step per full chunk, composed */
    ck_assert_int_eq(count_nodes(y_got, "cms_scan"), 3);
    ck_assert_int_eq(count_nodes(y_ref, "cms_scan"), 0);
    ck_assert_int_gt(count_nodes(y_ref, "matmul_acc"), 2 * 9);
}
END_TEST

/* The backward from what the forward kept (mi_cms_scan recording: no
 * second forward, each segment's weights by undoing its steps) against the
 * backward that runs the forward again (mi_cms_scan_backward alone), f64 and
 * f32, on the kernels the backends pick: T = 40 (several segments of
 * checkpoints), C ∈ {1, 3}. _i: chunk (2) × dtype (2) */
START_TEST(kept_forward_equals_rerun)
{
    int64_t C = _i % 2 ? 3 : 1, T = 40;
    mi_dtype dt = _i / 2 ? MI_F32 : MI_F64;
    inputs x;
    make_inputs(&x, T, C, true, 70u + (unsigned)_i);
    mi_tensor *in[5], *got[5];
    for (int i = 0; i < 5; i++) in[i] = leaf(mi_tensor_to(x.in[i], dt));
    mi_tensor *gy = mi_tensor_to(x.gy, dt);
    mi_tensor *y = mi_cms_scan(in[0], in[1], in[2], in[3], in[4], C, true, EPS, HIDDEN_EPS);
    ck_assert_msg(y && mi_grad(&y, &gy, 1, in, 5, false, got) == 0, "%s", mi_error());
    mi_tensor *packed = mi_cms_scan_backward(in[0], in[1], in[2], in[3], in[4], gy, C, true,
                                             EPS, HIDDEN_EPS);
    ck_assert_msg(packed != NULL, "%s", mi_error());
    int64_t off = 0;
    for (int i = 0; i < 5; i++) {
        double worst = 0, scale = 0;
        for (int64_t j = 0; j < in[i]->numel; j++) {
            double a = mi_get(got[i], j), b = mi_get(packed, off + j);
            worst = fmax(worst, fabs(a - b));
            scale = fmax(scale, fabs(b));
        }
        off += in[i]->numel;
        ck_assert_msg(scale > 0, "C %lld: %s is zero", (long long)C, what[1 + i]);
        ck_assert_msg(worst <= (dt == MI_F64 ? 1e-12 : 1e-4) * scale,
                      "C %lld %s: %s differs by %.3g (largest %.3g)", (long long)C,
                      mi_dtype_name(dt), what[1 + i], worst, scale);
    }
}
END_TEST

/* ---------------------------------------------------------------- errors */
START_TEST(bad_inputs_give_messages)
{
    inputs x;
    make_inputs(&x, 5, 2, true, 3);
    mi_tensor **in = x.in;
    mi_error_clear();
    mi_tensor *v_bad = mi_zeros(MI_F64, MI_SHAPE(B, 5, D + 1));
    ck_assert_ptr_null(mi_cms_scan(in[0], v_bad, in[2], in[3], in[4], 2, true, EPS, 1));
    ck_assert_error_has("cms_scan: shapes do not fit");
    ck_assert_error_has("[2,5,5]");
    mi_error_clear();
    mi_tensor *eta_bad = mi_zeros(MI_F64, MI_SHAPE(B, 5, 1));
    ck_assert_ptr_null(mi_cms_scan(in[0], in[1], eta_bad, in[3], in[4], 2, true, EPS, 1));
    ck_assert_error_has("eta");
    mi_error_clear();
    mi_tensor *w2_bad = mi_zeros(MI_F64, MI_SHAPE(H + 1, D));
    ck_assert_ptr_null(mi_cms_scan(in[0], in[1], in[2], in[3], w2_bad, 2, true, EPS, 1));
    ck_assert_error_has("w2 [7,4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_scan(in[0], in[1], in[2], mi_tensor_to(in[3], MI_F32), in[4], 2,
                                   true, EPS, 1));
    ck_assert_error_has("dtype");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_scan(in[0], in[1], in[2], in[3], in[4], 0, true, EPS, 1));
    ck_assert_error_has("chunk C = 0");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_scan(in[0], in[1], in[2], in[3], in[4], 2, true, 0, 1));
    ck_assert_error_has("eps");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_scan(in[0], NULL, in[2], in[3], in[4], 2, true, EPS, 1));
    ck_assert_error_has("cms_scan");
    mi_error_clear();
    ck_assert_ptr_null(mi_cms_scan_backward(in[0], in[1], in[2], in[3], in[4],
                                            mi_zeros(MI_F64, MI_SHAPE(B, 4, D)), 2, true, EPS,
                                            1));
    ck_assert_error_has("cms_scan_backward: shapes do not fit");
    assert_no_second_derivative(mi_cms_scan(in[0], in[1], in[2], in[3], in[4], 2, true, EPS, 1),
                                in[3]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("cms_scan");
    TCase *tc = tcase_slow("cms_scan");
    tcase_add_loop_test(tc, op_equals_composed_ops, 0, 6);
    tcase_add_loop_test(tc, op_gradcheck, 0, 6);
    tcase_add_loop_test(tc, cms_forward_fused_equals_composed, 0, 4);
    tcase_add_loop_test(tc, kept_forward_equals_rerun, 0, 4);
    tcase_add_test(tc, bad_inputs_give_messages);
    suite_add_tcase(s, tc);
    return s;
}
