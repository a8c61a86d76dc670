/* ℓ1 retention, the proximal gradient (ISTA) form (Lattice Appendix B.1,
 * Eq. 16–17). Eq. 16 adds λ_t‖S‖₁ to the loss; one ISTA step on it is
 *
 *   S_t = prox_{γ_t λ_t ‖·‖₁}(S_{t-1} − γ_t ∇ℓ(S_{t-1}; k_t, v_t))   (Lattice, Eq. 17)
 *   prox_{μ‖·‖₁}(z) = sign(z) max(|z| − μ, 0)
 *
 * with the step γ_t = η_t (the gate eta) and λ_t = λ = config l1_gamma: the
 * threshold is λ η_t, so it scales with the step and vanishes with it
 * (l1_threshold=scaled, the default). l1_threshold=constant thresholds by λ
 * itself at every token, whatever η_t. The soft threshold is the boundary:
 * after every token at b = 1; at the end of each chunk otherwise (the linear
 * part S + Σ steps accumulates inside the chunk), with the threshold of the
 * chunk's last token, λ η_t.
 *
 * Choices the paper leaves open:
 * - λ_t is one number, config l1_gamma, not a gate of its own.
 * - Eq. 17 is given without the sphere projection, so this retention does
 *   not project; the lattice memory's φ still reads every slot normalised
 *   (a slot thresholded to exactly zero has no direction: keep λ η small
 *   against the slots' entries).
 * This is the elastic retention with α ≡ 1 (no ℓ2 part). */
#include <math.h>
#include <string.h>

#include "components.h"

/* Index = the enum's value (models.h). */
static const char *const l1_thresholds[] = {"scaled", "constant", NULL};

const mi_field mi_l1_fields[2] = {
    MI_FIELD_REAL_AT(mi_l1_params, "l1_gamma", gamma, "1e-3", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "l1, elastic: the l1 weight"),
    MI_FIELD_CHOICE_AT(mi_l1_params, "l1_threshold", threshold, "scaled", l1_thresholds,
                       "l1, elastic: the threshold l1_gamma eta_t or l1_gamma"),
};

mi_l1_params mi_l1_params_of(const mi_miras_config *c)
{
    mi_l1_params p;
    memcpy(&p, &c->retention_params, sizeof p);
    return p;
}

/* S_τ(x) with τ = λ η_t as relu(x − τ) − relu(−x − τ), so that the outer
 * gradient reaches η through τ (mi_soft_threshold takes a constant). */
mi_tensor *mi_l1_prox(const mi_miras_config *c, mi_tensor *x, mi_tensor *eta)
{
    mi_l1_params p = mi_l1_params_of(c);
    if (p.threshold == MI_L1_CONSTANT) return mi_soft_threshold(x, p.gamma);
    if (!eta) return x; /* nothing written yet: no step, no threshold */
    mi_tensor *tau = mi_mul_scalar(eta, p.gamma);
    return mi_sub(mi_relu(mi_sub(x, tau)), mi_relu(mi_neg(mi_add(x, tau))));
}

static mi_tensor *l1_boundary(const mi_miras_config *c, mi_tensor *w, mi_tensor *eta)
{
    return mi_l1_prox(c, w, eta);
}

const mi_retention_kind mi_retention_l1 = {
    .name = "l1", .formula = "W_t = S_tau(W_{t-1} - eta_t grad), tau = gamma eta_t",
    .boundary = l1_boundary, .uses_alpha = false, MI_PARAMS(mi_l1_params, mi_l1_fields),
};
