/* What mi_scan's two files share (scan_body.c: the closure, a token's
 * step and the backward; scan_body_forward.c: the forward, the rows' parts
 * and the entry points). Private to ops/. */
#ifndef MIRAS_SCAN_BODY_IMPL_H
#define MIRAS_SCAN_BODY_IMPL_H

#include "internal.h"

#define SCAN_MAX 32 /* carries, per-token inputs, per-token outputs: each at most */

typedef struct scan_closure {
    mi_scan_fn body;
    void *ctx;
    int n_carry, n_xs, n_ys, n_params;
    mi_dtype dt;
    int64_t N, T, n_seg, n_slots;
    int64_t *start;                     /* segment s is tokens [start[s], start[s + 1]) */
    mi_tensor **carry0, **xs, **params; /* as the caller gave them (shapes, requires_grad) */
    /* per carry: [n_slots · numel]; slot s holds the carry at segment s's
     * start after the forward, and a backward pass fills the slots after
     * slot s with the carries inside segment s (the segments after it are
     * done by then); kept_valid: the slots hold the starts */
    mi_tensor **kept;
    bool kept_valid;
    int y_rank[SCAN_MAX];
    int64_t y_shape[SCAN_MAX][MI_MAX_RANK]; /* y_t's shape [N, …] */
    /* where each tensor sits among the node's inputs: slot, element offset */
    int carry_slot[SCAN_MAX], xs_slot[SCAN_MAX], params_slot;
    int64_t carry_off[SCAN_MAX], xs_off[SCAN_MAX];
    /* where c_T and the y's are in O (the carries come first): a part's own rows */
    int64_t out_off_c[SCAN_MAX], out_off_y[SCAN_MAX];
    /* mi_scan_rows: the closure of rows [row0, row0 + N) of N_all (a part;
     * the whole scan: row0 0, N_all N), and the whole scan's parts (n_parts
     * > 1: its rows run on that many threads, each part a scan of its own) */
    int64_t row0, N_all;
    int n_parts;
    struct scan_closure *part;
    /* a part's own leaves for the parameters while its backward runs on a
     * thread (the body's reads of params[j] are mapped to leaf[j]), or NULL */
    mi_tensor **leaf;
    /* segment MI_SCAN_RECORD: the record the forward kept (scan_record.c),
     * per part; NULL in the other modes */
    struct scan_record *rec;
} scan_closure;

/* What the body used, from the input hook: the tensors from outside that
 * require grad (the body's own arguments do not), leaves or recorded. What
 * the body makes lives in the token's scope and is never one of them, even
 * when the body records for a gradient of its own (an inner mi_grad). */
typedef struct finder {
    int n, cap;
    mi_tensor **params;
    const mi_scope *token[2]; /* the scopes the body's tensors go to, token by token */
    bool out_of_memory;
} finder;

/* A tracking id of mi_scan's own (unique across threads). */
uint64_t scan_next_pass(void);
/* ys[n, t, r] = y_t[n, r] (bytes, R elements of size es a row) */
void scan_scatter(void *dst, const void *src, int64_t N, int64_t T, int64_t t, int64_t R,
                  size_t es);
/* The stacked shape of ys[j]: [N, T, y_t.shape[1:]]; its rank. */
int scan_ys_shape(const scan_closure *c, int j, int64_t *shape);
/* x_t[n, r] = xs[n, t, r] (bytes, R elements of size es a row) */
void scan_gather(void *dst, const void *src, int64_t N, int64_t T, int64_t t, int64_t R,
                 size_t es);
/* acc[k] += g[k], g's numel elements of its dtype */
void scan_add_into(void *acc, const mi_tensor *g);
/* x_t of xs (one of c->xs) at token t, a new tensor [N, xs.shape[2:]] in the current scope */
mi_tensor *scan_token_of(const scan_closure *c, const mi_tensor *xs, int64_t t);
/* The body at token t from carry[] and x[], its results checked against the
 * carries' shapes and the y's (the first token fixes theirs); 0 or -1. */
int scan_step(scan_closure *c, mi_tensor *const *carry, mi_tensor *const *x,
              mi_tensor **carry_out, mi_tensor **y, int64_t t);
/* Where c's c_T and y's go in O, from the first token's y's; O's size. */
int64_t scan_layout(scan_closure *c, mi_tensor *const *y);
/* O, made in `outer` by the first part to ask (parts run on threads). */
mi_tensor *scan_output_of(mi_dtype dt, mi_scope *outer, mi_tensor **O, int64_t total);
/* Segment MI_SCAN_RECORD (scan_record.c). The record of closure c (a part,
 * or the whole scan) in a sub of outer: made here, before c's thread fills it. */
int scan_record_new(scan_closure *c, mi_scope *outer);
/* The forward on c's thread, recording into c->rec: the y's and c_T into
 * *O (made in outer at the first token); the tensors from outside that
 * require grad it read are c->rec's, each with a leaf of c's own in its place. */
int scan_record_forward(scan_closure *c, mi_scope *outer, mi_tensor **O);
/* The tensors from outside that c's record read and that require grad
 * (in the order it met them), and how many. */
mi_tensor *const *scan_record_found(const scan_closure *c, int *n);
/* The backward of c from its record, on c's thread: c_T's and the y's
 * gradients from g; carry0's into gcar[i], x's into gx[j] (NULL: not
 * needed), c->params[j]'s added into gp (NULL: not needed). */
int scan_record_backward(scan_closure *c, const mi_tensor *g, void *const *gcar,
                         void *const *gx, void *gp);

/* Carry i's elements in slot k of the kept carries, and tensors over slot k
 * (views, in the current scope). */
void *scan_slot(const scan_closure *c, int i, int64_t k);
int scan_slot_views(const scan_closure *c, int64_t k, mi_tensor **cur);
/* Copies the carries src[] into the elements dst[]. */
void scan_put_carries(const scan_closure *c, void *const *dst, mi_tensor *const *src);
/* Token t with recording off in scope s (scan_body.c). */
int scan_token_step(scan_closure *c, mi_scope *s, mi_tensor *const *cur, int64_t k, int64_t t,
                    mi_tensor **co, mi_tensor **y, finder *f);
/* Runs run(&c->part[p], p, ctx) for every part, one a thread; 0, or -1
 * with the first failing part's message. */
typedef int (*part_fn)(scan_closure *part, int p, void *ctx);
int scan_over_parts(scan_closure *c, part_fn run, void *ctx);
/* The node's op: its vjp is the backward. */
extern const mi_op mi_op_scan_body;

#endif
