/* Lattice's similarity objective (Lattice §2.2, Eq. 8; its update Eq. 9), an
 * encoding objective: maximise the dot product of the code z = φ(S)ᵀ v_t
 * with the key,
 *
 *   ℓ_t = −⟨φ(S)ᵀ v_t, k_t⟩,   e_t = ∂ℓ/∂z = −k_t
 *   S_t = S_{t-1} + η_t v_tᵀ ×₁ [P(s_1)/‖s_1‖, …, P(s_m)/‖s_m‖] ⊙ k_tᵀ   (Eq. 9)
 *
 * Since ⟨φ(S)ᵀ v, k⟩ = ⟨φ(S) k, v⟩ this is also the dot bias on the read
 * (Eq. 10's h_t = −v_t, c_t = k_t); it is written in the paper's encoding
 * form. Needs the lattice memory (encode). */
#include "components.h"

static mi_tensor *lattice_sim_loss(const mi_miras_config *c, mi_tensor *z, mi_tensor *k,
                                   mi_tensor *delta)
{
    return mi_neg(mi_sum(mi_mul(z, k), -1, false));
}

static mi_tensor *lattice_sim_error(const mi_miras_config *c, mi_tensor *z, mi_tensor *k,
                                    mi_tensor *delta)
{
    return z ? mi_neg(k) : NULL;
}

const mi_bias_kind mi_bias_lattice_sim = {
    .name = "lattice-sim", .formula = "l = -<phi(S)^T v, k>",
    .loss = lattice_sim_loss, .error = lattice_sim_error, .encoding = true,
};
