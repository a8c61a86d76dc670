/* Scopes are bump allocators over a list of blocks. Reset keeps the memory:
 * it rewinds every block and the next cycle fills them again in the order
 * they were made, so an identical cycle (a training step) fits the same
 * blocks the same way, on pages the first cycle already touched, without
 * asking the system for anything. A piece given back before the reset (mi_scope_release:
 * backward returns what no later step reads) goes on a free list of its exact
 * size, and the next request of that size takes it: a step's shapes repeat, so
 * most requests in backward are served by pieces forward or backward freed.
 * A sub-scope (mi_scope_sub) is one whose header, blocks and free table are
 * allocations of its parent: nothing of it goes back to the system but with
 * the parent, and a parent with subs takes a spin lock around its own
 * allocations, since the subs of several threads grow from it at once. */
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "tensor.h"

#if defined(__SANITIZE_ADDRESS__)
#define MI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MI_ASAN 1
#endif
#endif
#ifdef MI_ASAN
#include <sanitizer/asan_interface.h>
/* a released piece is poisoned until it is handed out again: a read of a
 * tensor backward has released is an error under the sanitizers */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ALIGN 64
#define MIN_BLOCK ((size_t)1 << 20)
#define MAX_GROWN ((size_t)1 << 30)
#define MAX_GROWN_SUB ((size_t)64 << 20) /* a sub's blocks: less of its parent left unused */
#define MAX_DEPTH 32
/* Blocks of at least this size are aligned to it and asked to be backed by
 * transparent huge pages: a training step's scope is gigabytes touched once,
 * and with 4 KiB pages the first step spends more time in page faults than
 * in arithmetic. */
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct block {
    struct block *next;
    size_t size, used;
    unsigned char *base; /* ALIGN-aligned */
} block;

/* The free pieces of one size: a list threaded through the pieces. The
 * table is open-addressed on the size (a power-of-two capacity). */
typedef struct free_list {
    size_t size; /* 0: an empty slot */
    void *head;
} free_list;

struct mi_scope {
    char name[32];
    mi_scope *parent; /* a sub's, or NULL */
    bool shared;      /* has subs (until its reset): allocations take the lock */
    char lock;
    block *first, *cur; /* the blocks in the order they were made; the one being filled */
    size_t reserved, used, system_allocs;
    free_list *free;
    size_t free_cap, free_sizes, released, reused;
};

static _Thread_local mi_scope *stack[MAX_DEPTH];
/* the bytes all scopes hold from the system, and the most since the last reset of the peak */
static size_t system_bytes, system_peak;

static void system_add(size_t n)
{
    size_t now = __atomic_add_fetch(&system_bytes, n, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&system_peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&system_peak, &peak, now, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

size_t mi_scope_system_bytes(void) { return __atomic_load_n(&system_bytes, __ATOMIC_RELAXED); }
size_t mi_scope_system_peak(void) { return __atomic_load_n(&system_peak, __ATOMIC_RELAXED); }
void mi_scope_system_peak_reset(void)
{
    __atomic_store_n(&system_peak, mi_scope_system_bytes(), __ATOMIC_RELAXED);
}
static _Thread_local int depth;

static void lock(mi_scope *s)
{
    while (__atomic_test_and_set(&s->lock, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED)) {
        }
}

static void unlock(mi_scope *s) { __atomic_clear(&s->lock, __ATOMIC_RELEASE); }

/* A sub's block: both pieces of its parent. */
static block *sub_block_new(mi_scope *s, size_t size)
{
    block *b = mi_scope_alloc(s->parent, sizeof *b);
    if (!b || !(b->base = mi_scope_alloc(s->parent, size))) return NULL;
    b->size = size;
    b->used = 0;
    b->next = NULL;
    s->reserved += size;
    s->system_allocs++;
    return b;
}

static block *block_new(mi_scope *s, size_t size)
{
    if (s->parent) return sub_block_new(s, size);
    block *b = malloc(sizeof *b);
    if (!b) return NULL;
    bool huge = size >= HUGE_PAGE;
    if (huge) size = (size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    b->base = aligned_alloc(huge ? HUGE_PAGE : ALIGN, size);
#ifdef MADV_HUGEPAGE
    if (b->base && huge) madvise(b->base, size, MADV_HUGEPAGE); /* advice; failure is harmless */
#endif
    if (!b->base) {
        free(b);
        return NULL;
    }
    b->size = size;
    b->used = 0;
    b->next = NULL;
    s->reserved += size;
    s->system_allocs++;
    system_add(size);
    return b;
}

static void blocks_free(mi_scope *s)
{
    for (block *b = s->first, *n; b; b = n) {
        n = b->next;
        free(b->base);
        free(b);
    }
    s->first = s->cur = NULL;
    __atomic_sub_fetch(&system_bytes, s->reserved, __ATOMIC_RELAXED);
    s->reserved = 0;
}

mi_scope *mi_scope_sub(mi_scope *parent, const char *name)
{
    if (!parent) {
        mi_error_set("scope_sub: NULL parent");
        return NULL;
    }
    __atomic_store_n(&parent->shared, true, __ATOMIC_RELEASE);
    mi_scope *s = mi_scope_alloc(parent, sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name ? name : "sub");
    s->parent = parent;
    return s;
}

mi_scope *mi_scope_new(const char *name)
{
    mi_scope *s = calloc(1, sizeof *s);
    if (!s) {
        mi_error_set("scope_new: out of memory");
        return NULL;
    }
    snprintf(s->name, sizeof s->name, "%s", name ? name : "scope");
    return s;
}

void mi_scope_free(mi_scope *s)
{
    if (!s) return;
    for (int i = 0; i < depth; i++)
        if (stack[i] == s) stack[i] = NULL;
    if (s->parent) return; /* its memory is its parent's */
    for (block *b = s->first; b; b = b->next) UNPOISON(b->base, b->size);
    blocks_free(s);
    free(s->free);
    free(s);
}

static void free_lists_clear(mi_scope *s)
{
    if (s->free_sizes) memset(s->free, 0, s->free_cap * sizeof *s->free);
    s->free_sizes = 0;
    for (block *b = s->first; b; b = b->next) UNPOISON(b->base, b->size);
}

void mi_scope_reset(mi_scope *s)
{
    if (!s) return;
    free_lists_clear(s);
    s->released = s->reused = 0;
    for (block *b = s->first; b; b = b->next) b->used = 0;
    s->cur = s->first;
    s->used = 0;
    __atomic_store_n(&s->shared, false, __ATOMIC_RELEASE); /* its subs are gone */
}

static free_list *free_slot(const mi_scope *s, size_t size)
{
    size_t mask = s->free_cap - 1, i = ((size / ALIGN * 0x9E3779B97F4A7C15ull) >> 29) & mask;
    while (s->free[i].size && s->free[i].size != size) i = (i + 1) & mask;
    return &s->free[i];
}

/* Doubles the table when it is half full; false when that fails (the piece
 * is then simply not reused). */
static bool free_table_room(mi_scope *s)
{
    if (2 * (s->free_sizes + 1) <= s->free_cap) return true;
    size_t cap = s->free_cap ? 2 * s->free_cap : 256;
    free_list *old = s->free;
    free_list *t = s->parent ? mi_scope_alloc(s->parent, cap * sizeof *t) : calloc(cap, sizeof *t);
    if (!t) return false;
    if (s->parent) memset(t, 0, cap * sizeof *t);
    size_t old_cap = s->free_cap;
    s->free = t;
    s->free_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].size) *free_slot(s, old[i].size) = old[i];
    if (!s->parent) free(old); /* a sub's old table stays in its parent until the reset */
    return true;
}

static void release(mi_scope *s, void *p, size_t bytes)
{
    size_t size = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (size == 0) size = ALIGN;
    if (!free_table_room(s)) return;
    free_list *l = free_slot(s, size);
    if (!l->size) {
        l->size = size;
        s->free_sizes++;
    }
    *(void **)p = l->head;
    l->head = p;
    s->released += size;
    POISON(p, size);
}

void mi_scope_release(mi_scope *s, void *p, size_t bytes)
{
    if (!s || !p) return;
    bool shared = __atomic_load_n(&s->shared, __ATOMIC_ACQUIRE);
    if (shared) lock(s);
    release(s, p, bytes);
    if (shared) unlock(s);
}

static void *alloc(mi_scope *s, size_t bytes)
{
    size_t need = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (need == 0) need = ALIGN;
    if (s->free_sizes) {
        free_list *l = free_slot(s, need);
        if (l->head) {
            void *p = l->head;
            UNPOISON(p, need);
            l->head = *(void **)p;
            s->reused += need;
            return p;
        }
    }
    /* on to the blocks an earlier cycle made, then a new one at the end */
    block *b = s->cur;
    while (b && b->size - b->used < need && b->next) b = b->next;
    if (!b || b->size - b->used < need) {
        /* each new block twice the last (up to MAX_GROWN): a first step of
         * gigabytes takes a few dozen blocks, not thousands */
        size_t most = s->parent ? MAX_GROWN_SUB : MAX_GROWN;
        size_t size = b ? (b->size < most ? 2 * b->size : b->size) : MIN_BLOCK;
        if (size < need) size = need;
        block *nb = block_new(s, size);
        if (!nb) {
            mi_error_set("alloc: out of memory asking for %zu bytes in scope '%s'", bytes, s->name);
            return NULL;
        }
        if (b) b->next = nb;
        else s->first = nb;
        b = nb;
    }
    s->cur = b;
    void *p = b->base + b->used;
    b->used += need;
    s->used += need;
    return p;
}

void *mi_scope_alloc(mi_scope *s, size_t bytes)
{
    if (!s) {
        mi_error_set("alloc: no current scope (call mi_scope_enter first)");
        return NULL;
    }
    bool shared = __atomic_load_n(&s->shared, __ATOMIC_ACQUIRE);
    if (shared) lock(s);
    void *p = alloc(s, bytes);
    if (shared) unlock(s);
    return p;
}

bool mi_scope_holds(const mi_scope *s, const void *p)
{
    const unsigned char *q = p;
    for (const block *b = s ? s->first : NULL; b; b = b->next)
        if (q >= b->base && q < b->base + b->size) return true;
    return false;
}

void mi_scope_enter(mi_scope *s)
{
    if (depth < MAX_DEPTH) stack[depth] = s;
    depth++;
}

void mi_scope_leave(void)
{
    if (depth > 0) depth--;
}

mi_scope *mi_scope_current(void)
{
    return depth > 0 && depth <= MAX_DEPTH ? stack[depth - 1] : NULL;
}

mi_scope_stats mi_scope_stats_get(const mi_scope *s)
{
    mi_scope_stats st = {0};
    if (s) {
        st.bytes_used = s->used;
        st.bytes_reserved = s->reserved;
        st.system_allocs = s->system_allocs;
        st.bytes_released = s->released;
        st.bytes_reused = s->reused;
    }
    return st;
}
