/* The delta rule's fast forms, used by the recurrence: the exact chunkwise
 * form (WY) and the fused per-token scan. Internal to the models layer. */
#ifndef MIRAS_RECURRENCE_DELTA_H
#define MIRAS_RECURRENCE_DELTA_H

#include "components.h"

/* Why the exact chunkwise form does not apply to m's components, or NULL
 * when it does (the gates' shapes aside: see delta_exact_applies). */
const char *delta_exact_missing(const mi_miras *m);

/* Whether chunks of m run in the exact form, given the chunk's α (NULL: none):
 * 1 yes, 0 no (the mini-batch rule), -1 with a message where form=exact was
 * asked for and does not apply. Chunk 1 is the recurrence itself: 0. */
int delta_exact_choose(const mi_miras *m, const mi_tensor *alpha);

/* One chunk of n write positions (n = tokens · steps) in the exact form:
 * state [N, 1, dv, dk] is replaced by the state after the chunk; q [N, n/steps,
 * dk] (NULL: no read), k [N, n, dk], v [N, n, dv], eta and alpha [N, n] or
 * [N, n, dv] (alpha NULL: α ≡ 1); *y [N, n/steps, dv] read after each token's
 * last write. 0, or -1 with a message. */
int delta_chunk_exact(const mi_miras *m, mi_tensor **state, mi_tensor *q, mi_tensor *k,
                      mi_tensor *v, mi_tensor *eta, mi_tensor *alpha, int steps, mi_tensor **y);

/* A chunk's decays in the layout of (2)–(4) (recurrence_delta.c): the
 * cumulative log decay cum [N, 1, n, 1] and, from it, γʳ, Γʳ, γ_n and γ_n/γ. */
typedef struct delta_wy_decays {
    mi_tensor *cum, *gamma_r, *ratio_r, *gamma_n, *to_end;
} delta_wy_decays;

/* delta_chunk_exact with β given ([N, n] or [N, n, dv]) and the rule's ordering
 * (decay_first: S_t = α_t S_{t−1}(I − β k kᵀ) + β v kᵀ; otherwise
 * S_t = α_t S_{t−1} − β (S_{t−1} k − v) kᵀ), for any caller whose per-token
 * step is such a rule (HOPE's Eq. 28 layers). ks, where the caller has it,
 * is K S_0ᵀ [N, n, dv], the state's reads at the keys (NULL: the product is
 * taken here); dec, α's decays (delta_wy_decays_of) or NULL; beta NULL: β ≡ 1. */
int delta_chunk_wy(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v, mi_tensor *beta,
                   mi_tensor *alpha, bool decay_first, int steps, mi_tensor *ks,
                   const delta_wy_decays *dec, mi_tensor **y);

/* The decays of α [N, n], for a caller that runs several delta rules with
 * one α (HOPE's component layers) and passes them to each delta_chunk_wy
 * (whose dec NULL forms them itself). 0, or -1. */
int delta_wy_decays_of(mi_tensor *alpha, bool decay_first, delta_wy_decays *dec);

/* The same for a channel-wise α [N, n, dk] on the key axis (alpha_on_keys:
 * S_t = S_{t−1} Diag(α_t)(I − β k kᵀ) + β v kᵀ with decay_first, otherwise
 * S_t = S_{t−1} Diag(α_t) − β (S_{t−1} k − v) kᵀ), one write per token, β
 * [N, n] or [N, n, dv] (recurrence_dplr.c). */
int delta_chunk_dplr(mi_tensor **state, mi_tensor *q, mi_tensor *k, mi_tensor *v, mi_tensor *beta,
                     mi_tensor *alpha, bool decay_first, mi_tensor **y);

/* Whether m's chunk-1 recurrence runs as the fused delta_scan op (and which
 * rule), given its gates. */
bool delta_fused_rule(const mi_miras *m, const mi_miras_gates *gt, mi_delta_rule *rule);

/* Whether a sequence runs as the fused delta_scan op (and which rule): at
 * chunk 1 wherever delta_fused_rule says so, and with form=auto at any chunk
 * where the exact form applies and the state has at most
 * DELTA_SCAN_MAX_STATE entries (dk·dv), and wherever a Hebbian rule has
 * channel-wise gates (a Hebbian chunk is the recurrence itself). */
bool delta_fused_choose(const mi_miras *m, const mi_miras_gates *gt, int64_t dk, int64_t dv,
                        mi_delta_rule *rule);

/* The tokens of q, k, v and the gates through delta_scan from the state *a
 * [N, 1, dv, dk], which is replaced by the state after the last token;
 * y [N, T, dv], or NULL with a message. */
mi_tensor *delta_fused_scan(const mi_miras *m, mi_delta_rule rule, mi_tensor **a, mi_tensor *q,
                            mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt);

#endif
