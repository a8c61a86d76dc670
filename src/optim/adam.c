/* Adam and AdamW, as torch.optim.Adam / torch.optim.AdamW (1.13, the
 * single-tensor path), at step t (from 1):
 *
 *   Adam:   g ← g + λ p                         (L2 weight decay)
 *   AdamW:  p ← p (1 − lr λ)                    (decoupled weight decay)
 *   m ← β₁ m + (1 − β₁) g
 *   v ← β₂ v + (1 − β₂) g²
 *   p ← p − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
 *
 * Defaults: lr 1e-3, (β₁, β₂) = (0.9, 0.999), ε 1e-8; λ = 0 (Adam), 1e-2
 * (AdamW). Nested Learning §2.3 / C.4 reads m and v as memories of the
 * gradients and of their squares. */
#include "internal.h"

int opt_check_adam(const char *who, const mi_optim_hparams *hp)
{
    if (opt_check_range(who, "beta1", hp->beta1, 0, 1, true) ||
        opt_check_range(who, "beta2", hp->beta2, 0, 1, true) ||
        opt_check_range(who, "eps", hp->eps, 0, INFINITY, false))
        return -1;
    return 0;
}

static int adam_check(const mi_optim_hparams *hp) { return opt_check_adam("adam", hp); }
static int adamw_check(const mi_optim_hparams *hp) { return opt_check_adam("adamw", hp); }

static void adam_spec(const mi_optim_hparams *hp, const mi_tensor *p, opt_state_spec *s)
{
    (void)hp;
    spec_like(s, "exp_avg", p);
    spec_like(s, "exp_avg_sq", p);
}

int opt_adam_update(const opt_param *a, hpv lr, bool decoupled, mi_tensor **p_new,
                    mi_tensor **m_new, mi_tensor **v_new)
{
    opt_param b = *a;
    b.lr = lr;
    mi_tensor *p = a->p, *g = a->g;
    if (decoupled) p = opt_decoupled_decay(&b, p);
    else g = opt_l2_decay(&b, g);
    hpv one_b1 = hp_one_minus(a->beta1), one_b2 = hp_one_minus(a->beta2);
    mi_tensor *m = hp_scale(g, one_b1), *v = hp_scale(mi_square(g), one_b2);
    if (a->st[0]) m = mi_add(hp_scale(a->st[0], a->beta1), m);
    if (a->st[1]) v = mi_add(hp_scale(a->st[1], a->beta2), v);
    hpv bc1 = hp_one_minus(hp_powi(a->beta1, a->step));
    hpv bc2 = hp_one_minus(hp_powi(a->beta2, a->step));
    hpv step_size = hp_div(lr, bc1);
    mi_tensor *denom = mi_add_scalar(hp_scale(mi_sqrt(v), hp_div(hp_of(1.0), hp_sqrt(bc2))),
                                     a->hp->eps);
    *p_new = mi_sub(p, hp_scale(mi_div(m, denom), step_size));
    *m_new = m;
    *v_new = v;
    return *p_new ? 0 : -1;
}

/* opt_adam_update as one pass in place (mi_adam_update): the same ops'
 * arithmetic, where the recorded ops make eleven passes and temporaries. */
static int adam_in_place(const opt_param *a, mi_tensor *const *st, bool decoupled)
{
    if (a->lr.t || a->beta1.t || a->beta2.t || a->wd.t) return 1;
    /* m and v are written together: both hold a value or neither does */
    if (!a->st[0] != !a->st[1]) return 1;
    mi_adam_step s = {.lr = a->lr.v, .beta1 = a->beta1.v, .beta2 = a->beta2.v,
                      .eps = a->hp->eps, .weight_decay = a->wd.v, .step = a->step,
                      .decoupled = decoupled, .warm = a->st[0] != NULL};
    return mi_adam_update(a->p, st[0], st[1], a->g, &s) == 0 ? 0 : -1;
}

static int adam_step_in_place(const opt_param *a, mi_tensor *const *st)
{
    return adam_in_place(a, st, false);
}

static int adamw_step_in_place(const opt_param *a, mi_tensor *const *st)
{
    return adam_in_place(a, st, true);
}

static int adam_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    return opt_adam_update(a, a->lr, false, p_new, &st_new[0], &st_new[1]);
}

static int adamw_step(const opt_param *a, mi_tensor **p_new, mi_tensor **st_new)
{
    return opt_adam_update(a, a->lr, true, p_new, &st_new[0], &st_new[1]);
}

const opt_rule opt_rule_adam = {.name = "adam", .check = adam_check, .spec = adam_spec,
                                .step = adam_step, .step_in_place = adam_step_in_place};
const opt_rule opt_rule_adamw = {.name = "adamw", .check = adamw_check, .spec = adam_spec,
                                 .step = adamw_step, .step_in_place = adamw_step_in_place};
