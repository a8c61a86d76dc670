/* The exact per-token rule (chunk 1) of a combination that no fused kernel
 * covers, and the chunked rule (b > 1), as the body of mi_scan. Internal to
 * the models layer. */
#ifndef MIRAS_RECURRENCE_SCAN_H
#define MIRAS_RECURRENCE_SCAN_H

#include "components.h"
#include "recurrence_run.h"

/* One token of the exact per-token rule by the composed ops (recurrence.c):
 * q [N, 1, dk], k [N, S, dk], v [N, S, dv], gates [N, S(, units)] (S = the
 * writes per token) → y [N, 1, dv]; st's a, s and eta move to the state after
 * the token (st->tokens is the caller's). q NULL: the writes alone (the
 * result is then st->a[0]). NULL with a message. */
mi_tensor *miras_token(const mi_miras *m, mi_miras_state *st, mi_tensor *q, mi_tensor *k,
                       mi_tensor *v, const mi_miras_gates *gates);

/* Whether mi_miras_forward runs m's chunk-1 recurrence through mi_scan once
 * the fused kernels have declined it: chunk 1, scan=auto, not materialize. */
bool miras_scan_applies(const mi_miras *m);

/* The T tokens of q [N, T, dk], k, v [N, S·T, …] and the gates through
 * miras_token as mi_scan's body, from the state a, s (momentum; [N, 1, …]
 * each, as init_run leaves them), which are replaced by the state after the
 * last token; y [N, T, dv], or NULL with a message. */
mi_tensor *miras_scan_forward(const mi_miras *m, int nw, mi_tensor **a, mi_tensor **s,
                              mi_tensor *q, mi_tensor *k, mi_tensor *v, const mi_miras_gates *gt);

/* Whether mi_miras_forward runs the chunked rule (b > 1) of r's memory over
 * `tokens` tokens (more than one chunk) with gates gt through mi_scan, one
 * chunk a body: scan=mi_scan; scan=auto where a chunk makes a state per token
 * (neither the rank-one form nor the exact form takes it), or once the
 * states the chunks start from come to MIRAS_CHUNK_SCAN_BYTES (the recorded
 * chunks would keep several times that; below it the memory saved is small
 * and the chunks' second forward is not); never with materialize. */
#define MIRAS_CHUNK_SCAN_BYTES (16.0 * (1 << 20))
bool miras_chunk_scan_applies(const run *r, int64_t tokens, const mi_miras_gates *gt);

/* The tokens of q [N, T, dk], k, v [N, S·T, …] and the gates chunk by chunk
 * through run_tokens as mi_scan's body, from r's state, moved to the state
 * after the last token; y [N, T, dv], or NULL with a message. */
mi_tensor *miras_chunk_scan_forward(run *r, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                                    const mi_miras_gates *gt);

#endif
