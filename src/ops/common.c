/* Helpers shared by the op families: common shape rules, the broadcast
 * walk, example inputs. */
#include <stdlib.h>

#include "internal.h"

bool tensor_list_add_once(mi_tensor ***items, int *n, int *cap, mi_tensor *t)
{
    for (int i = 0; i < *n; i++)
        if ((*items)[i] == t) return true;
    if (*n == *cap) {
        int grown = *cap ? 2 * *cap : 16;
        mi_tensor **v = realloc(*items, sizeof *v * (size_t)grown);
        if (!v) return false;
        *items = v;
        *cap = grown;
    }
    (*items)[(*n)++] = t;
    return true;
}

int require_float(const char *op, mi_tensor *const *in, int i)
{
    if (mi_dtype_is_float(in[i]->dtype)) return 0;
    mi_error_set("%s: input %d must be f32 or f64, got %s", op, i, mi_dtype_name(in[i]->dtype));
    return -1;
}

bool call_recorded(mi_tensor *const *in, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!in[i]) return false;
        any |= in[i]->requires_grad;
    }
    return any && mi_grad_enabled();
}

int shape_like_first(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                     int64_t *shape)
{
    (void)n;
    (void)a;
    *dt = in[0]->dtype;
    copy_shape(rank, shape, in[0]);
    return 0;
}

int shape_broadcast(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                    int64_t *shape)
{
    (void)a;
    int r = in[0]->rank;
    int64_t s[MI_MAX_RANK];
    memcpy(s, in[0]->shape, sizeof s);
    for (int i = 1; i < n; i++) {
        int64_t t[MI_MAX_RANK];
        if (mi_broadcast_shape(r, s, in[i]->rank, in[i]->shape, &r, t) != 0) return -1;
        memcpy(s, t, sizeof s);
    }
    *rank = r;
    memcpy(shape, s, sizeof s);
    *dt = in[n - 1]->dtype; /* where(): the condition's dtype does not decide */
    for (int i = 0; i < n; i++)
        if (mi_dtype_is_float(in[i]->dtype)) *dt = in[i]->dtype;
    return 0;
}

void bcast_init(bcast *b, const mi_tensor *out, mi_tensor *const *in, int n)
{
    memset(b, 0, sizeof *b);
    b->rank = out->rank;
    b->n = n;
    memcpy(b->shape, out->shape, sizeof b->shape);
    for (int k = 0; k < n; k++) {
        int64_t st[MI_MAX_RANK];
        mi_strides(in[k]->rank, in[k]->shape, st);
        for (int d = 0; d < out->rank; d++) {
            int dk = d - (out->rank - in[k]->rank);
            b->stride[k][d] = (dk < 0 || in[k]->shape[dk] == 1) ? 0 : st[dk];
        }
    }
}

mi_tensor *ex_normal(mi_rng *r, int rank, const int64_t *shape)
{
    return mi_requires_grad(mi_randn(r, MI_F64, rank, shape, 0.0, 1.0), true);
}

mi_tensor *ex_uniform(mi_rng *r, int rank, const int64_t *shape, double lo, double hi)
{
    return mi_requires_grad(mi_rand(r, MI_F64, rank, shape, lo, hi), true);
}

mi_tensor *ex_away_from_zero(mi_rng *r, int rank, const int64_t *shape, double lo, double hi)
{
    mi_tensor *t = mi_rand(r, MI_F64, rank, shape, lo, hi);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++)
        if (mi_rng_below(r, 2)) mi_set(t, i, -mi_get(t, i));
    return mi_requires_grad(t, true);
}

mi_tensor *ex_indices(mi_rng *r, mi_dtype dt, int rank, const int64_t *shape, int64_t n)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, (double)mi_rng_below(r, (uint64_t)n));
    return t;
}
