/* Installed as miras/autograd/autograd.h, for users: included by miras.h. */
/* miras autograd layer: reverse mode with higher order, recording, the
 * backends and threads, and numerical gradient checking (the op descriptor
 * and the generic apply are in op.h). Nothing here knows any particular op:
 * ops/ instantiates mi_op. */
#ifndef MIRAS_AUTOGRAD_H
#define MIRAS_AUTOGRAD_H

#include "tensor/tensor.h"

#define MI_MAX_INPUTS 8

/* The op descriptor (mi_op, mi_attrs, mi_node, kernels, mi_apply) is for op
 * authors: autograd/op.h, which miras/extend.h includes. */
typedef struct mi_op mi_op;
typedef struct mi_attrs mi_attrs;

/* ---------------------------------------------------------------- backends
 * Kernel providers. REF is plain C and the ground truth; the others are
 * optional per op (NULL = not provided). */
typedef enum mi_backend {
    MI_BACKEND_REF = 0,  /* reference loops, f32 and f64 */
    MI_BACKEND_BLAS = 1, /* OpenBLAS */
    MI_BACKEND_DNNL = 2, /* oneDNN 2.6 */
    MI_BACKEND_OWN = 3,  /* the project's vectorised / OpenMP kernels */
    MI_BACKEND_COUNT = 4
} mi_backend;
#define MI_BACKEND_ALL ((1u << MI_BACKEND_COUNT) - 1u)

/* Which backends may run: a mask of (1u << MI_BACKEND_x); REF is always
 * allowed. The environment variable MIRAS_BACKEND sets it at start-up:
 * "ref", "blas", "dnnl", "own" (REF plus that one), a comma list, or "all"
 * (the default). */
void mi_backends_allow(unsigned mask);
unsigned mi_backends_allowed(void);
const char *mi_backend_name(mi_backend b);
/* What a backend promises across thread counts. REF, BLAS (OpenBLAS at one
 * thread inside the runtime's own split) and OWN split work so that no sum's
 * order depends on the thread count: bitwise the same result, true. oneDNN 2.6
 * chooses its blocking and the split of a reduction by instruction set and
 * thread count (its AVX2 f32 matmul sums in another order at 1 and 2
 * threads), so DNNL results agree to rounding only: false. For results that
 * do not depend on the thread count, leave DNNL out (MIRAS_BACKEND=blas,own). */
bool mi_backend_same_bits_across_threads(mi_backend b);
/* Threads of the one parallel runtime (OpenMP); MIRAS_THREADS sets it at
 * start-up, the default is every core. */
void mi_set_threads(int n);
int mi_threads(void);
/* What a parallel region costs here against the fork/join the kernels'
 * parallel thresholds were measured at (two threads spinning between
 * regions: ≈ 1.1 µs back to back), ≥ 1: the thresholds are multiplied by
 * it. With passive waiting (OMP_WAIT_POLICY=passive) the other threads
 * sleep between regions and each region wakes them, tens of µs on a
 * virtual machine. Measured on first use for the current thread count:
 * back-to-back empty regions, timed. region_us: the time one took (may be
 * NULL). 1 inside a parallel region or with one thread. */
double mi_parallel_cost(double *region_us);

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
