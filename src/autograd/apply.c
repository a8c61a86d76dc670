/* The one path every op call takes: check, allocate, compute, record. */
#include <string.h>

#include "op.h"
#include "node_private.h"

static _Thread_local bool recording = true;
static uint64_t next_seq = 1; /* shared by all threads; only orders nodes */
static _Thread_local mi_input_hook input_hook;
static _Thread_local void *input_hook_ctx;
static _Thread_local mi_input_map input_map;
static _Thread_local void *input_map_ctx;

void mi_input_hook_set(mi_input_hook hook, void *ctx, mi_input_hook *was, void **was_ctx)
{
    if (was) *was = input_hook;
    if (was_ctx) *was_ctx = input_hook_ctx;
    input_hook = hook;
    input_hook_ctx = ctx;
}

void mi_input_map_set(mi_input_map map, void *ctx, mi_input_map *was, void **was_ctx)
{
    if (was) *was = input_map;
    if (was_ctx) *was_ctx = input_map_ctx;
    input_map = map;
    input_map_ctx = ctx;
}

bool mi_grad_enabled(void) { return recording; }

bool mi_set_grad_enabled(bool on)
{
    bool was = recording;
    recording = on;
    return was;
}

mi_tensor *mi_requires_grad(mi_tensor *t, bool on)
{
    if (!t) return NULL;
    if (on && !mi_dtype_is_float(t->dtype)) {
        mi_error_set("requires_grad: %s tensors cannot carry gradients", mi_dtype_name(t->dtype));
        return NULL;
    }
    t->requires_grad = on;
    return t;
}

static bool input_is_diff(const mi_op *op, mi_tensor *const *in, int i)
{
    if (op->diff_inputs) return (op->diff_inputs >> i) & 1u;
    return mi_dtype_is_float(in[i]->dtype);
}

mi_tensor *mi_apply(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a)
{
    static const mi_attrs no_attrs;
    if (!a) a = &no_attrs;
    bool variadic = op->flags & MI_OP_VARIADIC;
    if (n < 1 || n > MI_MAX_INPUTS || (variadic ? n > op->arity : n != op->arity)) {
        mi_error_set("%s: takes %s%d inputs, got %d", op->name, variadic ? "1 to " : "",
                     op->arity, n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!in[i]) {
            mi_error_set("%s: input %d is NULL", op->name, i); /* kept only if first */
            return NULL;
        }
    mi_tensor *mapped[MI_MAX_INPUTS];
    if (input_map) {
        for (int i = 0; i < n; i++) mapped[i] = input_map(input_map_ctx, in[i]);
        in = mapped;
    }
    if (input_hook)
        for (int i = 0; i < n; i++)
            if (in[i]->requires_grad && input_is_diff(op, in, i) && !(op->flags & MI_OP_NONDIFF))
                input_hook(input_hook_ctx, in[i]);
    mi_dtype float_dt = MI_F32;
    int first_float = -1;
    for (int i = 0; i < n; i++) {
        if (!mi_dtype_is_float(in[i]->dtype)) continue;
        if (first_float < 0) {
            first_float = i;
            float_dt = in[i]->dtype;
        } else if (in[i]->dtype != float_dt) {
            mi_error_set("%s: dtypes differ: input %d is %s, input %d is %s", op->name,
                         first_float, mi_dtype_name(float_dt), i, mi_dtype_name(in[i]->dtype));
            return NULL;
        }
    }
    mi_dtype dt = float_dt;
    int rank = 0;
    int64_t shape[MI_MAX_RANK];
    if (op->shape(in, n, a, &dt, &rank, shape) != 0) {
        mi_error_prefix(op->name);
        return NULL;
    }

    mi_tensor *out;
    if (op->flags & MI_OP_VIEW) {
        out = mi_tensor_alias(in[0], rank, shape, op->view_offset ? op->view_offset(in, a) : 0);
        if (!out) return NULL;
    } else {
        out = mi_tensor_new(dt, rank, shape);
        if (!out) return NULL;
        if (!mi_dtype_is_float(dt)) {
            mi_error_set("%s: output dtype %s has no kernel", op->name, mi_dtype_name(dt));
            return NULL;
        }
        mi_kernel_fn k = mi_kernel_choose(op, in, n, a, out);
        if (!k) {
            mi_error_set("%s: no %s kernel", op->name, mi_dtype_name(dt));
            return NULL;
        }
        if (out->numel > 0) k(out, in, a);
    }

    if (!recording || !mi_op_differentiable(op)) return out;
    bool any = false;
    for (int i = 0; i < n; i++) any |= in[i]->requires_grad && input_is_diff(op, in, i);
    if (!any) return out;
    return mi_node_record(op, in, n, a, out) ? out : NULL;
}

mi_node *mi_node_record(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a,
                        mi_tensor *out)
{
    /* the engine's scratch after the public fields (node_private.h) */
    mi_node *node = mi_scope_alloc(mi_scope_current(), sizeof(mi_node_full));
    if (!node) return NULL;
    memset(node, 0, sizeof(mi_node_full));
    node->op = op;
    node->n_inputs = n;
    for (int i = 0; i < n; i++) node->inputs[i] = in[i];
    node->output = out;
    node->attrs = *a;
    node->seq = __atomic_fetch_add(&next_seq, 1, __ATOMIC_RELAXED);
    out->node = node;
    out->requires_grad = true;
    return node;
}

bool mi_node_input_is_diff(const mi_node *node, int i)
{
    return node->inputs[i]->requires_grad && input_is_diff(node->op, node->inputs, i);
}
