/* Implicit gradient descent (Longhorn; MIRAS Table 1): the step solves
 *   A_t = argmin_A ½‖A k_t − v_t‖² + 1/(2η_t) ‖A − A_{t−1}‖²,
 * which for the ℓ2 bias on a matrix memory is the delta rule with the rate
 *   η'_t = η_t / (1 + η_t ‖k_t‖²)
 * (the closed form exists only there: other memories and biases are refused). */
#include "components.h"

static mi_tensor *implicit_rate(mi_tensor *eta, mi_tensor *k)
{
    mi_tensor *ksq = mi_sum(mi_square(k), -1, eta->rank == 3);
    return mi_div(eta, mi_add_scalar(mi_mul(eta, ksq), 1.0));
}

static const char *implicit_check(const mi_miras *m)
{
    if (m->memory->rule != MI_MEMORY_RULE_MATRIX || m->bias->rule != MI_BIAS_RULE_RESIDUAL)
        return "implicit GD needs memory=matrix and bias=l2 (its step's only closed form)";
    return NULL;
}

const mi_algorithm_kind mi_algorithm_implicit = {
    .name = "implicit", .formula = "A_t = alpha_t A_{t-1} - eta_t/(1 + eta_t |k_t|^2) grad",
    .rate = implicit_rate, .check = implicit_check, .delta_rule = true,
};
