/* Placeholder: filled in with the shape suite. */
#include "harness.h"

Suite *make_suite(void) { return suite_create("shape"); }
