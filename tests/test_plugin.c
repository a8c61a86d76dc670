/* mi_plugin_load and MIRAS_PLUGINS as values (components.h "plugins"): a
 * plugin's components are found by name once it is loaded and gone after
 * mi_registry_reset (which closes it: the suite runs unforked, under
 * LeakSanitizer); loading it twice initialises it once; a missing file, an
 * object without mi_plugin_init and a failing init are -1 with a message
 * naming the path, and a failing init's registrations are dropped;
 * mi_plugin_load_env takes MIRAS_PLUGINS's failure as a value and the
 * registry goes on; the list is read again after a reset.
 * CAUCHY_PLUGIN: examples/custom_component.c built with -DMIRAS_PLUGIN;
 * FAILING_PLUGIN: tests/plugin_failing.c. */
#include "harness.h"

static void reset(void)
{
    unsetenv("MIRAS_PLUGINS");
    mi_registry_reset();
    mi_error_clear();
}

START_TEST(a_plugin_registers_until_reset)
{
    ck_assert_ptr_null(mi_bias_find("cauchy"));
    ck_assert_msg(mi_plugin_load(CAUCHY_PLUGIN) == 0, "%s", mi_error());
    const mi_bias_kind *b = mi_bias_find("cauchy");
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(mi_preset_find("titans-cauchy"));
    /* its key, as a built-in's */
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "bias=cauchy");
    config_set(&c, "cauchy_c=0.25");
    ck_assert_close(config_real(&c, "cauchy_c"), 0.25, 0);
    /* the same object again: loaded once, not a clash of its names */
    ck_assert_msg(mi_plugin_load(CAUCHY_PLUGIN) == 0, "%s", mi_error());
    ck_assert_ptr_eq(mi_bias_find("cauchy"), b);
    mi_registry_reset();
    ck_assert_ptr_null(mi_bias_find("cauchy"));
    ck_assert_ptr_null(mi_preset_find("titans-cauchy"));
    ck_assert_ptr_nonnull(mi_preset_find("titans"));
}
END_TEST

START_TEST(a_plugin_that_does_not_load_is_an_error)
{
    const char *missing = "/nonexistent/libnothing.so";
    ck_assert_int_eq(mi_plugin_load(missing), -1);
    ck_assert_error_has("plugin '/nonexistent/libnothing.so': cannot load: ");
    ck_assert_error_has("No such file");
    mi_error_clear();
    ck_assert_int_eq(mi_plugin_load(NULL), -1);
    ck_assert_error_has("plugin: no path");
    mi_error_clear();
    /* a shared object that is not a plugin: the test program's own library */
    ck_assert_int_eq(mi_plugin_load(MIRAS_LIBRARY), -1);
    ck_assert_error_has("': no mi_plugin_init");
    ck_assert_error_has(MIRAS_LIBRARY);
}
END_TEST

START_TEST(a_failing_init_leaves_nothing)
{
    int biases = 0, presets = 0;
    while (mi_bias_at(biases)) biases++;
    while (mi_preset_at(presets)) presets++;
    ck_assert_int_eq(mi_plugin_load(FAILING_PLUGIN), -1);
    ck_assert_error_has("plugin '" FAILING_PLUGIN "': mi_plugin_init: register: ");
    ck_assert_error_has("test-plugin-nowhere");
    /* the bias it registered before failing is gone (its object is closed) */
    ck_assert_ptr_null(mi_bias_find("test-plugin-partial"));
    int b = 0, p = 0;
    while (mi_bias_at(b)) b++;
    while (mi_preset_at(p)) p++;
    ck_assert_int_eq(b, biases);
    ck_assert_int_eq(p, presets);
    /* and a good plugin still loads after it */
    mi_error_clear();
    ck_assert_msg(mi_plugin_load(CAUCHY_PLUGIN) == 0, "%s", mi_error());
    ck_assert_ptr_nonnull(mi_bias_find("cauchy"));
}
END_TEST

START_TEST(the_environment_list)
{
    /* read at the first use after a reset */
    mi_registry_reset();
    setenv("MIRAS_PLUGINS", ":" CAUCHY_PLUGIN ":", 1);
    ck_assert_ptr_nonnull(mi_bias_find("cauchy"));
    ck_assert_int_eq(mi_plugin_load_env(), 0);
    /* again after the next reset, and not when the variable is gone */
    mi_registry_reset();
    ck_assert_ptr_nonnull(mi_preset_find("titans-cauchy"));
    unsetenv("MIRAS_PLUGINS");
    mi_registry_reset();
    ck_assert_ptr_null(mi_bias_find("cauchy"));

    /* a failure taken as a value: the loads before it stay, the registry goes on */
    mi_registry_reset();
    setenv("MIRAS_PLUGINS", CAUCHY_PLUGIN ":/nonexistent/libnothing.so", 1);
    ck_assert_int_eq(mi_plugin_load_env(), -1);
    ck_assert_error_has("MIRAS_PLUGINS: plugin '/nonexistent/libnothing.so': cannot load: ");
    mi_error_clear();
    ck_assert_int_eq(mi_plugin_load_env(), -1);   /* the first outcome, again */
    ck_assert_error_has("/nonexistent/libnothing.so");
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_bias_find("cauchy"));
    ck_assert_ptr_nonnull(mi_bias_find("l2"));
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("plugin");
    TCase *tc = tcase_slow("plugin");
    tcase_add_checked_fixture(tc, reset, reset); /* beside tcase_slow's scope */
    tcase_add_test(tc, a_plugin_registers_until_reset);
    tcase_add_test(tc, a_plugin_that_does_not_load_is_an_error);
    tcase_add_test(tc, a_failing_init_leaves_nothing);
    tcase_add_test(tc, the_environment_list);
    suite_add_tcase(s, tc);
    return s;
}
