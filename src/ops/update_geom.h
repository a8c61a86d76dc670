/* The row walk of update.c's ops, shared by its REF loops and the OWN f32
 * build of the same loops (backend/cpu/own_update.c). Private to ops/. */
#ifndef MIRAS_UPDATE_GEOM_H
#define MIRAS_UPDATE_GEOM_H

#include "internal.h"

/* X [..., out, cols] as rows × cols; a and b broadcast to X, their offsets
 * per row from strides over X's leading axes (0 along broadcast axes); a's
 * last axis is cols wide (a_col) or 1, b's is 1. */
typedef struct up_geom {
    int64_t rows, cols, out;
    int nd; /* X's leading axes: rank − 1 */
    int64_t shape[MI_MAX_RANK], a_st[MI_MAX_RANK], b_st[MI_MAX_RANK];
    bool a_col;
} up_geom;

typedef struct up_walk {
    int64_t idx[MI_MAX_RANK];
    int64_t a, b; /* the row's offsets in a and b */
} up_walk;

/* The walk at row r. */
static inline up_walk up_walk_at(const up_geom *g, int64_t r)
{
    up_walk w = {0};
    for (int d = g->nd - 1; d >= 0; d--) {
        w.idx[d] = r % g->shape[d];
        r /= g->shape[d];
        w.a += w.idx[d] * g->a_st[d];
        w.b += w.idx[d] * g->b_st[d];
    }
    return w;
}

static inline void up_walk_next(up_walk *w, const up_geom *g)
{
    for (int d = g->nd - 1; d >= 0; d--) {
        w->a += g->a_st[d];
        w->b += g->b_st[d];
        if (++w->idx[d] < g->shape[d]) return;
        w->a -= g->a_st[d] * g->shape[d];
        w->b -= g->b_st[d] * g->shape[d];
        w->idx[d] = 0;
    }
}

/* OWN f32, whole tensors, split over the OpenMP threads by rows (the
 * gradients by whole matrices, and only where no gate is shared by two
 * matrices, whose sums would then race). */
void own_outer_update_rows_f32(const up_geom *g, float *Y, const float *X, const float *A,
                               const float *B, const float *D, const float *V);
void own_outer_update_grads_f32(const up_geom *g, const float *G, const float *X,
                                const float *A, const float *B, const float *D, const float *V,
                                float *gX, float *gA, float *gB, float *gD, float *gV);
void own_scale_add_rows_f32(const up_geom *g, float *Y, const float *X, const float *A,
                            const float *Z);
void own_scale_add_grads_f32(const up_geom *g, const float *G, const float *X, const float *A,
                             float *gX, float *gA);

#endif
