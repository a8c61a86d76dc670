/* checkpoint: y = fn(ctx, x_1, …, x_n) without keeping what fn computes on
 * the way (activation checkpointing, as torch.utils.checkpoint does it).
 *
 * Forward: fn runs with recording off; the storage of every tensor it made,
 * y's aside, goes back to the scope as soon as it returns, so the step keeps
 * y and the inputs, not fn's activations. The leaves fn used that require
 * grad (its parameters) are found on the way (mi_apply's input hook).
 * Backward (the node's vjp): fn runs again on the same inputs, recording,
 * and a backward pass nested in the outer one differentiates that run,
 * releasing as it goes; the outer pass then releases the recorded run. So
 * the backward holds one run of fn at a time, and fn runs twice.
 *
 * The node's inputs are x_1..x_n and, when fn uses leaves, their
 * concatenation P = concat(flatten(leaf_1), …) (a recorded concat: the outer
 * pass takes P's gradient back to each leaf through concat's and reshape's
 * vjps, so mi_grad and mi_backward see the leaves as usual). */
#include <stdlib.h>

#include "internal.h"
#include "tensor_internal.h"

typedef struct closure {
    mi_checkpoint_fn fn;
    void *ctx;
    int n_in, n_leaves;
    mi_tensor **leaves;
} closure;

/* What fn used, from the input hook: leaves that require grad, and the
 * first recorded tensor that is not an input (an error: its gradient would
 * be lost). */
typedef struct finder {
    mi_tensor *const *in;
    int n_in, n, cap;
    mi_tensor **leaves;
    const mi_tensor *foreign;
    bool out_of_memory;
} finder;

static void note_input(void *ctx, mi_tensor *t)
{
    finder *f = ctx;
    for (int i = 0; i < f->n_in; i++)
        if (f->in[i] == t) return;
    if (t->node) {
        if (!f->foreign) f->foreign = t;
        return;
    }
    if (!tensor_list_add_once(&f->leaves, &f->n, &f->cap, t)) f->out_of_memory = true;
}

/* Pass ids of the forward's tracking, apart from the engine's (which count
 * up from 1): a tensor tagged with one is never taken for a backward's. */
static _Thread_local uint64_t forward_pass;

/* fn with recording off; everything it made but y's storage released. */
static mi_tensor *run_unrecorded(mi_checkpoint_fn fn, void *ctx, mi_tensor *const *in, int n_in,
                                 finder *f)
{
    mi_input_hook was;
    void *was_ctx;
    mi_input_hook_set(note_input, f, &was, &was_ctx);
    mi_set_grad_enabled(false);
    mi_track_mark outer = mi_tensor_track_push((UINT64_C(1) << 63) | ++forward_pass);
    mi_tensor *y = fn(ctx, in, n_in);
    size_t n;
    mi_tensor *const *made = mi_tensor_tracked(&n);
    mi_tensor *keep = y ? mi_tensor_owner(y) : NULL;
    for (size_t i = 0; i < n; i++)
        if (!made[i]->base && made[i] != keep) mi_tensor_release(made[i]);
    mi_tensor_track_pop(outer);
    mi_set_grad_enabled(true);
    mi_input_hook_set(was, was_ctx, NULL, NULL);
    return y;
}

static mi_tensor *flat(mi_tensor *t) { return mi_reshape(t, 1, (int64_t[]){t->numel}); }

/* concat(flatten(ts[0..n))), a view when n = 1 */
static mi_tensor *packed(mi_tensor *const *ts, int n)
{
    mi_tensor **v = mi_scope_alloc(mi_scope_current(), sizeof *v * (size_t)n);
    if (!v) return NULL;
    for (int i = 0; i < n; i++) v[i] = flat(ts[i]);
    return n == 1 ? v[0] : mi_concat(v, n, 0);
}

static int checkpoint_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                            int *rank, int64_t *shape)
{
    (void)in, (void)n, (void)a, (void)dt, (void)rank, (void)shape;
    mi_error_set("checkpoint: not an op to apply; call mi_checkpoint");
    return -1;
}

static int checkpoint_vjp_all(const mi_node *nd, mi_tensor *g, const bool *need,
                              mi_tensor **grads)
{
    const closure *c = nd->attrs.data;
    if (mi_grad_enabled()) {
        mi_error_set("checkpoint: no second derivatives (create_graph): call the function "
                     "without mi_checkpoint to differentiate twice");
        return -1;
    }
    /* the inputs as fresh leaves over the same storage, so that the nested
     * pass stops at them; the leaves as they are */
    int n = c->n_in + c->n_leaves;
    mi_tensor *x[MI_MAX_INPUTS];
    mi_tensor **wrt = mi_scope_alloc(mi_scope_current(), sizeof *wrt * (size_t)(2 * n + 1));
    if (!wrt) return -1;
    mi_tensor **got = wrt + n;
    int m = 0;
    for (int i = 0; i < c->n_in; i++) {
        mi_tensor *in = nd->inputs[i];
        x[i] = in;
        if (!in->requires_grad) continue;
        if (!(x[i] = mi_tensor_alias(in, in->rank, in->shape, 0))) return -1;
        x[i]->requires_grad = true;
        wrt[m++] = x[i];
    }
    for (int j = 0; j < c->n_leaves; j++) wrt[m++] = c->leaves[j];
    mi_set_grad_enabled(true);
    mi_tensor *y = c->fn(c->ctx, x, c->n_in);
    mi_set_grad_enabled(false);
    if (!y) return -1;
    if (!mi_same_shape(y, nd->output)) {
        char a[96], b[96];
        mi_error_set("checkpoint: the function gave %s when run again, %s the first time",
                     mi_shape_str(a, sizeof a, y->rank, y->shape),
                     mi_shape_str(b, sizeof b, nd->output->rank, nd->output->shape));
        return -1;
    }
    if (mi_grad(&y, &g, 1, wrt, m, false, got) != 0) return -1;
    int k = 0;
    for (int i = 0; i < c->n_in; i++)
        if (nd->inputs[i]->requires_grad) {
            if (need[i]) grads[i] = got[k];
            k++;
        }
    if (c->n_leaves && need[c->n_in] && !(grads[c->n_in] = packed(got + k, c->n_leaves)))
        return -1;
    return 0;
}

static const mi_op mi_op_checkpoint = {
    .name = "checkpoint",
    .formula = "y = f(x_1, ..., x_n; leaves), f run again in the backward",
    .arity = MI_MAX_INPUTS, .flags = MI_OP_VARIADIC | MI_OP_NO_GRADGRAD,
    .shape = checkpoint_shape, .vjp_all = checkpoint_vjp_all};

mi_tensor *mi_checkpoint(mi_checkpoint_fn fn, void *ctx, mi_tensor *const *in, int n_in)
{
    if (!fn || n_in < 0 || n_in > MI_MAX_INPUTS - 1 || (n_in && !in)) {
        mi_error_set("checkpoint: needs a function and 0 to %d inputs, got %s and %d",
                     MI_MAX_INPUTS - 1, fn ? "a function" : "none", n_in);
        return NULL;
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i]) {
            mi_error_set("checkpoint: input %d is NULL", i);
            return NULL;
        }
    if (!mi_grad_enabled()) return fn(ctx, in, n_in);
    finder f = {.in = in, .n_in = n_in};
    mi_tensor *y = run_unrecorded(fn, ctx, in, n_in, &f);
    mi_tensor *out = NULL;
    if (!y) goto done;
    if (f.out_of_memory) {
        mi_error_set("checkpoint: out of memory");
        goto done;
    }
    if (f.foreign) {
        char s[96];
        mi_error_set("checkpoint: the function used a tensor %s that requires grad and is "
                     "neither an input nor a leaf; pass it as an input",
                     mi_shape_str(s, sizeof s, f.foreign->rank, f.foreign->shape));
        goto done;
    }
    bool any = f.n > 0;
    for (int i = 0; i < n_in; i++) any |= in[i]->requires_grad;
    if (!any) {
        out = y;
        goto done;
    }
    for (int j = 1; j < f.n; j++)
        if (f.leaves[j]->dtype != f.leaves[0]->dtype) {
            mi_error_set("checkpoint: the function's parameters differ in dtype (%s and %s)",
                         mi_dtype_name(f.leaves[0]->dtype), mi_dtype_name(f.leaves[j]->dtype));
            goto done;
        }
    mi_scope *sc = mi_scope_current();
    closure *c = mi_scope_alloc(sc, sizeof *c);
    mi_tensor **leaves = f.n ? mi_scope_alloc(sc, sizeof *leaves * (size_t)f.n) : NULL;
    if (!c || (f.n && !leaves)) goto done;
    for (int j = 0; j < f.n; j++) leaves[j] = f.leaves[j];
    *c = (closure){.fn = fn, .ctx = ctx, .n_in = n_in, .n_leaves = f.n, .leaves = leaves};
    mi_tensor *inputs[MI_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) inputs[i] = in[i];
    int n = n_in;
    if (f.n && !(inputs[n++] = packed(leaves, f.n))) goto done;
    mi_tensor *node_out = mi_tensor_alias(y, y->rank, y->shape, 0);
    mi_attrs a = {.data = c};
    if (node_out && mi_node_record(&mi_op_checkpoint, inputs, n, &a, node_out)) out = node_out;
done:
    free(f.leaves);
    return out;
}
