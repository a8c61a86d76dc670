/* miras autograd layer: the op descriptor type, the generic apply (validate,
 * allocate, run the kernel, record), reverse mode with higher order, and
 * numerical gradient checking. Nothing here knows any particular op: ops/
 * instantiates mi_op. */
#ifndef MIRAS_AUTOGRAD_H
#define MIRAS_AUTOGRAD_H

#include "tensor/tensor.h"

#define MI_MAX_INPUTS 8

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
/* Builds example inputs for the gradient-check suites (variant 0, 1, …);
 * returns the number of inputs, 0 when there are no more variants. Inputs to
 * check have requires_grad set; they are f64. */
typedef int (*mi_example_fn)(mi_rng *rng, int variant, mi_tensor **in, mi_attrs *a);

/* Kernel providers. REF is plain C and the ground truth; the others are
 * optional per op (NULL = not provided). */
typedef enum mi_backend {
    MI_BACKEND_REF = 0,  /* reference loops, f32 and f64 */
    MI_BACKEND_BLAS = 1, /* OpenBLAS */
    MI_BACKEND_DNNL = 2, /* oneDNN 2.6 */
    MI_BACKEND_OWN = 3,  /* the project's vectorised / OpenMP kernels */
    MI_BACKEND_COUNT = 4
} mi_backend;
#define MI_BACKEND_ALL ((1u << MI_BACKEND_COUNT) - 1u)
/* Picks a backend for this call among the allowed ones that have a kernel
 * for dt (bit b of `available`); ops without one take the first available
 * of OWN, DNNL, BLAS, REF. */
typedef mi_backend (*mi_select_fn)(mi_tensor *const *in, int n, const mi_attrs *a,
                                   const mi_tensor *out, unsigned available);

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
    mi_vjp_fn vjp;
    mi_vjp_all_fn vjp_all; /* optional: every input's vjp in one call */
    /* Which inputs can carry a gradient (bit i); 0 means all float inputs. */
    uint32_t diff_inputs;
    /* For MI_OP_VIEW: byte offset of the output inside input 0's data. */
    size_t (*view_offset)(mi_tensor *const *in, const mi_attrs *a);
    mi_example_fn examples;
    mi_select_fn select;
};

/* ---------------------------------------------------------------- backends
 * Which backends may run: a mask of (1u << MI_BACKEND_x); REF is always
 * allowed. The environment variable MIRAS_BACKEND sets it at start-up:
 * "ref", "blas", "dnnl", "own" (REF plus that one), a comma list, or "all"
 * (the default). */
void mi_backends_allow(unsigned mask);
unsigned mi_backends_allowed(void);
const char *mi_backend_name(mi_backend b);
/* The kernel mi_apply will run for this call (after the allow mask and the
 * op's select rule); NULL when the op has no kernel for out's dtype. */
mi_kernel_fn mi_kernel_choose(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a,
                              const mi_tensor *out);
/* The backend the last op call on this thread ran on (for tests, tools). */
mi_backend mi_backend_last(void);
/* Threads of the one parallel runtime (OpenMP); MIRAS_THREADS sets it at
 * start-up, the default is every core. */
void mi_set_threads(int n);
int mi_threads(void);

/* Runs op on inputs: validates, allocates the output in the current scope,
 * runs the kernel and records a node when recording is on and an input
 * requires grad. NULL inputs propagate (NULL result, first message kept). */
mi_tensor *mi_apply(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a);

/* Whether gradient flows into input i of a recorded node. */
bool mi_node_input_is_diff(const mi_node *node, int i);

/* The two ops the engine itself needs, provided by the ops layer (which
 * calls this before its first op): accumulation a + b, and summing a
 * broadcast gradient back to an input's shape (attrs.rank, attrs.shape). */
void mi_engine_set_ops(const mi_op *add, const mi_op *sum_to);

/* ---------------------------------------------------------------- recording */
bool mi_grad_enabled(void);
/* Turns recording on or off for this thread; returns the previous setting. */
bool mi_set_grad_enabled(bool on);
/* Marks a leaf as a variable to differentiate with respect to. */
mi_tensor *mi_requires_grad(mi_tensor *t, bool on);

/* ---------------------------------------------------------------- reverse mode
 * grads[j] = Σ_i d⟨outputs[i], grad_outputs[i]⟩ / d inputs[j].
 * grad_outputs may be NULL (each output must then have one element: seed 1).
 * Inputs the outputs do not depend on get zeros. With create_graph the
 * gradients are recorded, so they can be differentiated again (any order).
 * Gradients go to the current scope. 0 or -1. */
int mi_grad(mi_tensor *const *outputs, mi_tensor *const *grad_outputs, int n_out,
            mi_tensor *const *inputs, int n_in, bool create_graph, mi_tensor **grads);
/* How many recorded nodes the last mi_grad on this thread ran vjps for:
 * only nodes between the inputs and the outputs are visited. */
size_t mi_grad_last_nodes(void);
/* Accumulates d loss / d leaf into leaf->grad for every leaf that requires
 * grad (leaf->grad lives in the leaf's scope, so it survives step scopes). */
int mi_backward(mi_tensor *loss);
/* Zeroes leaf->grad of the given leaves. */
void mi_zero_grad(mi_tensor *const *leaves, int n);

/* ---------------------------------------------------------------- checking
 * A function under test: fills out[0..] and returns how many outputs, or -1. */
typedef int (*mi_check_fn)(mi_tensor *const *in, int n_in, mi_tensor **out, void *ctx);

typedef struct mi_gradcheck_opts {
    double eps, atol, rtol; /* MI_GRADCHECK_DEFAULTS: 1e-6, 1e-5, 1e-3 (PyTorch's) */
    bool quiet;             /* no report of the worst mismatch on stderr */
} mi_gradcheck_opts;
#define MI_GRADCHECK_DEFAULTS {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3, .quiet = false}

typedef struct mi_gradcheck_result {
    bool ok;
    double max_abs_err;   /* over every Jacobian entry checked */
    int64_t entries;      /* Jacobian entries compared */
    char message[256];    /* the worst entry when !ok */
} mi_gradcheck_result;

/* Compares the Jacobian built from reverse mode with central differences, in
 * f64, for every input with requires_grad. Inputs must be f64. */
mi_gradcheck_result mi_gradcheck(mi_check_fn f, void *ctx, mi_tensor *const *in, int n_in,
                                 const mi_gradcheck_opts *opts);
/* gradcheck of (x, v) ↦ vjp(f, x, v) with create_graph: second derivatives. */
mi_gradcheck_result mi_gradgradcheck(mi_check_fn f, void *ctx, mi_tensor *const *in, int n_in,
                                     const mi_gradcheck_opts *opts);

/* ---------------------------------------------------------------- graphs
 * Graphviz DOT of everything the outputs were computed from. */
int mi_graph_dot(FILE *f, mi_tensor *const *outputs, int n_out);

#endif
