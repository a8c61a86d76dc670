/* ℓ2-regression gradient descent (Nested Learning, §2.3,
 * Eq. 27–29). Backpropagation is a memory mapping each input x_t to its local
 * surprise ∇_{y_t}L (Eq. 25–26); replacing the dot-product objective by the
 * ℓ2 regression ‖W x_t − ∇_{y_t}L‖² (Eq. 27) gives
 *
 *   W_{t+1} = W_t (I − x_t x_tᵀ) − η ∇_{W_t} L(W_t; x_t)             (Eq. 28–29)
 *
 * for a layer y = W x, W [out, in]. Choices the paper leaves open:
 * - the inputs come from the caller (mi_optim_set_inputs: x [in] or a batch
 *   X [B, in]); they are ℓ2-normalised, x̂ = x / √(‖x‖² + ε), so that
 *   I − x̂x̂ᵀ is a projection and the step is stable at any input scale;
 * - a batch averages the rank-one terms, and a strength β (hp.delta) scales
 *   them:  W_{t+1} = W_t − (β/B) (W_t X̂ᵀ) X̂ − lr ∇_W L   (never forming
 *   the [in, in] matrix). β = 1 with B = 1 is Eq. 28 as printed; β does not
 *   follow the lr schedule (Eq. 28 has no η on it). As an outer optimizer on
 *   batches the term acts as a strong data-dependent weight decay, so β ≪ 1
 *   is what trains (the MLP test uses 0.05);
 * - parameters without inputs for a step, or that are not matrices, take
 *   the plain GD step of Eq. 25: W − lr ∇L (plus L2 weight decay λ, as SGD). */
#include "internal.h"

static int l2gd_check(const mi_optim_hparams *hp)
{
    if (opt_check_range("l2_gd", "delta", hp->delta, 0, INFINITY, false) ||
        opt_check_range("l2_gd", "eps", hp->eps, 0, INFINITY, false))
        return -1;
    return 0;
}

static void l2gd_spec(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s)
{
    (void)hp;
    (void)p;
    (void)s; /* stateless */
}

static int l2gd_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    (void)st_new;
    mi_tensor *g = opt_l2_decay(a, a->g), *w = a->p;
    if (a->inputs && w->rank == 2 && a->hp->delta != 0) {
        mi_tensor *x = a->inputs->rank == 1 ? mi_unsqueeze(a->inputs, 0) : a->inputs;
        mi_tensor *xh = mi_l2_normalize(x, a->hp->eps);                 /* X̂ [B, in] */
        mi_tensor *wx = mi_matmul_t(w, xh, false, true);                  /* W X̂ᵀ [out, B] */
        double s = a->hp->delta / (double)x->shape[0];
        w = mi_sub(w, mi_mul_scalar(mi_matmul(wx, xh), s));
    }
    *p_new = mi_sub(w, hp_scale(g, a->lr));
    return *p_new ? 0 : -1;
}

const opt_rule opt_rule_l2_gd = {.name = "l2_gd", .check = l2gd_check, .spec = l2gd_spec,
                                 .step = l2gd_step};
