/* Tutorial 3: momentum, Titans' "past surprise" (MIRAS "learning algorithm").
 *
 * Plain GD writes each token's gradient (its momentary surprise) and forgets
 * it. Titans keeps a running surprise S:
 *
 *   S_t = μ_t S_{t-1} − η_t ∇ℓ(M_{t-1}; k_t, v_t)
 *   M_t = α_t M_{t-1} + S_t
 *
 * so a direction that keeps being surprising keeps being written, with an
 * effective step η / (1 − μ). Here a matrix memory learns an unknown linear
 * map v = W* k from a stream of random unit keys, with the same small η
 * for both algorithms; we print how far M_t is from W* as the stream goes. */
#include <math.h>
#include <stdio.h>

#include "miras.h"

enum { D = 8, T = 200 };

/* ‖M_T − W*‖²_F / ‖W*‖²_F after the first n tokens of the stream */
static double distance(const char *algorithm, mi_tensor *keys, mi_tensor *values,
                       mi_tensor *w_star, int n)
{
    mi_miras_config c = mi_miras_config_default();  /* matrix memory, ℓ2 bias */
    c.algorithm = algorithm;                         /* "gd" or "momentum" */
    c.retention = "none";                            /* α ≡ 1 */
    mi_miras m;
    if (mi_miras_init(&m, &c) != 0) return NAN;
    mi_tensor *k = mi_slice(keys, 1, 0, n), *v = mi_slice(values, 1, 0, n);
    mi_miras_gates g = {
        .eta = mi_full(MI_F64, MI_SHAPE(1, n), 0.05),  /* η_t: the same small step */
        .mu = mi_full(MI_F64, MI_SHAPE(1, n), 0.9),    /* μ_t: only momentum reads it */
    };
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D)), *final[MI_MEMORY_MAX_WEIGHTS];
    if (!mi_miras_forward(&m, k, k, v, &g, &w0, final)) return NAN;
    mi_tensor *diff = mi_sub(mi_reshape(final[0], MI_SHAPE(D, D)), w_star);
    return mi_item(mi_sum(mi_square(diff), MI_ALL, false)) /
           mi_item(mi_sum(mi_square(w_star), MI_ALL, false));
}

int main(void)
{
    mi_scope *s = mi_scope_new("tutorial");
    mi_scope_enter(s);
    mi_rng r;
    mi_rng_seed(&r, 3);
    /* the map to learn, and the stream: unit keys, v_t = W* k_t */
    mi_tensor *w_star = mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 1 / sqrt(D));
    mi_tensor *keys = mi_l2_normalize(mi_randn(&r, MI_F64, MI_SHAPE(1, T, D), 0, 1), 0);
    mi_tensor *values = mi_squeeze(mi_matmul(w_star, mi_unsqueeze(keys, -1)), -1);

    printf("relative distance ||M_t - W*||^2 / ||W*||^2, eta = 0.05, mu = 0.9\n");
    printf("%6s %10s %10s\n", "tokens", "gd", "momentum");
    double gd = NAN, mom = NAN;
    for (int n = 25; n <= T; n *= 2) {
        gd = distance("gd", keys, values, w_star, n);
        mom = distance("momentum", keys, values, w_star, n);
        printf("%6d %10.2e %10.2e\n", n, gd, mom);
    }
    bool ok = mom < gd;
    printf("%s\n", ok ? "momentum learns the map faster at the same eta"
                      : "FAIL: momentum should be closer to W*");
    mi_scope_leave();
    mi_scope_free(s);
    return ok ? 0 : 1;
}
