/* Scopes are bump allocators over a list of blocks. Reset keeps the memory:
 * when a cycle needed more than one block, reset merges them into one block
 * of the total size, so the next identical cycle fits without asking the
 * system for anything. */
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "tensor.h"

#define ALIGN 64
#define MIN_BLOCK ((size_t)1 << 20)
#define MAX_GROWN ((size_t)1 << 30)
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

struct mi_scope {
    char name[32];
    block *head; /* the block being filled; older ones follow */
    size_t reserved, used, system_allocs;
};

static _Thread_local mi_scope *stack[MAX_DEPTH];
static _Thread_local int depth;

static block *block_new(mi_scope *s, size_t size)
{
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
    return b;
}

static void blocks_free(mi_scope *s)
{
    for (block *b = s->head, *n; b; b = n) {
        n = b->next;
        free(b->base);
        free(b);
    }
    s->head = NULL;
    s->reserved = 0;
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
    blocks_free(s);
    free(s);
}

void mi_scope_reset(mi_scope *s)
{
    if (!s || !s->head) return;
    if (s->head->next) {
        size_t total = s->reserved;
        blocks_free(s);
        s->head = block_new(s, total);
    } else {
        s->head->used = 0;
    }
    s->used = 0;
}

void *mi_scope_alloc(mi_scope *s, size_t bytes)
{
    if (!s) {
        mi_error_set("alloc: no current scope (call mi_scope_enter first)");
        return NULL;
    }
    size_t need = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (need == 0) need = ALIGN;
    block *b = s->head;
    if (!b || b->size - b->used < need) {
        /* each new block twice the last (up to MAX_GROWN): a first step of
         * gigabytes takes a few dozen blocks, not thousands */
        size_t size = b ? (b->size < MAX_GROWN ? 2 * b->size : b->size) : MIN_BLOCK;
        if (size < need) size = need;
        block *nb = block_new(s, size);
        if (!nb) {
            mi_error_set("alloc: out of memory asking for %zu bytes in scope '%s'", bytes, s->name);
            return NULL;
        }
        nb->next = b;
        s->head = b = nb;
    }
    void *p = b->base + b->used;
    b->used += need;
    s->used += need;
    return p;
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
    }
    return st;
}
