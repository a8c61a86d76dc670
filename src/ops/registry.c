/* The op table, built from op_list.h. */
#include <string.h>

#include "internal.h"

/* Every listed op must be defined by its family file (a link error otherwise). */
#define MI_OP(name) extern const mi_op mi_op_##name;
#include "op_list.h"
#undef MI_OP

static const mi_op *const table[] = {
#define MI_OP(name) &mi_op_##name,
#include "op_list.h"
#undef MI_OP
};

static const char *const listed_names[] = {
#define MI_OP(name) #name,
#include "op_list.h"
#undef MI_OP
};

int mi_op_count(void) { return (int)(sizeof table / sizeof table[0]); }

const mi_op *mi_op_at(int id) { return id >= 0 && id < mi_op_count() ? table[id] : NULL; }

const char *mi_op_listed_name(int id)
{
    return id >= 0 && id < mi_op_count() ? listed_names[id] : NULL;
}

const mi_op *mi_op_find(const char *name)
{
    for (int i = 0; name && i < mi_op_count(); i++)
        if (table[i] && strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}

mi_tensor *mi_op_call(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a)
{
    if (!op) {
        mi_error_set("op_call: op is NULL");
        return NULL;
    }
    return op_run(op, in, n, a);
}

mi_tensor *op_run(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a)
{
    static bool engine_ready;
    if (!engine_ready) {
        mi_engine_set_ops(&mi_op_add, &mi_op_sum_to);
        engine_ready = true;
    }
    mi_tensor *out = mi_apply(op, in, n, a);
    if (out && op->flops) op_flops_add(op->flops(in, n, a, out));
    return out;
}
