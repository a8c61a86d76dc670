/* mi_scan's forward and entry points (mi_scan, mi_scan_rows): the body run
 * over the tokens with recording off, keeping the carry at each segment's
 * start; with mi_scan_rows, over consecutive ranges of the rows, one a
 * thread, each a scan of its own (scan_body.c's header has the whole
 * algorithm, and the backward). */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "scan_body_impl.h"
#include "scan_scratch.h"
#include "tensor_internal.h"

static mi_tensor *flat(mi_tensor *t) { return mi_reshape(t, 1, (int64_t[]){t->numel}); }

/* concat(flatten(ts[0..n))), a view when n = 1 */
static mi_tensor *packed(mi_tensor *const *ts, int n)
{
    if (n == 1) return flat(ts[0]);
    mi_tensor **p = malloc(sizeof *p * (size_t)n), *r = NULL;
    if (!p) return mi_error_set("mi_scan: out of memory"), NULL;
    int k = 0;
    while (k < n && (p[k] = flat(ts[k]))) k++;
    if (k == n) r = mi_concat(p, n, 0);
    free(p);
    return r;
}

static int check_args(mi_scan_fn body, int n_carry, mi_tensor *const *carry0, int n_xs,
                      mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out,
                      mi_tensor **ys)
{
    if (!body) return mi_error_set("mi_scan: no body function"), -1;
    if (n_carry < 0 || n_carry > SCAN_MAX || n_xs < 1 || n_xs > SCAN_MAX || n_ys < 0 ||
        n_ys > SCAN_MAX)
        return mi_error_set("mi_scan: takes 0 to %d carries, 1 to %d per-token inputs and 0 to "
                            "%d per-token outputs; got %d, %d and %d", SCAN_MAX, SCAN_MAX,
                            SCAN_MAX, n_carry, n_xs, n_ys), -1;
    if ((n_carry && (!carry0 || !carry_out)) || !xs || (n_ys && !ys))
        return mi_error_set("mi_scan: a NULL array (carry0, xs, carry_out or ys) for a nonzero "
                            "count"), -1;
    if (segment < 0 && segment != MI_SCAN_RECORD)
        return mi_error_set("mi_scan: segment %d is negative (0: segments of about sqrt(2T) "
                            "tokens; MI_SCAN_RECORD, %d: keep the forward's record)", segment,
                            MI_SCAN_RECORD), -1;
    for (int i = 0; i < n_carry; i++)
        if (!carry0[i]) return mi_error_set("mi_scan: carry0[%d] is NULL", i), -1;
    for (int j = 0; j < n_xs; j++)
        if (!xs[j]) return mi_error_set("mi_scan: xs[%d] is NULL", j), -1;
    mi_dtype dt = xs[0]->dtype;
    char a[96], b[96];
    for (int j = 0; j < n_xs; j++) {
        const mi_tensor *x = xs[j];
        if (x->rank < 2)
            return mi_error_set("mi_scan: xs[%d] is %s; per-token inputs are [N, T, …]", j,
                                mi_shape_str(a, sizeof a, x->rank, x->shape)), -1;
        if (x->shape[0] != xs[0]->shape[0] || x->shape[1] != xs[0]->shape[1])
            return mi_error_set("mi_scan: xs[%d] is %s and xs[0] %s: N and T (axes 0 and 1) "
                                "differ", j, mi_shape_str(a, sizeof a, x->rank, x->shape),
                                mi_shape_str(b, sizeof b, xs[0]->rank, xs[0]->shape)), -1;
        if (x->dtype != dt || !mi_dtype_is_float(dt))
            return mi_error_set("mi_scan: xs[%d] is %s; every carry and input must be f32 or "
                                "f64, one dtype (xs[0] is %s)", j, mi_dtype_name(x->dtype),
                                mi_dtype_name(dt)), -1;
    }
    if (xs[0]->shape[1] < 1)
        return mi_error_set("mi_scan: xs[0] is %s: no tokens (T = 0)",
                            mi_shape_str(a, sizeof a, xs[0]->rank, xs[0]->shape)), -1;
    for (int i = 0; i < n_carry; i++)
        if (carry0[i]->dtype != dt)
            return mi_error_set("mi_scan: carry0[%d] is %s and xs[0] %s: one dtype for all", i,
                                mi_dtype_name(carry0[i]->dtype), mi_dtype_name(dt)), -1;
    return 0;
}

/* Where each carry and input sits among the node's inputs: one slot each,
 * or, when they do not fit, the smallest of them packed into one
 * concatenation (a copy, and its gradient a tensor of its size), as many as
 * it takes. Fills in[]; the count, or -1. */
static int node_inputs(scan_closure *c, mi_tensor **in)
{
    int n_t = c->n_carry + c->n_xs, over = n_t + (c->n_params > 0) - MI_MAX_INPUTS;
    int n_pack = over > 0 ? over + 1 : 0;
    mi_tensor *all[2 * SCAN_MAX], *pk[2 * SCAN_MAX];
    bool pack[2 * SCAN_MAX] = {0};
    for (int k = 0; k < n_t; k++) all[k] = k < c->n_carry ? c->carry0[k] : c->xs[k - c->n_carry];
    for (int m = 0; m < n_pack; m++) {
        int best = -1;
        for (int k = 0; k < n_t; k++)
            if (!pack[k] && (best < 0 || all[k]->numel < all[best]->numel)) best = k;
        pack[best] = true;
    }
    int n = 0, slot_of_pack = n_pack ? n_t - n_pack : -1, m = 0;
    int64_t off = 0;
    for (int k = 0; k < n_t; k++) {
        int sl = pack[k] ? slot_of_pack : n;
        int64_t o = pack[k] ? off : 0;
        if (pack[k]) off += all[k]->numel, pk[m++] = all[k];
        else in[n++] = all[k];
        if (k < c->n_carry) c->carry_slot[k] = sl, c->carry_off[k] = o;
        else c->xs_slot[k - c->n_carry] = sl, c->xs_off[k - c->n_carry] = o;
    }
    if (n_pack && !(in[n++] = packed(pk, n_pack))) return -1;
    c->params_slot = n;
    if (c->n_params && !(in[n++] = packed(c->params, c->n_params))) return -1;
    return n;
}

/* Where this part's c_T and y's go in O, from the first token's y's (the
 * carries first, then the y's, each over the N_all rows; a part's rows at
 * row0), and O's size. */
int64_t scan_layout(scan_closure *c, mi_tensor *const *y)
{
    int64_t total = 0;
    for (int i = 0; i < c->n_carry; i++) {
        int64_t n = c->carry0[i]->numel, R = n / c->N;
        c->out_off_c[i] = total + c->row0 * R;
        total += c->N == c->N_all ? n : R * c->N_all;
    }
    for (int j = 0; j < c->n_ys; j++) {
        int64_t R = y[j]->numel / c->N;
        c->out_off_y[j] = total + c->row0 * c->T * R;
        total += R * c->T * c->N_all;
    }
    return total;
}

/* O, made in `outer` by the first part to ask (parts run on threads). */
mi_tensor *scan_output_of(mi_dtype dt, mi_scope *outer, mi_tensor **O, int64_t total)
{
    mi_tensor *r;
#pragma omp critical(mi_scan_output)
    {
        if (!*O) {
            mi_scope_enter(outer);
            *O = mi_tensor_new(dt, 1, (int64_t[]){total});
            mi_scope_leave();
        }
        r = *O;
    }
    return r;
}

/* The forward's loop over one part's rows (or the whole scan's): every
 * token's body with recording off (token_step), the tokens alternating
 * between two scratch scopes of this thread, so that a token reads the carry
 * the one before it left in the other scope (no copy between tokens); the
 * carry at each segment's start into its slot (when kept); the y's and c_T
 * into O (*O, made at the first token, in outer). first[]: the carry before
 * the first token, a copy of carry0 the caller made (slot 0 when kept): the
 * body must not see the caller's tensors as its parameters. f: the finder
 * of the body's parameters, or NULL. */
static int run_forward(scan_closure *c, mi_scope *outer, mi_tensor **O, mi_tensor *const *first,
                       bool keep, finder *f)
{
    size_t es = mi_dtype_size(c->dt);
    mi_scope *sc[2] = {scratch_get(), scratch_get()};
    mi_tensor *cur[SCAN_MAX], *co[SCAN_MAX], *y[SCAN_MAX], *out = NULL;
    void *at[SCAN_MAX];
    int r = sc[0] && sc[1] ? 0 : -1;
    if (r) mi_error_set("mi_scan: out of memory");
    if (f) f->token[0] = sc[0], f->token[1] = sc[1];
    for (int i = 0; i < c->n_carry; i++) cur[i] = first[i];
    mi_track_mark mark = mi_tensor_track_push(scan_next_pass());
    bool recording = mi_set_grad_enabled(false);
    for (int64_t t = 0, sg = 0; t < c->T && r == 0; t++) {
        if (keep && t == c->start[sg]) {
            for (int i = 0; i < c->n_carry; i++) at[i] = scan_slot(c, i, sg);
            scan_put_carries(c, at, cur);
            sg++;
        }
        mi_scope *s = sc[t & 1];
        if ((r = scan_token_step(c, s, cur, 0, t, co, y, f)) != 0 || (r = scratch_hold(s, co, c->n_carry)))
            break;
        if (t == 0 && !(out = scan_output_of(c->dt, outer, O, scan_layout(c, y)))) r = -1;
        for (int j = 0; j < c->n_ys && r == 0; j++)
            scan_scatter((char *)out->data + (size_t)c->out_off_y[j] * es, y[j]->data, c->N, c->T, t,
                    y[j]->numel / c->N, es);
        for (int i = 0; i < c->n_carry; i++) cur[i] = co[i];
    }
    mi_set_grad_enabled(recording);
    for (int i = 0; i < c->n_carry && r == 0; i++)
        memcpy((char *)out->data + (size_t)c->out_off_c[i] * es, cur[i]->data,
               (size_t)cur[i]->numel * es);
    mi_tensor_track_pop(mark);
    scratch_put(sc[1]);
    scratch_put(sc[0]);
    return r;
}

/* What the parts' forwards share: the output, and per part the carry
 * before its first token and the finder of the body's parameters. */
typedef struct parts_forward {
    mi_scope *outer;
    mi_tensor **O, **first; /* first: [n_parts · n_carry] */
    finder *f;              /* [n_parts], or NULL */
    bool keep;
} parts_forward;

static int part_forward_of(scan_closure *part, int p, void *ctx)
{
    const parts_forward *pf = ctx;
    if (part->rec) return scan_record_forward(part, pf->outer, pf->O);
    return run_forward(part, pf->outer, pf->O, pf->first + (size_t)p * (size_t)part->n_carry,
                       pf->keep, pf->f ? &pf->f[p] : NULL);
}

/* The carry before the first token of closure c into first[] (views of slot
 * 0 when kept, else copies in outer, which the caller gives back). */
static int first_carries(const scan_closure *c, mi_scope *outer, bool keep, mi_tensor **first)
{
    size_t es = mi_dtype_size(c->dt);
    int r = 0;
    mi_scope_enter(outer);
    if (keep) r = scan_slot_views(c, 0, first);
    else
        for (int i = 0; i < c->n_carry && r == 0; i++)
            if (!(first[i] = mi_tensor_new(c->dt, c->carry0[i]->rank, c->carry0[i]->shape)))
                r = -1;
    mi_scope_leave();
    for (int i = 0; i < c->n_carry && r == 0; i++)
        memcpy(first[i]->data, c->carry0[i]->data, (size_t)first[i]->numel * es);
    return r;
}

/* Whether the forward keeps its record (segment MI_SCAN_RECORD, recording). */
static bool keep_record(const scan_closure *c)
{
    return c->n_parts > 1 ? c->part[0].rec != NULL : c->rec != NULL;
}

/* The tensors from outside that require grad which the parts' records read,
 * into f (each once, in the order part 0, part 1, … met them). */
static int records_found(const scan_closure *c, finder *f)
{
    for (int p = 0; p < (c->n_parts > 1 ? c->n_parts : 1); p++) {
        int n;
        mi_tensor *const *found = scan_record_found(c->n_parts > 1 ? &c->part[p] : c, &n);
        for (int j = 0; j < n; j++)
            if (!tensor_list_add_once(&f->params, &f->n, &f->cap, found[j]))
                return mi_error_set("mi_scan: out of memory"), -1;
    }
    return 0;
}

/* The forward over all rows, or over the parts on their threads (each part
 * checks its y's against its own rows; here they must agree past axis 0):
 * O, or NULL. The parameters the parts' finders found go into f. */
static mi_tensor *forward(scan_closure *c, mi_scope *outer, bool keep, finder *f)
{
    size_t es = mi_dtype_size(c->dt);
    int parts = c->n_parts > 1 ? c->n_parts : 1;
    mi_tensor *O = NULL, **first = calloc((size_t)(parts * c->n_carry) + 1, sizeof *first);
    finder *pf = f && c->n_parts > 1 ? calloc((size_t)parts, sizeof *pf) : NULL;
    int r = first && (!f || c->n_parts <= 1 || pf) ? 0 : -1;
    if (r) mi_error_set("mi_scan: out of memory");
    for (int p = 0; p < parts && r == 0 && !keep_record(c); p++)
        r = first_carries(c->n_parts > 1 ? &c->part[p] : c, outer, keep, first + p * c->n_carry);
    if (r == 0 && c->n_parts > 1) {
        parts_forward ctx = {.outer = outer, .O = &O, .first = first, .f = pf, .keep = keep};
        r = scan_over_parts(c, part_forward_of, &ctx);
        for (int p = 0; p < parts && pf; p++) {
            for (int j = 0; j < pf[p].n && r == 0; j++)
                if (!tensor_list_add_once(&f->params, &f->n, &f->cap, pf[p].params[j])) r = -1;
            f->out_of_memory |= pf[p].out_of_memory || r != 0;
            free(pf[p].params);
        }
        const scan_closure *p0 = &c->part[0];
        char a[96], b[96];
        for (int j = 0; j < c->n_ys && r == 0; j++) {
            for (int p = 1; p < parts && r == 0; p++) {
                const scan_closure *pp = &c->part[p];
                if (pp->y_rank[j] != p0->y_rank[j] ||
                    memcmp(pp->y_shape[j] + 1, p0->y_shape[j] + 1,
                           sizeof(int64_t) * (size_t)(p0->y_rank[j] - 1)) != 0) {
                    mi_error_set("mi_scan_rows: the body's y[%d] is %s for rows [%lld, %lld) and "
                                 "%s for rows [0, %lld): the rows must not change its shape", j,
                                 mi_shape_str(a, sizeof a, pp->y_rank[j], pp->y_shape[j]),
                                 (long long)pp->row0, (long long)(pp->row0 + pp->N),
                                 mi_shape_str(b, sizeof b, p0->y_rank[j], p0->y_shape[j]),
                                 (long long)p0->N);
                    r = -1;
                }
            }
            c->y_rank[j] = p0->y_rank[j];
            memcpy(c->y_shape[j], p0->y_shape[j], sizeof c->y_shape[j]);
            c->y_shape[j][0] = c->N;
        }
    } else if (r == 0) {
        r = c->rec ? scan_record_forward(c, outer, &O) : run_forward(c, outer, &O, first, keep, f);
    }
    for (int k = 0; first && !keep && k < parts * c->n_carry; k++)
        if (first[k]) mi_scope_release(outer, first[k]->data, (size_t)first[k]->numel * es);
    free(first);
    free(pf);
    return r == 0 ? O : NULL;
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
            rank = scan_ys_shape(c, k - c->n_carry, shape);
            if (rank > MI_MAX_RANK)
                return mi_error_set("mi_scan: y[%d] of rank %d stacks to rank %d, above %d",
                                    k - c->n_carry, rank - 1, rank, MI_MAX_RANK), -1;
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

/* The segments, c->start[0..n_seg] in outer, and the slots they need.
 * With segment = 0 they shorten by one token from the first (K, K − 1, …,
 * K the least with K (K + 1) / 2 ≥ T), so that segment s, filling slots s
 * to s + its length − 1 in the backward, never goes past slot K: K ≈ √(2T)
 * carries in all, where segments of ⌈√T⌉ would keep ⌈√T⌉ starts and need
 * ⌈√T⌉ more for one segment's carries. Else `segment` tokens each. */
static int schedule(scan_closure *c, mi_scope *outer, int64_t segment)
{
    int64_t T = c->T, K = 1, n = 0;
    if (segment == 0)
        while (K * (K + 1) / 2 < T) K++;
    for (int64_t t = 0; t < T; n++) t += segment ? segment : K - n;
    if (!(c->start = mi_scope_alloc(outer, sizeof *c->start * (size_t)(n + 1)))) return -1;
    c->n_seg = n;
    c->n_slots = 0;
    c->start[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t len = segment ? segment : K - s;
        c->start[s + 1] = c->start[s] + len < T ? c->start[s] + len : T;
        int64_t last = s + c->start[s + 1] - c->start[s];
        if (last > c->n_slots) c->n_slots = last;
    }
    return 0;
}

/* Rows [row0, row0 + rows) of t, whose axis 0 has N rows: a view (no node;
 * requires_grad as t). */
static mi_tensor *rows_of(const mi_tensor *t, int64_t N, int64_t row0, int64_t rows)
{
    int64_t shape[MI_MAX_RANK];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
    shape[0] = rows;
    mi_tensor *v = mi_tensor_alias(t, t->rank, shape,
                                   (size_t)(row0 * (t->numel / N)) * mi_dtype_size(t->dtype));
    if (v) v->requires_grad = t->requires_grad; /* a record's leaves for them follow it */
    return v;
}

/* The parts of mi_scan_rows: n closures over consecutive rows, each with
 * views of its rows of carry0, xs and the kept carries (part p's slots
 * follow part p − 1's, each slot over its own rows). */
static int make_parts(scan_closure *c, mi_scope *outer, int n)
{
    size_t es = mi_dtype_size(c->dt);
    char a[96];
    for (int i = 0; i < c->n_carry; i++)
        if (c->carry0[i]->rank < 1 || c->carry0[i]->shape[0] != c->N)
            return mi_error_set("mi_scan_rows: carry0[%d] is %s; every carry must be [N = %lld, "
                                "…], a row per row of the inputs", i,
                                mi_shape_str(a, sizeof a, c->carry0[i]->rank,
                                             c->carry0[i]->shape), (long long)c->N), -1;
    mi_scope_enter(outer);
    c->part = mi_scope_alloc(outer, sizeof *c->part * (size_t)n);
    int r = c->part ? 0 : -1;
    for (int p = 0; p < n && r == 0; p++) {
        scan_closure *pc = &c->part[p];
        int64_t row0 = c->N * p / n, rows = c->N * (p + 1) / n - row0;
        mi_tensor **arrays =
            mi_scope_alloc(outer, sizeof *arrays * (size_t)(2 * (c->n_carry + c->n_xs) + 1));
        if (!arrays) {
            r = -1;
            break;
        }
        *pc = (scan_closure){.body = c->body, .ctx = c->ctx, .n_carry = c->n_carry,
                             .n_xs = c->n_xs, .n_ys = c->n_ys, .dt = c->dt, .N = rows,
                             .T = c->T, .n_seg = c->n_seg, .n_slots = c->n_slots,
                             .start = c->start, .carry0 = arrays, .xs = arrays + c->n_carry,
                             .kept = arrays + c->n_carry + c->n_xs, .kept_valid = true,
                             .row0 = row0, .N_all = c->N};
        for (int j = 0; j < c->n_ys; j++) pc->y_rank[j] = -1;
        for (int i = 0; i < c->n_carry && r == 0; i++) {
            int64_t R = c->carry0[i]->numel / c->N;
            pc->carry0[i] = rows_of(c->carry0[i], c->N, row0, rows);
            pc->kept[i] = !c->kept[i] ? NULL
                          : mi_tensor_alias(c->kept[i], 1, (int64_t[]){c->n_slots * rows * R},
                                            (size_t)(c->n_slots * row0 * R) * es);
            if (!pc->carry0[i] || (c->kept[i] && !pc->kept[i])) r = -1;
        }
        for (int j = 0; j < c->n_xs && r == 0; j++)
            if (!(pc->xs[j] = rows_of(c->xs[j], c->N, row0, rows))) r = -1;
    }
    mi_scope_leave();
    if (r == 0) c->n_parts = n;
    return r;
}

/* The threads mi_scan_rows splits its rows over: one part a thread, at most
 * a row each; none inside a parallel region. */
static int parts_for(int64_t N)
{
    int n = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) n = mi_threads();
#endif
    return n > N ? (int)N : n;
}

static int scan(bool rows, mi_scan_fn body, void *ctx, int n_carry, mi_tensor *const *carry0,
                int n_xs, mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out,
                mi_tensor **ys)
{
    if (check_args(body, n_carry, carry0, n_xs, xs, n_ys, segment, carry_out, ys) != 0) return -1;
    mi_scope *outer = mi_scope_current();
    if (!outer) return mi_error_set("mi_scan: no current scope (call mi_scope_enter first)"), -1;
    scan_closure *c = mi_scope_alloc(outer, sizeof *c);
    mi_tensor **arrays = mi_scope_alloc(outer, sizeof *arrays * (size_t)(2 * (n_carry + n_xs) + 1));
    if (!c || !arrays) return -1;
    int64_t T = xs[0]->shape[1], N = xs[0]->shape[0];
    *c = (scan_closure){.body = body, .ctx = ctx, .n_carry = n_carry, .n_xs = n_xs, .n_ys = n_ys,
                        .dt = xs[0]->dtype, .N = N, .T = T, .carry0 = arrays,
                        .xs = arrays + n_carry, .kept = arrays + n_carry + n_xs,
                        .kept_valid = true, .N_all = N};
    /* inside a backward pass (a checkpoint's function run again) the node
     * lives for a nested pass only, and a record would outlive it in outer:
     * there the body runs again in the backward, as with segment 0 */
    bool record = segment == MI_SCAN_RECORD && mi_grad_enabled() && !mi_tensor_tracking();
    if (schedule(c, outer, segment == MI_SCAN_RECORD ? 0 : segment) != 0) return -1;
    for (int i = 0; i < n_carry; i++) c->carry0[i] = carry0[i];
    for (int j = 0; j < n_xs; j++) c->xs[j] = xs[j];
    for (int j = 0; j < n_ys; j++) c->y_rank[j] = -1;
    for (int i = 0; i < n_carry; i++) c->kept[i] = NULL;
    bool recording = mi_grad_enabled();
    if (recording && !record)
        for (int i = 0; i < n_carry; i++)
            if (!(c->kept[i] = mi_tensor_new(c->dt, 1, (int64_t[]){c->n_slots * carry0[i]->numel})))
                return -1;
    int n_parts = rows ? parts_for(N) : 1;
    if (n_parts > 1 && make_parts(c, outer, n_parts) != 0) return -1;
    /* the records' subs of outer, made here: outer is shared from the first on */
    for (int p = 0; record && p < n_parts; p++)
        if (scan_record_new(n_parts > 1 ? &c->part[p] : c, outer) != 0) return -1;

    /* everything made here is listed under mi_scan's own pass, so that an
     * enclosing pass (a checkpoint's forward, a backward) never releases
     * what the scratch scopes hold */
    mi_track_mark mark = mi_tensor_track_push(scan_next_pass());
    finder f = {0};
    int rc = -1;
    mi_tensor *O = forward(c, outer, recording && !record, recording && !record ? &f : NULL);
    if (!O || (record && records_found(c, &f) != 0)) goto done;
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
        for (int p = 0; p < c->n_parts; p++) {
            c->part[p].params = c->params;
            c->part[p].n_params = c->n_params;
        }
        mi_tensor *in[MI_MAX_INPUTS];
        int n = node_inputs(c, in);
        if (n < 0 || !mi_node_record(&mi_op_scan_body, in, n, &(mi_attrs){.data = c}, O)) goto done;
    }
    rc = split_outputs(c, O, carry_out, ys);
done:
    free(f.params);
    mi_tensor_track_pop(mark);
    return rc;
}

int mi_scan(mi_scan_fn body, void *ctx, int n_carry, mi_tensor *const *carry0, int n_xs,
            mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out, mi_tensor **ys)
{
    return scan(false, body, ctx, n_carry, carry0, n_xs, xs, n_ys, segment, carry_out, ys);
}

int mi_scan_rows(mi_scan_fn body, void *ctx, int n_carry, mi_tensor *const *carry0, int n_xs,
                 mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out,
                 mi_tensor **ys)
{
    return scan(true, body, ctx, n_carry, carry0, n_xs, xs, n_ys, segment, carry_out, ys);
}
