/* The growable name tables of registry.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "tensor/tensor.h"

int reg_table_add(reg_table *t, const char *name, const void *item)
{
    if (!name || !*name) return mi_error_set("register: a %s needs a name", t->what), -1;
    if (!item) return mi_error_set("register: %s '%s': NULL", t->what, name), -1;
    /* a name is set as KEY=NAME and listed among space-separated assignments */
    if (name[strcspn(name, " \t\n=")])
        return mi_error_set("register: %s '%s': a name has no spaces and no '='", t->what,
                            name), -1;
    if (reg_table_find(t, name))
        return mi_error_set("register: a %s named '%s' is already registered (names are "
                            "unique: choose another)", t->what, name), -1;
    if (t->n == t->cap) {
        /* doubling; int counts, so stop well below INT_MAX */
        if (t->cap > (1 << 28))
            return mi_error_set("register: too many %s entries (%d)", t->what, t->n), -1;
        int cap = t->cap ? 2 * t->cap : 16;
        const void **items = realloc(t->items, sizeof *items * (size_t)cap);
        if (!items) return mi_error_set("register: %s '%s': out of memory", t->what, name), -1;
        t->items = items;
        const char **names = realloc(t->names, sizeof *names * (size_t)cap);
        if (!names) return mi_error_set("register: %s '%s': out of memory", t->what, name), -1;
        t->names = names;
        t->cap = cap;
    }
    t->items[t->n] = item;
    t->names[t->n] = name;
    t->n++;
    return 0;
}

const void *reg_table_find(const reg_table *t, const char *name)
{
    for (int i = 0; name && i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) return t->items[i];
    return NULL;
}

const void *reg_table_at(const reg_table *t, int i)
{
    return i >= 0 && i < t->n ? t->items[i] : NULL;
}

void reg_table_clear(reg_table *t)
{
    free(t->items);
    free(t->names);
    t->items = NULL, t->names = NULL;
    t->n = t->cap = 0;
    t->ready = false;
}

void reg_table_truncate(reg_table *t, int n)
{
    if (n >= 0 && n < t->n) t->n = n;
}
