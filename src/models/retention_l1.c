/* ℓ1 retention, the proximal gradient (ISTA) form (Lattice Appendix B.1,
 * Eq. 16–17):
 *
 *   S_t = prox_{τ‖·‖₁}(S_{t-1} − η_t ∇ℓ(S_{t-1}; k_t, v_t)),
 *   prox_{τ‖·‖₁}(z) = S_τ(z) = sign(z) max(|z| − τ, 0)   (mi_soft_threshold)
 *
 * τ = config l1_gamma (default 1e-3). The soft threshold is the boundary:
 * after every token at b = 1, at the end of each chunk otherwise (the linear
 * part S + Σ steps accumulates inside the chunk).
 *
 * Choices the paper leaves open:
 * - Eq. 17's threshold is γ_t λ_t (the step size times the ℓ1 weight). The
 *   boundary does not see η_t, so τ is given directly and fixed, as in the
 *   elastic retention (this is elastic with α ≡ 1: no ℓ2 part).
 * - Eq. 17 is given without the sphere projection, so this retention does
 *   not project; the lattice memory's φ still reads every slot normalised
 *   (a slot thresholded to exactly zero has no direction: keep τ small
 *   against the slots' entries). */
#include "models.h"

static mi_tensor *l1_boundary(const mi_miras_config *c, mi_tensor *w)
{
    return mi_soft_threshold(w, c->l1_gamma);
}

const mi_retention_kind mi_retention_l1 = {
    .name = "l1", .formula = "W_t = S_gamma(W_{t-1} - eta_t grad)",
    .boundary = l1_boundary, .uses_alpha = false,
};
