/* Shared oneDNN 2.6 state for the DNNL backend kernels: one CPU engine, and
 * per thread a stream and a cache of primitives keyed by op and shape. Creating a
 * primitive costs 50–450 µs and a cache hit a few µs (measured), so
 * kernels never create one on the hot path after warm-up. */
#ifndef MIRAS_DNNL_COMMON_H
#define MIRAS_DNNL_COMMON_H

#include <dnnl.h>
#include <stdbool.h>
#include <stdint.h>

#define DNNL_KEY_DIMS 16
#define DNNL_MAX_ARGS 6

typedef struct dnnl_key {
    int kind;                      /* which kernel (a small per-file enum) */
    int dtype;                     /* mi_dtype */
    int64_t dims[DNNL_KEY_DIMS];   /* shapes and integer attributes */
    double f[2];                   /* float attributes (alpha, eps …) */
} dnnl_key;

typedef struct dnnl_entry {
    dnnl_key key;
    dnnl_primitive_t prim;
    int n_args;
    int arg[DNNL_MAX_ARGS];        /* DNNL_ARG_SRC, … */
    dnnl_memory_t mem[DNNL_MAX_ARGS];
    uint64_t last_use;
} dnnl_entry;

/* Fills e->prim, e->n_args, e->arg, e->mem (memories created with
 * DNNL_MEMORY_NONE handles) for key; returns 0 or -1. */
typedef int (*dnnl_build_fn)(const dnnl_key *key, dnnl_entry *e, void *ctx);

dnnl_engine_t miras_dnnl_engine(void); /* NULL if oneDNN cannot start */
/* Runs the cached primitive for key (building it on a miss) with the data
 * pointers ptr[0..n_args) in the order build gave the args. 0 or -1. */
int miras_dnnl_run(const dnnl_key *key, dnnl_build_fn build, void *ctx, void *const *ptr);
/* Whether oneDNN runs its AVX-512 kernels (ONEDNN_MAX_CPU_ISA may hold it
 * to AVX2 on an AVX-512 host): its f32 matmul is brgemm there and the
 * older gemm:jit on AVX2, and its depthwise convolution wants channels in
 * blocks of 16 or of 8. */
bool miras_dnnl_avx512(void);
/* oneDNN's effective instruction set, by its name ("avx512_core", "avx2", ...). */
const char *miras_dnnl_isa_name(void);
/* Helpers for builders. */
dnnl_data_type_t miras_dnnl_type(int mi_dtype);
int miras_dnnl_memory(dnnl_entry *e, int arg, const dnnl_memory_desc_t *md);
/* The primitive-cache counters, for tests and the benchmark. */
typedef struct dnnl_cache_stats {
    uint64_t hits, misses;
} dnnl_cache_stats;
dnnl_cache_stats miras_dnnl_cache_stats(void);

#endif
