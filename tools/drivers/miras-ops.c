/* miras-ops: lists the op registry, one op a line (--json: one object a line). */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "extend.h"

#ifndef MIRAS_VERSION
#define MIRAS_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
    tool_start("miras-ops");
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--version") == 0) {
            printf("miras-ops %s\n", MIRAS_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: miras-ops [--json] [--help] [--version]\nLists every registered op: "
                   "name, arity, whether it is differentiable, dtypes, formula.\n");
            return 0;
        } else {
            fprintf(stderr, "miras-ops: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    int missing = 0;
    for (int i = 0; i < mi_op_count(); i++) {
        const mi_op *op = mi_op_at(i);
        if (!op) {
            fprintf(stderr, "miras-ops: '%s' is listed but not defined\n", mi_op_listed_name(i));
            missing++;
            continue;
        }
        bool diff = mi_op_differentiable(op);
        const char *arity_text = (op->flags & MI_OP_VARIADIC) ? "variadic " : "";
        if (json)
            printf("{\"id\":%d,\"name\":\"%s\",\"arity\":%d,\"variadic\":%s,"
                   "\"differentiable\":%s,\"dtypes\":[\"f32\",\"f64\"],\"formula\":\"%s\"}\n",
                   i, op->name, op->arity, (op->flags & MI_OP_VARIADIC) ? "true" : "false",
                   diff ? "true" : "false", op->formula ? op->formula : "");
        else
            printf("%-22s %sarity %d  %-8s f32,f64  %s\n", op->name, arity_text, op->arity,
                   diff ? "diff" : "nondiff", op->formula ? op->formula : "");
    }
    return missing ? 1 : 0;
}
