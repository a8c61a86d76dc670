/* Higher-order gradients, the capability the models layer needs: the outer
 * loop differentiates through an inner gradient step. */
#include <sys/resource.h>

#include "harness.h"

/* A 2-layer MLP f(x) = W2 tanh(W1 x), x [n, d] as rows: x W1ᵀ → tanh → W2ᵀ. */
static mi_tensor *mlp(mi_tensor *w1, mi_tensor *w2, mi_tensor *x)
{
    return mi_matmul_t(mi_tanh(mi_matmul_t(x, w1, false, true)), w2, false, true);
}

static mi_tensor *mse(mi_tensor *pred, mi_tensor *y)
{
    return mi_mean(mi_square(mi_sub(pred, y)), MI_ALL, false);
}

typedef struct meta_ctx {
    mi_tensor *x_in, *y_in, *x_out, *y_out;
} meta_ctx;

/* L_out(W − η ∇_W L_in(W)), inputs W1, W2, η. */
static int meta_loss(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    meta_ctx *m = c;
    mi_tensor *w1 = in[0], *w2 = in[1], *eta = in[2], *g[2];
    mi_tensor *l_in = mse(mlp(w1, w2, m->x_in), m->y_in);
    if (mi_grad(&l_in, NULL, 1, (mi_tensor *[]){w1, w2}, 2, true, g) != 0) return -1;
    mi_tensor *w1n = mi_sub(w1, mi_mul(eta, g[0]));
    mi_tensor *w2n = mi_sub(w2, mi_mul(eta, g[1]));
    out[0] = mse(mlp(w1n, w2n, m->x_out), m->y_out);
    return out[0] ? 1 : -1;
}

START_TEST(gradient_through_an_inner_gradient_step)
{
    mi_rng r;
    mi_rng_seed(&r, 11);
    meta_ctx m = {
        .x_in = mi_randn(&r, MI_F64, MI_SHAPE(5, 3), 0, 1),
        .y_in = mi_randn(&r, MI_F64, MI_SHAPE(5, 2), 0, 1),
        .x_out = mi_randn(&r, MI_F64, MI_SHAPE(4, 3), 0, 1),
        .y_out = mi_randn(&r, MI_F64, MI_SHAPE(4, 2), 0, 1),
    };
    mi_tensor *in[3] = {
        mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(4, 3), 0, 0.7), true),
        mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(2, 4), 0, 0.7), true),
        mi_requires_grad(mi_scalar(MI_F64, 0.3), true),
    };
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    mi_gradcheck_result res = mi_gradcheck(meta_loss, &m, in, 3, &o);
    ck_assert_msg(res.ok, "%s", res.message);
    ck_assert_int_eq(res.entries, 12 + 8 + 1);
}
END_TEST

/* f(x) = Σ tanh(x)·x² ; H v from reverse-over-reverse vs the central
 * difference of gradients (∇f(x + εv) − ∇f(x − εv)) / 2ε. */
static mi_tensor *hv_f(mi_tensor *x) { return mi_sum(mi_mul(mi_tanh(x), mi_square(x)), MI_ALL, false); }

START_TEST(hessian_vector_product_matches_finite_differences)
{
    mi_rng r;
    mi_rng_seed(&r, 5);
    mi_tensor *x = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(7), 0, 1), true);
    mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(7), 0, 1);
    mi_tensor *y = hv_f(x), *g, *hv;
    ck_assert_int_eq(mi_grad(&y, NULL, 1, &x, 1, true, &g), 0);
    mi_tensor *gv = mi_sum(mi_mul(g, v), MI_ALL, false);
    ck_assert_int_eq(mi_grad(&gv, NULL, 1, &x, 1, false, &hv), 0);
    const double eps = 1e-6;
    for (int i = 0; i < 7; i++) {
        double fd[2];
        for (int side = 0; side < 2; side++) {
            mi_tensor *xp = mi_requires_grad(mi_add(mi_detach(x), mi_mul_scalar(v, side ? -eps : eps)), true);
            mi_tensor *yp = hv_f(xp), *gp;
            ck_assert_int_eq(mi_grad(&yp, NULL, 1, &xp, 1, false, &gp), 0);
            fd[side] = mi_get(gp, i);
        }
        ck_assert_close(mi_get(hv, i), (fd[0] - fd[1]) / (2 * eps), 1e-6);
    }
}
END_TEST

/* d³/dx³ tanh(x) = −2(1 − t²)(1 − 3t²), and d³/dx³ x·eˣ = (x + 3)eˣ. */
START_TEST(third_derivatives_of_composites)
{
    const double xs[] = {-1.3, 0.2, 0.9};
    for (int k = 0; k < 3; k++) {
        double x0 = xs[k], t = tanh(x0);
        for (int which = 0; which < 2; which++) {
            mi_tensor *x = mi_requires_grad(mi_scalar(MI_F64, x0), true), *d = NULL;
            mi_tensor *y = which == 0 ? mi_tanh(x) : mi_mul(x, mi_exp(x));
            for (int order = 0; order < 3; order++) {
                ck_assert_int_eq(mi_grad(&y, NULL, 1, &x, 1, true, &d), 0);
                y = d;
            }
            double want = which == 0 ? -2 * (1 - t * t) * (1 - 3 * t * t) : (x0 + 3) * exp(x0);
            ck_assert_close(mi_item(d), want, 1e-10);
        }
    }
}
END_TEST

static long peak_rss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* 1,000 forward+backward steps of the MLP in a step scope that is reset
 * every step: after warm-up no new system memory, and peak RSS stays flat. */
START_TEST(step_scope_keeps_memory_flat)
{
    mi_rng r;
    mi_rng_seed(&r, 3);
    mi_scope *params = mi_scope_new("params"), *step = mi_scope_new("step");
    mi_scope_enter(params);
    mi_tensor *w1 = mi_requires_grad(mi_randn(&r, MI_F32, MI_SHAPE(32, 8), 0, 0.3), true);
    mi_tensor *w2 = mi_requires_grad(mi_randn(&r, MI_F32, MI_SHAPE(4, 32), 0, 0.3), true);
    mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(64, 8), 0, 1);
    mi_tensor *y = mi_randn(&r, MI_F32, MI_SHAPE(64, 4), 0, 1);
    mi_scope_leave();
    size_t allocs_after_warmup = 0;
    long rss_after_warmup = 0;
    for (int i = 0; i < 1000; i++) {
        mi_scope_enter(step);
        mi_tensor *loss = mse(mlp(w1, w2, x), y);
        ck_assert_int_eq(mi_backward(loss), 0);
        mi_scope_leave();
        mi_scope_reset(step);
        if (i == 10) {
            allocs_after_warmup = mi_scope_stats_get(step).system_allocs;
            rss_after_warmup = peak_rss_kb();
        }
    }
    ck_assert_int_eq(mi_scope_stats_get(step).system_allocs, allocs_after_warmup);
    ck_assert_int_eq(mi_scope_stats_get(params).system_allocs, 1);
#ifndef __SANITIZE_ADDRESS__
    /* (ASan keeps freed blocks in quarantine, so RSS is no measure there;
     * the system-allocation count above and LeakSanitizer still apply.) */
    ck_assert_msg(peak_rss_kb() - rss_after_warmup < 2048, "peak RSS grew by %ld kB",
                  peak_rss_kb() - rss_after_warmup);
#else
    (void)rss_after_warmup;
#endif
    mi_scope_free(step);
    mi_scope_free(params);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("higher_order");
    TCase *tc = tcase_slow("higher-order");
    tcase_add_test(tc, gradient_through_an_inner_gradient_step);
    tcase_add_test(tc, hessian_vector_product_matches_finite_differences);
    tcase_add_test(tc, third_derivatives_of_composites);
    tcase_add_test(tc, step_scope_keeps_memory_flat);
    suite_add_tcase(s, tc);
    return s;
}
