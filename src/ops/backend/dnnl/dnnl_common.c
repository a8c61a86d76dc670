/* One oneDNN engine, and per thread a stream and an LRU cache of primitives. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_common.h"
#include "tensor/tensor.h"

#define CACHE_SIZE 512

/* The engine is made once (pthread_once) and only read after. */
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static uint64_t hits, misses; /* atomic */

/* Each thread has its own stream and its own cache of primitives, with the
 * memory objects their data pointers are set on: two threads (mi_scan's row
 * parts) run the same shapes at once, and a shared entry would serialize
 * them. A thread's first miss on a shape oneDNN has built for another thread
 * is a hit in oneDNN's own primitive cache. */
typedef struct thread_cache {
    dnnl_stream_t stream;
    dnnl_entry entry[CACHE_SIZE];
    int used;
    uint64_t clock_tick;
} thread_cache;
static _Thread_local thread_cache *mine;
/* A thread's cache goes with the thread: the key's destructor frees it. */
static pthread_key_t cache_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static bool key_made;

static void engine_make(void)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

dnnl_engine_t miras_dnnl_engine(void)
{
    pthread_once(&engine_once, engine_make);
    return engine;
}

static void entry_destroy(dnnl_entry *e);

static void cache_free(void *p)
{
    thread_cache *c = p;
    for (int i = 0; i < c->used; i++) entry_destroy(&c->entry[i]);
    dnnl_stream_destroy(c->stream);
    free(c);
}

static void key_make(void) { key_made = pthread_key_create(&cache_key, cache_free) == 0; }

/* This thread's cache, made (with its stream) on first use; NULL when that fails. */
static thread_cache *cache_of_thread(dnnl_engine_t eng)
{
    if (mine) return mine;
    thread_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (dnnl_stream_create(&c->stream, eng, dnnl_stream_default_flags) != dnnl_success) {
        free(c);
        return NULL;
    }
    pthread_once(&key_once, key_make);
    if (key_made) pthread_setspecific(cache_key, c);
    return mine = c;
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

static dnnl_entry *lookup(thread_cache *c, const dnnl_key *key, dnnl_build_fn build, void *ctx)
{
    for (int i = 0; i < c->used; i++)
        if (memcmp(&c->entry[i].key, key, sizeof *key) == 0) {
            __atomic_add_fetch(&hits, 1, __ATOMIC_RELAXED);
            return &c->entry[i];
        }
    __atomic_add_fetch(&misses, 1, __ATOMIC_RELAXED);
    dnnl_entry *e;
    if (c->used < CACHE_SIZE) e = &c->entry[c->used++];
    else { /* evict the least recently used */
        e = &c->entry[0];
        for (int i = 1; i < CACHE_SIZE; i++)
            if (c->entry[i].last_use < e->last_use) e = &c->entry[i];
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
    dnnl_engine_t eng = miras_dnnl_engine();
    thread_cache *c = eng ? cache_of_thread(eng) : NULL;
    dnnl_entry *e = c ? lookup(c, key, build, ctx) : NULL;
    if (!e) return -1;
    e->last_use = ++c->clock_tick;
    dnnl_exec_arg_t args[DNNL_MAX_ARGS];
    for (int i = 0; i < e->n_args; i++) {
        if (dnnl_memory_set_data_handle(e->mem[i], ptr[i]) != dnnl_success) return -1;
        args[i].arg = e->arg[i];
        args[i].memory = e->mem[i];
    }
    if (dnnl_primitive_execute(e->prim, c->stream, e->n_args, args) != dnnl_success) return -1;
    return dnnl_stream_wait(c->stream) == dnnl_success ? 0 : -1;
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
    return (dnnl_cache_stats){__atomic_load_n(&hits, __ATOMIC_RELAXED),
                              __atomic_load_n(&misses, __ATOMIC_RELAXED)};
}
