/* Generation from a language model: greedy or sampled (temperature, top-k),
 * for miras-sample and miras-eval's needle-in-a-haystack scoring. */
#ifndef MIRAS_TOOLS_GENERATE_H
#define MIRAS_TOOLS_GENERATE_H

#include "miras.h"

typedef struct sampler {
    double temperature;  /* 0: greedy (the first maximum) */
    int64_t top_k;       /* 0: the whole vocabulary */
    mi_rng rng;
} sampler;

/* A token from one row of logits (f32 or f64, V entries): softmax(logits /
 * temperature) over the top_k largest, drawn with one uniform from rng. */
int64_t sample_token(const mi_tensor *logits, int64_t row, sampler *s);

/* Continues B sequences: seq is i64 [B, P + n] row-major with the first P
 * tokens of each row given; writes the n next ones. on_token (may be NULL)
 * sees each new token as it is made. 0, or -1 with the library's message. */
int generate(const mi_lm *lm, int64_t *seq, int64_t B, int64_t P, int64_t n, sampler *s,
             void (*on_token)(int64_t row, int64_t token, void *ctx), void *ctx);

#endif
