/* mi_scan's scratch scopes: the scopes its tokens run in, kept per thread
 * for the next call (reset, not freed): a layer calls mi_scan with the same
 * shapes at every step, and a fresh scope would take its pages from the
 * system each time (the kernel zeroing them was an eighth of a step). A body
 * that calls mi_scan itself takes other scopes from the pool. */
#include "scan_scratch.h"

#define POOL_MAX 8
static _Thread_local mi_scope *pool[POOL_MAX];
static _Thread_local int pool_n;

mi_scope *scratch_get(void)
{
    return pool_n ? pool[--pool_n] : mi_scope_new("mi_scan scratch");
}

void scratch_put(mi_scope *s)
{
    if (!s) return;
    mi_scope_reset(s);
    if (pool_n < POOL_MAX) pool[pool_n++] = s;
    else mi_scope_free(s);
}

void mi_scan_release(void)
{
    while (pool_n) mi_scope_free(pool[--pool_n]);
}

int scratch_hold(mi_scope *s, mi_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) {
        if (mi_scope_holds(s, ts[i]->data)) continue;
        mi_scope_enter(s);
        mi_tensor *t = mi_tensor_new(ts[i]->dtype, ts[i]->rank, ts[i]->shape);
        mi_scope_leave();
        if (!t) return -1;
        memcpy(t->data, ts[i]->data, (size_t)t->numel * mi_dtype_size(t->dtype));
        ts[i] = t;
    }
    return 0;
}

