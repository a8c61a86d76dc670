/* Tutorial 4: robust attentional biases, ℓp and Huber (MIRAS "Alternative
 * Attentional Biases", eq:lp-attentional-bias and eq:huber-loss).
 *
 * The ℓ2 bias writes a step proportional to the error: one corrupted value
 * (an outlier) pushes the memory as hard as its error is large. Two robust
 * biases bound that push:
 *
 *   ℓp, p = 1:  ℓ = Σ_j |e_j|        ∇ = Sign(e) kᵀ        (|x| ≈ √(x² + ε))
 *   Huber:      ℓ = Σ_j H_δ(e_j)     ∇ = clip(e, ±δ) kᵀ    (ℓ2 near 0, ℓ1 beyond δ)
 *
 * A matrix memory learns v = W* k from a stream of unit keys; once with
 * clean values, once with a single value corrupted by +20 near the end. We
 * print how far each memory ends from W*, and how much the outlier hurt.
 * (ℓ1 pays for its robustness on clean data at this η: its steps do not
 * shrink as the error does. Huber gets both: ℓ2 for small errors.) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "miras.h"

enum { D = 8, T = 120, OUTLIER = T - 10 };

/* ‖M_T − W*‖²_F / ‖W*‖²_F after the stream */
static double learn(const char *bias, mi_tensor *keys, mi_tensor *values, mi_tensor *w_star)
{
    mi_miras_config c = mi_miras_config_default();  /* matrix memory, gd */
    c.bias = bias;                                   /* "l2", "lp" or "huber" */
    c.retention = "none";
    if (!strcmp(bias, "lp") && mi_miras_config_set(&c, "p=1") != 0) return NAN;  /* ℓp: p = 1 */
    mi_miras m;
    if (mi_miras_init(&m, &c) != 0) return NAN;
    mi_miras_gates g = {
        .eta = mi_full(MI_F64, MI_SHAPE(1, T), 0.5),    /* η_t */
        .delta = mi_full(MI_F64, MI_SHAPE(1, T), 0.1),  /* Huber's δ_t (only Huber reads it) */
    };
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D)), *final[MI_MEMORY_MAX_WEIGHTS];
    if (!mi_miras_forward(&m, keys, keys, values, &g, &w0, final)) return NAN;
    mi_tensor *diff = mi_sub(mi_reshape(final[0], MI_SHAPE(D, D)), w_star);
    return mi_item(mi_sum(mi_square(diff), MI_ALL, false)) /
           mi_item(mi_sum(mi_square(w_star), MI_ALL, false));
}

int main(void)
{
    mi_scope *s = mi_scope_new("tutorial");
    mi_scope_enter(s);
    mi_rng r;
    mi_rng_seed(&r, 4);
    mi_tensor *w_star = mi_randn(&r, MI_F64, MI_SHAPE(D, D), 0, 1 / sqrt(D));
    mi_tensor *keys = mi_l2_normalize(mi_randn(&r, MI_F64, MI_SHAPE(1, T, D), 0, 1), 0);
    mi_tensor *clean = mi_squeeze(mi_matmul(w_star, mi_unsqueeze(keys, -1)), -1);
    /* the same stream with one value corrupted: v_OUTLIER += 20 in every channel */
    mi_tensor *dirty = mi_tensor_to(clean, MI_F64);
    for (int j = 0; j < D; j++) mi_set(dirty, OUTLIER * D + j, mi_get(dirty, OUTLIER * D + j) + 20);

    printf("relative distance ||M_T - W*||^2 / ||W*||^2 after %d tokens (outlier at %d)\n", T,
           OUTLIER);
    printf("%-8s %10s %12s %10s\n", "bias", "clean", "one outlier", "hurt");
    const char *biases[] = {"l2", "lp", "huber"};
    double hurt[3];
    for (int b = 0; b < 3; b++) {
        double c = learn(biases[b], keys, clean, w_star), d = learn(biases[b], keys, dirty, w_star);
        hurt[b] = d - c;
        printf("%-8s %10.4f %12.4f %10.4f\n", b == 1 ? "lp (p=1)" : biases[b], c, d, hurt[b]);
    }
    bool ok = hurt[1] < hurt[0] && hurt[2] < hurt[0];
    printf("%s\n", ok ? "the robust biases are hurt less by the outlier than l2"
                      : "FAIL: lp and Huber should be hurt less than l2");
    mi_scope_leave();
    mi_scope_free(s);
    return ok ? 0 : 1;
}
