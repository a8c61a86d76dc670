/* Lattice's decoding objective (Lattice §2.1, Eq. 3; its update Eq. 4):
 *
 *   ℓ_t = ½‖φ(S) k_t − v_t‖²,   e_t = ∂ℓ/∂y = φ(S) k_t − v_t
 *
 * on the lattice memory's read y = φ(S) k_t. With GD (η_t = the paper's γ_t):
 *   S_t = S_{t-1} − η_t e_tᵀ ×₁ [P(s_1)/‖s_1‖, …, P(s_m)/‖s_m‖] ⊙ k_tᵀ   (Eq. 4)
 * The paper writes the loss without the ½ and drops the factor 2 it brings
 * (Eq. 2 has it; Eq. 4, 7, 9 and Table 3 do not); the ½ here makes the GD step
 * exactly Eq. 4. On a memory other than lattice this is the ℓ2 bias. */
#include "components.h"

static mi_tensor *lattice_dec_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                                   mi_tensor *delta)
{
    return mi_mul_scalar(mi_sum(mi_square(mi_sub(y, v)), -1, false), 0.5);
}

static mi_tensor *lattice_dec_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                                    mi_tensor *delta)
{
    return mi_sub(y, v);
}

const mi_bias_kind mi_bias_lattice_dec = {
    .name = "lattice-dec", .formula = "l = 1/2 ||phi(S) k - v||^2",
    .loss = lattice_dec_loss, .error = lattice_dec_error,
};
