/* mi_scan's record mode (segment MI_SCAN_RECORD): the forward runs the body
 * once a token, recording, and keeps the record; the backward differentiates
 * it in a nested pass, with no second run of the body. The body's ops are
 * the same ones the other modes run (the results equal theirs); what changes
 * is the trade: every token's record is held from the forward to the
 * backward, as an unrolled tape holds it, for one run of the body instead of
 * three.
 *
 * With mi_scan_rows each part (a range of the rows, one a thread) records on
 * its thread into a sub of the caller's scope (mi_scope_sub: the parts fill
 * theirs at once, and the records go when the caller's scope is reset or
 * freed, with the node that reads them), and its backward runs on its
 * thread. The record reads each tensor from outside that requires grad (the
 * body's parameters: leaves, or views and functions of them) through a leaf
 * of the part's own, a header over its storage that mi_apply's input map
 * puts in its place as the body first reads it: the nested passes of two
 * threads then never share a gradient slot, and each stops where the body's
 * record does; the outer pass takes the parameters' gradients on from the
 * node, as in the other modes. */
#include <stdlib.h>

#include "scan_body_impl.h"
#include "scan_scratch.h"
#include "tensor_internal.h"

typedef struct scan_record {
    mi_scope *scope; /* a sub of the caller's scope */
    mi_tensor **carry; /* [n_carry]: the carry before the first token, leaves */
    mi_tensor **x;     /* [T · n_xs]: x_t[j] at t · n_xs + j, leaves */
    mi_tensor **out;   /* [n_carry + T · n_ys]: c_T, then y_t[j] at n_carry + t · n_ys + j */
    int n, cap;
    mi_tensor **found, **leaf; /* the tensors from outside that require grad; the part's leaves */
    bool out_of_memory;
} scan_record;

int scan_record_new(scan_closure *c, mi_scope *outer)
{
    mi_scope *s = mi_scope_sub(outer, "mi_scan record");
    scan_record *r = s ? mi_scope_alloc(s, sizeof *r) : NULL;
    if (!r) return -1;
    *r = (scan_record){.scope = s};
    c->rec = r;
    return 0;
}

mi_tensor *const *scan_record_found(const scan_closure *c, int *n)
{
    *n = c->rec->n;
    return c->rec->found;
}

/* mi_apply's input map while the body records: a tensor from outside that
 * requires grad reads as the part's leaf for it, made at its first read. */
static mi_tensor *leaf_for(void *ctx, mi_tensor *t)
{
    scan_record *r = ctx;
    if (!t || !t->requires_grad || t->scope == r->scope) return t;
    for (int j = 0; j < r->n; j++)
        if (r->found[j] == t) return r->leaf[j];
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        mi_tensor **a = mi_scope_alloc(r->scope, sizeof *a * 2 * (size_t)cap);
        if (!a) {
            r->out_of_memory = true;
            return t;
        }
        if (r->n) {
            memcpy(a, r->found, sizeof *a * (size_t)r->n);
            memcpy(a + cap, r->leaf, sizeof *a * (size_t)r->n);
        }
        r->found = a, r->leaf = a + cap, r->cap = cap;
    }
    mi_tensor *leaf = mi_tensor_alias(t, t->rank, t->shape, 0);
    if (!leaf) {
        r->out_of_memory = true;
        return t;
    }
    leaf->requires_grad = true;
    r->found[r->n] = t;
    r->leaf[r->n++] = leaf;
    return leaf;
}

/* The tokens, recording, from leaves for the carry before the first and
 * for each x_t (they require grad where carry0 and xs do). */
static int record_tokens(scan_closure *c, scan_record *r, mi_scope *outer, mi_tensor **O)
{
    size_t es = mi_dtype_size(c->dt);
    int64_t n_out = c->n_carry + c->T * c->n_ys;
    r->carry = mi_scope_alloc(r->scope, sizeof *r->carry * (size_t)(c->n_carry + 1));
    r->x = mi_scope_alloc(r->scope, sizeof *r->x * (size_t)(c->T * c->n_xs));
    r->out = mi_scope_alloc(r->scope, sizeof *r->out * (size_t)(n_out + 1));
    if (!r->carry || !r->x || !r->out) return -1;
    mi_tensor *cur[SCAN_MAX], *x[SCAN_MAX], *co[SCAN_MAX], *y[SCAN_MAX], *out = NULL;
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *c0 = c->carry0[i];
        if (!(cur[i] = r->carry[i] = mi_tensor_new(c->dt, c0->rank, c0->shape))) return -1;
        memcpy(cur[i]->data, c0->data, (size_t)c0->numel * es);
        cur[i]->requires_grad = c0->requires_grad;
    }
    for (int64_t t = 0; t < c->T; t++) {
        for (int j = 0; j < c->n_xs; j++) {
            if (!(x[j] = scan_token_of(c, c->xs[j], t))) return -1;
            x[j]->requires_grad = c->xs[j]->requires_grad;
            r->x[t * c->n_xs + j] = x[j];
        }
        if (scan_step(c, cur, x, co, y, t) != 0) return -1;
        if (t == 0 && !(out = scan_output_of(c->dt, outer, O, scan_layout(c, y)))) return -1;
        for (int j = 0; j < c->n_ys; j++) {
            scan_scatter((char *)out->data + (size_t)c->out_off_y[j] * es, y[j]->data, c->N,
                         c->T, t, y[j]->numel / c->N, es);
            r->out[c->n_carry + t * c->n_ys + j] = y[j];
        }
        for (int i = 0; i < c->n_carry; i++) cur[i] = co[i];
    }
    for (int i = 0; i < c->n_carry; i++) {
        r->out[i] = cur[i];
        memcpy((char *)out->data + (size_t)c->out_off_c[i] * es, cur[i]->data,
               (size_t)cur[i]->numel * es);
    }
    return 0;
}

int scan_record_forward(scan_closure *c, mi_scope *outer, mi_tensor **O)
{
    scan_record *r = c->rec;
    mi_scope_enter(r->scope);
    /* what the record holds is listed under mi_scan's own pass: no
     * enclosing pass (a checkpoint's, a backward) releases it */
    mi_track_mark mark = mi_tensor_track_push(scan_next_pass());
    bool recording = mi_set_grad_enabled(true);
    mi_input_map was_map;
    mi_input_hook was_hook;
    void *was_map_ctx, *was_hook_ctx;
    mi_input_map_set(leaf_for, r, &was_map, &was_map_ctx);
    mi_input_hook_set(NULL, NULL, &was_hook, &was_hook_ctx); /* the body's reads are its own */
    int rc = record_tokens(c, r, outer, O);
    mi_input_hook_set(was_hook, was_hook_ctx, NULL, NULL);
    mi_input_map_set(was_map, was_map_ctx, NULL, NULL);
    mi_set_grad_enabled(recording);
    mi_tensor_track_pop(mark);
    mi_scope_leave();
    if (r->out_of_memory) rc = -1;
    if (rc != 0 && !mi_error_pending()) mi_error_set("mi_scan: out of memory");
    return rc;
}

/* The upstream gradients of the record's outputs, from g (O's): c_T's,
 * then each y_t's, in the current scope. */
static int seeds_of(const scan_closure *c, const mi_tensor *g, mi_tensor **seeds)
{
    size_t es = mi_dtype_size(c->dt);
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *c0 = c->carry0[i];
        if (!(seeds[i] = mi_tensor_new(c->dt, c0->rank, c0->shape))) return -1;
        memcpy(seeds[i]->data, (const char *)g->data + (size_t)c->out_off_c[i] * es,
               (size_t)c0->numel * es);
    }
    for (int64_t t = 0; t < c->T; t++)
        for (int j = 0; j < c->n_ys; j++) {
            mi_tensor *sd = mi_tensor_new(c->dt, c->y_rank[j], c->y_shape[j]);
            if (!sd) return -1;
            scan_gather(sd->data, (const char *)g->data + (size_t)c->out_off_y[j] * es, c->N,
                        c->T, t, sd->numel / c->N, es);
            seeds[c->n_carry + t * c->n_ys + j] = sd;
        }
    return 0;
}

/* Where found tensor t is among the node's parameters: its first element's
 * offset in their concatenation, or −1. */
static int64_t param_offset(const scan_closure *c, const mi_tensor *t)
{
    int64_t off = 0;
    for (int j = 0; j < c->n_params; j++) {
        if (c->params[j] == t) return off;
        off += c->params[j]->numel;
    }
    return -1;
}

int scan_record_backward(scan_closure *c, const mi_tensor *g, void *const *gcar,
                         void *const *gx, void *gp)
{
    scan_record *r = c->rec;
    size_t es = mi_dtype_size(c->dt);
    int64_t n_out = c->n_carry + c->T * c->n_ys;
    int64_t max_in = c->n_carry + c->T * c->n_xs + r->n;
    mi_tensor **seeds = calloc((size_t)n_out + 1, sizeof *seeds);
    mi_tensor **wrt = calloc((size_t)max_in + 1, sizeof *wrt);
    mi_tensor **got = calloc((size_t)max_in + 1, sizeof *got);
    mi_scope *s = scratch_get();
    bool recording = mi_set_grad_enabled(false);
    mi_scope_enter(s);
    mi_track_mark mark = mi_tensor_track_push(scan_next_pass());
    int rc = -1, m = 0;
    if (!seeds || !wrt || !got || !s) {
        mi_error_set("mi_scan: out of memory");
        goto done;
    }
    if (seeds_of(c, g, seeds) != 0) goto done;
    for (int i = 0; i < c->n_carry; i++)
        if (gcar[i]) wrt[m++] = r->carry[i];
    for (int64_t t = 0; t < c->T; t++)
        for (int j = 0; j < c->n_xs; j++)
            if (gx[j]) wrt[m++] = r->x[t * c->n_xs + j];
    for (int k = 0; k < r->n; k++) wrt[m++] = r->leaf[k];
    if (mi_grad(r->out, seeds, (int)n_out, wrt, m, false, got) != 0) goto done;
    m = 0;
    for (int i = 0; i < c->n_carry; i++)
        if (gcar[i]) {
            memcpy(gcar[i], got[m]->data, (size_t)got[m]->numel * es);
            m++;
        }
    for (int64_t t = 0; t < c->T; t++)
        for (int j = 0; j < c->n_xs; j++)
            if (gx[j]) {
                scan_scatter(gx[j], got[m]->data, c->N, c->T, t, got[m]->numel / c->N, es);
                m++;
            }
    for (int k = 0; gp && k < r->n; k++) {
        int64_t off = param_offset(c, r->found[k]);
        if (off >= 0) scan_add_into((char *)gp + (size_t)off * es, got[m + k]);
    }
    rc = 0;
done:
    mi_tensor_track_pop(mark);
    mi_scope_leave();
    mi_set_grad_enabled(recording);
    scratch_put(s);
    free(seeds);
    free(wrt);
    free(got);
    return rc;
}
