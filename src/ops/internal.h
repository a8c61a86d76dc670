/* Shared by the op family files; not installed. */
#ifndef MIRAS_OPS_INTERNAL_H
#define MIRAS_OPS_INTERNAL_H

#include <math.h>
#include <string.h>

#include "ops.h"
#include "fused.h"
#include "op.h"

/* Every public op function goes through here (it also hands the engine the
 * ops it needs for accumulation and un-broadcasting). */
mi_tensor *op_run(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a);
/* Appends t to the list items[0..*n) (capacity *cap, grown by realloc) unless
 * it is there already: false when out of memory. The input hooks of
 * mi_checkpoint and mi_scan collect the tensors a function used with it. */
bool tensor_list_add_once(mi_tensor ***items, int *n, int *cap, mi_tensor *t);
/* Adds n to the process-wide tally mi_flops reads (flops.c). */
void op_flops_add(uint64_t n);

#define IN(...) ((mi_tensor *[]){__VA_ARGS__})
#define NARGS(...) ((int)(sizeof((mi_tensor *[]){__VA_ARGS__}) / sizeof(mi_tensor *)))
/* RUN(&mi_op_add, NULL, a, b): calls the op on the listed inputs. */
#define RUN(op, attrs, ...) op_run(op, IN(__VA_ARGS__), NARGS(__VA_ARGS__), attrs)

/* Normalises a possibly negative axis; -1 and a message when out of range. */
static inline int axis_norm(const char *op, int axis, int rank)
{
    int r = axis < 0 ? axis + rank : axis;
    if (r < 0 || r >= rank) {
        mi_error_set("%s: axis %d out of range for rank %d", op, axis, rank);
        return -1;
    }
    return r;
}

static inline void copy_shape(int *rank, int64_t *shape, const mi_tensor *t)
{
    *rank = t->rank;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
}

static inline bool is_index_dtype(mi_dtype dt) { return dt == MI_I32 || dt == MI_I64; }

static inline int64_t index_at(const mi_tensor *idx, int64_t i)
{
    return idx->dtype == MI_I32 ? ((const int32_t *)idx->data)[i]
                                : ((const int64_t *)idx->data)[i];
}

/* Shape rules shared by many ops. */
int shape_like_first(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                     int64_t *shape);
int shape_broadcast(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt, int *rank,
                    int64_t *shape);
/* Whether a vjp may compute its gradients with an OWN one-pass kernel (not
 * recorded ops): nothing is being recorded, x is f32 and OWN is allowed. */
static inline bool own_unrecorded_f32(const mi_tensor *x)
{
    return !mi_grad_enabled() && x->dtype == MI_F32 &&
           (mi_backends_allowed() >> MI_BACKEND_OWN & 1u);
}
/* Requires input i to be float; message names the op. */
int require_float(const char *op, mi_tensor *const *in, int i);
/* Whether a call on these n inputs will be recorded: grad mode on, every
 * input given and one of them requiring grad (a fused op's forward then
 * keeps what its backward needs, attrs.data: cms_scan, mlp_scan). */
bool call_recorded(mi_tensor *const *in, int n);

/* The gradients of Y = a ⊙ X + … for the cotangent G (X G's shape, a
 * broadcast to it, its last axis 1 or X's) in one loop over G and X, for a
 * vjp that does not record: *gX = a ⊙ G, *ga = Σ G ⊙ X over a's broadcast
 * axes (gX or ga NULL: not wanted); own: OWN's loops (f32). scale_add's and
 * matmul_acc's (update.c). */
int scale_grads(mi_tensor *X, mi_tensor *a, mi_tensor *G, bool own, mi_tensor **gX,
                mi_tensor **ga);

/* ---------------------------------------------------------------- shape and index helpers
 * Shared by shape.c and index.c. */
/* A tensor seen as [outer, dim, inner] around one axis. */
/* Strides (in elements) of an operand's batch dims along the output's nb
 * batch dims: 0 where the operand lacks the dim or has size 1. `mat` is the
 * number of elements in one of its matrices (or vectors); `tail` its
 * non-batch dims (2 for a matrix, 1 for a vector). */
static inline void batch_strides(const mi_tensor *t, int tail, int nb, int64_t mat,
                                 int64_t *st)
{
    int tb = t->rank - tail;
    int64_t s = mat;
    for (int d = nb - 1; d >= 0; d--) {
        int dt = d - (nb - tb);
        st[d] = (dt < 0 || t->shape[dt] == 1) ? 0 : s;
        if (dt >= 0) s *= t->shape[dt];
    }
}

/* Element offset of batch entry q (row-major over the nb batch dims of
 * sizes batch) in an operand with batch strides st (batch_strides). */
static inline int64_t batch_offset(int nb, const int64_t *batch, const int64_t *st, int64_t q)
{
    int64_t off = 0;
    for (int d = nb - 1; d >= 0; d--) {
        off += (q % batch[d]) * st[d];
        q /= batch[d];
    }
    return off;
}

static inline void split_at(const mi_tensor *t, int axis, int64_t *outer, int64_t *inner)
{
    *outer = mi_shape_numel(axis, t->shape);
    *inner = mi_shape_numel(t->rank - axis - 1, t->shape + axis + 1);
}

/* attrs.axis made non-negative (already validated by the shape rule). */
static inline int ax_of(const mi_attrs *a, int rank)
{
    return a->axis < 0 ? a->axis + rank : a->axis;
}

static inline void copy_elem(char *d, const char *s, size_t es)
{
    if (es == 8) memcpy(d, s, 8);
    else memcpy(d, s, 4);
}

/* The float data input of a shape op, with the op's own message otherwise. */
static inline int data_input(const char *op, mi_tensor *const *in, mi_dtype *dt)
{
    if (require_float(op, in, 0) != 0) return -1;
    *dt = in[0]->dtype;
    return 0;
}

/* ---------------------------------------------------------------- broadcast walk
 * Walks the output of a broadcasting op in row-major order while tracking
 * each input's offset (stride 0 along broadcast axes). */
typedef struct bcast {
    int rank, n;
    int64_t shape[MI_MAX_RANK];
    int64_t idx[MI_MAX_RANK];
    int64_t stride[3][MI_MAX_RANK];
    int64_t off[3];
} bcast;

void bcast_init(bcast *b, const mi_tensor *out, mi_tensor *const *in, int n);

static inline void bcast_next(bcast *b)
{
    for (int d = b->rank - 1; d >= 0; d--) {
        for (int k = 0; k < b->n; k++) b->off[k] += b->stride[k][d];
        if (++b->idx[d] < b->shape[d]) return;
        for (int k = 0; k < b->n; k++) b->off[k] -= b->stride[k][d] * b->shape[d];
        b->idx[d] = 0;
    }
}

/* ---------------------------------------------------------------- kernel templates
 * UNARY_KERNELS(name, EXPR) defines name_f32 and name_f64 computing
 * y[i] = EXPR, where EXPR reads `x` (the element, of type T) and `a` (attrs)
 * and calls F(fn) for the dtype's libm function (F(exp) → expf / exp);
 * scalar_t is the element type. BINARY_KERNELS(name, EXPR): y = EXPR of `x`
 * (input 0) and `y` (input 1), broadcasting. The loops are functions in
 * elementwise_impl.h, per dtype; each macro defines only the element
 * function (name_el_f32, name_el_f64: the one-line EXPR) and the one-line
 * kernel that hands it to the loop. */
#define EW_T float
#define EW_NAME(x) x##_f32
#include "elementwise_impl.h"
#undef EW_T
#undef EW_NAME
#define EW_T double
#define EW_NAME(x) x##_f64
#include "elementwise_impl.h"
#undef EW_T
#undef EW_NAME

#define F(fn) _Generic((scalar_t)0, float: fn##f, double: fn)
#define UNARY_KERNEL_T(name, T, sfx, EXPR)                                                    \
    static inline T name##_el##sfx(T x, const mi_attrs *a)                                   \
    {                                                                                        \
        typedef T scalar_t;                                                                  \
        (void)(scalar_t)0;                                                                   \
        (void)a;                                                                             \
        return (T)(EXPR);                                                                    \
    }                                                                                        \
    static void name##sfx(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)             \
    {                                                                                        \
        unary_map##sfx(o, in, a, name##_el##sfx);                                            \
    }
#define UNARY_KERNELS(name, EXPR)                   \
    UNARY_KERNEL_T(name, float, _f32, EXPR)         \
    UNARY_KERNEL_T(name, double, _f64, EXPR)

/* An op of two inputs element by element: the element function name_el
 * (of x and the second input, named y2 in EXPR) and the one-line kernel that
 * hands it to map (binary_map here; unary.c's gradients use grad_map). */
#define PAIR_KERNEL_T(name, T, sfx, y2, map, EXPR)                                            \
    static inline T name##_el##sfx(T x, T y2)                                                \
    {                                                                                        \
        typedef T scalar_t;                                                                  \
        (void)(scalar_t)0;                                                                   \
        return (T)(EXPR);                                                                    \
    }                                                                                        \
    static void name##sfx(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)             \
    {                                                                                        \
        (void)a;                                                                             \
        map##sfx(o, in, name##_el##sfx);                                                     \
    }
#define BINARY_KERNEL_T(name, T, sfx, EXPR) PAIR_KERNEL_T(name, T, sfx, y, binary_map, EXPR)
#define BINARY_KERNELS(name, EXPR)                  \
    BINARY_KERNEL_T(name, float, _f32, EXPR)        \
    BINARY_KERNEL_T(name, double, _f64, EXPR)

#define KERNELS(name) .kernel = {{name##_f32, name##_f64}}

/* ANY_KERNEL(fn): one dtype-agnostic kernel (it copies element bytes) in both slots. */
#define ANY_KERNEL(fn) .kernel = {{fn, fn}}

/* gelu and gelu' (s, gp) and gelu'' (y) on raw arrays of n, exact: the
 * fused scans' REF kernels (unary.c). */
void ref_gelu_pair_f32(const float *a, float *s, float *gp, int64_t n);
void ref_gelu_pair_f64(const double *a, double *s, double *gp, int64_t n);
void ref_gelu_second_f32(const float *a, float *y, int64_t n);
void ref_gelu_second_f64(const double *a, double *y, int64_t n);

/* ---------------------------------------------------------------- examples
 * Inputs for the registry-driven gradient checks: f64, requires_grad. */
mi_tensor *ex_normal(mi_rng *r, int rank, const int64_t *shape);
mi_tensor *ex_uniform(mi_rng *r, int rank, const int64_t *shape, double lo, double hi);
/* |x| in [lo, hi] with a random sign: keeps inputs away from kinks at 0. */
mi_tensor *ex_away_from_zero(mi_rng *r, int rank, const int64_t *shape, double lo, double hi);
/* A constant (no grad) tensor of random integers in [0, n). */
mi_tensor *ex_indices(mi_rng *r, mi_dtype dt, int rank, const int64_t *shape, int64_t n);

#endif
