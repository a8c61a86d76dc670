/* Lattice's encoding objective (Lattice §2.2, Eq. 6; its update Eq. 7; the
 * gradient Appendix C.1, Eq. 19), an encoding objective: the memory encodes
 * the value, z = φ(S)ᵀ v_t ∈ R^m, and the code is compared with the key:
 *
 *   ℓ_t = ½‖φ(S)ᵀ v_t − k_t‖²,   e_t = ∂ℓ/∂z = φ(S)ᵀ v_t − k_t ∈ R^m
 *   S_t = S_{t-1} − η_t v_tᵀ ×₁ [P(s_1)/‖s_1‖, …, P(s_m)/‖s_m‖] ⊙ e_tᵀ   (Eq. 7)
 *
 * The ½ as in lattice-dec (Eq. 19's factor 2 is dropped by Eq. 7). The
 * read stays y_t = φ(S_t) q_t (Eq. 10). Needs the lattice memory (encode). */
#include "components.h"

static mi_tensor *lattice_enc_loss(const mi_miras_config *c, mi_tensor *z, mi_tensor *k,
                                   mi_tensor *delta)
{
    return mi_mul_scalar(mi_sum(mi_square(mi_sub(z, k)), -1, false), 0.5);
}

static mi_tensor *lattice_enc_error(const mi_miras_config *c, mi_tensor *z, mi_tensor *k,
                                    mi_tensor *delta)
{
    return mi_sub(z, k);
}

const mi_bias_kind mi_bias_lattice_enc = {
    .name = "lattice-enc", .formula = "l = 1/2 ||phi(S)^T v - k||^2",
    .loss = lattice_enc_loss, .error = lattice_enc_error, .encoding = true,
};
