/* mi_scan: a differentiable scan of a body written with ordinary ops over
 * the T tokens of its per-token inputs (the framework's lax.scan):
 *
 *     (c_t, y_t) = body(c_{t−1}, x_t),  t = 1..T,  c_0 = carry0,
 *
 * returning c_T and the stacked y_1..y_T, without an autograd record per
 * token.
 *
 * Forward: the body runs T times with recording off, the tokens alternating
 * between two scratch scopes (scan_scratch.c), each reset before the token
 * after next: a token reads the carry the one before left where it lies, and
 * the forward keeps the outputs and the carry at the start of every segment,
 * nothing else. The tensors from outside the body uses that
 * require grad (its parameters: leaves, or views and functions of them) are
 * found on the way, by mi_apply's input hook, as mi_checkpoint finds its
 * leaves.
 *
 * Backward (the node's vjp), segment by segment from the last: the body runs
 * again with recording off from the segment's kept carry, keeping the carry
 * before each of its tokens, then token by token from the last it runs once
 * more, recording, from the carry before the token, and a backward pass
 * nested in the outer one takes the token's upstream gradients (its y_t's,
 * and the carry's from the token after) to the carry before it, its x_t and
 * the parameters; the token's record is dropped before the next but one
 * (the tokens alternate scopes again: the carry's gradient stays where its
 * token's pass left it). The √n
 * checkpointing of Chen, Xu, Zhang, Guestrin, "Training Deep Nets with
 * Sublinear Memory Cost", 2016, with the tokens as the layers, and the
 * segments' carries in one array: segment s of L_s tokens fills slots s to
 * s + L_s − 1 in the backward, when the later segments (whose starts the
 * slots after s held) are done. With segments of K, K − 1, …, 1 tokens
 * (K (K + 1) / 2 ≥ T) that is K ≈ √(2T) carries in all and one token's
 * record at a time: memory O(√T · |c| + |body record|) besides the inputs,
 * the outputs and their gradients; the body runs three times a token, and
 * its vjps once. A second backward pass through the node (mi_grad again on
 * the same graph) first runs the forward again to refill the starts.
 *
 * mi_scan_rows, for a body whose rows are independent: the N rows split
 * into one consecutive range a thread, and each range is a scan of its own
 * (a part: a closure over views of its rows of carry0, xs and the kept
 * carries), its forward and its backward run on its thread, one parallel
 * region a pass, its records and scratch in that thread's scopes. O is laid
 * out as for the whole scan and each part writes its rows of it. In a part's
 * backward the body's parameters are the part's own leaves (headers over
 * their storage, put in their place by mi_apply's input map): a nested pass
 * keeps a gradient slot in each tensor it differentiates, and two threads
 * must not share one. Each part sums its parameters' gradients apart; the
 * sums are added after the parts are done.
 *
 * First-order only: the vjp runs a nested backward pass that records
 * nothing, so under create_graph it fails with a message; differentiating
 * twice would need the nested pass recorded, which is the unrolled tape this
 * op exists to avoid.
 *
 * The node has one output, O = concat(flatten(c_T…), flatten(ys…)), and the
 * results are views of it; its inputs are carry0 and xs (each one, the
 * smallest of them packed into one concatenation when they would not fit
 * MI_MAX_INPUTS), and the concatenation of the parameters as mi_checkpoint
 * does it. */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "scan_body_impl.h"
#include "scan_scratch.h"
#include "tensor_internal.h"

static void note_input(void *ctx, mi_tensor *t)
{
    finder *f = ctx;
    if (t->scope != f->token[0] && t->scope != f->token[1] &&
        !tensor_list_add_once(&f->params, &f->n, &f->cap, t))
        f->out_of_memory = true;
}

/* Tracking ids of mi_scan's own, apart from the engine's (counting up from
 * 1) and mi_checkpoint's (top bit): what a token or a segment made is listed
 * under one and dropped from the list with it. */
static uint64_t scan_pass; /* atomic: a pass's id is unique across threads too */
uint64_t scan_next_pass(void)
{
    return (UINT64_C(1) << 62) | __atomic_add_fetch(&scan_pass, 1, __ATOMIC_RELAXED);
}

/* The elements of one token of a [N, T, …] tensor: R = numel / (N·T). */
static int64_t per_token(const mi_tensor *t, int64_t N, int64_t T)
{
    return N * T != 0 ? t->numel / (N * T) : 0;
}

/* x_t[n, r] = xs[n, t, r] (bytes, R elements of size es a row) */
void scan_gather(void *dst, const void *src, int64_t N, int64_t T, int64_t t, int64_t R,
                 size_t es)
{
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)dst + (size_t)(n * R) * es,
               (const char *)src + (size_t)((n * T + t) * R) * es, (size_t)R * es);
}

/* ys[n, t, r] = y_t[n, r] */
void scan_scatter(void *dst, const void *src, int64_t N, int64_t T, int64_t t, int64_t R,
                    size_t es)
{
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)dst + (size_t)((n * T + t) * R) * es,
               (const char *)src + (size_t)(n * R) * es, (size_t)R * es);
}

void scan_add_into(void *acc, const mi_tensor *g)
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

/* x_t of xs at token t, a new tensor [N, xs.shape[2:]] */
mi_tensor *scan_token_of(const scan_closure *c, const mi_tensor *xs, int64_t t)
{
    int64_t shape[MI_MAX_RANK];
    shape[0] = c->N;
    for (int d = 2; d < xs->rank; d++) shape[d - 1] = xs->shape[d];
    mi_tensor *x = mi_tensor_new(c->dt, xs->rank - 1, shape);
    if (x)
        scan_gather(x->data, xs->data, c->N, c->T, t, per_token(xs, c->N, c->T),
                    mi_dtype_size(c->dt));
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

/* While a token runs again for its carry alone: mi_scan_wants_ys's answer, negated. */
static _Thread_local bool skip_ys;

bool mi_scan_wants_ys(void) { return !skip_ys; }

/* One step of the body, its results checked against the carry's shapes and
 * (after the first token, unless skip_ys) the y's; the first token fixes the
 * y's shapes. */
int scan_step(scan_closure *c, mi_tensor *const *carry, mi_tensor *const *x,
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
    for (int j = 0; j < c->n_ys && !skip_ys; j++) {
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

/* The stacked shape of ys[j]: [N, T, y_t.shape[1:]] */
int scan_ys_shape(const scan_closure *c, int j, int64_t *shape)
{
    shape[0] = c->N;
    shape[1] = c->T;
    for (int d = 1; d < c->y_rank[j]; d++) shape[d + 1] = c->y_shape[j][d];
    return c->y_rank[j] + 1;
}

/* Carry i's elements in slot k of the kept carries. */
void *scan_slot(const scan_closure *c, int i, int64_t k)
{
    return (char *)c->kept[i]->data + (size_t)(k * c->carry0[i]->numel) * mi_dtype_size(c->dt);
}

/* Tensors over slot k of the kept carries (views, in the current scope). */
int scan_slot_views(const scan_closure *c, int64_t k, mi_tensor **cur)
{
    size_t es = mi_dtype_size(c->dt);
    for (int i = 0; i < c->n_carry; i++) {
        const mi_tensor *c0 = c->carry0[i];
        cur[i] = mi_tensor_alias(c->kept[i], c0->rank, c0->shape, (size_t)(k * c0->numel) * es);
        if (!cur[i]) return -1;
    }
    return 0;
}

/* Copies the carries src[] into the elements dst[] (memmove: a carry the
 * body passed through may be a view of its destination). */
void scan_put_carries(const scan_closure *c, void *const *dst, mi_tensor *const *src)
{
    for (int i = 0; i < c->n_carry; i++)
        memmove(dst[i], src[i]->data, (size_t)src[i]->numel * mi_dtype_size(c->dt));
}

/* Token t with recording off in scope s, reset first, from the carry cur[]
 * (NULL: views of kept slot k, made in s): co[] and y[] as the body gave
 * them, valid until s is reset. f: the input hook's finder, or NULL. */
int scan_token_step(scan_closure *c, mi_scope *s, mi_tensor *const *cur, int64_t k, int64_t t,
                      mi_tensor **co, mi_tensor **y, finder *f)
{
    /* a token run again from a kept slot (cur NULL) is run for its carry */
    bool was_skip = skip_ys;
    skip_ys = !cur;
    mi_scope_reset(s);
    mi_scope_enter(s);
    mi_track_mark tok = mi_tensor_track_push(scan_next_pass());
    mi_tensor *x[SCAN_MAX], *view[SCAN_MAX];
    int r = 0;
    if (!cur) {
        r = scan_slot_views(c, k, view);
        cur = view;
    }
    for (int j = 0; j < c->n_xs && r == 0; j++)
        if (!(x[j] = scan_token_of(c, c->xs[j], t))) r = -1;
    mi_input_hook was;
    void *was_ctx;
    if (f) mi_input_hook_set(note_input, f, &was, &was_ctx);
    if (r == 0) r = scan_step(c, cur, x, co, y, t);
    if (f) mi_input_hook_set(was, was_ctx, NULL, NULL);
    mi_tensor_track_pop(tok);
    mi_scope_leave();
    skip_ys = was_skip;
    return r;
}

/* ---------------------------------------------------------------- backward */

static int scan_shape(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                      int64_t *shape)
{
    (void)in, (void)n, (void)a, (void)dt, (void)rank, (void)shape;
    mi_error_set("mi_scan: not an op to apply; call mi_scan");
    return -1;
}

/* A part's own leaf in place of a parameter (the input map of its backward). */
static mi_tensor *leaf_of(void *ctx, mi_tensor *t)
{
    const scan_closure *c = ctx;
    for (int j = 0; j < c->n_params; j++)
        if (t == c->params[j]) return c->leaf[j];
    return t;
}

/* The gradient of token t: the body run again, recording, from the carry
 * before it (c_{t−1}: views of kept slot prev, leaves of the nested pass), and a nested
 * backward pass from the upstream gradients (gc: c_t's, replaced by c_{t−1}'s,
 * which live in s; g: O's), in scope s, reset first (gc must not be in s). x_t's gradients go into
 * gx[j] (or nowhere when NULL), the parameters' are added into gp. v: room
 * for 2 (n_carry + n_ys) + 2 (n_carry + n_xs + n_params) pointers. */
static int token_grad(scan_closure *c, mi_scope *s, int64_t t, int64_t prev,
                      mi_tensor **gc, const mi_tensor *g, void *const *gx, void *gp,
                      mi_tensor **v)
{
    size_t es = mi_dtype_size(c->dt);
    int n_out = c->n_carry + c->n_ys, max_in = c->n_carry + c->n_xs + c->n_params;
    mi_tensor **outs = v, **seeds = v + n_out, **wrt = seeds + n_out, **got = wrt + max_in;
    mi_tensor *cur[SCAN_MAX], *x[SCAN_MAX], *next[SCAN_MAX], *y[SCAN_MAX];
    int rc = -1, m = 0;
    mi_scope_reset(s);
    mi_scope_enter(s);
    mi_track_mark tok = mi_tensor_track_push(scan_next_pass());
    if (scan_slot_views(c, prev, cur) != 0) goto done;
    for (int i = 0; i < c->n_carry; i++) {
        cur[i]->requires_grad = true;
        wrt[m++] = cur[i];
    }
    for (int j = 0; j < c->n_xs; j++) {
        if (!(x[j] = scan_token_of(c, c->xs[j], t))) goto done;
        if (gx[j]) x[j]->requires_grad = true, wrt[m++] = x[j];
    }
    mi_input_map was;
    void *was_ctx;
    if (c->leaf) mi_input_map_set(leaf_of, c, &was, &was_ctx);
    mi_set_grad_enabled(true);
    int r = scan_step(c, cur, x, next, y, t);
    mi_set_grad_enabled(false);
    if (c->leaf) mi_input_map_set(was, was_ctx, NULL, NULL);
    if (r != 0) goto done;
    for (int i = 0; i < c->n_carry; i++) outs[i] = next[i], seeds[i] = gc[i];
    for (int j = 0; j < c->n_ys; j++) {
        mi_tensor *sd = mi_tensor_new(c->dt, c->y_rank[j], c->y_shape[j]);
        if (!sd) goto done;
        scan_gather(sd->data, (const char *)g->data + (size_t)c->out_off_y[j] * es, c->N, c->T,
                    t, y[j]->numel / c->N, es);
        outs[c->n_carry + j] = y[j];
        seeds[c->n_carry + j] = sd;
    }
    /* the parameters asked for even when their gradient is not needed: the
     * nested pass then keeps the outer pass's gradient slots for them */
    for (int j = 0; j < c->n_params; j++) wrt[m++] = c->leaf ? c->leaf[j] : c->params[j];
    if (mi_grad(outs, seeds, n_out, wrt, m, false, got) != 0) goto done;
    /* the carry's gradients stay in s for the token before (which runs in
     * the other scope); the others go out of it */
    m = 0;
    for (int i = 0; i < c->n_carry; i++) gc[i] = got[m++];
    if (scratch_hold(s, gc, c->n_carry) != 0) goto done;
    for (int j = 0; j < c->n_xs; j++)
        if (gx[j]) {
            mi_tensor *gt = got[m++];
            scan_scatter(gx[j], gt->data, c->N, c->T, t, gt->numel / c->N, es);
        }
    int64_t off = 0;
    for (int j = 0; gp && j < c->n_params; j++) {
        scan_add_into((char *)gp + (size_t)off * es, got[m++]);
        off += c->params[j]->numel;
    }
    rc = 0;
done:
    mi_set_grad_enabled(false);
    mi_tensor_track_pop(tok);
    mi_scope_leave();
    return rc;
}

/* The gradient of segment sg: the carries before each of its tokens from
 * the one kept at its start (slot sg), by the body with recording off, into
 * the slots after it, then token_grad from the last token back. gc, g, gx,
 * gp, v: token_grad's. */
static int segment_grad(scan_closure *c, mi_scope *const *sc, int *held, int64_t sg,
                        mi_tensor **gc, const mi_tensor *g, void *const *gx, void *gp,
                        mi_tensor **v)
{
    /* the scope that does not hold gc (*held: which one does, −1 neither)
     * runs the recompute and the segment's last token; then they alternate */
    int k = *held == 0;
    int64_t a = c->start[sg], b = c->start[sg + 1];
    mi_tensor *co[SCAN_MAX], *y[SCAN_MAX];
    void *at[SCAN_MAX];
    if (b - a > 1) c->kept_valid = false;
    for (int64_t t = a; t + 1 < b; t++) {
        if (scan_token_step(c, sc[k], NULL, sg + t - a, t, co, y, NULL) != 0) return -1;
        for (int i = 0; i < c->n_carry; i++) at[i] = scan_slot(c, i, sg + t + 1 - a);
        scan_put_carries(c, at, co);
    }
    for (int64_t t = b; t-- > a; k = !k) {
        if (token_grad(c, sc[k], t, sg + t - a, gc, g, gx, gp, v) != 0) return -1;
        *held = k;
    }
    return 0;
}

/* The carries at the segments' starts into their slots again (a backward
 * pass overwrote them), by the body with recording off from the first,
 * which no pass overwrites: segment s's tokens from slot s, each carry into
 * slot s + 1 (the last one the next segment's start). */
static int refill_kept(scan_closure *c, mi_scope *sc)
{
    mi_tensor *co[SCAN_MAX], *y[SCAN_MAX];
    void *at[SCAN_MAX];
    for (int64_t s = 0; s + 1 < c->n_seg; s++)
        for (int64_t t = c->start[s]; t < c->start[s + 1]; t++) {
            if (scan_token_step(c, sc, NULL, t == c->start[s] ? s : s + 1, t, co, y, NULL) != 0)
                return -1;
            for (int i = 0; i < c->n_carry; i++) at[i] = scan_slot(c, i, s + 1);
            scan_put_carries(c, at, co);
        }
    c->kept_valid = true;
    return 0;
}

/* The backward of one part (or of the whole scan) on the thread that runs
 * it, in scratch scopes of that thread: gc0[] (tensors of the part's carry
 * shapes, made by the caller) take c_T's gradient from g, the segments run
 * from the last, and carry0's gradient goes into gcar[i] (NULL: not needed),
 * x's into gx[j], the parameters' are added into gp. */
static int part_backward(scan_closure *c, const mi_tensor *g, mi_tensor *const *gc0,
                         void *const *gcar, void *const *gx, void *gp)
{
    if (c->rec) return scan_record_backward(c, g, gcar, gx, gp);
    size_t es = mi_dtype_size(c->dt);
    mi_tensor *gc[SCAN_MAX]; /* each token's pass replaces them with the carry's before it */
    for (int i = 0; i < c->n_carry; i++) gc[i] = gc0[i];
    int n_v = 2 * (c->n_carry + c->n_ys) + 2 * (c->n_carry + c->n_xs + c->n_params);
    mi_tensor **v = calloc((size_t)n_v, sizeof *v);
    mi_scope *sc[2] = {scratch_get(), scratch_get()};
    bool recording = mi_set_grad_enabled(false);
    mi_track_mark mark = mi_tensor_track_push(scan_next_pass());
    int rc = -1, held = -1;
    if (!v || !sc[0] || !sc[1]) {
        if (!mi_error_pending()) mi_error_set("mi_scan: out of memory");
        goto done;
    }
    if (!c->kept_valid && refill_kept(c, sc[0]) != 0) goto done;
    for (int i = 0; i < c->n_carry; i++)
        memcpy(gc[i]->data, (const char *)g->data + (size_t)c->out_off_c[i] * es,
               (size_t)gc[i]->numel * es);
    for (int64_t s = c->n_seg; s-- > 0;)
        if (segment_grad(c, sc, &held, s, gc, g, gx, gp, v) != 0) goto done;
    for (int i = 0; i < c->n_carry; i++)
        if (gcar[i]) memcpy(gcar[i], gc[i]->data, (size_t)gc[i]->numel * es);
    rc = 0;
done:
    mi_tensor_track_pop(mark);
    mi_set_grad_enabled(recording);
    free(v);
    scratch_put(sc[1]);
    scratch_put(sc[0]);
    return rc;
}

/* Runs run(c->part[p], p, ctx) for every part, on n_parts threads, and
 * keeps the first failing part's message: 0, or -1 with that message. */
int scan_over_parts(scan_closure *c, part_fn run, void *ctx)
{
    enum { MSG = 600 };
    char *msg = calloc((size_t)c->n_parts, MSG);
    if (!msg) return mi_error_set("mi_scan: out of memory"), -1;
    int failed = -1;
#pragma omp parallel num_threads(c->n_parts)
    {
        int t = 0, k = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        k = omp_get_num_threads();
#endif
        for (int p = t; p < c->n_parts; p += k)
            if (run(&c->part[p], p, ctx) != 0) {
                snprintf(msg + (size_t)p * MSG, MSG, "%s",
                         mi_error_pending() ? mi_error() : "mi_scan: a part failed");
                mi_error_clear();
#pragma omp critical(mi_scan_parts)
                if (failed < 0 || p < failed) failed = p;
            }
    }
    if (failed >= 0) mi_error_set("%s", msg + (size_t)failed * MSG);
    free(msg);
    return failed >= 0 ? -1 : 0;
}

/* A part's gradient buffers: the whole scan's at the part's rows. */
typedef struct part_grads {
    const mi_tensor *g;
    mi_tensor **gc;   /* [n_parts · n_carry] */
    void *const *gcar, *const *gx;
    mi_tensor **gp;   /* [n_parts]: each part's sums of the parameters' gradients, or NULL */
} part_grads;

static int part_backward_of(scan_closure *part, int p, void *ctx)
{
    const part_grads *pg = ctx;
    size_t es = mi_dtype_size(part->dt);
    void *gcar[SCAN_MAX], *gx[SCAN_MAX];
    for (int i = 0; i < part->n_carry; i++) {
        int64_t R = part->carry0[i]->numel / part->N;
        gcar[i] = pg->gcar[i] ? (char *)pg->gcar[i] + (size_t)(part->row0 * R) * es : NULL;
    }
    for (int j = 0; j < part->n_xs; j++) {
        int64_t R = part->xs[j]->numel / part->N;
        gx[j] = pg->gx[j] ? (char *)pg->gx[j] + (size_t)(part->row0 * R) * es : NULL;
    }
    return part_backward(part, pg->g, pg->gc + (size_t)p * (size_t)part->n_carry, gcar, gx,
                         pg->gp[p] ? pg->gp[p]->data : NULL);
}

/* Each part's leaves for the parameters (headers over their storage, in the
 * current scope) and, when their gradients are needed (gp), a zeroed sum of
 * them per part in gpp[]. */
static int part_leaves(scan_closure *c, const void *gp, mi_tensor **gpp)
{
    int64_t total = 0;
    for (int j = 0; j < c->n_params; j++) total += c->params[j]->numel;
    for (int p = 0; p < c->n_parts && c->n_params; p++) {
        scan_closure *pc = &c->part[p];
        if (gp && !(gpp[p] = mi_zeros(c->dt, 1, (int64_t[]){total}))) return -1;
        if (pc->rec) continue;   /* its record reads leaves of its own */
        pc->leaf = mi_scope_alloc(mi_scope_current(), sizeof *pc->leaf * (size_t)c->n_params);
        if (!pc->leaf) return -1;
        for (int j = 0; j < c->n_params; j++) {
            const mi_tensor *w = c->params[j];
            if (!(pc->leaf[j] = mi_tensor_alias(w, w->rank, w->shape, 0))) return -1;
            pc->leaf[j]->requires_grad = true;
        }
    }
    return 0;
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
    void *gx[SCAN_MAX] = {0}, *gcar[SCAN_MAX] = {0};
    for (int j = 0; j < c->n_xs; j++) {
        mi_tensor *gs = gin[c->xs_slot[j]];
        if (gs && c->xs[j]->requires_grad) gx[j] = (char *)gs->data + (size_t)c->xs_off[j] * es;
    }
    for (int i = 0; i < c->n_carry; i++) {
        mi_tensor *gs = gin[c->carry_slot[i]];
        if (gs) gcar[i] = (char *)gs->data + (size_t)c->carry_off[i] * es;
    }
    void *gp = c->n_params && gin[c->params_slot] ? gin[c->params_slot]->data : NULL;
    mi_scope *outer_scope = mi_scope_current();
    /* a parameter with autograd history (a view of a leaf, a function of
     * one) stands as a leaf in the nested passes, so that they stop at it:
     * the outer pass takes its gradient on through its node */
    mi_node **nodes = c->n_params ? malloc(sizeof *nodes * (size_t)c->n_params) : NULL;
    int parts = c->n_parts > 1 ? c->n_parts : 1;
    /* the carry's gradient per part, in the outer pass's scope, given back
     * to it at the end (the next call of this size takes the same piece) */
    mi_tensor **gc = calloc((size_t)(parts * c->n_carry) + 1, sizeof *gc);
    mi_tensor **gpp = calloc((size_t)parts, sizeof *gpp);
    mi_track_mark mark = mi_tensor_track_push(scan_next_pass());
    int rc = -1;
    if ((c->n_params && !nodes) || !gc || !gpp) {
        mi_error_set("mi_scan: out of memory");
        goto out;
    }
    for (int p = 0; p < parts; p++) {
        const scan_closure *pc = c->n_parts > 1 ? &c->part[p] : c;
        for (int i = 0; i < c->n_carry; i++) {
            const mi_tensor *c0 = pc->carry0[i];
            if (!(gc[p * c->n_carry + i] = mi_tensor_new(c->dt, c0->rank, c0->shape))) goto out;
        }
    }
    for (int j = 0; j < c->n_params; j++) {
        nodes[j] = c->params[j]->node;
        c->params[j]->node = NULL;
    }
    if (c->n_parts > 1) {
        /* each part its own leaves for the parameters and its own sums of
         * their gradients: two threads' nested passes share no slot */
        part_grads pg = {.g = g, .gc = gc, .gcar = gcar, .gx = gx, .gp = gpp};
        rc = part_leaves(c, gp, gpp);
        if (rc == 0) rc = scan_over_parts(c, part_backward_of, &pg);
        for (int p = 0; p < c->n_parts; p++) {
            if (rc == 0 && gpp[p]) scan_add_into(gp, gpp[p]);
            c->part[p].leaf = NULL;
        }
    } else {
        rc = part_backward(c, g, gc, gcar, gx, gp);
    }
    for (int j = 0; j < c->n_params; j++) c->params[j]->node = nodes[j];
out:
    for (int k = 0; gc && k < parts * c->n_carry; k++)
        if (gc[k]) mi_scope_release(outer_scope, gc[k]->data, (size_t)gc[k]->numel * es);
    for (int p = 0; gpp && p < parts; p++)
        if (gpp[p]) mi_scope_release(outer_scope, gpp[p]->data, (size_t)gpp[p]->numel * es);
    mi_tensor_track_pop(mark);
    free(gc);
    free(gpp);
    free(nodes);
    if (rc != 0) return -1;
    for (int k = 0; k < nd->n_inputs; k++)
        if (need[k]) grads[k] = gin[k];
    return 0;
}

const mi_op mi_op_scan_body = {
    .name = "mi_scan",
    .formula = "(c_t, y_t) = body(c_{t-1}, x_t), t = 1..T; the body run again per segment in "
               "the backward",
    .arity = MI_MAX_INPUTS, .flags = MI_OP_VARIADIC | MI_OP_NO_GRADGRAD,
    .shape = scan_shape, .vjp_all = scan_vjp_all};
