/* The component tables: every memory, attentional bias, retention gate and
 * learning algorithm a configuration can name. The built-ins below go in
 * through the same check as a user's mi_register_* (components.h), on the
 * first use of a table; a user's program adds its own before it builds a
 * model. A new built-in is one file defining its kind plus one line here. */
#include <pthread.h>
#include <string.h>

#include "components.h"
#include "registry.h"

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

/* One lock for the four tables: registration, look-up and reset. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reg_table memories = {.what = "memory"};
static reg_table biases = {.what = "attentional bias"};
static reg_table retentions = {.what = "retention gate"};
static reg_table algorithms = {.what = "learning algorithm"};

/* ---------------------------------------------------------------- checks
 * What every kind must have (the recurrence calls these without a test),
 * and parameters that fit the config's block. */

static int params_check(const char *what, const char *name, const mi_field *params,
                        int n_params, size_t size)
{
    if (n_params < 0 || (n_params > 0 && !params))
        return mi_error_set("register: %s '%s': %d parameters without a field table", what, name,
                            n_params), -1;
    if (size > sizeof(mi_component_params))
        return mi_error_set("register: %s '%s': parameters of %zu bytes, the config holds %zu",
                            what, name, size, sizeof(mi_component_params)), -1;
    return 0;
}

static int memory_check(const mi_memory_kind *k)
{
    if (!k || !k->name) return mi_error_set("register: a memory needs a name"), -1;
    if (!k->shapes || !k->init || !k->forward)
        return mi_error_set("register: memory '%s' needs shapes, init and forward", k->name), -1;
    if ((k->grad_factors == NULL) != (k->forward_linear == NULL))
        return mi_error_set("register: memory '%s': grad_factors and forward_linear come "
                            "together", k->name), -1;
    if (k->grad_factors_of && !k->grad_factors)
        return mi_error_set("register: memory '%s': grad_factors_of needs grad_factors",
                            k->name), -1;
    if (k->rule == MI_MEMORY_RULE_MATRIX && !k->grad)
        return mi_error_set("register: memory '%s': rule matrix needs its closed-form grad",
                            k->name), -1;
    return 0;
}

static int bias_check(const mi_bias_kind *k)
{
    if (!k || !k->name) return mi_error_set("register: an attentional bias needs a name"), -1;
    if (!k->loss) return mi_error_set("register: attentional bias '%s' needs loss", k->name), -1;
    if (k->rule != MI_BIAS_RULE_OWN && !k->error)
        return mi_error_set("register: attentional bias '%s': a fused rule needs its closed-form "
                            "error", k->name), -1;
    return params_check("attentional bias", k->name, k->params, k->n_params, k->params_size);
}

static int retention_check(const mi_retention_kind *k)
{
    if (!k || !k->name) return mi_error_set("register: a retention gate needs a name"), -1;
    if ((k->read_split == NULL) != (k->boundary_split == NULL))
        return mi_error_set("register: retention gate '%s': read_split and boundary_split come "
                            "together", k->name), -1;
    if ((k->read_is_scale == NULL) != (k->read_scale == NULL))
        return mi_error_set("register: retention gate '%s': read_is_scale and read_scale come "
                            "together", k->name), -1;
    if (k->rule == MI_RETENTION_RULE_DECAY && (k->init || k->read || k->boundary || k->lag_token))
        return mi_error_set("register: retention gate '%s': rule decay keeps W = A (no init, "
                            "read, boundary or lag token)", k->name), -1;
    return params_check("retention gate", k->name, k->params, k->n_params, k->params_size);
}

static int algorithm_check(const mi_algorithm_kind *k)
{
    if (!k || !k->name) return mi_error_set("register: a learning algorithm needs a name"), -1;
    return 0;
}

/* ---------------------------------------------------------------- the tables */

#define ADD(table, check, k) (check(k) != 0 ? -1 : reg_table_add(&(table), (k)->name, (k)))
#define MEMORY_ADD(n) rc |= ADD(memories, memory_check, &mi_memory_##n);
#define BIAS_ADD(n) rc |= ADD(biases, bias_check, &mi_bias_##n);
#define RETENTION_ADD(n) rc |= ADD(retentions, retention_check, &mi_retention_##n);
#define ALGORITHM_ADD(n) rc |= ADD(algorithms, algorithm_check, &mi_algorithm_##n);

/* The built-ins, once after every reset; under the lock. They are checked as
 * a user's are: a failure is a bug in a built-in (the tests list the tables). */
static void builtins_locked(void)
{
    if (memories.ready) return;
    int rc = 0;
    MEMORIES(MEMORY_ADD)
    BIASES(BIAS_ADD)
    RETENTIONS(RETENTION_ADD)
    ALGORITHMS(ALGORITHM_ADD)
    (void)rc;
    memories.ready = true;
}

/* Every entry point: the plugins MIRAS_PLUGINS names and the built-ins are
 * in the tables before the first look-up. */
static void components_enter(void)
{
    registry_plugins_env();
    pthread_mutex_lock(&lock);
    builtins_locked();
}

#define REGISTER(type, fn, table, check)                                  \
    int mi_register_##fn(const type *k)                                   \
    {                                                                     \
        components_enter();                                                 \
        int rc = ADD(table, check, k);                                    \
        pthread_mutex_unlock(&lock);                                      \
        return rc;                                                        \
    }                                                                     \
    const type *mi_##fn##_find(const char *name)                          \
    {                                                                     \
        components_enter();                                                 \
        const type *k = reg_table_find(&(table), name);                   \
        pthread_mutex_unlock(&lock);                                      \
        return k;                                                         \
    }                                                                     \
    const type *mi_##fn##_at(int i)                                       \
    {                                                                     \
        components_enter();                                                 \
        const type *k = reg_table_at(&(table), i);                        \
        pthread_mutex_unlock(&lock);                                      \
        return k;                                                         \
    }

REGISTER(mi_memory_kind, memory, memories, memory_check)
REGISTER(mi_bias_kind, bias, biases, bias_check)
REGISTER(mi_retention_kind, retention, retentions, retention_check)
REGISTER(mi_algorithm_kind, algorithm, algorithms, algorithm_check)

void mi_registry_reset(void)
{
    presets_clear();
    pthread_mutex_lock(&lock);
    reg_table_clear(&memories);
    reg_table_clear(&biases);
    reg_table_clear(&retentions);
    reg_table_clear(&algorithms);
    pthread_mutex_unlock(&lock);
    registry_plugins_close();
}

void registry_mark_take(registry_mark *m)
{
    m->presets = presets_count(); /* first: the presets' built-ins look components up */
    pthread_mutex_lock(&lock);
    builtins_locked();
    m->memories = memories.n, m->biases = biases.n;
    m->retentions = retentions.n, m->algorithms = algorithms.n;
    pthread_mutex_unlock(&lock);
}

void registry_rollback(const registry_mark *m)
{
    presets_truncate(m->presets);
    pthread_mutex_lock(&lock);
    reg_table_truncate(&memories, m->memories);
    reg_table_truncate(&biases, m->biases);
    reg_table_truncate(&retentions, m->retentions);
    reg_table_truncate(&algorithms, m->algorithms);
    pthread_mutex_unlock(&lock);
}
