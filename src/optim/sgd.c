/* SGD with momentum, dampening and Nesterov, as torch.optim.SGD (1.13):
 *
 *   g ← g + λ p                                    (weight decay, L2 form)
 *   b ← g                      on the first step with momentum,
 *   b ← μ b + (1 − τ) g        afterwards                     (momentum μ, dampening τ)
 *   g ← g + μ b   (Nesterov)   or   g ← b
 *   p ← p − lr g
 *
 * Nested Learning Eq. 17 is the same recurrence with m = −lr·b: the momentum
 * is a memory compressing past gradients (Eq. 18). */
#include "internal.h"

static int sgd_check(const mi_optim_hparams *hp)
{
    if (opt_check_range("sgd", "momentum", hp->momentum, 0, INFINITY, false) ||
        opt_check_range("sgd", "dampening", hp->dampening, -INFINITY, INFINITY, false))
        return -1;
    if (!isfinite(hp->dampening)) {
        mi_error_set("sgd: dampening must be finite, got %g", hp->dampening);
        return -1;
    }
    if (hp->nesterov && (hp->momentum <= 0 || hp->dampening != 0)) {
        mi_error_set("sgd: Nesterov momentum requires a momentum > 0 and zero dampening "
                     "(momentum %g, dampening %g)", hp->momentum, hp->dampening);
        return -1;
    }
    return 0;
}

static void sgd_spec(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s)
{
    if (hp->momentum != 0) spec_like(s, "momentum_buffer", p);
}

static int sgd_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    mi_tensor *g = opt_l2_decay(a, a->g);
    if (!hp_is(a->momentum, 0)) {
        mi_tensor *b = a->st[0];
        b = b ? mi_add(hp_scale(b, a->momentum), mi_mul_scalar(g, 1.0 - a->hp->dampening)) : g;
        st_new[0] = b;
        g = a->hp->nesterov ? mi_add(g, hp_scale(b, a->momentum)) : b;
    }
    *p_new = mi_sub(a->p, hp_scale(g, a->lr));
    return *p_new ? 0 : -1;
}

const opt_rule opt_rule_sgd = {.name = "sgd", .check = sgd_check, .spec = sgd_spec,
                               .step = sgd_step};
