/* miras-gradcheck: numerical gradient checks from the command line.
 *   --ops        gradcheck + gradgradcheck (f64) of every registered op */
#include <stdio.h>
#include <string.h>

#include "miras.h"

static int check_ops(const char *only)
{
    int passed = 0, failed = 0;
    for (int i = 0; i < mi_op_count(); i++) {
        const mi_op *op = mi_op_at(i);
        const char *name = op ? op->name : mi_op_listed_name(i);
        if (only && strcmp(only, name) != 0) continue;
        mi_op_check_result r = mi_op_check(op, 1234u + (unsigned)i);
        if (r.ok) {
            passed++;
            printf("ok    %-22s %d examples, %d checks, f32 rel err %.1e\n", name, r.variants,
                   r.gradchecks, r.f32_rel_err);
        } else {
            failed++;
            printf("FAIL  %-22s %s\n", name, r.message);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: miras-gradcheck --ops [--op NAME]\n"
               "  --ops       gradcheck and gradgradcheck (f64, central differences,\n"
               "              eps 1e-6, atol 1e-5, rtol 1e-3) on every registered op\n"
               "  --op NAME   only that op\n");
}

int main(int argc, char **argv)
{
    bool ops = false;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0) ops = true;
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
            ops = true;
            only = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "miras-gradcheck: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!ops) {
        usage(stderr);
        return 2;
    }
    if (only && !mi_op_find(only)) {
        fprintf(stderr, "miras-gradcheck: no op named '%s' (see miras-ops)\n", only);
        return 2;
    }
    return check_ops(only);
}
