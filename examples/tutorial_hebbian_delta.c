/* Tutorial 1: Hebbian vs delta rule.
 *
 * A matrix memory M (d × d) stores key→value pairs; reading key k returns M k.
 * MIRAS names two ways to write a pair (k, v), both one gradient step:
 *
 *   Hebbian (linear attention): bias ℓ = −⟨M k, v⟩   →  M ← M + η v kᵀ
 *   delta rule (DeltaNet):      bias ℓ = ½‖M k − v‖² →  M ← M − η (M k − v) kᵀ
 *
 * Past capacity (more pairs than dimensions) the Hebbian sum piles every
 * value onto every key it overlaps; the delta rule first erases what M
 * already returns for k, then writes v. We store N = 2d random unit pairs,
 * read every key back and print the mean recall error of each rule. */
#include <math.h>
#include <stdio.h>

#include "extend.h"

enum { D = 16, PAIRS = 32 };

/* Writes all pairs once (one token each, η = 1), then recalls every key
 * from the final memory: mean ‖M k_i − v_i‖². */
static double store_and_recall(const char *bias, mi_tensor *keys, mi_tensor *values)
{
    mi_miras_config c = mi_miras_config_default();  /* matrix memory, gd, chunk 1 */
    c.bias = bias;                                   /* "dot" = Hebbian, "l2" = delta */
    c.retention = "none";                            /* nothing forgotten on purpose */
    mi_miras m;
    if (mi_miras_init(&m, &c) != 0) return NAN;

    mi_tensor *eta = mi_ones(MI_F64, MI_SHAPE(1, PAIRS));  /* η_t = 1 for every token */
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));      /* M_0 = 0 */
    mi_tensor *final[MI_MEMORY_MAX_WEIGHTS];
    mi_miras_gates g = {.eta = eta};
    /* q = k: we only need the final state, written to final[0] ([1, 1, D, D]) */
    if (!mi_miras_forward(&m, keys, keys, values, &g, &w0, final)) return NAN;

    /* recall: M k_i for every stored key, against v_i */
    mi_tensor *recalled = m.memory->forward(&c, final, keys);
    mi_tensor *err = mi_sum(mi_square(mi_sub(recalled, values)), MI_ALL, false);
    return err ? mi_item(err) / PAIRS : NAN;
}

/* n random unit vectors of width D, as one sequence [1, n, D] */
static mi_tensor *unit_vectors(mi_rng *r, int n)
{
    mi_tensor *x = mi_randn(r, MI_F64, MI_SHAPE(1, n, D), 0, 1);
    return mi_l2_normalize(x, 0);
}

int main(void)
{
    mi_scope *s = mi_scope_new("tutorial");
    mi_scope_enter(s);
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_tensor *keys = unit_vectors(&r, PAIRS), *values = unit_vectors(&r, PAIRS);

    double hebbian = store_and_recall("dot", keys, values);
    double delta = store_and_recall("l2", keys, values);
    printf("%d unit pairs in a %dx%d matrix memory (capacity %d)\n", PAIRS, D, D, D);
    printf("mean recall error ||M k - v||^2, Hebbian:    %.4f\n", hebbian);
    printf("mean recall error ||M k - v||^2, delta rule: %.4f\n", delta);
    if (isnan(hebbian) || isnan(delta)) fprintf(stderr, "error: %s\n", mi_error());
    bool ok = delta < hebbian;
    printf("%s\n", ok ? "the delta rule recalls better" : "FAIL: the delta rule should recall better");
    mi_scope_leave();
    mi_scope_free(s);
    return ok ? 0 : 1;
}
