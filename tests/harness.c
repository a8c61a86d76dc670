#include <stdlib.h>
#include <string.h>

#include "harness.h"

mi_scope *test_scope;

void scope_setup(void)
{
    mi_error_clear();
    mi_set_grad_enabled(true);
    test_scope = mi_scope_new("test");
    mi_scope_enter(test_scope);
}

void scope_teardown(void)
{
    mi_scope_leave();
    mi_scope_free(test_scope);
    test_scope = NULL;
}

TCase *tcase_slow(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, scope_setup, scope_teardown);
    return tc;
}

int main(void)
{
    SRunner *sr = srunner_create(make_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
