/* Tutorial 5: KL retention, Memora (MIRAS "Alternative Retention Gates",
 * eq:xmodel; "MIRAS's Variants", Memora).
 *
 * A retention gate decides how much of the old memory a write keeps. The
 * ℓ2 gate decays it (W ← α W + step). Memora's KL gate instead keeps the
 * memory a distribution: every row of W lies on the simplex scaled by c,
 *
 *   W_t = c · Softmax(α_t log W_{t-1} − η_t ∇ℓ(W_{t-1}; k_t, v_t)),
 *
 * a mirror-descent step: the update happens in the log domain and the
 * softmax maps it back, so no entry turns negative and no row grows. The
 * library keeps L = log W as the state; retention->read gives W = c·softmax(L).
 * We write 64 random pairs with each gate and print the rows of W. */
#include <math.h>
#include <stdio.h>

#include "extend.h"

enum { D = 4, T = 64 };

/* Writes the stream with the given retention gate; returns the weights W. */
static mi_tensor *write_stream(const char *retention, mi_tensor *keys, mi_tensor *values)
{
    mi_miras_config c = mi_miras_config_default();  /* matrix memory, ℓ2 bias, gd */
    c.retention = retention;                         /* "kl" or "l2" */
    c.kl_scale = 2;                                  /* c: each row sums to 2 */
    mi_miras m;
    if (mi_miras_init(&m, &c) != 0) return NULL;
    mi_miras_gates g = {
        .eta = mi_full(MI_F64, MI_SHAPE(1, T), 0.5),    /* η_t */
        .alpha = mi_full(MI_F64, MI_SHAPE(1, T), 0.9),  /* α_t: the kept fraction */
    };
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D)), *final[MI_MEMORY_MAX_WEIGHTS];
    if (!mi_miras_forward(&m, keys, keys, values, &g, &w0, final)) return NULL;
    /* the state is L (KL) or W itself (ℓ2); read gives the weights (its last
     * argument, η of the last write, matters only to an ℓ1 threshold) */
    mi_tensor *w = m.retention->read ? m.retention->read(&c, final[0], NULL) : final[0];
    return mi_reshape(w, MI_SHAPE(D, D));
}

int main(void)
{
    mi_scope *s = mi_scope_new("tutorial");
    mi_scope_enter(s);
    mi_rng r;
    mi_rng_seed(&r, 5);
    mi_tensor *keys = mi_l2_normalize(mi_randn(&r, MI_F64, MI_SHAPE(1, T, D), 0, 1), 0);
    mi_tensor *values = mi_randn(&r, MI_F64, MI_SHAPE(1, T, D), 0, 1);
    bool ok = true;
    const char *gates[] = {"kl", "l2"};
    for (int gi = 0; gi < 2; gi++) {
        mi_tensor *w = write_stream(gates[gi], keys, values);
        if (!w) return fprintf(stderr, "error: %s\n", mi_error()), 1;
        printf("retention %s: rows of W after %d writes\n", gates[gi], T);
        for (int i = 0; i < D; i++) {
            double sum = 0, min = INFINITY;
            printf("  [");
            for (int j = 0; j < D; j++) {
                double x = mi_get(w, i * D + j);
                sum += x, min = fmin(min, x);
                printf(" %7.4f", x);
            }
            printf(" ]  sum %.6f  min %+.4f\n", sum, min);
            /* KL: every row on the simplex scaled by c = 2 */
            if (gi == 0 && (fabs(sum - 2) > 1e-9 || min <= 0)) ok = false;
        }
    }
    printf("%s\n", ok ? "KL retention keeps every row positive with sum c = 2"
                      : "FAIL: a KL row left the simplex");
    mi_scope_leave();
    mi_scope_free(s);
    return ok ? 0 : 1;
}
