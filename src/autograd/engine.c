/* Reverse mode. Nodes carry a creation sequence number; creation order is a
 * topological order, so visiting the reachable nodes by decreasing sequence
 * number sees every consumer of a tensor before the tensor's producer. */
#include <stdlib.h>
#include <string.h>

#include "op.h"
#include "node_private.h"
#include "tensor_internal.h"
#include "tensor_private.h"

/* The engine's scratch of a tensor and of a node (not in the public structs). */
#define TP(t) mi_tensor_private(t)
#define NP(n) mi_node_private(n)

static const mi_op *op_add, *op_sum_to;
static _Thread_local uint64_t pass_id;
static _Thread_local size_t last_nodes;

size_t mi_grad_last_nodes(void) { return last_nodes; }

void mi_engine_set_ops(const mi_op *add, const mi_op *sum_to)
{
    op_add = add;
    op_sum_to = sum_to;
}

typedef struct node_list {
    mi_node **v;
    size_t n, cap;
} node_list;

static int list_push(node_list *l, mi_node *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        mi_node **v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static int by_seq_desc(const void *a, const void *b)
{
    uint64_t x = (*(mi_node *const *)a)->seq, y = (*(mi_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every node the outputs depend on that was created at or after min_seq,
 * latest first. A node older than an input's producer cannot consume it, so
 * the walk stops there: an inner-loop gradient w.r.t. a fresh tensor never
 * walks the whole outer graph behind it. */
static int collect(mi_tensor *const *outputs, int n_out, uint64_t min_seq, node_list *order)
{
    node_list stack = {0};
    uint64_t id = ++pass_id;
    int rc = 0;
    for (int i = 0; i < n_out && rc == 0; i++) {
        mi_node *p = outputs[i]->node;
        if (p && NP(p)->visit != id && p->seq >= min_seq) {
            NP(p)->visit = id;
            rc = list_push(&stack, p);
        }
    }
    while (rc == 0 && stack.n > 0) {
        mi_node *nd = stack.v[--stack.n];
        rc = list_push(order, nd);
        for (int i = 0; i < nd->n_inputs && rc == 0; i++) {
            mi_node *p = nd->inputs[i]->node;
            if (p && NP(p)->visit != id && p->seq >= min_seq && nd->inputs[i]->requires_grad) {
                NP(p)->visit = id;
                rc = list_push(&stack, p);
            }
        }
    }
    free(stack.v);
    if (rc == 0 && order->n > 1) qsort(order->v, order->n, sizeof *order->v, by_seq_desc);
    return rc;
}

/* Keeps only the nodes that depend on one of the inputs (walking oldest
 * first); the others' vjps could not reach an input. */
static void keep_dependents(node_list *order, mi_tensor *const *inputs, int n_in)
{
    uint64_t id = ++pass_id;
    size_t kept = 0;
    for (size_t k = order->n; k-- > 0;) {
        mi_node *nd = order->v[k];
        bool dep = false;
        for (int i = 0; i < nd->n_inputs && !dep; i++) {
            mi_tensor *t = nd->inputs[i];
            if (t->node && NP(t->node)->visit == id) dep = true;
            for (int j = 0; j < n_in && !dep; j++) dep = t == inputs[j];
        }
        if (dep) NP(nd)->visit = id;
    }
    for (size_t k = 0; k < order->n; k++)
        if (NP(order->v[k])->visit == id) order->v[kept++] = order->v[k];
    order->n = kept;
}

static uint64_t oldest_input_seq(mi_tensor *const *inputs, int n_in)
{
    uint64_t m = UINT64_MAX;
    for (int j = 0; j < n_in; j++) {
        uint64_t s = inputs[j]->node ? inputs[j]->node->seq : 0;
        if (s < m) m = s;
    }
    return m == UINT64_MAX ? 0 : m;
}

static mi_tensor *unbroadcast(mi_tensor *g, const mi_tensor *like)
{
    if (!g || mi_same_shape(g, like)) return g;
    if (!op_sum_to) {
        mi_error_set("grad: no sum_to op to un-broadcast with");
        return NULL;
    }
    mi_attrs a = {.rank = like->rank};
    memcpy(a.shape, like->shape, sizeof a.shape);
    return mi_apply(op_sum_to, &g, 1, &a);
}

/* ---------------------------------------------------------------- releasing
 * A pass that records nothing (create_graph off) gives the storage of every
 * tensor it creates (vjp temporaries, gradients, their sums) back to the
 * scope as soon as no gradient slot holds it: a gradient is dead once its
 * node has run, a vjp's temporaries once it has returned. `uses` counts, per
 * storage owner, the gradient slots that hold it; the requested inputs' slots
 * are kept to the end (keep == pass). The caller's tensors, the graph and
 * what the pass returns are never released. */
typedef struct release {
    uint64_t pass;       /* the tracking pass; 0: release nothing */
    bool nested;         /* inside another pass (a checkpoint's backward) */
    mi_track_mark outer; /* ... whose tracking comes back at the end */
} release;

static _Thread_local uint64_t release_id;

static bool releasable(const release *r, const mi_tensor *o) { return TP(o)->pass == r->pass; }

static void hold(const release *r, mi_tensor *t)
{
    if (r->pass && t) TP(mi_tensor_owner(t))->uses++;
}

static void drop(const release *r, mi_tensor *t)
{
    if (!r->pass || !t) return;
    mi_tensor *o = mi_tensor_owner(t);
    if (--TP(o)->uses == 0 && releasable(r, o)) mi_tensor_release(o);
}

/* Releases what the pass created since the last call that nothing holds. */
static void release_unheld(const release *r)
{
    if (!r->pass) return;
    size_t n;
    mi_tensor *const *v = mi_tensor_tracked(&n);
    for (size_t i = 0; i < n; i++)
        if (!v[i]->base && TP(v[i])->uses == 0 && releasable(r, v[i])) mi_tensor_release(v[i]);
    mi_tensor_tracked_clear();
}

/* Starts releasing for a pass (none when it records): tracks the tensors it
 * creates and marks the requested inputs, whose slots stay. A pass inside
 * another (the backward of a checkpoint, run from its vjp) lists its
 * tensors after the outer pass's and releases only its own. */
static release release_begin(bool create_graph, mi_tensor *const *inputs, int n_in)
{
    release r = {0};
    if (create_graph) return r;
    r.pass = ++release_id;
    r.nested = mi_tensor_tracking() != 0;
    if (r.nested) r.outer = mi_tensor_track_push(r.pass);
    else mi_tensor_track(r.pass);
    for (int j = 0; j < n_in; j++) TP(inputs[j])->keep = r.pass;
    return r;
}

/* Ends the pass's tracking. What a nested pass returns and created goes to
 * the outer pass, which releases it once nothing holds it (this pass's
 * slots are gone). */
static void release_end(const release *r, mi_tensor *const *grads, int n)
{
    if (!r->pass) return;
    if (!r->nested) {
        mi_tensor_track(0);
        return;
    }
    mi_tensor_track_pop(r->outer);
    for (int j = 0; j < n; j++) {
        mi_tensor *o = grads[j] ? mi_tensor_owner(grads[j]) : NULL;
        if (o && TP(o)->pass == r->pass) {
            TP(o)->uses = 0;
            mi_tensor_track_adopt(o);
        }
    }
}

/* After node nd has run its output's gradient goes, unless it is asked for. */
static void release_node(const release *r, mi_node *nd)
{
    if (!r->pass) return;
    mi_tensor *out = nd->output;
    if (TP(out)->gacc && TP(out)->keep != r->pass) {
        drop(r, TP(out)->gacc);
        TP(out)->gacc = NULL;
    }
    release_unheld(r);
}

/* Whether t's gradient slot holds a tensor this pass made and may change in
 * place: storage of its own, or a view of all of another's (a reshape's
 * gradient), held by that slot alone. */
static bool own_gradient(const release *r, const mi_tensor *t)
{
    mi_tensor *a = TP(t)->gacc;
    if (!r->pass || !a || !a->data) return false;
    const mi_tensor *o = mi_tensor_owner(a);
    bool whole = a == o || (a->data == o->data && a->numel == o->numel);
    return whole && TP(o)->pass == r->pass && TP(o)->uses == 1;
}

/* Whether t's gradient slot can take like (a tensor of like's shape and
 * dtype) added in place: the pass's own (own_gradient) and of that shape and
 * a float dtype. */
static bool adds_in_place(const release *r, const mi_tensor *t, const mi_tensor *like)
{
    const mi_tensor *acc = TP(t)->gacc;
    return own_gradient(r, t) && mi_same_shape(acc, like) && acc->dtype == like->dtype &&
           mi_dtype_is_float(like->dtype);
}

/* The gradients node's vjp_all_into may add into: into[i] is input i's where
 * it adds in place and no other input of the node is the same tensor. */
static void gradients_to_add_into(const release *r, const mi_node *nd, const bool *need,
                                  mi_tensor **into)
{
    for (int i = 0; i < nd->n_inputs; i++) {
        const mi_tensor *in = nd->inputs[i];
        bool alone = true;
        for (int j = 0; j < nd->n_inputs; j++) alone &= j == i || nd->inputs[j] != in;
        if (need[i] && alone && adds_in_place(r, in, in)) into[i] = TP(in)->gacc;
    }
}

/* acc += g, element by element (same shape and dtype); on every thread from
 * 128K elements (more where a parallel region costs more: mi_parallel_cost) */
static void add_into(mi_tensor *acc, const mi_tensor *g)
{
    int64_t n = acc->numel;
    bool par = n >= (1 << 17) && n >= (int64_t)((1 << 17) * mi_parallel_cost(NULL));
    if (acc->dtype == MI_F32) {
        float *a = acc->data;
        const float *b = g->data;
#pragma omp parallel for simd if (par) schedule(static)
        for (int64_t k = 0; k < n; k++) a[k] += b[k];
    } else {
        double *a = acc->data;
        const double *b = g->data;
#pragma omp parallel for simd if (par) schedule(static)
        for (int64_t k = 0; k < n; k++) a[k] += b[k];
    }
}

/* Adds g to t's gradient slot: a new slot, an in-place sum where the slot's
 * tensor is the pass's own (no new storage), else a recorded add. */
static int accumulate(const release *r, mi_tensor *t, mi_tensor *g)
{
    if (!g) return -1;
    if (!TP(t)->gacc) {
        TP(t)->gacc = g;
        hold(r, g);
        return 0;
    }
    mi_tensor *acc = TP(t)->gacc;
    if (acc != g && adds_in_place(r, t, g)) {
        add_into(acc, g);
        return 0;
    }
    mi_tensor *sum = mi_apply(op_add, (mi_tensor *[]){TP(t)->gacc, g}, 2, NULL);
    if (!sum) return -1;
    hold(r, sum);
    drop(r, TP(t)->gacc);
    TP(t)->gacc = sum;
    return 0;
}

/* A tensor's gradient slot and the pass that returns it, kept aside. */
typedef struct slot {
    mi_tensor *gacc;
    uint64_t keep;
} slot;

static void clear_gacc(mi_tensor *const *outputs, int n_out, const node_list *order)
{
    for (int i = 0; i < n_out; i++) TP(outputs[i])->gacc = NULL;
    for (size_t k = 0; k < order->n; k++) {
        TP(order->v[k]->output)->gacc = NULL;
        for (int i = 0; i < order->v[k]->n_inputs; i++) TP(order->v[k]->inputs[i])->gacc = NULL;
    }
}

int mi_grad(mi_tensor *const *outputs, mi_tensor *const *grad_outputs, int n_out,
            mi_tensor *const *inputs, int n_in, bool create_graph, mi_tensor **grads)
{
    if (!op_add) {
        mi_error_set("grad: no op has been run yet");
        return -1;
    }
    for (int i = 0; i < n_out; i++) {
        if (!outputs[i]) {
            mi_error_set("grad: output %d is NULL", i);
            return -1;
        }
        const mi_tensor *go = grad_outputs ? grad_outputs[i] : NULL;
        if (!go && outputs[i]->numel != 1) {
            char b[96];
            mi_error_set("grad: output %d has shape %s; give grad_outputs for non-scalars", i,
                         mi_shape_str(b, sizeof b, outputs[i]->rank, outputs[i]->shape));
            return -1;
        }
        if (go && (go->numel != outputs[i]->numel || go->dtype != outputs[i]->dtype)) {
            mi_error_set("grad: grad_outputs[%d] does not match its output's shape or dtype", i);
            return -1;
        }
    }
    for (int j = 0; j < n_in; j++)
        if (!inputs[j]) {
            mi_error_set("grad: input %d is NULL", j);
            return -1;
        }

    node_list order = {0};
    if (collect(outputs, n_out, oldest_input_seq(inputs, n_in), &order) != 0) {
        free(order.v);
        mi_error_set("grad: out of memory");
        return -1;
    }
    keep_dependents(&order, inputs, n_in);
    last_nodes = order.n;
    /* A pass inside another (a checkpoint's backward, from its vjp) may be
     * asked for the gradients of tensors whose slots the outer pass uses (the
     * leaves both reach): it starts them empty and gives them back. */
    slot *outer_slots = NULL;
    if (mi_tensor_tracking() && n_in > 0) {
        if (!(outer_slots = malloc(sizeof *outer_slots * (size_t)n_in))) {
            free(order.v);
            mi_error_set("grad: out of memory");
            return -1;
        }
        for (int j = 0; j < n_in; j++) {
            outer_slots[j] = (slot){TP(inputs[j])->gacc, TP(inputs[j])->keep};
            TP(inputs[j])->gacc = NULL;
        }
    }
    release r = release_begin(create_graph, inputs, n_in);
    bool was = mi_set_grad_enabled(create_graph);
    int rc = 0;
    for (int i = 0; i < n_out && rc == 0; i++) {
        mi_tensor *seed = grad_outputs && grad_outputs[i]
                              ? grad_outputs[i]
                              : mi_ones(outputs[i]->dtype, outputs[i]->rank, outputs[i]->shape);
        if (seed && !mi_same_shape(seed, outputs[i]))
            seed = mi_tensor_alias(seed, outputs[i]->rank, outputs[i]->shape, 0);
        rc = accumulate(&r, outputs[i], seed);
    }
    for (size_t k = 0; k < order.n && rc == 0; k++) {
        mi_node *nd = order.v[k];
        mi_tensor *g = TP(nd->output)->gacc, *all[MI_MAX_INPUTS] = {0};
        bool need[MI_MAX_INPUTS] = {0};
        for (int i = 0; i < nd->n_inputs; i++) need[i] = mi_node_input_is_diff(nd, i);
        mi_tensor *into[MI_MAX_INPUTS] = {0};
        bool all_at_once = nd->op->vjp_all_into || nd->op->vjp_all;
        if (g && nd->op->vjp_all_into) gradients_to_add_into(&r, nd, need, into);
        if (g && (nd->op->vjp_all_into ? nd->op->vjp_all_into(nd, g, need, all, into)
                  : nd->op->vjp_all    ? nd->op->vjp_all(nd, g, need, all)
                                       : 0) != 0) {
            if (!mi_error_pending()) mi_error_set("grad: vjp of %s failed", nd->op->name);
            rc = -1;
        }
        for (int i = 0; g && i < nd->n_inputs && rc == 0; i++) {
            if (!need[i] || (into[i] && !all[i])) continue; /* added into by vjp_all_into */
            mi_tensor *in = nd->inputs[i];
            /* a second contribution goes straight into the first (the
             * first is the vjp itself: no zeros to add it to) */
            if (nd->op->vjp_into && own_gradient(&r, in)) {
                if ((rc = nd->op->vjp_into(nd, i, g, TP(in)->gacc)) != 0 && !mi_error_pending())
                    mi_error_set("grad: vjp of %s for input %d failed", nd->op->name, i);
                continue;
            }
            mi_tensor *gi = unbroadcast(all_at_once ? all[i] : nd->op->vjp(nd, i, g),
                                        nd->inputs[i]);
            if (!gi && !mi_error_pending())
                mi_error_set("grad: vjp of %s for input %d failed", nd->op->name, i);
            rc = accumulate(&r, nd->inputs[i], gi);
        }
        release_node(&r, nd);
    }
    for (int j = 0; j < n_in && rc == 0; j++) {
        grads[j] = TP(inputs[j])->gacc ? TP(inputs[j])->gacc : mi_zeros_like(inputs[j]);
        if (!grads[j]) rc = -1;
        else if (!create_graph && grads[j]->requires_grad) {
            grads[j] = mi_detach(grads[j]);
            if (!grads[j]) rc = -1;
        }
    }
    mi_set_grad_enabled(was);
    release_end(&r, grads, rc == 0 ? n_in : 0);
    clear_gacc(outputs, n_out, &order);
    for (int j = 0; outer_slots && j < n_in; j++) {
        TP(inputs[j])->gacc = outer_slots[j].gacc;
        TP(inputs[j])->keep = outer_slots[j].keep;
    }
    free(outer_slots);
    free(order.v);
    return rc;
}


/* Leaves reachable from loss that require grad. */
static int leaves_of(mi_tensor *loss, mi_tensor ***out, int *n)
{
    node_list order = {0};
    if (collect(&loss, 1, 0, &order) != 0) return -1;
    uint64_t id = ++pass_id;
    size_t cap = 16, cnt = 0;
    mi_tensor **v = malloc(cap * sizeof *v);
    int rc = v ? 0 : -1;
    for (size_t k = 0; k < order.n && rc == 0; k++)
        for (int i = 0; i < order.v[k]->n_inputs && rc == 0; i++) {
            mi_tensor *t = order.v[k]->inputs[i];
            /* leaves have no node; gacc briefly marks "seen" through a sentinel */
            if (t->node || !t->requires_grad || TP(t)->gacc == (mi_tensor *)(uintptr_t)id) continue;
            TP(t)->gacc = (mi_tensor *)(uintptr_t)id;
            if (cnt == cap) {
                mi_tensor **nv = realloc(v, 2 * cap * sizeof *nv);
                if (!nv) {
                    rc = -1;
                    break;
                }
                v = nv;
                cap *= 2;
            }
            v[cnt++] = t;
        }
    for (size_t i = 0; i < cnt; i++) TP(v[i])->gacc = NULL;
    free(order.v);
    *out = v;
    *n = (int)cnt;
    return rc;
}

int mi_backward(mi_tensor *loss)
{
    if (!loss) {
        mi_error_set("backward: loss is NULL");
        return -1;
    }
    mi_tensor **leaves = NULL;
    int n = 0;
    if (leaves_of(loss, &leaves, &n) != 0) {
        free(leaves);
        mi_error_set("backward: out of memory");
        return -1;
    }
    mi_tensor **grads = n ? malloc((size_t)n * sizeof *grads) : NULL;
    int rc = (n && !grads) ? -1 : mi_grad(&loss, NULL, 1, leaves, n, false, grads);
    for (int i = 0; i < n && rc == 0; i++) {
        mi_tensor *leaf = leaves[i];
        if (!leaf->grad) {
            mi_scope_enter(leaf->scope);
            leaf->grad = mi_zeros_like(leaf);
            mi_scope_leave();
            if (!leaf->grad) {
                rc = -1;
                break;
            }
        }
        if (leaf->grad->dtype == MI_F32) {
            float *d = leaf->grad->data;
            const float *s = grads[i]->data;
            for (int64_t k = 0; k < leaf->numel; k++) d[k] += s[k];
        } else {
            double *d = leaf->grad->data;
            const double *s = grads[i]->data;
            for (int64_t k = 0; k < leaf->numel; k++) d[k] += s[k];
        }
    }
    free(grads);
    free(leaves);
    return rc;
}

void mi_zero_grad(mi_tensor *const *leaves, int n)
{
    for (int i = 0; i < n; i++)
        if (leaves[i] && leaves[i]->grad) mi_fill(leaves[i]->grad, 0.0);
}
