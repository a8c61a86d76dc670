/* Shared by the suites that test the driver programs: a way to run a built
 * tool and capture what it printed, and a listing of the test's temporary
 * directory (the harness's tmpdir fixture). */
#ifndef MIRAS_TEST_TOOL_RUN_H
#define MIRAS_TEST_TOOL_RUN_H

#include <stddef.h>

/* Names in the test's temporary directory, sorted, joined with '|'. */
const char *tool_tmp_listing(void);

typedef struct tool_result {
    int status;     /* exit status, or 128 + signal */
    char out[1 << 16], err[1 << 14];  /* stdout and stderr (truncated) */
} tool_result;

/* Runs the program at `path` with the NULL-terminated argv (argv[0] is
 * filled in) and waits for it. */
const tool_result *tool_run(const char *path, const char *const *args);

#endif
