/* Tensor creation, element access, shapes and broadcasting, printing. */
#include <stdlib.h>
#include <string.h>

#include "tensor.h"
#include "tensor_internal.h"
#include "tensor_private.h"

static const char *const dtype_names[] = {"f32", "f64", "i32", "i64"};
static const size_t dtype_sizes[] = {4, 8, 4, 8};

const char *mi_dtype_name(mi_dtype dt)
{
    return (unsigned)dt < MI_DTYPE_COUNT ? dtype_names[dt] : "?";
}
size_t mi_dtype_size(mi_dtype dt) { return (unsigned)dt < MI_DTYPE_COUNT ? dtype_sizes[dt] : 0; }
bool mi_dtype_is_float(mi_dtype dt) { return dt == MI_F32 || dt == MI_F64; }

int64_t mi_shape_numel(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

void mi_strides(int rank, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

static _Thread_local uint64_t track_pass;
static _Thread_local mi_tensor **tracked;
static _Thread_local size_t n_tracked, cap_tracked;
static _Thread_local size_t track_base; /* the current pass's entries start here */

uint64_t mi_tensor_track(uint64_t pass)
{
    uint64_t was = track_pass;
    track_pass = pass;
    n_tracked = track_base = 0; /* the list keeps its capacity: the next pass needs as much */
    return was;
}

uint64_t mi_tensor_tracking(void) { return track_pass; }

mi_track_mark mi_tensor_track_push(uint64_t pass)
{
    mi_track_mark outer = {.pass = track_pass, .base = track_base};
    track_pass = pass;
    track_base = n_tracked;
    return outer;
}

void mi_tensor_track_pop(mi_track_mark outer)
{
    n_tracked = track_base;
    track_pass = outer.pass;
    track_base = outer.base;
}

mi_tensor *const *mi_tensor_tracked(size_t *n)
{
    *n = n_tracked - track_base;
    return tracked + track_base;
}

void mi_tensor_tracked_clear(void) { n_tracked = track_base; }

static void track(mi_tensor *t);

void mi_tensor_track_adopt(mi_tensor *t)
{
    if (track_pass && t) track(t);
}

/* A tensor that cannot be listed is never released: tracking is an
 * optimisation, so running out of memory here only costs memory. */
static void track(mi_tensor *t)
{
    if (n_tracked == cap_tracked) {
        size_t cap = cap_tracked ? 2 * cap_tracked : 1024;
        mi_tensor **v = realloc(tracked, cap * sizeof *v);
        if (!v) return;
        tracked = v;
        cap_tracked = cap;
    }
    mi_tensor_private(t)->pass = track_pass;
    tracked[n_tracked++] = t;
}

void mi_tensor_release(mi_tensor *t)
{
    if (t && !t->base && t->data) {
        mi_scope_release(t->scope, t->data, (size_t)t->numel * dtype_sizes[t->dtype]);
        t->data = NULL;
    }
}

mi_tensor *mi_tensor_new(mi_dtype dt, int rank, const int64_t *shape)
{
    char buf[96];
    if ((unsigned)dt >= MI_DTYPE_COUNT) {
        mi_error_set("tensor_new: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (rank < 0 || rank > MI_MAX_RANK || (rank > 0 && !shape)) {
        mi_error_set("tensor_new: rank %d outside 0..%d", rank, MI_MAX_RANK);
        return NULL;
    }
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && numel > INT64_MAX / 8 / shape[i])) {
            mi_error_set("tensor_new: bad shape %s", mi_shape_str(buf, sizeof buf, rank, shape));
            return NULL;
        }
        numel *= shape[i];
    }
    mi_scope *s = mi_scope_current();
    /* the engine's scratch after the public fields (tensor_private.h) */
    mi_tensor *t = mi_scope_alloc(s, sizeof(mi_tensor_full));
    if (!t) return NULL;
    memset(t, 0, sizeof(mi_tensor_full));
    t->data = mi_scope_alloc(s, (size_t)numel * dtype_sizes[dt]);
    if (!t->data) return NULL;
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->scope = s;
    if (track_pass) track(t);
    return t;
}

mi_tensor *mi_full(mi_dtype dt, int rank, const int64_t *shape, double value)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (t) mi_fill(t, value);
    return t;
}

mi_tensor *mi_zeros(mi_dtype dt, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (t) memset(t->data, 0, (size_t)t->numel * dtype_sizes[dt]);
    return t;
}

mi_tensor *mi_ones(mi_dtype dt, int rank, const int64_t *shape)
{
    return mi_full(dt, rank, shape, 1.0);
}

mi_tensor *mi_scalar(mi_dtype dt, double value) { return mi_full(dt, 0, NULL, value); }

mi_tensor *mi_arange(mi_dtype dt, int64_t n)
{
    mi_tensor *t = mi_tensor_new(dt, 1, (int64_t[]){n});
    if (t)
        for (int64_t i = 0; i < n; i++) mi_set(t, i, (double)i);
    return t;
}

mi_tensor *mi_from_buffer(mi_dtype dt, int rank, const int64_t *shape, const void *data)
{
    if (!data) {
        mi_error_set("from_buffer: data is NULL");
        return NULL;
    }
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (t) memcpy(t->data, data, (size_t)t->numel * dtype_sizes[dt]);
    return t;
}

mi_tensor *mi_zeros_like(const mi_tensor *t)
{
    if (!t) return NULL;
    return mi_zeros(t->dtype, t->rank, t->shape);
}

mi_tensor *mi_tensor_to(const mi_tensor *t, mi_dtype dt)
{
    if (!t) return NULL;
    mi_tensor *r = mi_tensor_new(dt, t->rank, t->shape);
    if (r && mi_tensor_copy_into(r, t) != 0) return NULL;
    return r;
}

mi_tensor *mi_detach(const mi_tensor *t)
{
    if (!t) return NULL;
    return mi_tensor_to(t, t->dtype);
}

int mi_tensor_copy_into(mi_tensor *dst, const mi_tensor *src)
{
    if (!dst || !src) {
        mi_error_set("copy_into: NULL tensor");
        return -1;
    }
    if (dst->numel != src->numel) {
        mi_error_set("copy_into: %lld elements into %lld", (long long)src->numel,
                     (long long)dst->numel);
        return -1;
    }
    if (dst->data == src->data && dst->dtype == src->dtype) return 0;
    if (dst->dtype == src->dtype) {
        memmove(dst->data, src->data, (size_t)src->numel * dtype_sizes[src->dtype]);
        return 0;
    }
    for (int64_t i = 0; i < src->numel; i++) mi_set(dst, i, mi_get(src, i));
    return 0;
}

double mi_get(const mi_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case MI_F32: return ((const float *)t->data)[i];
    case MI_F64: return ((const double *)t->data)[i];
    case MI_I32: return ((const int32_t *)t->data)[i];
    case MI_I64: return (double)((const int64_t *)t->data)[i];
    }
    return 0;
}

void mi_set(mi_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case MI_F32: ((float *)t->data)[i] = (float)v; break;
    case MI_F64: ((double *)t->data)[i] = v; break;
    case MI_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case MI_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    }
}

double mi_item(const mi_tensor *t) { return t && t->numel > 0 ? mi_get(t, 0) : 0.0; }

void mi_fill(mi_tensor *t, double v)
{
    if (!t) return;
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, v);
}

bool mi_same_shape(const mi_tensor *a, const mi_tensor *b)
{
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int mi_broadcast_shape(int ra, const int64_t *sa, int rb, const int64_t *sb, int *rout,
                       int64_t *sout)
{
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int ia = ra - r + i, ib = rb - r + i;
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char x[96], y[96];
            mi_error_set("shapes %s and %s do not broadcast", mi_shape_str(x, sizeof x, ra, sa),
                         mi_shape_str(y, sizeof y, rb, sb));
            return -1;
        }
        sout[i] = da == 1 ? db : da;
    }
    *rout = r;
    return 0;
}

void mi_print(FILE *f, const mi_tensor *t)
{
    char buf[96];
    if (!t) {
        fprintf(f, "tensor(NULL)\n");
        return;
    }
    fprintf(f, "tensor(%s%s%s, %s, [", t->name ? t->name : "", t->name ? ", " : "",
            mi_dtype_name(t->dtype), mi_shape_str(buf, sizeof buf, t->rank, t->shape));
    int64_t shown = t->numel < 8 ? t->numel : 8;
    for (int64_t i = 0; i < shown; i++) fprintf(f, i ? ", %.6g" : "%.6g", mi_get(t, i));
    fprintf(f, "%s]%s)\n", t->numel > shown ? ", ..." : "", t->requires_grad ? ", grad" : "");
}

mi_tensor *mi_tensor_alias(const mi_tensor *base, int rank, const int64_t *shape,
                           size_t byte_offset)
{
    if (!base) return NULL;
    int64_t numel = mi_shape_numel(rank, shape);
    if (rank < 0 || rank > MI_MAX_RANK ||
        byte_offset + (size_t)numel * dtype_sizes[base->dtype] >
            (size_t)base->numel * dtype_sizes[base->dtype]) {
        mi_error_set("alias: view outside its base tensor");
        return NULL;
    }
    mi_scope *s = mi_scope_current();
    /* the engine's scratch after the public fields (tensor_private.h) */
    mi_tensor *t = mi_scope_alloc(s, sizeof(mi_tensor_full));
    if (!t) return NULL;
    memset(t, 0, sizeof(mi_tensor_full));
    t->dtype = base->dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->data = (char *)base->data + byte_offset;
    t->scope = s;
    t->base = mi_tensor_owner((mi_tensor *)base);
    if (track_pass) track(t);
    return t;
}
