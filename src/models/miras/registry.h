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
/* Drops the entries from n on (those added after the table held n). */
void reg_table_truncate(reg_table *t, int n);

/* Empties the preset table (presets.c), for mi_registry_reset. */
void presets_clear(void);
/* The preset table's size (built-ins in), and dropping what came after it. */
int presets_count(void);
void presets_truncate(int n);

/* The sizes of the five tables (components.c), so that what a failed
 * plugin registered can be dropped again (plugin.c). */
typedef struct registry_mark {
    int memories, biases, retentions, algorithms, presets;
} registry_mark;
void registry_mark_take(registry_mark *m);
void registry_rollback(const registry_mark *m);

/* MIRAS_PLUGINS (plugin.c): loaded at the first use of any table, called
 * before the table's lock is taken; ends the process with the message when
 * a plugin of the list fails (components.h says why). */
void registry_plugins_env(void);
/* Closes every plugin and forgets MIRAS_PLUGINS was read (mi_registry_reset,
 * after the tables are empty). */
void registry_plugins_close(void);

#endif
