/* Registry-driven: every listed op is defined, has a vjp or is marked
 * non-differentiable, has examples, passes gradcheck and gradgradcheck in
 * f64, and its f32 kernel agrees with its f64 kernel. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

START_TEST(every_listed_op_is_defined_and_covered)
{
    char missing[2048] = "";
    for (int i = 0; i < mi_op_count(); i++) {
        const mi_op *op = mi_op_at(i);
        if (!op || !op->examples || !op->shape || !op->kernel[0][0] || !op->kernel[0][1] ||
            (!mi_op_differentiable(op) && !(op->flags & MI_OP_NONDIFF)))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s",
                     mi_op_listed_name(i));
    }
    ck_assert_msg(missing[0] == '\0', "ops missing a definition, kernel, vjp or examples:%s",
                  missing);
}
END_TEST

START_TEST(names_are_unique_and_found)
{
    for (int i = 0; i < mi_op_count(); i++) {
        const mi_op *op = mi_op_at(i);
        if (!op) continue;
        ck_assert_str_eq(op->name, mi_op_listed_name(i));
        ck_assert_ptr_eq(mi_op_find(op->name), op);
    }
    ck_assert_ptr_null(mi_op_find("no-such-op"));
}
END_TEST

START_TEST(op_passes_checks)
{
    const mi_op *op = mi_op_at(_i);
    if (!op) return; /* reported by the coverage test */
    mi_op_check_result r = mi_op_check(op, 1234u + (unsigned)_i);
    ck_assert_msg(r.ok, "%s", r.message);
}
END_TEST

START_TEST(null_input_propagates)
{
    const mi_op *op = mi_op_at(_i);
    if (!op) return;
    mi_tensor *in[MI_MAX_INPUTS] = {0};
    mi_attrs a = {0};
    mi_rng r;
    mi_rng_seed(&r, 7);
    int n = op->examples(&r, 0, in, &a);
    ck_assert_int_gt(n, 0);
    for (int i = 0; i < n; i++) {
        mi_tensor *saved = in[i];
        in[i] = NULL;
        mi_error_clear();
        ck_assert_ptr_null(mi_op_call(op, in, n, &a));
        ck_assert_error_has(op->name);
        ck_assert_error_has("NULL");
        in[i] = saved;
    }
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_slow("coverage");
    tcase_add_test(tc, every_listed_op_is_defined_and_covered);
    tcase_add_test(tc, names_are_unique_and_found);
    suite_add_tcase(s, tc);
    tc = tcase_slow("per-op");
    tcase_add_loop_test(tc, op_passes_checks, 0, mi_op_count());
    tcase_add_loop_test(tc, null_input_propagates, 0, mi_op_count());
    suite_add_tcase(s, tc);
    return s;
}
