/* Placeholder: filled in with the scan_miras suite. */
#include "harness.h"

Suite *make_suite(void) { return suite_create("scan_miras"); }
