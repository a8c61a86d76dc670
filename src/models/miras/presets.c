/* Presets: the models of the MIRAS table (MIRAS tab:memory-perspective-all,
 * §"MIRAS" and §"MIRAS's Variants") as the four components plus how each
 * gate is parameterised. Every rule below is written with the memory
 * M ∈ R^{dv×dk} acting on keys, M(k) = M k, so a write is v kᵀ and the
 * table's (I − β k kᵀ) M_{t-1} reads M_{t-1}(I − β k kᵀ) here; y_t = M_t q_t
 * (read after write). tests/test_presets.c checks each preset against its
 * rule written out independently.
 *
 * Gates: η (inner learning rate, the table's β for the delta-rule family),
 * α (the kept fraction), μ (momentum), δ (Yaad's threshold). CONST is a
 * fixed value; HEAD is data-dependent, one value per head and token [N,T];
 * CHANNEL is data-dependent per value channel [N,T,dv] (rows of M); SLOPES
 * (α only) is fixed per head, Lightning Attention's exp(−2^(−value·(h+1)/H)). For
 * data-dependent gates `value` is the initial level the layer block's
 * projection biases start at. The delta-rule family starts at the papers'
 * β = σ(0) = 0.5, which is stable at any length for unit keys since
 * ‖I − β k kᵀ‖ ≤ 1. The deep (MLP) memories start at an inner rate of 0.02
 * and a decay of 0.002, except where a measured training run chose otherwise
 * (the comment at the preset says which run): their inner step is not
 * self-limiting (the memory's LayerNorm amplifies it by 1/std of its input, and
 * a chunk's b gradients are all taken at one state), so a rate that is too
 * large makes the inner loop chaotic and the outer gradients explode.
 *
 * Choices where the table is loose (documented in the test too):
 * - retnet is the matrix form (Lightning Attention's row of the table,
 *   RetNet's recurrent form S_t = γ S_{t-1} + v kᵀ) with one constant γ; the
 *   table lists RetNet as a vector memory. RetNet's per-head γ_h = 1 − 2^(−5−h)
 *   are not one constant: the preset takes head 0's, γ = 1 − 2^−5.
 * - gla and rwkv7 decay the key dimension of M (M_{t-1} Diag(α_t) in this
 *   orientation), as GLA and RWKV-7 do; the MIRAS table writes the decay on
 *   the value rows (Diag(α_t) M_{t-1} with M = Σ v kᵀ), which
 *   `alpha_on_keys=false` gives (a channel gate there is per value channel).
 *   Measured again (docs/quality.md): small MQAR (as below, 2000 steps),
 *   seeds 1–3, value rows gla 0.993, 0.890, 0.992 and rwkv7 0.789, 0.679,
 *   0.942; key dimension gla 0.984, 0.913, 0.667 and rwkv7 0.862, 0.960,
 *   0.653, a spread larger than the difference (the same key-side models
 *   with another f32 rounding, seed 1: gla 0.693, rwkv7 0.989); the
 *   200-step byte LM, rwkv7 seeds 1 and 2: 2.076, 2.064 with the value
 *   rows, 2.088, 2.073 with the key dimension; gla (seed 1) 2.151 and 2.152.
 *   The default follows the papers; the table's form stays an option.
 * - hgrn2 decays the key dimension, as HGRN2
 *   does (alpha_on_keys): its key is 1 − α_t, so key channel j is written
 *   with weight 1 − α_{t,j} exactly where it forgets by α_{t,j} (a per-slot
 *   moving average). The table's Diag(α_t) M_{t-1} would make writing key
 *   channel j erase value row j of every stored pair. MQAR (vocabulary 64,
 *   32 tokens, 4 pairs, d 32, 2 layers, 2 heads, 2000 steps, seeds 1 and 2):
 *   that form 0.249 and 0.263; the key-side decay with the block's conv on
 *   α's projection 0.939 and 0.962 (at 1000 steps either change alone: 0.25,
 *   0.43).
 * - rwkv7 with decay_first gives M_{t-1} Diag(α_t)(I − β k kᵀ) + β v kᵀ;
 *   RWKV-7 itself has M_{t-1}(Diag(w_t) − κ̂ (a_t ⊙ κ̂)ᵀ) + v kᵀ: the same
 *   key-side decay, but the erase not decayed, a channel-wise in-context
 *   rate and separate removal and replacement keys. None of that is in the
 *   table.
 * - deltaproduct takes one α per token: the layer block gives α at each
 *   token's first step and 1 at the other steps (the test does so).
 * - longhorn's β is per value channel (Longhorn's β_t ∈ R^dv, the table's
 *   β_t/(1 + β_t kᵀk) ⊙ x_t): each row of M takes its own implicit step.
 * - ttt-linear is DeltaNet's rule with TTT's learning rate (the table gives
 *   both the same components); TTT's inner LayerNorm and mini-batches are
 *   not modelled.
 * - the lattice presets need keys and queries of dimension config slots (m,
 *   default 64): a layer block must size its q/k projections to it, or set
 *   slots to its head dimension.
 * Every preset has chunk 1 (the exact recurrence); the layer block sets b. */
#include <pthread.h>
#include <string.h>

#include "components.h"
#include "registry.h"

#define CONST(x) {MI_GATE_CONST, (x), 0}
#define HEAD(x) {MI_GATE_HEAD, (x), 0}
#define CHANNEL(x) {MI_GATE_CHANNEL, (x), 0}
#define UNUSED {MI_GATE_UNUSED, 0, 0}
#define SLOPES(x) {MI_GATE_SLOPES, (x), 0}

#define LR_DEEP 0.02     /* deep memories' inner learning rate */
#define KEEP 0.998       /* kept fraction α, i.e. decay 0.002 */
#define BETA 0.5         /* delta-rule writing strength, σ(0) */

static const mi_preset presets[] = {
    /* Linear attention (Katharopoulos et al.; MIRAS table "LA"): dot bias, no
     * retention, η ≡ 1. y = (Q Kᵀ ⊙ causal mask) V. */
    {.name = "linear-attention", .update = "M_t = M_{t-1} + v_t k_t^T",
     .config = "memory=matrix bias=dot retention=none algorithm=gd",
     .eta = CONST(1), .alpha = UNUSED, .mu = UNUSED, .delta = UNUSED},
    /* RetNet (MIRAS §"RNNs with Hebbian Rule", M_t = α M_{t-1} + v kᵀ): the
     * paper calls α a learnable parameter; here it is a constant gate, not
     * learned, as RetNet's own decay γ is a fixed hyperparameter (head 0's,
     * 1 − 2^−5; see the top of the file). */
    {.name = "retnet", .update = "M_t = gamma M_{t-1} + v_t k_t^T",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd",
     .eta = CONST(1), .alpha = CONST(0.96875), .mu = UNUSED, .delta = UNUSED},
    /* Mamba2 (MIRAS table "Mamba"): a data-dependent scalar decay per head. */
    {.name = "mamba2", .update = "M_t = alpha_t M_{t-1} + v_t k_t^T",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd",
     .eta = CONST(1), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* GLA (MIRAS table): a data-dependent decay per key channel, as GLA
     * has it (see above); `alpha_on_keys=false` decays the value rows. */
    {.name = "gla", .update = "M_t = M_{t-1} Diag(alpha_t) + v_t k_t^T",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd alpha_on_keys=true",
     .eta = CONST(1), .alpha = CHANNEL(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* HGRN2 (MIRAS table): GLA whose key is 1 − α_t (needs dk = dv), the
     * decay on the key axis as in HGRN2 (see above). The bias is dot, not
     * the ℓ1 that the MIRAS table and the spec's table list: the table's
     * update, Diag(α_t) M_{t-1} + v_t (1 − α_t)ᵀ, writes v kᵀ whatever the
     * state, the step of −⟨M k, v⟩, while an ℓ1 bias ‖M k − v‖₁ would step
     * by Sign(M k − v) kᵀ; where table and formula disagree the formula
     * wins. The decay also sets the
     * write strength, so it starts lower (0.9). The output gate is σ(x W_g)
     * ∈ (0, 1) (`out_gate=sigmoid`), not the block's SiLU(x W_g), whose sign
     * flips let a query scramble the recalled value: small MQAR (as above,
     * 2000 steps) seeds 1–3 with SiLU 0.939, 0.962, 0.957, with σ 0.995,
     * 0.986, 0.993; the byte LM (d 128, 200 steps) 1.957 with SiLU, 2.007 with
     * σ. HGRN2's own output, the normalised read alone (`out_gate=false`,
     * RMSNorm(o) W_out), gives 0.987, 0.989, 0.996 and LM 2.066. */
    {.name = "hgrn2", .update = "M_t = M_{t-1} Diag(alpha_t) + v_t (1 - alpha_t)^T",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd alpha_on_keys=true",
     .eta = CONST(1), .alpha = CHANNEL(0.9), .mu = UNUSED, .delta = UNUSED,
     .key_is_one_minus_alpha = true, .out_gate_sigmoid = true},
    /* DeltaNet (MIRAS §"RNNs with Delta Rule"): ℓ2 bias, GD with η = β_t. */
    {.name = "deltanet", .update = "M_t = M_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T",
     .config = "memory=matrix bias=l2 retention=none algorithm=gd",
     .eta = HEAD(BETA), .alpha = UNUSED, .mu = UNUSED, .delta = UNUSED},
    /* Gated DeltaNet: the gradient is taken at α_t M_{t-1} (decay_first). */
    {.name = "gated-deltanet",
     .update = "M_t = alpha_t M_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T",
     .config = "memory=matrix bias=l2 retention=l2 algorithm=gd decay_first=true",
     .eta = HEAD(BETA), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* RWKV-7: the delta rule with a decay per key channel (see above);
     * `alpha_on_keys=false` decays the value rows. */
    {.name = "rwkv7",
     .update = "M_t = M_{t-1} Diag(alpha_t)(I - beta_t k_t k_t^T) + beta_t v_t k_t^T",
     .config = "memory=matrix bias=l2 retention=l2 algorithm=gd decay_first=true "
               "alpha_on_keys=true",
     .eta = HEAD(BETA), .alpha = CHANNEL(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* DeltaProduct (MIRAS table, "MGD"): n = 2 delta steps per token; k, v, β
     * have n positions per token, α is given at the first one. */
    {.name = "deltaproduct",
     .update = "M_t = alpha_t M_{t-1} prod_{i=1..n}(I - beta_{t,i} k_{t,i} k_{t,i}^T) + "
               "sum_{j=1..n} beta_{t,j} v_{t,j} k_{t,j}^T prod_{i=j+1..n}(I - beta_{t,i} "
               "k_{t,i} k_{t,i}^T)",
     .config = "memory=matrix bias=l2 retention=l2 algorithm=multistep decay_first=true",
     .eta = HEAD(BETA), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* Longhorn (MIRAS table): implicit GD, the closed-form proximal step;
     * row i of M takes eps_i = β_i / (1 + β_i kᵀk). */
    {.name = "longhorn",
     .update = "M_t = M_{t-1} - Diag(eps_t)(M_{t-1} k_t - v_t) k_t^T, "
               "eps_t = beta_t / (1 + beta_t k_t^T k_t)",
     .config = "memory=matrix bias=l2 retention=none algorithm=implicit",
     .eta = CHANNEL(BETA), .alpha = UNUSED, .mu = UNUSED, .delta = UNUSED},
    /* TTT-Linear (MIRAS table): one GD step on ½‖M k − v‖². */
    {.name = "ttt-linear", .update = "M_t = M_{t-1} - eta_t (M_{t-1} k_t - v_t) k_t^T",
     .config = "memory=matrix bias=l2 retention=none algorithm=gd",
     .eta = HEAD(BETA), .alpha = UNUSED, .mu = UNUSED, .delta = UNUSED},
    /* TTT-MLP (MIRAS table): the 2-layer MLP memory, plain GD. η starts at
     * 0.03 and is bounded by 0.06 (η_t = 0.06 σ(·)): with no momentum and no
     * forget gate, small MQAR (vocabulary 64, 32 tokens, 4 pairs, 2000
     * steps, seeds 1/2) stayed on its plateau at η 0.02 unbounded (0.288)
     * and reaches 0.9995/0.998 here; the bound keeps the byte LM (d 128, 200
     * steps) at 2.151, where η 0.035 bounded by 0.07 gave 2.272. */
    {.name = "ttt-mlp", .update = "W_t = W_{t-1} - eta_t grad l2(W_{t-1}; k_t, v_t)",
     .config = "memory=mlp bias=l2 retention=none algorithm=gd",
     .eta = {MI_GATE_HEAD, 0.03, 0.06}, .alpha = UNUSED, .mu = UNUSED, .delta = UNUSED},
    /* Titans-LMM (MIRAS table; Titans' "past surprise"): GD with momentum
     * (the surprise S) and the ℓ2 forget gate. η 0.005 and μ 0.5 at init: on
     * the byte LM (d 128, 4 layers, T 256, batch 16, chunk 16, 200 AdamW steps
     * at 1e-3) η 0.02/μ 0.9 reached 2.486 nats/byte with pre-clip gradient
     * norms spiking to 87, μ 0.5 2.306, η 0.01/μ 0.5 2.184, η 0.005/μ 0.9
     * 2.358, no momentum 2.167, η 0.005/μ 0.5 2.089 (attention 2.079). */
    {.name = "titans",
     .update = "S_t = mu_t S_{t-1} - eta_t grad l2(W_{t-1}; k_t, v_t), "
               "W_t = alpha_t W_{t-1} + S_t",
     .config = "memory=mlp bias=l2 retention=l2 algorithm=momentum",
     .eta = HEAD(0.005), .alpha = HEAD(KEEP), .mu = HEAD(0.5), .delta = UNUSED},
    /* Moneta, (p, q) = (3, 4) (MIRAS eq:q-norm, "MIRAS's Variants"): ℓp
     * bias with smooth sign and abs, ℓq normalisation in the Frobenius form
     * (lq_form=frobenius; docs/models.md).
     * η 0.007 at init, bounded by 0.014, and a decay of at most 0.2 per token
     * (α ∈ (0.8, 1)). Byte LM
     * (200 steps, chunk 16) / small MQAR (2000 steps, chunk 8): with A_0 = W_0
     * and η 0.02, α ∈ (0, 1), 2.746 / 0.863 (gradient norms 20–300 on the
     * LM); with A_0 read as W_0 (retention/lq.c) and α ∈ (0.8, 1): η 0.02
     * 2.147 / 0.915, η 0.05 2.800 / 0.999, η 0.01 2.103 / 1.000, η 0.01
     * bounded by 0.02 2.107 / 0.999, η 0.007 2.072 / 1.000 (seed 2: 0.773),
     * η 0.007 bounded by 0.014 2.081 / 1.000 (seed 2: 0.984). (Before
     * lq_eps, η 0.05 with α ∈ (0, 1) went NaN on MQAR: α → 0 emptied A.) */
    {.name = "moneta",
     .update = "A_t = alpha_t A_{t-1} - eta_t grad lp(W_{t-1}; k_t, v_t), "
               "W_t = A_t / ||A_t||^((q-2)/q), p = 3, q = 4",
     .config = "memory=mlp bias=lp retention=lq algorithm=gd",
     .eta = {MI_GATE_HEAD, 0.007, 0.014}, .alpha = {MI_GATE_HEAD, KEEP, 0.2}, .mu = UNUSED, .delta = UNUSED},
    /* Yaad (MIRAS eq:huber-loss and §"MIRAS's Variants"): ℓ2 step when the
     * error is within δ_t, δ_t times an ℓ1 step otherwise; ℓ2 forget gate. */
    {.name = "yaad",
     .update = "W_t = alpha_t W_{t-1} - eta_t (grad l2 if ||M(k_t) - v_t|| <= delta_t, "
               "else delta_t grad l1)(W_{t-1}; k_t, v_t)",
     .config = "memory=mlp bias=yaad retention=l2 algorithm=gd",
     .eta = HEAD(LR_DEEP), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = HEAD(1)},
    /* Memora (MIRAS eq:xmodel, "MIRAS's Variants"): KL retention, the
     * weights on a scaled simplex, the state kept in the log domain. The
     * simplex scale c = 16 and η 0.005: with c = 1 every row of an MLP weight
     * is a near-uniform average (entries ≈ 1/row length), the hidden units
     * nearly equal, and the memory's LayerNorm divides by an output spread
     * near 0. On the small MQAR (2000 steps, chunk 8) c 1, η 0.02: 0.208; at
     * 1000 steps c 16, η 0.02: 0.497, c 64, η 0.02: 0.864, c 16, η 0.1: 0.102,
     * c 64, η 0.005: 0.152, c 256, η 0.005: diverged; c 16, η 0.005: 0.912,
     * and 0.990 at 2000 steps. The log-domain step scales like η/c (the
     * gradient of the LayerNorm'd MLP in W falls as 1/c). A learned c
     * (kl_scale_learn), channel-wise η and spread initial rows (kl_init_sd)
     * are options, not defaults: the last, and a larger c, help the small LM
     * but drop MQAR (kl_init_sd 0.5: 0.131 at 1000 steps; c 32: 0.553 at
     * 2000), and channel-wise η makes MQAR's inner loop chaotic (0.042). */
    {.name = "memora",
     .update = "W_t = c Softmax(alpha_t log W_{t-1} - eta_t grad l2(W_{t-1}; k_t, v_t))",
     .config = "memory=mlp bias=l2 retention=kl algorithm=gd kl_scale=16",
     .eta = HEAD(0.005), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* Lattice (Lattice §2, the orthogonal state recurrence, Eq. 10): m slots
     * s_i (memory "lattice", S ∈ R^{d×m} stored as Sᵀ, dk = m = config slots),
     * read y_t = φ(S_t) q_t; each slot takes only the part of the new
     * information orthogonal to it, then is projected back onto the unit
     * sphere (Eq. 11), after the forget gate α_t (Eq. 15): Table 2's final
     * configuration. P(s) = I − s sᵀ/‖s‖², P_C(s) = s/‖s‖ per slot, η_t is the
     * paper's γ_t, α_t its μ_t. The writing strength starts at the delta-rule
     * family's σ(0) = 0.5 (the step is orthogonal and projected, so it stays
     * bounded); the forget gate starts near 1 (KEEP). Decoding form, Eq. 4.
     * No output gate (the read is normalised and projected, RMSNorm(o)
     * W_out; `out_gate=true` gives the block's SiLU(x W_g) back): at init
     * that gate is a random per-token factor in (−0.28, ∞) on each channel
     * of the read, and small MQAR (vocabulary 64, 32 tokens, 4 pairs, 2000
     * steps) seeds 1–3 reached 0.481, 0.958, 0.645 with it, 0.996, 0.997,
     * 0.992 without; the byte LM (d 128, 200 steps) 2.114 with it, 2.134
     * without. */
    {.name = "lattice-dec",
     .update = "S_t = P_C(alpha_t S_{t-1} - eta_t e_t^T x_1 [P(s_1)/||s_1||, ..., "
               "P(s_m)/||s_m||] . k_t^T), e_t = phi(S_{t-1}) k_t - v_t, y_t = phi(S_t) q_t",
     .config = "memory=lattice bias=lattice-dec retention=sphere-forget algorithm=gd",
     .eta = HEAD(BETA), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED,
     .no_out_gate = true},
    /* Encoding form (Eq. 6–7): the code φ(S)ᵀ v_t regresses on k_t. */
    {.name = "lattice-enc",
     .update = "S_t = P_C(alpha_t S_{t-1} - eta_t v_t^T x_1 [P(s_1)/||s_1||, ..., "
               "P(s_m)/||s_m||] . e_t^T), e_t = phi(S_{t-1})^T v_t - k_t, y_t = phi(S_t) q_t",
     .config = "memory=lattice bias=lattice-enc retention=sphere-forget algorithm=gd",
     .eta = HEAD(BETA), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* Similarity form (Eq. 8–9): maximise ⟨φ(S)ᵀ v_t, k_t⟩. */
    {.name = "lattice-sim",
     .update = "S_t = P_C(alpha_t S_{t-1} + eta_t v_t^T x_1 [P(s_1)/||s_1||, ..., "
               "P(s_m)/||s_m||] . k_t^T), y_t = phi(S_t) q_t",
     .config = "memory=lattice bias=lattice-sim retention=sphere-forget algorithm=gd",
     .eta = HEAD(BETA), .alpha = HEAD(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* Lightning Attention (MIRAS table; MIRAS §"RNNs with Hebbian Rule": α a
     * constant, n > 1): a fixed decay per head, head h of H keeping
     * γ_h = exp(−2^(−8(h+1)/H)) (Lightning Attention's decays, ALiBi's slopes
     * m_h = 2^(−8(h+1)/H) for H a power of two; other H take the same formula,
     * not ALiBi's interleaving), not learned. H = 4: 0.779, 0.939, 0.985, 0.996. */
    {.name = "lightning", .update = "M_t = gamma_h M_{t-1} + v_t k_t^T, gamma_h = exp(-2^(-8(h+1)/H))",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd",
     .eta = CONST(1), .alpha = SLOPES(8), .mu = UNUSED, .delta = UNUSED},
    /* DFW (MIRAS table): M_t = (β_t α_tᵀ) ⊙ M_{t-1} + v_t k_tᵀ, the
     * data-dependent decay on both axes: β_t ∈ R^dv on the value rows and α_t
     * ∈ R^dk on the key columns (alpha_both_sides: the α gate has dv + dk
     * entries, β first), Diag(β_t) M_{t-1} Diag(α_t). The implementation
     * spec's table lists DFW with an ℓ2 bias, no retention and implicit GD;
     * this preset follows the MIRAS paper's update (dot bias, ℓ2 retention,
     * GD). Each side starts at KEEP. */
    {.name = "dfw", .update = "M_t = (beta_t alpha_t^T) . M_{t-1} + v_t k_t^T",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd alpha_both_sides=true",
     .eta = CONST(1), .alpha = CHANNEL(KEEP), .mu = UNUSED, .delta = UNUSED},
    /* Mamba (MIRAS table, "Mamba"; the selective SSM of "Mamba: Linear-Time
     * Sequence Modeling with Selective State Spaces", §2–3): per head a
     * matrix memory of dv channels × dk states, M_t = Diag(ᾱ_t) M_{t-1} +
     * Δ_t ⊙ x_t B_tᵀ, y_t = M_t C_t: v = x, k = B, q = C; the step Δ_t is η_t,
     * per value channel (CHANNEL), and the decay its zero-order hold
     * ᾱ_t = exp(Δ_t A) with A = −exp(a) learned per head and channel
     * (alpha_zoh), starting as S4D-real's −(d + 1) scaled so channel 0 keeps
     * 0.998 at Δ = 0.1: small MQAR (as hgrn2's above) seeds 1 and 2 0.994,
     * 0.968, with 0.99 0.822, 0.981, with 0.995 0.682, 0.792; the byte LM
     * (d 128, 200 steps) 2.106, 0.995 2.029, 0.99 1.989 (recall wants the longer
     * memory, as for hgrn2's gate). The implementation spec's table calls
     * Mamba's memory a vector; the MIRAS paper writes it as this matrix.
     * Not modelled: Mamba's A
     * per channel and state (here per channel: the decay is a row decay),
     * softplus Δ (here Δ = σ(·) ∈ (0, 1)), the skip D x; B, C and x take the
     * block's convs and ℓ2 norms, z is the block's SiLU output gate. */
    {.name = "mamba", .update = "M_t = Diag(exp(Delta_t A)) M_{t-1} + (Delta_t . x_t) B_t^T",
     .config = "memory=matrix bias=dot retention=l2 algorithm=gd",
     .eta = CHANNEL(0.1), .alpha = CHANNEL(KEEP), .mu = UNUSED, .delta = UNUSED,
     .alpha_zoh = true},
};

#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

int mi_preset_config(const mi_preset *p, mi_miras_config *out)
{
    *out = mi_miras_config_default();
    if (!p || !p->config) return mi_error_set("preset: no config"), -1;
    for (const char *a = p->config; *a;) {
        size_t n = strcspn(a, " ");
        char one[64];
        if (n >= sizeof one) return mi_error_set("preset %s: '%.*s' is too long", p->name, (int)n, a), -1;
        memcpy(one, a, n);
        one[n] = 0;
        if (n && mi_miras_config_set(out, one) != 0) return -1;
        a += n + (a[n] == ' ');
    }
    return 0;
}

/* The preset table: the built-ins above, then the user's (components.h). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reg_table table = {.what = "preset"};

/* A preset must name itself and give a config that parses (its components
 * registered); the check takes the component tables' lock, never this one. */
static int preset_add_locked(const mi_preset *p)
{
    if (!p || !p->name || !*p->name) return mi_error_set("register: a preset needs a name"), -1;
    if (!p->config) return mi_error_set("register: preset '%s' needs a config", p->name), -1;
    mi_miras_config c;
    if (mi_preset_config(p, &c) != 0) {
        mi_error_prefix("register");
        return -1;
    }
    return reg_table_add(&table, p->name, p);
}

/* The built-ins, once after every reset; under the lock. */
static void builtins_locked(void)
{
    if (table.ready) return;
    for (int i = 0; i < N_PRESETS; i++) (void)preset_add_locked(&presets[i]);
    table.ready = true;
}

/* Every entry point: the plugins MIRAS_PLUGINS names and the built-ins are
 * in the table before the first look-up. */
static void presets_enter(void)
{
    registry_plugins_env();
    pthread_mutex_lock(&lock);
    builtins_locked();
}

int mi_register_preset(const mi_preset *p)
{
    presets_enter();
    int rc = preset_add_locked(p);
    pthread_mutex_unlock(&lock);
    return rc;
}

const mi_preset *mi_preset_at(int i)
{
    presets_enter();
    const mi_preset *p = reg_table_at(&table, i);
    pthread_mutex_unlock(&lock);
    return p;
}

const mi_preset *mi_preset_find(const char *name)
{
    presets_enter();
    const mi_preset *p = reg_table_find(&table, name);
    pthread_mutex_unlock(&lock);
    return p;
}

void presets_clear(void)
{
    pthread_mutex_lock(&lock);
    reg_table_clear(&table);
    pthread_mutex_unlock(&lock);
}

int presets_count(void)
{
    pthread_mutex_lock(&lock);
    builtins_locked();
    int n = table.n;
    pthread_mutex_unlock(&lock);
    return n;
}

void presets_truncate(int n)
{
    pthread_mutex_lock(&lock);
    reg_table_truncate(&table, n);
    pthread_mutex_unlock(&lock);
}
