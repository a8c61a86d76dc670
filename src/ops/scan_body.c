/* mi_scan: a differentiable scan of a body written with ordinary ops over
 * the T tokens of its per-token inputs (the framework's lax.scan):
 *
 *     (c_t, y_t) = body(c_{t−1}, x_t),  t = 1..T,  c_0 = carry0,
 *
 * returning c_T and the stacked y_1..y_T, without an autograd record per
 * token.
 *
 * Forward: the body runs T times with recording off; each token's tensors
 * live in a scratch scope reset after the token, so the forward keeps the
 * outputs and the carry at the start of every segment of S tokens (S =
 * ⌈√T⌉ by default), nothing else. The tensors from outside the body uses
 * that require grad (its parameters: leaves, or views and functions of
 * them) are found on the way, by mi_apply's input hook, as mi_checkpoint
 * finds its leaves.
 *
 * Backward (the node's vjp), segment by segment from the last: the body runs
 * again, recording, from the segment's kept carry over its ≤ S tokens, and a
 * backward pass nested in the outer one takes the segment's upstream
 * gradients (its y_t's, and the carry's from the later segment) to the
 * segment's start carry, its x_t and the parameters; the segment's record
 * is dropped before the next. So the backward holds one segment's record at
 * a time: memory O(T/S · |c| + S · |body record|) = O(√T) in the carry and
 * the body, besides the inputs, the outputs and their gradients, and the
 * body runs twice per token (the √n checkpointing of Chen, Xu, Zhang,
 * Guestrin, "Training Deep Nets with Sublinear Memory Cost", 2016,
 * with the tokens as the layers).
 *
 * First-order only: the vjp runs a nested backward pass that records
 * nothing, so under create_graph it fails with a message; differentiating
 * twice would need the nested pass recorded, which is the unrolled tape this
 * op exists to avoid.
 *
 * The node has one output, O = concat(flatten(c_T…), flatten(ys…)), and the
 * results are views of it; its inputs are carry0 and xs (each one, or packed
 * into one concatenation per group when they would not fit MI_MAX_INPUTS),
 * and the concatenation of the parameters as mi_checkpoint does it. */
#include <stdlib.h>

#include "internal.h"
#include "tensor_internal.h"

#define SCAN_MAX 32 /* carries, per-token inputs, per-token outputs: each at most */

typedef struct scan_closure {
    mi_scan_fn body;
    void *ctx;
    int n_carry, n_xs, n_ys, n_params;
    mi_dtype dt;
    int64_t N, T, S, n_seg;
    mi_tensor **carry0, **xs, **params; /* as the caller gave them (shapes, requires_grad) */
    mi_tensor **kept;                   /* per carry: [n_seg · numel], each segment's start */
    int y_rank[SCAN_MAX];
    int64_t y_shape[SCAN_MAX][MI_MAX_RANK]; /* y_t's shape [N, …] */
    /* where each tensor sits among the node's inputs: slot, element offset */
    int carry_slot[SCAN_MAX], xs_slot[SCAN_MAX], params_slot;
    int64_t carry_off[SCAN_MAX], xs_off[SCAN_MAX];
    int64_t out_off_y[SCAN_MAX]; /* y's offset in O (the carries come first) */
} scan_closure;

/* What the body used, from the input hook: the tensors from outside that
 * require grad (the body's own arguments do not), leaves or recorded. What
 * the body makes lives in the token's scope and is never one of them, even
 * when the body records for a gradient of its own (an inner mi_grad). */
typedef struct finder {
    int n, cap;
    mi_tensor **params;
    const mi_scope *token; /* the scope the body's tensors go to */
    bool out_of_memory;
} finder;

static void note_input(void *ctx, mi_tensor *t)
{
    finder *f = ctx;
    if (t->scope != f->token && !tensor_list_add_once(&f->params, &f->n, &f->cap, t))
        f->out_of_memory = true;
}

/* Tracking ids of mi_scan's own, apart from the engine's (counting up from
 * 1) and mi_checkpoint's (top bit): what a token or a segment made is listed
 * under one and dropped from the list with it. */
static _Thread_local uint64_t scan_pass;
static uint64_t next_pass(void) { return (UINT64_C(1) << 62) | ++scan_pass; }

/* The elements of one token of a [N, T, …] tensor: R = numel / (N·T). */
static int64_t per_token(const mi_tensor *t, int64_t N, int64_t T)
{
    return N * T != 0 ? t->numel / (N * T) : 0;
}

/* x_t[n, r] = xs[n, t, r] (bytes, R elements of size es a row) */
static void gather(void *dst, const void *src, int64_t N, int64_t T, int64_t t, int64_t R,
                   size_t es)
{
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)dst + (size_t)(n * R) * es,
               (const char *)src + (size_t)((n * T + t) * R) * es, (size_t)R * es);
}

/* ys[n, t, r] = y_t[n, r] */
static void scatter(void *dst, const void *src, int64_t N, int64_t T, int64_t t, int64_t R,
                    size_t es)
{
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)dst + (size_t)((n * T + t) * R) * es,
               (const char *)src + (size_t)(n * R) * es, (size_t)R * es);
}

static void add_into(void *acc, const mi_tensor *g)
{
    if (g->dtype == MI_F32) {
        float *a = acc;
        const float *b = g->data;
        for (int64_t k = 0; k < g->numel; k++) a[k] += b[k];
    } else {
        double *a = acc;
        const double *b = g->data;
        for (int64_t k = 0; k < g->numel; k++) a[k] += b[k];
    }
}

/* x_t of xs[j] at token t, a new tensor [N, xs.shape[2:]] */
static mi_tensor *token_of(const scan_closure *c, const mi_tensor *xs, int64_t t)
{
    int64_t shape[MI_MAX_RANK];
    shape[0] = c->N;
    for (int d = 2; d < xs->rank; d++) shape[d - 1] = xs->shape[d];
    mi_tensor *x = mi_tensor_new(c->dt, xs->rank - 1, shape);
    if (x)
        gather(x->data, xs->data, c->N, c->T, t, per_token(xs, c->N, c->T), mi_dtype_size(c->dt));
    return x;
}

/* "mi_scan: <what> at token t: <the body's message>" in place of the
 * body's own (the first message of a chain is otherwise kept). */
static void body_failed(const char *what, int64_t t)
{
    char why[512];
    snprintf(why, sizeof why, "%s", mi_error_pending() ? mi_error() : "");
    mi_error_clear();
    mi_error_set("mi_scan: %s at token %lld%s%s", what, (long long)t, why[0] ? ": " : "", why);
}

/* One step of the body, its results checked against the carry's shapes and
 * (after the first token) the y's; the first token fixes the y's shapes. */
static int step(scan_closure *c, mi_tensor *const *carry, mi_tensor *const *x,
                mi_tensor **carry_out, mi_tensor **y, int64_t t)
{
    for (int i = 0; i < c->n_carry; i++) carry_out[i] = NULL;
    for (int j = 0; j < c->n_ys; j++) y[j] = NULL;
    if (c->body(c->ctx, carry, x, carry_out, y) != 0) {
        body_failed("the body failed", t);
        return -1;
    }
    char a[96], b[96];
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *o = carry_out[i], *want = c->carry0[i];
        if (!o) {
            char what[48];
            snprintf(what, sizeof what, "the body gave no carry_out[%d]", i);
            body_failed(what, t);
            return -1;
        }
        if (!mi_same_shape(o, want) || o->dtype != c->dt) {
            mi_error_set("mi_scan: the body's carry_out[%d] is %s %s at token %lld, the carry "
                         "is %s %s", i, mi_dtype_name(o->dtype),
                         mi_shape_str(a, sizeof a, o->rank, o->shape), (long long)t,
                         mi_dtype_name(c->dt), mi_shape_str(b, sizeof b, want->rank, want->shape));
            return -1;
        }
    }
    for (int j = 0; j < c->n_ys; j++) {
        const mi_tensor *o = y[j];
        if (!o) {
            char what[48];
            snprintf(what, sizeof what, "the body gave no y[%d]", j);
            body_failed(what, t);
            return -1;
        }
        if (c->y_rank[j] < 0) {
            if (o->rank < 1 || o->shape[0] != c->N || o->dtype != c->dt) {
                mi_error_set("mi_scan: the body's y[%d] is %s %s; it must be %s [N = %lld, …]", j,
                             mi_dtype_name(o->dtype), mi_shape_str(a, sizeof a, o->rank, o->shape),
                             mi_dtype_name(c->dt), (long long)c->N);
                return -1;
            }
            c->y_rank[j] = o->rank;
            memcpy(c->y_shape[j], o->shape, sizeof(int64_t) * (size_t)o->rank);
        } else if (o->dtype != c->dt || o->rank != c->y_rank[j] ||
                   memcmp(o->shape, c->y_shape[j], sizeof(int64_t) * (size_t)o->rank) != 0) {
            mi_error_set("mi_scan: the body's y[%d] is %s at token %lld and was %s before", j,
                         mi_shape_str(a, sizeof a, o->rank, o->shape), (long long)t,
                         mi_shape_str(b, sizeof b, c->y_rank[j], c->y_shape[j]));
            return -1;
        }
    }
    return 0;
}

static int64_t y_numel(const scan_closure *c, int j)
{
    return mi_shape_numel(c->y_rank[j], c->y_shape[j]) * c->T;
}

/* The stacked shape of ys[j]: [N, T, y_t.shape[1:]] */
static int ys_shape(const scan_closure *c, int j, int64_t *shape)
{
    shape[0] = c->N;
    shape[1] = c->T;
    for (int d = 1; d < c->y_rank[j]; d++) shape[d + 1] = c->y_shape[j][d];
    return c->y_rank[j] + 1;
}

/* ---------------------------------------------------------------- backward */

static int scan_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    (void)in, (void)n, (void)a, (void)dt, (void)rank, (void)shape;
    mi_error_set("mi_scan: not an op to apply; call mi_scan");
    return -1;
}

/* The gradient of one segment [a, b): the body run again from the kept
 * carry, recording, and a nested backward pass from the upstream gradients
 * (gc: the carry's at b, in place updated to the carry's at a; g: O's). The
 * x_t's gradients go into gx[j] (or nowhere when NULL), the parameters'
 * are added into gp. */
static int segment_grad(scan_closure *c, int64_t a, int64_t b, mi_tensor **gc, const mi_tensor *g,
                        void *const *gx, void *gp)
{
    size_t es = mi_dtype_size(c->dt);
    int64_t L = b - a;
    int n_out = c->n_carry + (int)L * c->n_ys;
    int max_in = c->n_carry + (int)L * c->n_xs + c->n_params;
    mi_tensor **v = calloc((size_t)(2 * n_out + 2 * max_in + c->n_carry + c->n_xs + c->n_ys),
                           sizeof *v);
    if (!v) {
        mi_error_set("mi_scan: out of memory");
        return -1;
    }
    mi_tensor **outs = v, **seeds = v + n_out, **wrt = seeds + n_out, **got = wrt + max_in;
    mi_tensor **cur = got + max_in, **x = cur + c->n_carry, **y = x + c->n_xs;
    int rc = -1, m = 0, k = 0;
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *c0 = c->carry0[i];
        mi_tensor *s = mi_tensor_new(c->dt, c0->rank, c0->shape);
        if (!s) goto done;
        memcpy(s->data, (char *)c->kept[i]->data + (size_t)(a / c->S * c0->numel) * es,
               (size_t)c0->numel * es);
        s->requires_grad = true;
        cur[i] = wrt[m++] = s;
    }
    mi_set_grad_enabled(true);
    for (int64_t t = a; t < b; t++) {
        for (int j = 0; j < c->n_xs; j++) {
            if (!(x[j] = token_of(c, c->xs[j], t))) goto done;
            if (gx[j]) x[j]->requires_grad = true, wrt[m++] = x[j];
        }
        mi_tensor *next[SCAN_MAX];
        if (step(c, cur, x, next, y, t) != 0) goto done;
        for (int i = 0; i < c->n_carry; i++) cur[i] = next[i];
        for (int j = 0; j < c->n_ys; j++) {
            mi_tensor *s = mi_tensor_new(c->dt, c->y_rank[j], c->y_shape[j]);
            if (!s) goto done;
            gather(s->data, (const char *)g->data + (size_t)c->out_off_y[j] * es, c->N, c->T, t,
                   y[j]->numel / c->N, es);
            outs[c->n_carry + k] = y[j];
            seeds[c->n_carry + k++] = s;
        }
    }
    mi_set_grad_enabled(false);
    for (int i = 0; i < c->n_carry; i++) outs[i] = cur[i], seeds[i] = gc[i];
    /* the parameters asked for even when their gradient is not needed: the
     * nested pass then keeps the outer pass's gradient slots for them */
    for (int j = 0; j < c->n_params; j++) wrt[m++] = c->params[j];
    if (mi_grad(outs, seeds, n_out, wrt, m, false, got) != 0) goto done;
    /* the gradients out of the segment's scratch */
    m = 0;
    for (int i = 0; i < c->n_carry; i++)
        memmove(gc[i]->data, got[m++]->data, (size_t)gc[i]->numel * es);
    for (int64_t t = a; t < b; t++)
        for (int j = 0; j < c->n_xs; j++)
            if (gx[j]) {
                mi_tensor *gt = got[m++];
                scatter(gx[j], gt->data, c->N, c->T, t, gt->numel / c->N, es);
            }
    int64_t off = 0;
    for (int j = 0; gp && j < c->n_params; j++) {
        add_into((char *)gp + (size_t)off * es, got[m++]);
        off += c->params[j]->numel;
    }
    rc = 0;
done:
    mi_set_grad_enabled(false);
    free(v);
    return rc;
}

static int scan_vjp_all(const mi_node *nd, mi_tensor *g, const bool *need, mi_tensor **grads)
{
    scan_closure *c = (scan_closure *)(uintptr_t)nd->attrs.data;
    if (mi_grad_enabled()) {
        mi_error_set("mi_scan: no second derivatives (create_graph): its backward runs the "
                     "body again in a nested first-order pass; unroll the body with recording "
                     "on to differentiate twice");
        return -1;
    }
    size_t es = mi_dtype_size(c->dt);
    /* the node inputs' gradients, in the outer pass's scope */
    mi_tensor *gin[MI_MAX_INPUTS] = {0};
    for (int k = 0; k < nd->n_inputs; k++)
        if (need[k] && !(gin[k] = mi_zeros_like(nd->inputs[k]))) return -1;
    void *gx[SCAN_MAX] = {0};
    for (int j = 0; j < c->n_xs; j++) {
        mi_tensor *gs = gin[c->xs_slot[j]];
        if (gs && c->xs[j]->requires_grad) gx[j] = (char *)gs->data + (size_t)c->xs_off[j] * es;
    }
    void *gp = c->n_params && gin[c->params_slot] ? gin[c->params_slot]->data : NULL;

    mi_scope *scratch = mi_scope_new("mi_scan backward");
    mi_scope *hold = mi_scope_new("mi_scan carry gradient");
    if (!scratch || !hold) {
        mi_scope_free(scratch);
        mi_scope_free(hold);
        return -1;
    }
    /* a parameter with autograd history (a view of a leaf, a function of
     * one) stands as a leaf in the nested passes, so that they stop at it:
     * the outer pass takes its gradient on through its node */
    mi_node **nodes = c->n_params ? malloc(sizeof *nodes * (size_t)c->n_params) : NULL;
    if (c->n_params && !nodes) {
        mi_error_set("mi_scan: out of memory");
        mi_scope_free(scratch);
        mi_scope_free(hold);
        return -1;
    }
    for (int j = 0; j < c->n_params; j++) {
        nodes[j] = c->params[j]->node;
        c->params[j]->node = NULL;
    }
    mi_track_mark outer = mi_tensor_track_push(next_pass());
    int rc = -1;
    mi_tensor *gc[SCAN_MAX];
    mi_scope_enter(hold);
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *c0 = c->carry0[i];
        if (!(gc[i] = mi_tensor_new(c->dt, c0->rank, c0->shape))) goto leave_hold;
    }
    int64_t off = 0;
    for (int i = 0; i < c->n_carry; i++) {
        memcpy(gc[i]->data, (const char *)g->data + (size_t)off * es, (size_t)gc[i]->numel * es);
        off += gc[i]->numel;
    }
    for (int64_t s = c->n_seg; s-- > 0;) {
        int64_t a = s * c->S, b = a + c->S < c->T ? a + c->S : c->T;
        mi_scope_enter(scratch);
        mi_track_mark seg = mi_tensor_track_push(next_pass());
        int r = segment_grad(c, a, b, gc, g, gx, gp);
        mi_tensor_track_pop(seg);
        mi_scope_leave();
        mi_scope_reset(scratch);
        if (r != 0) goto leave_hold;
    }
    for (int i = 0; i < c->n_carry; i++) {
        mi_tensor *gs = gin[c->carry_slot[i]];
        if (gs) memcpy((char *)gs->data + (size_t)c->carry_off[i] * es, gc[i]->data,
                       (size_t)gc[i]->numel * es);
    }
    rc = 0;
leave_hold:
    mi_scope_leave();
    mi_tensor_track_pop(outer);
    for (int j = 0; j < c->n_params; j++) c->params[j]->node = nodes[j];
    free(nodes);
    mi_scope_free(scratch);
    mi_scope_free(hold);
    if (rc != 0) return -1;
    for (int k = 0; k < nd->n_inputs; k++)
        if (need[k]) grads[k] = gin[k];
    return 0;
}

static mi_tensor *scan_vjp(const mi_node *nd, int i, mi_tensor *g)
{
    mi_tensor *all[MI_MAX_INPUTS] = {0};
    bool need[MI_MAX_INPUTS] = {0};
    need[i] = true;
    return scan_vjp_all(nd, g, need, all) == 0 ? all[i] : NULL;
}

static const mi_op mi_op_scan_body = {
    .name = "mi_scan",
    .formula = "(c_t, y_t) = body(c_{t-1}, x_t), t = 1..T; the body run again per segment in "
               "the backward",
    .arity = MI_MAX_INPUTS, .flags = MI_OP_VARIADIC | MI_OP_NO_GRADGRAD,
    .shape = scan_shape, .vjp = scan_vjp, .vjp_all = scan_vjp_all};

/* ---------------------------------------------------------------- forward */

static mi_tensor *flat(mi_tensor *t) { return mi_reshape(t, 1, (int64_t[]){t->numel}); }

/* concat(flatten(ts[0..n))), a view when n = 1 */
static mi_tensor *packed(mi_tensor *const *ts, int n)
{
    mi_tensor *p[SCAN_MAX];
    for (int i = 0; i < n; i++) p[i] = flat(ts[i]);
    return n == 1 ? p[0] : mi_concat(p, n, 0);
}

static int check_args(mi_scan_fn body, int n_carry, mi_tensor *const *carry0, int n_xs,
                      mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out,
                      mi_tensor **ys)
{
    if (!body) {
        mi_error_set("mi_scan: no body function");
        return -1;
    }
    if (n_carry < 0 || n_carry > SCAN_MAX || n_xs < 1 || n_xs > SCAN_MAX || n_ys < 0 ||
        n_ys > SCAN_MAX) {
        mi_error_set("mi_scan: takes 0 to %d carries, 1 to %d per-token inputs and 0 to %d "
                     "per-token outputs; got %d, %d and %d", SCAN_MAX, SCAN_MAX, SCAN_MAX, n_carry,
                     n_xs, n_ys);
        return -1;
    }
    if ((n_carry && (!carry0 || !carry_out)) || !xs || (n_ys && !ys)) {
        mi_error_set("mi_scan: a NULL array (carry0, xs, carry_out or ys) for a nonzero count");
        return -1;
    }
    if (segment < 0) {
        mi_error_set("mi_scan: segment %d is negative (0: ceil(sqrt(T)))", segment);
        return -1;
    }
    for (int i = 0; i < n_carry; i++)
        if (!carry0[i]) {
            mi_error_set("mi_scan: carry0[%d] is NULL", i);
            return -1;
        }
    for (int j = 0; j < n_xs; j++)
        if (!xs[j]) {
            mi_error_set("mi_scan: xs[%d] is NULL", j);
            return -1;
        }
    mi_dtype dt = xs[0]->dtype;
    char a[96], b[96];
    for (int j = 0; j < n_xs; j++) {
        const mi_tensor *x = xs[j];
        if (x->rank < 2) {
            mi_error_set("mi_scan: xs[%d] is %s; per-token inputs are [N, T, …]", j,
                         mi_shape_str(a, sizeof a, x->rank, x->shape));
            return -1;
        }
        if (x->shape[0] != xs[0]->shape[0] || x->shape[1] != xs[0]->shape[1]) {
            mi_error_set("mi_scan: xs[%d] is %s and xs[0] %s: N and T (axes 0 and 1) differ", j,
                         mi_shape_str(a, sizeof a, x->rank, x->shape),
                         mi_shape_str(b, sizeof b, xs[0]->rank, xs[0]->shape));
            return -1;
        }
        if (x->dtype != dt || !mi_dtype_is_float(dt)) {
            mi_error_set("mi_scan: xs[%d] is %s; every carry and input must be f32 or f64, "
                         "one dtype (xs[0] is %s)", j, mi_dtype_name(x->dtype), mi_dtype_name(dt));
            return -1;
        }
    }
    if (xs[0]->shape[1] < 1) {
        mi_error_set("mi_scan: xs[0] is %s: no tokens (T = 0)",
                     mi_shape_str(a, sizeof a, xs[0]->rank, xs[0]->shape));
        return -1;
    }
    for (int i = 0; i < n_carry; i++)
        if (carry0[i]->dtype != dt) {
            mi_error_set("mi_scan: carry0[%d] is %s and xs[0] %s: one dtype for all", i,
                         mi_dtype_name(carry0[i]->dtype), mi_dtype_name(dt));
            return -1;
        }
    return 0;
}

/* Where each carry and input sits among the node's inputs: one slot each,
 * or one concatenation per group when they do not fit. Fills in[]; the
 * count, or -1. */
static int node_inputs(scan_closure *c, mi_tensor **in)
{
    int n = 0;
    bool pack = c->n_carry + c->n_xs + (c->n_params > 0) > MI_MAX_INPUTS;
    int64_t off = 0;
    for (int i = 0; i < c->n_carry; i++) {
        c->carry_slot[i] = pack ? 0 : n;
        c->carry_off[i] = pack ? off : 0;
        off += c->carry0[i]->numel;
        if (!pack) in[n++] = c->carry0[i];
    }
    if (pack && c->n_carry && !(in[n++] = packed(c->carry0, c->n_carry))) return -1;
    off = 0;
    int first = n;
    for (int j = 0; j < c->n_xs; j++) {
        c->xs_slot[j] = pack ? first : n;
        c->xs_off[j] = pack ? off : 0;
        off += c->xs[j]->numel;
        if (!pack) in[n++] = c->xs[j];
    }
    if (pack && !(in[n++] = packed(c->xs, c->n_xs))) return -1;
    c->params_slot = n;
    if (c->n_params && !(in[n++] = packed(c->params, c->n_params))) return -1;
    return n;
}

/* The forward's loop: every token's body with recording off in a scratch
 * scope, the carry copied out between tokens (cur, nxt in `hold`), the
 * carry at each segment's start into c->kept (when kept), the y's into O,
 * which the first token's y's size and which goes to the caller's scope. */
static mi_tensor *run_forward(scan_closure *c, mi_scope *outer, mi_scope *scratch, mi_scope *hold,
                              mi_tensor **keep, finder *f)
{
    size_t es = mi_dtype_size(c->dt);
    mi_tensor *cur[SCAN_MAX], *nxt[SCAN_MAX], *O = NULL;
    mi_scope_enter(hold);
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *c0 = c->carry0[i];
        cur[i] = mi_tensor_new(c->dt, c0->rank, c0->shape);
        nxt[i] = mi_tensor_new(c->dt, c0->rank, c0->shape);
        if (!cur[i] || !nxt[i]) goto fail;
        memcpy(cur[i]->data, c0->data, (size_t)c0->numel * es);
    }
    mi_input_hook was;
    void *was_ctx;
    bool recording = mi_set_grad_enabled(false);
    for (int64_t t = 0; t < c->T; t++) {
        if (keep && t % c->S == 0)
            for (int i = 0; i < c->n_carry; i++)
                memcpy((char *)keep[i]->data + (size_t)(t / c->S * cur[i]->numel) * es,
                       cur[i]->data, (size_t)cur[i]->numel * es);
        mi_scope_enter(scratch);
        mi_track_mark tok = mi_tensor_track_push(next_pass());
        mi_tensor *x[SCAN_MAX], *co[SCAN_MAX], *y[SCAN_MAX];
        int r = 0;
        for (int j = 0; j < c->n_xs && r == 0; j++)
            if (!(x[j] = token_of(c, c->xs[j], t))) r = -1;
        if (f) mi_input_hook_set(note_input, f, &was, &was_ctx);
        if (r == 0) r = step(c, cur, x, co, y, t);
        if (f) mi_input_hook_set(was, was_ctx, NULL, NULL);
        if (r == 0 && t == 0) {
            int64_t total = 0;
            for (int i = 0; i < c->n_carry; i++) total += c->carry0[i]->numel;
            for (int j = 0; j < c->n_ys; j++) {
                c->out_off_y[j] = total;
                total += y_numel(c, j);
            }
            mi_scope_enter(outer);
            O = mi_tensor_new(c->dt, 1, (int64_t[]){total});
            mi_scope_leave();
            if (!O) r = -1;
        }
        if (r == 0) {
            for (int i = 0; i < c->n_carry; i++)
                memcpy(nxt[i]->data, co[i]->data, (size_t)co[i]->numel * es);
            for (int j = 0; j < c->n_ys; j++)
                scatter((char *)O->data + (size_t)c->out_off_y[j] * es, y[j]->data, c->N, c->T, t,
                        y[j]->numel / c->N, es);
        }
        mi_tensor_track_pop(tok);
        mi_scope_leave();
        mi_scope_reset(scratch);
        if (r != 0) {
            mi_set_grad_enabled(recording);
            goto fail;
        }
        for (int i = 0; i < c->n_carry; i++) {
            mi_tensor *s = cur[i];
            cur[i] = nxt[i];
            nxt[i] = s;
        }
    }
    mi_set_grad_enabled(recording);
    /* c_T ahead of the y's in O */
    int64_t off = 0;
    for (int i = 0; i < c->n_carry; i++) {
        memcpy((char *)O->data + (size_t)off * es, cur[i]->data, (size_t)cur[i]->numel * es);
        off += cur[i]->numel;
    }
    mi_scope_leave();
    return O;
fail:
    mi_scope_leave();
    return NULL;
}

/* The results as views of O (recorded when O is). */
static int split_outputs(const scan_closure *c, mi_tensor *O, mi_tensor **carry_out, mi_tensor **ys)
{
    int n = c->n_carry + c->n_ys;
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        int rank;
        int64_t shape[MI_MAX_RANK + 1];
        if (k < c->n_carry) {
            rank = c->carry0[k]->rank;
            memcpy(shape, c->carry0[k]->shape, sizeof(int64_t) * (size_t)rank);
        } else {
            rank = ys_shape(c, k - c->n_carry, shape);
            if (rank > MI_MAX_RANK) {
                mi_error_set("mi_scan: y[%d] of rank %d stacks to rank %d, above %d",
                             k - c->n_carry, rank - 1, rank, MI_MAX_RANK);
                return -1;
            }
        }
        int64_t numel = mi_shape_numel(rank, shape);
        mi_tensor *part = n == 1 ? O : mi_slice(O, 0, off, off + numel);
        mi_tensor *r = part ? mi_reshape(part, rank, shape) : NULL;
        if (!r) return -1;
        if (k < c->n_carry) carry_out[k] = r;
        else ys[k - c->n_carry] = r;
        off += numel;
    }
    return 0;
}

int mi_scan(mi_scan_fn body, void *ctx, int n_carry, mi_tensor *const *carry0, int n_xs,
            mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out, mi_tensor **ys)
{
    if (check_args(body, n_carry, carry0, n_xs, xs, n_ys, segment, carry_out, ys) != 0) return -1;
    mi_scope *outer = mi_scope_current();
    if (!outer) {
        mi_error_set("mi_scan: no current scope (call mi_scope_enter first)");
        return -1;
    }
    scan_closure *c = mi_scope_alloc(outer, sizeof *c);
    mi_tensor **arrays = mi_scope_alloc(outer, sizeof *arrays * (size_t)(2 * (n_carry + n_xs) + 1));
    if (!c || !arrays) return -1;
    int64_t T = xs[0]->shape[1];
    int64_t S = segment ? segment : (int64_t)ceil(sqrt((double)T));
    if (S > T) S = T;
    while (S * S < T && segment == 0) S++; /* ⌈√T⌉ despite rounding */
    *c = (scan_closure){.body = body, .ctx = ctx, .n_carry = n_carry, .n_xs = n_xs, .n_ys = n_ys,
                        .dt = xs[0]->dtype, .N = xs[0]->shape[0], .T = T, .S = S,
                        .n_seg = (T + S - 1) / S, .carry0 = arrays, .xs = arrays + n_carry,
                        .kept = arrays + n_carry + n_xs};
    for (int i = 0; i < n_carry; i++) c->carry0[i] = carry0[i];
    for (int j = 0; j < n_xs; j++) c->xs[j] = xs[j];
    for (int j = 0; j < n_ys; j++) c->y_rank[j] = -1;
    bool recording = mi_grad_enabled();
    if (recording)
        for (int i = 0; i < n_carry; i++)
            if (!(c->kept[i] = mi_tensor_new(c->dt, 1, (int64_t[]){c->n_seg * carry0[i]->numel})))
                return -1;

    /* everything made here is listed under mi_scan's own pass, so that an
     * enclosing pass (a checkpoint's forward, a backward) never releases
     * what the scratch scopes hold */
    mi_track_mark mark = mi_tensor_track_push(next_pass());
    mi_scope *scratch = mi_scope_new("mi_scan token"), *hold = mi_scope_new("mi_scan carry");
    finder f = {0};
    int rc = -1;
    mi_tensor *O = NULL;
    if (!scratch || !hold) goto done;
    f.token = scratch;
    O = run_forward(c, outer, scratch, hold, recording ? c->kept : NULL, recording ? &f : NULL);
    if (!O) goto done;
    if (f.out_of_memory) {
        mi_error_set("mi_scan: out of memory");
        goto done;
    }
    bool any = f.n > 0;
    for (int i = 0; i < n_carry; i++) any |= carry0[i]->requires_grad;
    for (int j = 0; j < n_xs; j++) any |= xs[j]->requires_grad;
    if (recording && any) {
        for (int j = 0; j < f.n; j++)
            if (f.params[j]->dtype != c->dt) {
                mi_error_set("mi_scan: the body's parameter %s is %s and the carries and inputs %s",
                             f.params[j]->name ? f.params[j]->name : "(unnamed)",
                             mi_dtype_name(f.params[j]->dtype), mi_dtype_name(c->dt));
                goto done;
            }
        if (f.n && !(c->params = mi_scope_alloc(outer, sizeof *c->params * (size_t)f.n)))
            goto done;
        for (int j = 0; j < f.n; j++) c->params[j] = f.params[j];
        c->n_params = f.n;
        mi_tensor *in[MI_MAX_INPUTS];
        int n = node_inputs(c, in);
        if (n < 0 || !mi_node_record(&mi_op_scan_body, in, n, &(mi_attrs){.data = c}, O)) goto done;
    }
    rc = split_outputs(c, O, carry_out, ys);
done:
    free(f.params);
    mi_scope_free(scratch);
    mi_scope_free(hold);
    mi_tensor_track_pop(mark);
    return rc;
}
