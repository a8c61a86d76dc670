/* Tutorial 2: a deep memory fits what a matrix cannot (MIRAS "memory
 * architecture"; the MLP of "MIRAS's Variants").
 *
 * The MLP memory is M(x) = x + LN(W1 GELU(W2 x)) (post-norm, expansion 4).
 * Both memories learn the same pairs by the same rule, one ℓ2 gradient step
 * per token: W ← W − η ∇_W ½‖M_W(k) − v‖².
 *
 * The target: 4 random unit keys k and their negatives −k in R^4, with
 *   v = k + LN(p(k)),   p_i(k) = k_{i+1} k_{i+2}  (indices mod 4).
 * p is even (p(−k) = p(k)), so for any matrix W the pair ±k gives
 *   ‖Wk − k − e‖² + ‖−Wk + k − e‖² ≥ 2‖e‖²,  e = LN(p(k)), ‖e‖² = 4:
 * no linear memory gets a mean recall error below 4. The MLP can. */
#include <math.h>
#include <stdio.h>

#include "extend.h"

enum { D = 4, PAIRS = 8, PASSES = 50 };

/* PASSES passes over the pairs at inner learning rate eta; mean recall error. */
static double fit(const char *memory, mi_tensor *keys, mi_tensor *values, double eta, mi_rng init)
{
    mi_miras_config c = mi_miras_config_default();
    c.memory = memory;          /* "matrix" or "mlp" */
    c.retention = "none";       /* bias l2, gd, chunk 1: the defaults */
    mi_miras m;
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS], *wf[MI_MEMORY_MAX_WEIGHTS];
    if (mi_miras_init(&m, &c) != 0 || m.memory->init(&c, D, D, &init, MI_F64, w0) != 0) return NAN;
    mi_tensor *ks[PASSES], *vs[PASSES];
    for (int p = 0; p < PASSES; p++) ks[p] = keys, vs[p] = values;
    mi_tensor *k = mi_concat(ks, PASSES, 1), *v = mi_concat(vs, PASSES, 1);  /* [1, 400, D] */
    mi_miras_gates g = {.eta = mi_full(MI_F64, MI_SHAPE(1, PASSES * PAIRS), eta)};
    if (!mi_miras_forward(&m, k, k, v, &g, w0, wf)) return NAN;
    mi_tensor *err = mi_sub(m.memory->forward(&c, wf, keys), values);
    return mi_item(mi_sum(mi_square(err), MI_ALL, false)) / PAIRS;
}

int main(void)
{
    mi_scope *s = mi_scope_new("tutorial");
    mi_scope_enter(s);
    mi_rng r;
    mi_rng_seed(&r, 15);
    /* the keys: ±k for 4 random unit k */
    double k[PAIRS][D], v[PAIRS][D];
    for (int p = 0; p < PAIRS / 2; p++) {
        double n = 0;
        for (int i = 0; i < D; i++) k[p][i] = mi_rng_normal(&r), n += k[p][i] * k[p][i];
        for (int i = 0; i < D; i++) k[p][i] /= sqrt(n), k[p + PAIRS / 2][i] = -k[p][i];
    }
    /* the values: v = k + LN(p(k)) (LN without eps) */
    for (int p = 0; p < PAIRS; p++) {
        double f[D], mu = 0, var = 0;
        for (int i = 0; i < D; i++) f[i] = k[p][(i + 1) % D] * k[p][(i + 2) % D], mu += f[i] / D;
        for (int i = 0; i < D; i++) var += (f[i] - mu) * (f[i] - mu) / D;
        for (int i = 0; i < D; i++) v[p][i] = k[p][i] + (f[i] - mu) / sqrt(var);
    }
    mi_tensor *keys = mi_from_buffer(MI_F64, MI_SHAPE(1, PAIRS, D), k);
    mi_tensor *values = mi_from_buffer(MI_F64, MI_SHAPE(1, PAIRS, D), v);

    /* each memory at its best inner learning rate from one grid */
    const char *memories[2] = {"matrix", "mlp"};
    const double etas[] = {0.01, 0.03, 0.1, 0.3, 1.0};
    double best[2] = {INFINITY, INFINITY};
    for (int m = 0; m < 2; m++) {
        for (int e = 0; e < 5; e++) {
            double err = fit(memories[m], keys, values, etas[e], r);  /* same init stream */
            if (err < best[m]) best[m] = err;
        }
        printf("%-6s memory: mean recall error %.4f after %d GD steps\n", memories[m], best[m],
               PASSES * PAIRS);
    }
    printf("any linear memory: >= %d\n", D);
    bool ok = best[1] < 0.05 * best[0];
    printf("%s\n", ok ? "the deep memory fits the non-linear map"
                      : "FAIL: the deep memory should be 20x better");
    mi_scope_leave();
    mi_scope_free(s);
    return ok ? 0 : 1;
}
