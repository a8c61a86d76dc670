#include <stdio.h>
#include "miras.h"

/* f(w, x) = Σ softplus(x·w) ⊙ tanh(x·w) */
static int f(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    mi_tensor *xw = mi_matmul(in[1], in[0]);
    out[0] = mi_sum(mi_mul(mi_softplus(xw), mi_tanh(xw)), MI_ALL, false);
    return out[0] ? 1 : -1;
}

int main(void)
{
    mi_scope *s = mi_scope_new("main");
    mi_scope_enter(s);
    mi_rng rng;
    mi_rng_seed(&rng, 42);
    mi_tensor *w = mi_requires_grad(mi_randn(&rng, MI_F64, MI_SHAPE(3, 2), 0, 1), true);
    mi_tensor *x = mi_randn(&rng, MI_F64, MI_SHAPE(4, 3), 0, 1), *y, *dw;
    f((mi_tensor *[]){w, x}, 2, &y, NULL);                  /* forward, recorded */
    if (mi_grad(&y, NULL, 1, &w, 1, false, &dw) != 0) return fprintf(stderr, "%s\n", mi_error()), 1;
    mi_print(stdout, dw);                                   /* ∂f/∂w */
    mi_gradcheck_result r = mi_gradcheck(f, NULL, (mi_tensor *[]){w, x}, 2, NULL);
    printf("gradcheck: %s (%lld entries, max error %.1e)\n", r.ok ? "ok" : r.message,
           (long long)r.entries, r.max_abs_err);
    mi_scope_leave();
    mi_scope_free(s);
    return r.ok ? 0 : 1;
}
