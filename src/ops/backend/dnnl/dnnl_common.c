/* One oneDNN engine and stream, and an LRU cache of primitives. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dnnl_common.h"
#include "tensor/tensor.h"

#define CACHE_SIZE 512

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static bool tried;
static dnnl_entry cache[CACHE_SIZE];
static int used;
static uint64_t clock_tick;
static dnnl_cache_stats stats;

static dnnl_engine_t engine_locked(void)
{
    if (!tried) {
        tried = true;
        if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
        else if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
            dnnl_engine_destroy(engine);
            engine = NULL;
        }
    }
    return engine;
}

dnnl_engine_t miras_dnnl_engine(void)
{
    pthread_mutex_lock(&lock);
    dnnl_engine_t e = engine_locked();
    pthread_mutex_unlock(&lock);
    return e;
}

/* oneDNN 2.6 has no f64 on the CPU: DNNL kernels exist for f32 only. */
dnnl_data_type_t miras_dnnl_type(int dt) { return dt == MI_F32 ? dnnl_f32 : dnnl_data_type_undef; }

int miras_dnnl_memory(dnnl_entry *e, int arg, const dnnl_memory_desc_t *md)
{
    if (e->n_args >= DNNL_MAX_ARGS) return -1;
    dnnl_memory_t m;
    if (dnnl_memory_create(&m, md, engine, DNNL_MEMORY_NONE) != dnnl_success) return -1;
    e->arg[e->n_args] = arg;
    e->mem[e->n_args++] = m;
    return 0;
}

static void entry_destroy(dnnl_entry *e)
{
    for (int i = 0; i < e->n_args; i++) dnnl_memory_destroy(e->mem[i]);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

static dnnl_entry *lookup(const dnnl_key *key, dnnl_build_fn build, void *ctx)
{
    for (int i = 0; i < used; i++)
        if (memcmp(&cache[i].key, key, sizeof *key) == 0) {
            stats.hits++;
            return &cache[i];
        }
    stats.misses++;
    dnnl_entry *e;
    if (used < CACHE_SIZE) e = &cache[used++];
    else { /* evict the least recently used */
        e = &cache[0];
        for (int i = 1; i < CACHE_SIZE; i++)
            if (cache[i].last_use < e->last_use) e = &cache[i];
        entry_destroy(e);
    }
    memset(e, 0, sizeof *e);
    e->key = *key;
    if (build(key, e, ctx) != 0 || !e->prim) {
        entry_destroy(e);
        e->key.kind = -1; /* never matches a real key */
        return NULL;
    }
    return e;
}

int miras_dnnl_run(const dnnl_key *key, dnnl_build_fn build, void *ctx, void *const *ptr)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    if (!engine_locked()) goto out;
    dnnl_entry *e = lookup(key, build, ctx);
    if (!e) goto out;
    e->last_use = ++clock_tick;
    dnnl_exec_arg_t args[DNNL_MAX_ARGS];
    for (int i = 0; i < e->n_args; i++) {
        if (dnnl_memory_set_data_handle(e->mem[i], ptr[i]) != dnnl_success) goto out;
        args[i].arg = e->arg[i];
        args[i].memory = e->mem[i];
    }
    if (dnnl_primitive_execute(e->prim, stream, e->n_args, args) != dnnl_success) goto out;
    rc = dnnl_stream_wait(stream) == dnnl_success ? 0 : -1;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

bool miras_dnnl_avx512(void)
{
    static int isa = -1; /* the effective ISA is fixed once oneDNN has started */
    if (isa < 0) isa = (int)dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

const char *miras_dnnl_isa_name(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
    }
}

dnnl_cache_stats miras_dnnl_cache_stats(void)
{
    pthread_mutex_lock(&lock);
    dnnl_cache_stats s = stats;
    pthread_mutex_unlock(&lock);
    return s;
}
