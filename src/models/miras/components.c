/* The component tables: every memory, attentional bias, retention gate and
 * learning algorithm a configuration can name. A new component is one file defining its kind
 * (with its own parameters, if any: components.h) plus one line here. */
#include <string.h>

#include "components.h"

/* One line per component: NAME stands for the kind mi_<axis>_NAME that its
 * file defines (bias/lp.c: mi_bias_lp), in the order the tables list them;
 * each list ends with a comment line, so that a new entry is one new line. */
#define MEMORIES(X)   \
    X(vector)         \
    X(matrix)         \
    X(mlp)            \
    X(lattice)        \
    /* (a new line above this one) */
#define BIASES(X)     \
    X(dot)            \
    X(l2)             \
    X(lp)             \
    X(huber)          \
    X(huber_norm)     \
    X(yaad)           \
    X(robust)         \
    X(lattice_dec)    \
    X(lattice_enc)    \
    X(lattice_sim)    \
    X(logcosh)        \
    /* (a new line above this one) */
#define RETENTIONS(X) \
    X(none)           \
    X(l2)             \
    X(kl)             \
    X(fdiv)           \
    X(lq)             \
    X(elastic)        \
    X(elastic_ftrl)   \
    X(bregman)        \
    X(sphere)         \
    X(sphere_forget)  \
    X(l1)             \
    /* (a new line above this one) */
#define ALGORITHMS(X) \
    X(gd)             \
    X(momentum)       \
    X(implicit)       \
    X(multistep)      \
    /* (a new line above this one) */

#define DECLARE_MEMORY(n) extern const mi_memory_kind mi_memory_##n;
#define DECLARE_BIAS(n) extern const mi_bias_kind mi_bias_##n;
#define DECLARE_RETENTION(n) extern const mi_retention_kind mi_retention_##n;
#define DECLARE_ALGORITHM(n) extern const mi_algorithm_kind mi_algorithm_##n;
MEMORIES(DECLARE_MEMORY)
BIASES(DECLARE_BIAS)
RETENTIONS(DECLARE_RETENTION)
ALGORITHMS(DECLARE_ALGORITHM)

#define MEMORY_ENTRY(n) &mi_memory_##n,
#define BIAS_ENTRY(n) &mi_bias_##n,
#define RETENTION_ENTRY(n) &mi_retention_##n,
#define ALGORITHM_ENTRY(n) &mi_algorithm_##n,
static const mi_memory_kind *const memories[] = {MEMORIES(MEMORY_ENTRY)};
static const mi_bias_kind *const biases[] = {BIASES(BIAS_ENTRY)};
static const mi_retention_kind *const retentions[] = {RETENTIONS(RETENTION_ENTRY)};
static const mi_algorithm_kind *const algorithms[] = {ALGORITHMS(ALGORITHM_ENTRY)};

#define COUNT(a) ((int)(sizeof(a) / sizeof(a[0])))
#define FINDER(type, fn, table)                                       \
    const type *fn##_at(int i) { return i >= 0 && i < COUNT(table) ? table[i] : NULL; } \
    const type *fn##_find(const char *name)                          \
    {                                                                 \
        for (int i = 0; name && i < COUNT(table); i++)                \
            if (table[i] && strcmp(table[i]->name, name) == 0)        \
                return table[i];                                      \
        return NULL;                                                  \
    }

FINDER(mi_memory_kind, mi_memory, memories)
FINDER(mi_bias_kind, mi_bias, biases)
FINDER(mi_retention_kind, mi_retention, retentions)
FINDER(mi_algorithm_kind, mi_algorithm, algorithms)
