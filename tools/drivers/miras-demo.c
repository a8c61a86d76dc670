/* miras-demo: a 2-layer MLP learns y = sin(x₀)·x₁ with plain SGD, where the
 * update p ← p − lr·∇p is itself written with miras ops. Prints the loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "miras.h"

enum { N = 256, HIDDEN = 32, STEPS = 400 };

/* ŷ = W2 tanh(W1 x + b1) + b2, with x as rows [N, 2]. */
static mi_tensor *forward(mi_tensor *const *p, mi_tensor *x)
{
    mi_tensor *h = mi_tanh(mi_add(mi_matmul_t(x, p[0], false, true), p[1]));
    return mi_add(mi_matmul_t(h, p[2], false, true), p[3]);
}

int main(int argc, char **argv)
{
    tool_start("miras-demo");
    double lr = 0.1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--lr") == 0 && i + 1 < argc) lr = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: miras-demo [--lr RATE]  (default 0.1)\n");
            return 2;
        }
    }
    mi_scope *params = mi_scope_new("params"), *step = mi_scope_new("step");
    mi_rng rng;
    mi_rng_seed(&rng, 1);

    mi_scope_enter(params);
    mi_tensor *x = mi_rand(&rng, MI_F32, MI_SHAPE(N, 2), -2, 2);
    mi_tensor *y = mi_tensor_new(MI_F32, MI_SHAPE(N, 1));
    for (int i = 0; i < N; i++) mi_set(y, i, sin(mi_get(x, 2 * i)) * mi_get(x, 2 * i + 1));
    mi_tensor *p[4] = {
        mi_randn(&rng, MI_F32, MI_SHAPE(HIDDEN, 2), 0, 1.0 / sqrt(2)),
        mi_zeros(MI_F32, MI_SHAPE(HIDDEN)),
        mi_randn(&rng, MI_F32, MI_SHAPE(1, HIDDEN), 0, 1.0 / sqrt(HIDDEN)),
        mi_zeros(MI_F32, MI_SHAPE(1)),
    };
    for (int i = 0; i < 4; i++) mi_requires_grad(p[i], true);
    mi_scope_leave();
    if (mi_error_pending()) {
        fprintf(stderr, "miras-demo: %s\n", mi_error());
        return 1;
    }

    printf("2-layer MLP (2 → %d → 1, tanh) fitting y = sin(x0)·x1 on %d points, SGD lr %g\n",
           HIDDEN, N, lr);
    for (int s = 0; s <= STEPS; s++) {
        mi_scope_enter(step);
        mi_tensor *loss = mi_mean(mi_square(mi_sub(forward(p, x), y)), MI_ALL, false);
        mi_zero_grad(p, 4);
        if (mi_backward(loss) != 0) {
            fprintf(stderr, "miras-demo: %s\n", mi_error());
            return 1;
        }
        if (s % 50 == 0) printf("step %4d  loss %.5f\n", s, mi_item(loss));
        /* SGD: p ← p − lr·∇p, computed by ops outside the recorded graph. */
        bool was = mi_set_grad_enabled(false);
        for (int i = 0; i < 4; i++) mi_tensor_copy_into(p[i], mi_sub(p[i], mi_mul_scalar(p[i]->grad, lr)));
        mi_set_grad_enabled(was);
        mi_scope_leave();
        mi_scope_reset(step);
    }
    mi_scope_free(step);
    mi_scope_free(params);
    return 0;
}
