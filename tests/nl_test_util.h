/* Helpers shared by the Nested Learning suites (test_cms.c, test_hope.c):
 * scalar activations for the plain-loop references, a seeded f64 input, the
 * largest difference of two tensors, and a gradcheck over a layer's input
 * and every parameter. */
#ifndef MIRAS_NL_TEST_UTIL_H
#define MIRAS_NL_TEST_UTIL_H

#include "harness.h"

enum { MAXT = 12, MAXD = 16 };  /* the references' largest T and width */

static inline double P(const mi_tensor *t, int64_t i) { return mi_get(t, i); }
static inline double sigm(double z) { return 1 / (1 + exp(-z)); }
static inline double silu(double z) { return z * sigm(z); }
static inline double gelu(double z) { return 0.5 * z * (1 + erf(z * M_SQRT1_2)); }
static inline double gelu_prime(double z)
{
    return 0.5 * (1 + erf(z * M_SQRT1_2)) + z * exp(-0.5 * z * z) / sqrt(2 * M_PI);
}

static inline mi_tensor *input(uint64_t seed, int64_t B, int64_t T, int64_t d)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return mi_randn(&r, MI_F64, MI_SHAPE(B, T, d), 0, 1);
}

static inline double max_abs_diff(const mi_tensor *a, const mi_tensor *b)
{
    ck_assert_int_eq(a->numel, b->numel);
    double m = 0;
    for (int64_t i = 0; i < a->numel; i++) m = fmax(m, fabs(mi_get(a, i) - mi_get(b, i)));
    return m;
}

/* Gradcheck w.r.t. x and every parameter, in groups (gradcheck perturbs the
 * parameters in place; the layer reads them). */
static inline void gradcheck_params(const char *what, mi_check_fn f, void *layer, mi_tensor *x,
                             const mi_named_tensor *p, int n)
{
    mi_requires_grad(x, true);
    for (int g = 0; g < n; g += MI_MAX_INPUTS - 1) {
        mi_tensor *in[MI_MAX_INPUTS] = {x};
        int m = 1;
        for (int i = g; i < n && m < MI_MAX_INPUTS; i++) in[m++] = p[i].tensor;
        mi_gradcheck_result r = mi_gradcheck(f, layer, in, m, NULL);
        ck_assert_msg(r.ok, "%s, parameters %s..%s: %s", what, p[g].name, p[g + m - 2].name,
                      r.message);
        ck_assert(r.entries > 0);
        x->requires_grad = false;  /* checked once */
    }
}

#endif
