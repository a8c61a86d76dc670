/* The MIRAS block tests' shared sizes and helpers (test_block.c,
 * test_block_config.c). */
#ifndef MIRAS_BLOCK_TEST_UTIL_H
#define MIRAS_BLOCK_TEST_UTIL_H

#include <string.h>

#include "harness.h"

enum { BT = 2, TT = 5, DM = 4, HEADS = 2, RANK = 2 };

static inline double sigm(double z) { return 1 / (1 + exp(-z)); }

/* A block config on top of the given components, gates data-dependent per
 * head at mid-range levels (so the inner loop matters in the checks). */
static inline mi_miras_block_config tiny_config(const char *memory, const char *bias,
                                                const char *retention, const char *algorithm)
{
    mi_miras_config m = mi_miras_config_default();
    m.memory = memory;
    m.bias = bias;
    m.retention = retention;
    m.algorithm = algorithm;
    mi_miras_block_config c = mi_miras_block_config_default(DM, HEADS, &m);
    c.gate_rank = RANK;
    if (c.eta.kind) c.eta.value = strcmp(memory, "mlp") ? 0.5 : 0.2;
    if (c.alpha.kind) c.alpha.value = 0.9;
    if (c.mu.kind) c.mu.value = 0.6;
    return c;
}

static inline void make_block(mi_miras_block *b, const mi_miras_block_config *c, mi_dtype dt,
                              uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    ck_assert_msg(mi_miras_block_init(b, c, dt, &r, test_scope) == 0, "%s", mi_error());
}

static inline mi_tensor *input(uint64_t seed, mi_dtype dt, int64_t B, int64_t T)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    return mi_randn(&r, dt, MI_SHAPE(B, T, DM), 0, 1);
}

#endif
