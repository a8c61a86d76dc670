/* Installed as miras/autograd/op.h, for op and component authors: included by miras/extend.h,
 * not by miras.h. */
/* The op descriptor, for op authors (miras/extend.h): an op's attributes,
 * its kernels per backend and dtype, its shape rule and vector–Jacobian
 * products, and the generic apply that validates, allocates, runs the kernel
 * and records a node. ops/ instantiates mi_op; users call the ops through
 * ops.h and never see this. */
#ifndef MIRAS_AUTOGRAD_OP_H
#define MIRAS_AUTOGRAD_OP_H

#include "autograd/autograd.h"

/* Attributes of one op call. Each op reads the fields it documents. */
typedef struct mi_attrs {
    int axis;                      /* single-axis ops (negative counts from the end) */
    uint32_t axes;                 /* reductions: bit i = reduce axis i; 0 = all axes */
    bool keepdim;
    bool trans_a, trans_b;         /* matmul */
    bool reverse;                  /* scans, rope inverse */
    bool causal;                   /* attention */
    int rank;                      /* reshape / broadcast_to / sum_to / permute */
    int64_t shape[MI_MAX_RANK];    /* ... their target shape, or permutation */
    int64_t start, stop;           /* slice [start, stop) along axis; pad widths */
    int64_t window;                /* attention window (0 = unlimited) */
    int64_t index;                 /* ignore index (cross entropy), one-hot classes */
    double scalar;                 /* scalar operand: add_scalar, mul_scalar, pow exponent */
    double p, eps, lo, hi;         /* norms, clamps, smooth functions */
    const void *data;              /* an op's own data (mi_checkpoint: its closure) */
} mi_attrs;

typedef struct mi_op mi_op;

/* A recorded call: the op, its inputs and attributes, and its output. */
typedef struct mi_node {
    const mi_op *op;
    int n_inputs;
    mi_tensor *inputs[MI_MAX_INPUTS];
    mi_tensor *output;
    mi_attrs attrs;
    uint64_t seq;   /* creation order = a topological order */
} mi_node;

typedef void (*mi_kernel_fn)(mi_tensor *out, mi_tensor *const *in, const mi_attrs *a);
/* Output shape and dtype from inputs and attributes; -1 with a message naming
 * the op, the argument and the shapes when they do not fit. */
typedef int (*mi_shape_fn)(mi_tensor *const *in, int n, const mi_attrs *a, mi_dtype *dt,
                           int *rank, int64_t *shape);
/* Vector–Jacobian product for input i, given the gradient g of the output.
 * Written only with registered ops, so it is itself differentiable. It may
 * return a gradient of the output's (broadcast) shape: the engine sums it
 * back to the input's shape. */
typedef mi_tensor *(*mi_vjp_fn)(const mi_node *node, int i, mi_tensor *g);
/* The vector–Jacobian products for every input i with need[i] at once, into
 * grads[i] (the others untouched), 0 or -1: for an op whose gradients share
 * work (attention recomputes its probabilities once, not once per input).
 * The engine prefers it to vjp; vjp stays, for one input. */
typedef int (*mi_vjp_all_fn)(const mi_node *node, mi_tensor *g, const bool *need,
                             mi_tensor **grads);
/* Adds the vjp for input i into acc, in place: acc has input i's shape and
 * is a gradient the running backward pass made and alone holds. 0 or -1.
 * Optional; the engine prefers it, when the pass records nothing, for an op
 * whose vjp touches a part of its input (slice: the chunk, not a zero-padded
 * copy of the whole input added to the whole gradient). */
typedef int (*mi_vjp_into_fn)(const mi_node *node, int i, mi_tensor *g, mi_tensor *acc);
/* vjp_all, with into[i] (or NULL) a gradient of input i's shape and dtype
 * that the running pass made and alone holds: the op may add input i's vjp
 * into it in place and leave grads[i] NULL, or set grads[i] as vjp_all does
 * (the engine then adds it). Optional, in place of vjp_all, which the engine
 * then never calls; into has entries only where the pass records nothing
 * and an input already has a gradient (a residual stream's: the
 * normalisation's dx goes into it, in one pass). */
typedef int (*mi_vjp_all_into_fn)(const mi_node *node, mi_tensor *g, const bool *need,
                                  mi_tensor **grads, mi_tensor *const *into);
/* Builds example inputs for the gradient-check suites (variant 0, 1, …);
 * returns the number of inputs, 0 when there are no more variants. Inputs to
 * check have requires_grad set; they are f64. */
typedef int (*mi_example_fn)(mi_rng *rng, int variant, mi_tensor **in, mi_attrs *a);

/* Picks a backend for this call among the allowed ones that have a kernel
 * for dt (bit b of `available`); ops without one take the first available
 * of OWN, DNNL, BLAS, REF. */
typedef mi_backend (*mi_select_fn)(mi_tensor *const *in, int n, const mi_attrs *a,
                                   const mi_tensor *out, unsigned available);
/* The floating-point operations of the matrix products one call computes,
 * from the shapes (the ops layer's tally, mi_flops); optional, NULL for ops
 * without matrix products. */
typedef uint64_t (*mi_flops_fn)(mi_tensor *const *in, int n, const mi_attrs *a,
                                const mi_tensor *out);

enum {
    MI_OP_VARIADIC = 1u << 0,      /* arity is a maximum, at least one input */
    MI_OP_NONDIFF = 1u << 1,       /* no gradient flows (comparisons, masks, indices) */
    MI_OP_VIEW = 1u << 2,          /* output shares input 0's storage */
    MI_OP_NO_GRADGRAD = 1u << 3,   /* vjp is exact but its own vjp is not checked */
};

struct mi_op {
    const char *name;
    const char *formula;  /* one line: the math */
    int arity;
    unsigned flags;
    mi_shape_fn shape;
    mi_kernel_fn kernel[MI_BACKEND_COUNT][2]; /* [backend][MI_F32, MI_F64] */
    mi_vjp_fn vjp;         /* vjp, vjp_all or vjp_all_into (or more), unless MI_OP_NONDIFF */
    mi_vjp_all_fn vjp_all; /* every input's vjp in one call */
    mi_vjp_into_fn vjp_into; /* optional: a vjp added into the input's gradient in place */
    mi_vjp_all_into_fn vjp_all_into; /* or vjp_all, adding into existing gradients */
    /* Which inputs can carry a gradient (bit i); 0 means all float inputs. */
    uint32_t diff_inputs;
    /* For MI_OP_VIEW: byte offset of the output inside input 0's data. */
    size_t (*view_offset)(mi_tensor *const *in, const mi_attrs *a);
    mi_example_fn examples;
    mi_select_fn select;
    mi_flops_fn flops;
};

/* Whether gradients flow through op: it has a vjp (one input, or all at once)
 * and is not marked non-differentiable. */
static inline bool mi_op_differentiable(const mi_op *op)
{
    return (op->vjp || op->vjp_all || op->vjp_all_into) && !(op->flags & MI_OP_NONDIFF);
}

/* The kernel mi_apply will run for this call (after the allow mask and the
 * op's select rule); NULL when the op has no kernel for out's dtype. */
mi_kernel_fn mi_kernel_choose(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a,
                              const mi_tensor *out);
/* The backend the last op call on this thread ran on (for tests, tools). */
mi_backend mi_backend_last(void);
/* Runs op on inputs: validates, allocates the output in the current scope,
 * runs the kernel and records a node when recording is on and an input
 * requires grad. NULL inputs propagate (NULL result, first message kept). */
mi_tensor *mi_apply(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a);

/* Records a node of op for out, computed from in (mi_apply's last step; also
 * for an op whose output no kernel computes, as mi_checkpoint's). NULL when out
 * of memory. */
mi_node *mi_node_record(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a,
                        mi_tensor *out);

/* Called by mi_apply for every input that requires grad and that the op
 * differentiates, before anything else, recording or not (mi_checkpoint
 * finds the leaves its function uses with it). One per thread; set returns
 * the one before in *was, *was_ctx. */
typedef void (*mi_input_hook)(void *ctx, mi_tensor *t);
void mi_input_hook_set(mi_input_hook hook, void *ctx, mi_input_hook *was, void **was_ctx);
/* Called by mi_apply on every input before the hook, on this thread: the op
 * takes what it returns in the input's place (mi_scan_rows gives each thread
 * its own leaves for the parameters a body reads, so that the nested passes
 * of two threads never share a tensor's gradient slot). One per thread. */
typedef mi_tensor *(*mi_input_map)(void *ctx, mi_tensor *t);
void mi_input_map_set(mi_input_map map, void *ctx, mi_input_map *was, void **was_ctx);

/* Whether gradient flows into input i of a recorded node. */
bool mi_node_input_is_diff(const mi_node *node, int i);

/* The two ops the engine itself needs, provided by the ops layer (which
 * calls this before its first op): accumulation a + b, and summing a
 * broadcast gradient back to an input's shape (attrs.rank, attrs.shape). */
void mi_engine_set_ops(const mi_op *add, const mi_op *sum_to);


#endif
