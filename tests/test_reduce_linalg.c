/* Placeholder: filled in with the reduce_linalg suite. */
#include "harness.h"

Suite *make_suite(void) { return suite_create("reduce_linalg"); }
