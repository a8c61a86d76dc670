/* Placeholder: filled in with the safetensors suite. */
#include "harness.h"

Suite *make_suite(void) { return suite_create("safetensors"); }
