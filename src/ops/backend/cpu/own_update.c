/* update.c's OWN f32 loops: update_impl.h built like the other OWN files
 * with -O3 -ffast-math -march=<cpu>, so the rows run in vector registers
 * with fused multiply-adds (the row sums reassociated: a few ulp from REF),
 * the rows split over the OpenMP threads (own_parallel) above its size. */
#include "own_kernels.h"
#include "update_geom.h"
#include "adam_step.h"

#define UP_KERNEL static
#define UP_T float
#define UP_NAME(x) x##_range
#include "update_impl.h"

/* The arguments of one call, for own_parallel's ranges. */
typedef struct up_call {
    const up_geom *g;
    const float *G, *X, *A, *B, *D, *V, *Z;
    float *Y, *gX, *gA, *gB, *gD, *gV;
} up_call;

static void outer_update_part(const void *ctx, int64_t r0, int64_t r1)
{
    const up_call *c = ctx;
    outer_update_rows_range(c->g, r0, r1, c->Y, c->X, c->A, c->B, c->D, c->V);
}

static void outer_update_grads_part(const void *ctx, int64_t r0, int64_t r1)
{
    const up_call *c = ctx;
    outer_update_grads_range(c->g, r0, r1, c->G, c->X, c->A, c->B, c->D, c->V, c->gX, c->gA,
                             c->gB, c->gD, c->gV);
}

static void scale_add_grads_part(const void *ctx, int64_t r0, int64_t r1)
{
    const up_call *c = ctx;
    scale_add_grads_range(c->g, r0, r1, c->G, c->X, c->A, c->gX, c->gA);
}

static void scale_add_part(const void *ctx, int64_t r0, int64_t r1)
{
    const up_call *c = ctx;
    scale_add_rows_range(c->g, r0, r1, c->Y, c->X, c->A, c->Z);
}

/* Whether whole matrices (g->out rows) may go to different threads: every
 * gate a sum is taken for (a, and b when gb is asked for) has a matrix of
 * its own along each matrix axis, so no two threads add into one entry. */
static bool matrices_apart(const up_geom *g, bool with_b)
{
    for (int d = 0; d + 1 < g->nd; d++)
        if (g->shape[d] > 1 && (g->a_st[d] == 0 || (with_b && g->b_st[d] == 0))) return false;
    return true;
}

static void grads_split(const up_geom *g, const up_call *c, bool with_b, own_range_fn part)
{
    if (matrices_apart(g, with_b))
        own_parallel(g->rows, g->rows * g->cols, OWN_PAR_MIN, g->out, part, c);
    else
        part(c, 0, g->rows);
}

void own_outer_update_rows_f32(const up_geom *g, float *Y, const float *X, const float *A,
                               const float *B, const float *D, const float *V)
{
    up_call c = {.g = g, .Y = Y, .X = X, .A = A, .B = B, .D = D, .V = V};
    own_parallel(g->rows, g->rows * g->cols, OWN_PAR_MIN, 1, outer_update_part, &c);
}

void own_outer_update_grads_f32(const up_geom *g, const float *G, const float *X,
                                const float *A, const float *B, const float *D, const float *V,
                                float *gX, float *gA, float *gB, float *gD, float *gV)
{
    up_call c = {.g = g, .G = G, .X = X, .A = A, .B = B, .D = D, .V = V,
                 .gX = gX, .gA = gA, .gB = gB, .gD = gD, .gV = gV};
    grads_split(g, &c, gB != NULL, outer_update_grads_part);
}

void own_scale_add_rows_f32(const up_geom *g, float *Y, const float *X, const float *A,
                            const float *Z)
{
    up_call c = {.g = g, .Y = Y, .X = X, .A = A, .Z = Z};
    own_parallel(g->rows, g->rows * g->cols, OWN_PAR_MIN, 1, scale_add_part, &c);
}

void own_scale_add_grads_f32(const up_geom *g, const float *G, const float *X, const float *A,
                             float *gX, float *gA)
{
    up_call c = {.g = g, .G = G, .X = X, .A = A, .gX = gX, .gA = gA};
    grads_split(g, &c, false, scale_add_grads_part);
}

/* ---------------------------------------------------------------- Adam's step
 * adam_step.c's loop in vector registers (one element's arithmetic does not
 * depend on its neighbours, so the split over the threads changes no bit). */
#define AS_T float
#define AS_SQRT sqrtf
#define AS_NAME(x) x##_own
#include "adam_step_impl.h"

typedef struct adam_call {
    const adam_coeffs *c;
    float *p, *m, *v;
    const float *g;
} adam_call;

static void adam_part(const void *ctx, int64_t i0, int64_t i1)
{
    const adam_call *a = ctx;
    adam_range_own(a->c, a->p, a->m, a->v, a->g, i0, i1);
}

void own_adam_f32(const adam_coeffs *c, float *p, float *m, float *v, const float *g, int64_t n)
{
    adam_call a = {c, p, m, v, g};
    own_parallel(n, 4 * n, OWN_PAR_MIN, 16, adam_part, &a);
}
