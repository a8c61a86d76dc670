/* Sphere retention: Lattice's normalised projection onto the unit sphere
 * (Lattice §2.3, Eq. 11; Proposition 2.1, a Riemannian retraction), with the
 * optional forget gate (Lattice Appendix B.1, Eq. 15):
 *
 *   sphere          s_{i,t} = P_C(s_{i,t-1} + Δs_{i,t})              (Eq. 11)
 *   sphere-forget   s_{i,t} = P_C(α_t s_{i,t-1} + Δs_{i,t})          (Eq. 15, then Eq. 11)
 *
 * with Δs_t = −η_t ∇ℓ (the orthogonal step of the lattice memory), α_t the
 * forget gate (the paper's μ_t = 1 − γ_t λ_t) and P_C(x) = x/‖x‖ for every
 * row along the last axis: every slot of the lattice memory (any row of
 * another memory's weight). The linear part runs as usual (a scan in a
 * chunk); P_C is the boundary, after every token at b = 1 and at the end of
 * each chunk otherwise.
 *
 * Choices the paper leaves open:
 * - P_C is applied as the exact projection x/‖x‖. The paper writes it as
 *   β_{i,t}(s + Δs) with β = (1 + ‖Δs‖²)^(−1/2), which is the same number when
 *   ‖s_{i,t-1}‖ = 1 and Δs ⟂ s_{i,t-1}: true here with φ and no forget gate,
 *   at b = 1 and also at b > 1 (every step of a chunk is orthogonal to the
 *   slots the chunk started from). With the forget gate, or without φ, the
 *   β form would leave the sphere; x/‖x‖ does not. The boundary sees only
 *   the sum s + Δs, so it normalises it (mi_l2_normalize with eps 0, the same
 *   map as mi_sphere_retract(s, Δs)).
 * - The initial state is projected too, A_0 = P_C(W_0), so Eq. 11's
 *   assumption ‖s_{t-1}‖ = 1 holds from the first token even for a learnt W_0
 *   that has drifted off the sphere (the lattice memory's init is already on it).
 * - With the projection the forget gate only rescales the step:
 *   P_C(α s + Δs) = P_C(s + Δs/α) for α > 0, consistent with the paper's
 *   ablation (Table 2: the forget gate changes nothing measurable).
 * - α is one value per head and token (Eq. 15's scalar μ_t).
 * Inside a chunk (b > 1) the states read between boundaries are off the
 * sphere; the lattice memory's φ reads them normalised. */
#include "components.h"

static mi_tensor *sphere_project(const mi_miras_config *c, mi_tensor *a)
{
    return mi_l2_normalize(a, 0.0);
}

static mi_tensor *sphere_boundary(const mi_miras_config *c, mi_tensor *a, mi_tensor *eta)
{
    return sphere_project(c, a);
}

const mi_retention_kind mi_retention_sphere = {
    .name = "sphere", .formula = "s_t = P_C(s_{t-1} + step_t), P_C(x) = x / ||x|| per row",
    .init = sphere_project, .boundary = sphere_boundary, .uses_alpha = false,
};

const mi_retention_kind mi_retention_sphere_forget = {
    .name = "sphere-forget",
    .formula = "s_t = P_C(alpha_t s_{t-1} + step_t), P_C(x) = x / ||x|| per row",
    .init = sphere_project, .boundary = sphere_boundary, .uses_alpha = true,
};
