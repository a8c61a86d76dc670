/* The fused path of the MLP memory: with b = 1 (and in the one-token step
 * of generation), and for kl's chunks (below), a memory=mlp of depth 2 with
 * bias l2, yaad or lp, retention none, l2, lq (the Frobenius form) or kl (a
 * constant scale c), gd or momentum (none or l2 retention only) and one η,
 * α, μ, δ per head is one mlp_scan op over the sequence, not ~40 ops per
 * token:
 *   g_t = ∇_W ℓ(M_W(k_t); v_t) at W = read(A_{t−1})          (MIRAS eq:OGDupdate)
 *   A_t = α_t A_{t−1} − η_t g_t                             (gd)
 *   S_t = μ_t S_{t−1} − η_t g_t,  A_t = α_t A_{t−1} + S_t    (momentum, Titans §3.1)
 *   A_t ← boundary(A_t)                                     (kl)
 *   y_t = M_{read(A_t)}(q_t)
 * with α ≡ 1 for retention none, read the identity for none and l2, and
 * with decay_first g_t at read(α_t A_{t−1}) (recurrence.c's header, the op's
 * in ops/mlp_scan.c). With b > 1 a kl read (Memora) takes the op's
 * mini-batch rule, the lag token included (recurrence.c's header): its
 * tokens each read the weights of their own state, c softmax(L_t), which
 * the op forms one at a time where the recorded chunk keeps one copy a
 * token; so does the state itself with the ℓ2 or ℓp bias (Titans, TTT-MLP:
 * Titans' BENCH training step 891 → 767 ms, 796 → 751 MB, as the op's
 * recorded forward keeps its checkpoints); yaad's and lq's chunks take the
 * rank-one form (recurrence_factored.c), and scan=composed and scan=mi_scan
 * keep the chunks as recorded ops and as mi_scan's body. Channel-wise gates, other
 * depths, lq's paper form, a learned kl scale and every other component
 * keep the composed path, and so does materialize=true (the tests'
 * reference). Not differentiable twice. The components are known by the
 * rules they declare (components.h), a user's as a built-in's. */
#include <stdlib.h>
#include <string.h>

#include "recurrence_mlp.h"

/* A component parameter of the config by key, as a number. */
static bool config_real(const mi_miras_config *c, const char *key, double *out)
{
    char text[64];
    if (mi_miras_config_get(c, key, text, sizeof text) != 0) return false;
    *out = strtod(text, NULL);
    return true;
}

/* The op's bias and read for m's components; false where it has none. */
static bool fused_components(const mi_miras *m, mi_mlp_scan_rule *rule)
{
    const mi_miras_config *c = &m->config;
    mi_bias_rule bias = m->bias->rule;
    mi_retention_rule ret = m->retention->rule;
    rule->yaad = bias == MI_BIAS_RULE_YAAD;
    rule->lp = bias == MI_BIAS_RULE_LP;
    if (rule->yaad && !config_real(c, "sign_sharpness", &rule->sign_sharpness)) return false;
    if (rule->lp && (!config_real(c, "p", &rule->lp_p) || !config_real(c, "abs_eps", &rule->lp_eps)))
        return false;
    if (!rule->yaad && !rule->lp && bias != MI_BIAS_RULE_RESIDUAL) return false;
    rule->read = MI_MLP_READ_STATE;
    if (ret == MI_RETENTION_RULE_LQ) {
        char form[32];
        if (mi_miras_config_get(c, "lq_form", form, sizeof form) != 0 ||
            strncmp(form, "frobenius", 9) || !config_real(c, "q", &rule->lq_q) ||
            !config_real(c, "lq_eps", &rule->lq_eps))
            return false;
        rule->read = MI_MLP_READ_LQ;
    } else if (ret == MI_RETENTION_RULE_KL) {
        if (c->kl_scale_t) return false;
        rule->read = MI_MLP_READ_KL;
        rule->kl_scale = c->kl_scale;
    } else if (ret != MI_RETENTION_RULE_DECAY) {
        return false;
    }
    return true;
}

bool mlp_fused_rule(const mi_miras *m, const mi_miras_gates *gt, mi_mlp_scan_rule *rule)
{
    const mi_miras_config *c = &m->config;
    /* the algorithm's step is η's own (no rate) once per token: gd, or momentum
     * with uses_mu (components.h) */
    const mi_algorithm_kind *alg = m->algorithm;
    mi_mlp_scan_rule r = {.momentum = alg->uses_mu, .decay_first = c->decay_first,
                          .chunk = c->chunk, .lag_token = m->retention->lag_token};
    if (c->materialize || m->memory->rule != MI_MEMORY_RULE_MLP || c->mlp_depth != 2 ||
        alg->rate || alg->multistep || !fused_components(m, &r) ||
        (r.momentum && r.read != MI_MLP_READ_STATE))
        return false;
    /* chunks (scan=auto, no decay_first): kl's read, whose composed chunks
     * keep a weight copy a token, and the state read as it is; yaad's bias
     * keeps the rank-one form (the op runs it on its REF loops: Yaad's BENCH
     * training step 606 → 1114 ms), and so does lq's read, which the op's
     * mini-batch rule does not take */
    bool op_chunks = r.read == MI_MLP_READ_KL || (r.read == MI_MLP_READ_STATE && !r.yaad);
    if (c->chunk > 1 && (c->scan != MI_SCAN_AUTO || c->decay_first || !op_chunks)) return false;
    /* one gate per head: [N, T] */
    if (gt->eta->rank != 2 || (m->retention->uses_alpha && gt->alpha->rank != 2) ||
        (r.momentum && gt->mu->rank != 2) || (r.yaad && gt->delta->rank != 2))
        return false;
    *rule = r;
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
