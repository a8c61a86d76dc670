/* The component tables: every memory, attentional bias, retention gate and
 * learning algorithm a configuration can name. A new component is one file defining its kind
 * plus one line here. */
#include <string.h>

#include "components.h"

#define DECLARE(type, name) extern const type name;
DECLARE(mi_memory_kind, mi_memory_vector)
DECLARE(mi_memory_kind, mi_memory_matrix)
DECLARE(mi_memory_kind, mi_memory_mlp)
DECLARE(mi_bias_kind, mi_bias_dot)
DECLARE(mi_bias_kind, mi_bias_l2)
DECLARE(mi_bias_kind, mi_bias_lp)
DECLARE(mi_bias_kind, mi_bias_huber)
DECLARE(mi_bias_kind, mi_bias_huber_norm)
DECLARE(mi_bias_kind, mi_bias_yaad)
DECLARE(mi_bias_kind, mi_bias_robust)
DECLARE(mi_bias_kind, mi_bias_logcosh)
DECLARE(mi_retention_kind, mi_retention_none)
DECLARE(mi_retention_kind, mi_retention_l2)
DECLARE(mi_retention_kind, mi_retention_kl)
DECLARE(mi_retention_kind, mi_retention_fdiv)
DECLARE(mi_retention_kind, mi_retention_lq)
DECLARE(mi_retention_kind, mi_retention_elastic)
DECLARE(mi_retention_kind, mi_retention_elastic_ftrl)
DECLARE(mi_retention_kind, mi_retention_bregman)
DECLARE(mi_memory_kind, mi_memory_lattice)
DECLARE(mi_bias_kind, mi_bias_lattice_dec)
DECLARE(mi_bias_kind, mi_bias_lattice_enc)
DECLARE(mi_bias_kind, mi_bias_lattice_sim)
DECLARE(mi_retention_kind, mi_retention_sphere)
DECLARE(mi_retention_kind, mi_retention_sphere_forget)
DECLARE(mi_retention_kind, mi_retention_l1)
DECLARE(mi_algorithm_kind, mi_algorithm_gd)
DECLARE(mi_algorithm_kind, mi_algorithm_momentum)
DECLARE(mi_algorithm_kind, mi_algorithm_implicit)
DECLARE(mi_algorithm_kind, mi_algorithm_multistep)

static const mi_memory_kind *const memories[] = {&mi_memory_vector, &mi_memory_matrix,
                                                 &mi_memory_mlp, &mi_memory_lattice};
static const mi_bias_kind *const biases[] = {&mi_bias_dot,   &mi_bias_l2,         &mi_bias_lp,
                                             &mi_bias_huber, &mi_bias_huber_norm, &mi_bias_yaad,
                                             &mi_bias_robust, &mi_bias_lattice_dec,
                                             &mi_bias_lattice_enc, &mi_bias_lattice_sim, &mi_bias_logcosh};
static const mi_retention_kind *const retentions[] = {
    &mi_retention_none, &mi_retention_l2,           &mi_retention_kl,     &mi_retention_fdiv,
    &mi_retention_lq,   &mi_retention_elastic,      &mi_retention_elastic_ftrl,
    &mi_retention_bregman, &mi_retention_sphere, &mi_retention_sphere_forget, &mi_retention_l1};
static const mi_algorithm_kind *const algorithms[] = {
    &mi_algorithm_gd, &mi_algorithm_momentum, &mi_algorithm_implicit, &mi_algorithm_multistep};

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
