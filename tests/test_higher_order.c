/* Placeholder: filled in with the higher-order suite. */
#include "harness.h"

Suite *make_suite(void) { return suite_create("higher_order"); }
