/* mi_scan's misuse gives messages naming it: no body, counts out of range,
 * xs of different N or T, no tokens, mixed dtypes, a body that fails,
 * returns NULL or a wrong shape (also when the backward runs it again),
 * second derivatives. (Its results: test_scan_body.c.) */
#include "harness.h"

static mi_tensor *randn(mi_rng *r, int rank, const int64_t *shape, double sd)
{
    return mi_requires_grad(mi_randn(r, MI_F64, rank, shape, 0, sd), true);
}

static int failing_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                        mi_tensor **y)
{
    (void)ctx, (void)c, (void)x, (void)c_out, (void)y;
    mi_error_set("no memory today");
    return -1;
}

/* carry_out from an op that fails (a matmul of mismatched shapes) */
static int null_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                     mi_tensor **y)
{
    (void)ctx;
    c_out[0] = mi_matmul(c[0], c[0]);
    y[0] = x[0];
    return 0;
}

static int wrong_shape_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                            mi_tensor **y)
{
    (void)ctx;
    c_out[0] = mi_sum(c[0], 0, false);
    y[0] = x[0];
    return 0;
}

/* y's shape changes after the first token */
static int changing_y_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                           mi_tensor **y)
{
    int *calls = ctx;
    c_out[0] = c[0];
    y[0] = (*calls)++ == 0 ? x[0] : mi_concat((mi_tensor *[]){x[0], x[0]}, 2, 1);
    return 0;
}

static int copy_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                     mi_tensor **y)
{
    (void)ctx;
    c_out[0] = mi_add(c[0], x[0]);
    y[0] = mi_mul(c_out[0], x[0]);
    return 0;
}

START_TEST(misuse_gives_messages)
{
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_tensor *c0 = randn(&r, MI_SHAPE(2, 3), 1), *x = randn(&r, MI_SHAPE(2, 5, 3), 1);
    mi_tensor *c, *y;
    mi_error_clear();
    ck_assert_int_eq(mi_scan(NULL, NULL, 1, &c0, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: no body");
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 0, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: takes");
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 33, &c0, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("got 33");
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 1, &x, -1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: takes");
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 1, &x, 1, -2, &c, &y), -1);
    ck_assert_error_has("mi_scan: segment -2");
    mi_tensor *xs_t[2] = {x, randn(&r, MI_SHAPE(2, 4, 3), 1)};
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 2, xs_t, 1, 0, &c, &y), -1);
    ck_assert_error_has("N and T (axes 0 and 1) differ");
    mi_tensor *xs_n[2] = {x, randn(&r, MI_SHAPE(3, 5, 3), 1)};
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 2, xs_n, 1, 0, &c, &y), -1);
    ck_assert_error_has("N and T (axes 0 and 1) differ");
    mi_tensor *flat = randn(&r, MI_SHAPE(5), 1);
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 1, &flat, 1, 0, &c, &y), -1);
    ck_assert_error_has("per-token inputs are [N, T, …]");
    mi_tensor *empty = mi_zeros(MI_F64, MI_SHAPE(2, 0, 3));
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 1, &empty, 1, 0, &c, &y), -1);
    ck_assert_error_has("T = 0");
    mi_tensor *c32 = mi_zeros(MI_F32, MI_SHAPE(2, 3));
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c32, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("one dtype");
    mi_tensor *none = NULL;
    mi_error_clear();
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &none, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("carry0[0] is NULL");

    mi_error_clear();
    ck_assert_int_eq(mi_scan(failing_body, NULL, 1, &c0, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: the body failed at token 0: no memory today");
    mi_error_clear();
    ck_assert_int_eq(mi_scan(null_body, NULL, 1, &c0, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: the body gave no carry_out[0] at token 0");
    ck_assert_error_has("matmul");
    mi_error_clear();
    ck_assert_int_eq(mi_scan(wrong_shape_body, NULL, 1, &c0, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: the body's carry_out[0] is f64 [3] at token 0, "
                        "the carry is f64 [2,3]");
    int calls = 0;
    mi_error_clear();
    ck_assert_int_eq(mi_scan(changing_y_body, &calls, 1, &c0, 1, &x, 1, 0, &c, &y), -1);
    ck_assert_error_has("mi_scan: the body's y[0] is [2,6] at token 1 and was [2,3] before");

    /* second derivatives through the scan */
    ck_assert_int_eq(mi_scan(copy_body, NULL, 1, &c0, 1, &x, 1, 0, &c, &y), 0);
    mi_tensor *loss = mi_sum(mi_square(y), MI_ALL, false), *g;
    mi_error_clear();
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, &x, 1, true, &g), -1);
    ck_assert_error_has("mi_scan: no second derivatives");
}
END_TEST

/* The backward runs the body again: a body that fails then makes mi_grad fail
 * with its message (T 5, segments of 3: the backward starts at token 3). */
static int flaky_body(void *ctx, mi_tensor *const *c, mi_tensor *const *x, mi_tensor **c_out,
                      mi_tensor **y)
{
    int *calls = ctx;
    if ((*calls)++ >= 5) {
        mi_error_set("the body failed on its second run");
        return -1;
    }
    return copy_body(NULL, c, x, c_out, y);
}

START_TEST(backward_failure_is_reported)
{
    mi_rng r;
    mi_rng_seed(&r, 2);
    mi_tensor *c0 = randn(&r, MI_SHAPE(2, 3), 1), *x = randn(&r, MI_SHAPE(2, 5, 3), 1);
    mi_tensor *c, *y, *g;
    int calls = 0;
    ck_assert_int_eq(mi_scan(flaky_body, &calls, 1, &c0, 1, &x, 1, 0, &c, &y), 0);
    mi_tensor *loss = mi_sum(mi_square(y), MI_ALL, false);
    mi_error_clear();
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, &x, 1, false, &g), -1);
    ck_assert_error_has("mi_scan: the body failed at token 3: the body failed on its second run");
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("scan_body_errors");
    TCase *tc = tcase_slow("scan_body_errors");
    tcase_add_test(tc, misuse_gives_messages);
    tcase_add_test(tc, backward_failure_is_reported);
    suite_add_tcase(s, tc);
    return s;
}
