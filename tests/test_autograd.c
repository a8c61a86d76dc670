/* The engine: backward accumulation, un-broadcasting, grad with
 * create_graph, higher order. */
#include <string.h>

#include "harness.h"

START_TEST(backward_accumulates_and_unbroadcasts)
{
    mi_tensor *a = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(2, 3), 2.0), true);
    mi_tensor *b = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(3), 5.0), true);
    /* loss = Σ (a * b + a) → dL/da = b + 1, dL/db = Σ_rows a */
    mi_tensor *y = mi_add(mi_mul(a, b), a);
    mi_tensor *loss = mi_sum(y, MI_ALL, false);
    ck_assert_msg(loss, "%s", mi_error());
    ck_assert_int_eq(mi_backward(loss), 0);
    ck_assert_ptr_nonnull(a->grad);
    ck_assert_int_eq(b->grad->rank, 1);
    for (int i = 0; i < 6; i++) ck_assert(mi_get(a->grad, i) == 6.0);
    for (int i = 0; i < 3; i++) ck_assert(mi_get(b->grad, i) == 4.0);
    ck_assert_int_eq(mi_backward(loss), 0); /* accumulates */
    ck_assert(mi_get(a->grad, 0) == 12.0);
    mi_zero_grad(&a, 1);
    ck_assert(mi_get(a->grad, 0) == 0.0);
}
END_TEST

START_TEST(grad_of_unrelated_input_is_zero)
{
    mi_tensor *x = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(1), 3.0), true);
    mi_tensor *u = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(2), 1.0), true);
    mi_tensor *y = mi_mul(x, x), *g[2];
    ck_assert_int_eq(mi_grad(&y, NULL, 1, (mi_tensor *[]){x, u}, 2, false, g), 0);
    ck_assert(mi_get(g[0], 0) == 6.0);
    ck_assert(mi_get(g[1], 0) == 0.0 && g[1]->numel == 2);
    ck_assert(!g[0]->requires_grad);
}
END_TEST

START_TEST(no_grad_records_nothing)
{
    mi_tensor *x = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(2), 3.0), true);
    bool was = mi_set_grad_enabled(false);
    mi_tensor *y = mi_mul(x, x);
    mi_set_grad_enabled(was);
    ck_assert_ptr_null(y->node);
    ck_assert(!y->requires_grad);
}
END_TEST

/* x³: second derivative 6x, third 6, by repeated create_graph. */
START_TEST(third_derivative_of_cube)
{
    mi_tensor *x = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(1), 1.7), true);
    mi_tensor *y = mi_mul(mi_mul(x, x), x), *d1, *d2, *d3;
    ck_assert_int_eq(mi_grad(&y, NULL, 1, &x, 1, true, &d1), 0);
    ck_assert_int_eq(mi_grad(&d1, NULL, 1, &x, 1, true, &d2), 0);
    ck_assert_int_eq(mi_grad(&d2, NULL, 1, &x, 1, true, &d3), 0);
    ck_assert_close(mi_item(d1), 3 * 1.7 * 1.7, 1e-12);
    ck_assert_close(mi_item(d2), 6 * 1.7, 1e-12);
    ck_assert_close(mi_item(d3), 6.0, 1e-12);
}
END_TEST

/* A gradient w.r.t. an intermediate visits only the nodes after it: an
 * inner-loop gradient never walks the outer graph that produced its input. */
START_TEST(grad_visits_only_nodes_between_inputs_and_outputs)
{
    mi_tensor *x = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(3), 0.5), true);
    mi_tensor *h = x;
    for (int i = 0; i < 100; i++) h = mi_tanh(mi_add(h, x));
    mi_tensor *side = mi_exp(x); /* created after h, but independent of it */
    mi_tensor *loss = mi_sum(mi_add(mi_mul(h, h), side), MI_ALL, false), *g;
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, &h, 1, true, &g), 0);
    ck_assert_int_eq(mi_grad_last_nodes(), 3); /* sum, add, mul */
    for (int i = 0; i < 3; i++) ck_assert_close(mi_get(g, i), 2 * mi_get(h, i), 1e-15);
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, &x, 1, false, &g), 0);
    ck_assert_int_eq(mi_grad_last_nodes(), 204);
}
END_TEST

/* A thread count set before the first op survives it (the environment is
 * read first, never after the caller's setting). Check forks each test, so
 * here mi_set_threads is the process's first miras call. */
START_TEST(thread_setting_survives_the_first_op)
{
    mi_set_threads(1);
    mi_tensor *x = mi_full(MI_F32, MI_SHAPE(4), 1.0);
    ck_assert_ptr_nonnull(mi_add(x, x));
    ck_assert_int_eq(mi_threads(), 1);
    mi_set_threads(0); /* back to every core */
}
END_TEST

START_TEST(grad_rejects_bad_arguments)
{
    mi_tensor *x = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(3), 1.0), true);
    mi_tensor *y = mi_mul(x, x), *g;
    ck_assert_int_eq(mi_grad(&y, NULL, 1, &x, 1, false, &g), -1);
    ck_assert_error_has("grad_outputs");
    mi_error_clear();
    ck_assert_int_eq(mi_backward(NULL), -1);
    mi_error_clear();
    ck_assert_ptr_null(mi_requires_grad(mi_arange(MI_I64, 3), true));
    mi_error_clear();
}
END_TEST

START_TEST(dot_export_names_ops_and_shapes)
{
    mi_tensor *x = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(2, 3), 1.0), true);
    mi_tensor *y = mi_mul(mi_add(x, x), x);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(mi_graph_dot(f, &y, 1), 0);
    fclose(f);
    ck_assert_msg(strstr(buf, "digraph") && strstr(buf, "\"mul\"") && strstr(buf, "\"add\"") &&
                      strstr(buf, "f64 [2,3]"),
                  "%s", buf);
    free(buf);
}
END_TEST

/* A gradient slot holding a view of all of another tensor's storage (a
 * reshape's vjp) takes the next contribution in place when that slot alone
 * holds the storage, and never while another slot does. w1 and w2 are read
 * by a product (w1 only) and then through reshapes into one sum, whose vjp
 * hands both reshapes the same gradient: w1's and w2's first gradients are
 * views of one tensor, so the product's term must not land in w2's. Then a
 * reshape of w1 alone, whose view does take the product's term in place. */
START_TEST(gradients_of_whole_views_add_in_place_only_when_alone)
{
    mi_tensor *w1 = mi_requires_grad(mi_arange(MI_F64, 6), true);
    mi_tensor *w2 = mi_requires_grad(mi_full(MI_F64, MI_SHAPE(6), 1.0), true);
    w1 = mi_requires_grad(mi_detach(mi_reshape(w1, MI_SHAPE(2, 3))), true);
    w2 = mi_requires_grad(mi_detach(mi_reshape(w2, MI_SHAPE(2, 3))), true);
    mi_tensor *x = mi_full(MI_F64, MI_SHAPE(3, 2), 0.5);
    mi_tensor *c = mi_mul_scalar(mi_arange(MI_F64, 6), 0.25);
    for (int shared = 1; shared >= 0; shared--) {
        mi_tensor *product = mi_sum(mi_matmul(w1, x), MI_ALL, false);   /* ∂/∂w1 = 1 xᵀ = 1 */
        mi_tensor *flat = mi_reshape(w1, MI_SHAPE(6));
        if (shared) flat = mi_add(flat, mi_reshape(w2, MI_SHAPE(6)));
        mi_tensor *loss = mi_add(product, mi_sum(mi_mul(flat, c), MI_ALL, false));
        mi_tensor *g[2];
        ck_assert_msg(loss, "%s", mi_error());
        ck_assert_int_eq(mi_grad(&loss, NULL, 1, (mi_tensor *[]){w1, w2}, 2, false, g), 0);
        for (int i = 0; i < 6; i++) {
            ck_assert_double_eq(mi_get(g[0], i), (0.25 * i + 1));   /* c + 1 */
            ck_assert_double_eq(mi_get(g[1], i), (shared ? 0.25 * i : 0)); /* c, or none */
        }
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_slow("engine");
    tcase_add_test(tc, backward_accumulates_and_unbroadcasts);
    tcase_add_test(tc, grad_of_unrelated_input_is_zero);
    tcase_add_test(tc, no_grad_records_nothing);
    tcase_add_test(tc, third_derivative_of_cube);
    tcase_add_test(tc, grad_visits_only_nodes_between_inputs_and_outputs);
    tcase_add_test(tc, thread_setting_survives_the_first_op);
    tcase_add_test(tc, grad_rejects_bad_arguments);
    tcase_add_test(tc, dot_export_names_ops_and_shapes);
    tcase_add_test(tc, gradients_of_whole_views_add_in_place_only_when_alone);
    suite_add_tcase(s, tc);
    return s;
}
