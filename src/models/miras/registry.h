/* A table of named entries that grows without a fixed cap: the component
 * tables (components.c) and the presets (presets.c) are each one. An entry
 * is a pointer the caller keeps valid; the table holds the pointers only.
 * Not locked: its owner holds a lock around every call. */
#ifndef MIRAS_MODELS_REGISTRY_H
#define MIRAS_MODELS_REGISTRY_H

#include <stdbool.h>

typedef struct reg_table {
    const char *what;  /* "attentional bias", "preset", …: for messages */
    const void **items;
    const char **names;
    int n, cap;
    bool ready;        /* the built-ins are in */
} reg_table;

/* Appends item under name: 0, or -1 with a message (no name, a space or '='
 * in it, the name taken, out of memory); the table is unchanged on error. */
int reg_table_add(reg_table *t, const char *name, const void *item);
/* The entry named name, or NULL. */
const void *reg_table_find(const reg_table *t, const char *name);
/* Entry i in registration order, or NULL past the end. */
const void *reg_table_at(const reg_table *t, int i);
/* Frees the table's storage and empties it (ready = false). */
void reg_table_clear(reg_table *t);

/* Empties the preset table (presets.c), for mi_registry_reset. */
void presets_clear(void);

#endif
