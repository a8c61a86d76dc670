/* The MLP memory's fused per-token path (chunk 1 and the one-token step of
 * generation) through the mlp_scan op. Internal to the models layer. */
#ifndef MIRAS_RECURRENCE_MLP_H
#define MIRAS_RECURRENCE_MLP_H

#include "components.h"

/* Whether m's chunk-1 recurrence runs as the fused mlp_scan op, given its
 * gates; the op's rule in *rule. */
bool mlp_fused_rule(const mi_miras *m, const mi_miras_gates *gt, mi_mlp_scan_rule *rule);

/* The tokens of q, k, v and the gates through mlp_scan from the weights
 * a[0] [N, 1, dv, h], a[1] [N, 1, h, dk] (and the momentum s[0], s[1]), which
 * are replaced by the state after the last token; y [N, T, dv], or NULL with
 * a message. */
mi_tensor *mlp_fused_scan(const mi_miras *m, const mi_mlp_scan_rule *rule, mi_tensor **a,
                          mi_tensor **s, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                          const mi_miras_gates *gt);

#endif
