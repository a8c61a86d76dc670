/* The fused per-token path of the MLP memory: with b = 1 (and in the
 * one-token step of generation) a memory=mlp of depth 2 with bias l2 or
 * yaad, retention none or l2, gd or momentum and one η, α, μ, δ per head is
 * one mlp_scan op over the sequence, not ~40 ops per token:
 *   g_t = ∇_W ℓ(M_{W_{t−1}}(k_t); v_t)                     (MIRAS Eq. 3)
 *   W_t = α_t W_{t−1} − η_t g_t                             (gd)
 *   S_t = μ_t S_{t−1} − η_t g_t,  W_t = α_t W_{t−1} + S_t    (momentum, Titans §3.1)
 *   y_t = M_{W_t}(q_t)
 * with α ≡ 1 for retention none, and with decay_first g_t at α_t W_{t−1}
 * (recurrence.c's header, the op's in ops/mlp_scan.c). Channel-wise gates,
 * other depths and every other component keep the composed path, and so does
 * materialize=true (the tests' reference). Not differentiable twice. */
#include <stdlib.h>
#include <string.h>

#include "recurrence_mlp.h"

bool mlp_fused_rule(const mi_miras *m, const mi_miras_gates *gt, mi_mlp_scan_rule *rule)
{
    const mi_miras_config *c = &m->config;
    bool yaad = !strcmp(m->bias->name, "yaad");
    bool momentum = !strcmp(m->algorithm->name, "momentum");
    if (c->materialize || strcmp(m->memory->name, "mlp") || c->mlp_depth != 2 ||
        (!yaad && strcmp(m->bias->name, "l2")) ||
        (strcmp(m->retention->name, "none") && strcmp(m->retention->name, "l2")) ||
        (!momentum && strcmp(m->algorithm->name, "gd")))
        return false;
    /* one gate per head: [N, T] */
    if (gt->eta->rank != 2 || (m->retention->uses_alpha && gt->alpha->rank != 2) ||
        (momentum && gt->mu->rank != 2) || (yaad && gt->delta->rank != 2))
        return false;
    double sharpness = 0;
    if (yaad) {
        char text[64];
        if (mi_miras_config_get(c, "sign_sharpness", text, sizeof text) != 0) return false;
        sharpness = strtod(text, NULL);
    }
    *rule = (mi_mlp_scan_rule){.momentum = momentum, .yaad = yaad,
                               .decay_first = c->decay_first, .sign_sharpness = sharpness};
    return true;
}

/* The op's gates [N, T, 4] = (η, α, μ, δ): α ≡ 1 without retention, μ and δ
 * zeros where the rule does not read them. */
static mi_tensor *packed_gates(const mi_miras *m, const mi_mlp_scan_rule *rule,
                               const mi_miras_gates *gt)
{
    mi_tensor *eta = gt->eta;
    const int64_t *shape = eta->shape;
    mi_tensor *cols[4] = {
        eta,
        m->retention->uses_alpha ? gt->alpha : mi_ones(eta->dtype, 2, shape),
        rule->momentum ? gt->mu : mi_zeros(eta->dtype, 2, shape),
        rule->yaad ? gt->delta : mi_zeros(eta->dtype, 2, shape),
    };
    for (int i = 0; i < 4; i++)
        if (!(cols[i] = mi_unsqueeze(cols[i], -1))) return NULL;
    return mi_concat(cols, 4, 2);
}

mi_tensor *mlp_fused_scan(const mi_miras *m, const mi_mlp_scan_rule *rule, mi_tensor **a,
                          mi_tensor **s, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                          const mi_miras_gates *gt)
{
    mi_tensor *gates = packed_gates(m, rule, gt);
    if (!gates) return NULL;
    mi_tensor *state0[4] = {a[0], a[1], rule->momentum ? s[0] : NULL,
                            rule->momentum ? s[1] : NULL};
    mi_tensor *state[4] = {0};
    mi_tensor *y = mi_mlp_scan(state0, q, k, v, gates, rule, state);
    if (!y) return NULL;
    a[0] = state[0], a[1] = state[1];
    if (rule->momentum) s[0] = state[2], s[1] = state[3];
    return y;
}
