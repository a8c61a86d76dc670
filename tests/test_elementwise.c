/* Placeholder: filled in with the elementwise suite. */
#include "harness.h"

Suite *make_suite(void) { return suite_create("elementwise"); }
