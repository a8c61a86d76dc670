/* The Adam step's loop, written once and included per dtype and backend (by
 * adam_step.c for REF, f32 and f64, by backend/cpu/own_update.c for OWN f32),
 * with AS_T the element type, AS_SQRT its square root and AS_NAME(x) the
 * loop's name. Not a header of its own: no guard. */

/* Elements i0 … i1 − 1, in place, in optim's Adam order (optim/adam.c):
 *   decoupled: p ← p·(1 − lr·wd);  L2: g ← g + wd·p
 *   m ← β1·m + (1 − β1)·g,  v ← β2·v + (1 − β2)·g²   (m = v = 0 before: warm false)
 *   p ← p − m / (√v·(1/√bc2) + ε) · (lr/bc1) */
static void AS_NAME(adam_range)(const adam_coeffs *c, AS_T *restrict p, AS_T *restrict m,
                                AS_T *restrict v, const AS_T *restrict g, int64_t i0,
                                int64_t i1)
{
    const AS_T keep = (AS_T)c->keep, l2 = (AS_T)c->l2, b1 = (AS_T)c->beta1,
               b2 = (AS_T)c->beta2, one_b1 = (AS_T)c->one_b1, one_b2 = (AS_T)c->one_b2,
               inv_bc2 = (AS_T)c->inv_sqrt_bc2, eps = (AS_T)c->eps, step = (AS_T)c->step_size;
    const bool warm = c->warm;
    const int decay = c->decay;
    for (int64_t i = i0; i < i1; i++) {
        AS_T pi = p[i], gi = g[i];
        if (decay == ADAM_DECOUPLED) pi = pi * keep;
        if (decay == ADAM_L2) gi = gi + p[i] * l2;
        AS_T mi = gi * one_b1, vi = gi * gi * one_b2;
        if (warm) mi = m[i] * b1 + mi, vi = v[i] * b2 + vi;
        m[i] = mi, v[i] = vi;
        p[i] = pi - mi / (AS_SQRT(vi) * inv_bc2 + eps) * step;
    }
}
