/* Plugins: a user's components in a shared object, so that programs built
 * without them (the miras-* tools) find them by name. A plugin defines
 *
 *   int mi_plugin_init(void)   (0, or -1 with a message)
 *
 * which registers its components and presets (components.h); mi_plugin_load
 * opens it and calls it, and MIRAS_PLUGINS=a.so:b.so loads a list of them
 * at the registry's first use. The handles stay open until mi_registry_reset,
 * which drops the registrations that point into them before closing them. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "components.h"
#include "registry.h"

typedef struct plugin {
    void *handle;
    char *path;
} plugin;

/* Recursive: a plugin's mi_plugin_init registers, and registering is a use of
 * the registry, which comes back here (and finds the list being read). */
static pthread_mutex_t lock;
static pthread_once_t lock_once = PTHREAD_ONCE_INIT;
static plugin *plugins;
static int n_plugins, cap_plugins;

/* MIRAS_PLUGINS: not yet read, being read (by the thread holding the lock),
 * read; env_rc and env_message keep the outcome for mi_plugin_load_env. */
enum { ENV_UNREAD, ENV_READING, ENV_READ };
static atomic_int env_state = ENV_UNREAD;
static int env_rc;
static char env_message[512];

static void lock_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock, &a);
    pthread_mutexattr_destroy(&a);
}

static void lock_take(void)
{
    pthread_once(&lock_once, lock_init);
    pthread_mutex_lock(&lock);
}

static void lock_give(void) { pthread_mutex_unlock(&lock); }

/* Under the lock. */
static int plugin_load_locked(const char *path)
{
    if (!path || !*path) return mi_error_set("plugin: no path"), -1;
    (void)dlerror();
    /* RTLD_NOW: a plugin that misses a symbol fails here, with dlerror's
     * message, and not at its first call */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return mi_error_set("plugin '%s': cannot load: %s", path, dlerror()), -1;
    for (int i = 0; i < n_plugins; i++)
        if (plugins[i].handle == h) {
            dlclose(h); /* the same object again (by another name): loaded once */
            return 0;
        }
    int (*init)(void);
    *(void **)&init = dlsym(h, "mi_plugin_init");
    if (!init) {
        const char *why = dlerror();
        mi_error_set("plugin '%s': no mi_plugin_init (a plugin defines int mi_plugin_init(void)"
                     "): %s", path, why ? why : "NULL");
        dlclose(h);
        return -1;
    }
    if (n_plugins == cap_plugins) {
        int cap = cap_plugins ? 2 * cap_plugins : 4;
        plugin *p = realloc(plugins, sizeof *p * (size_t)cap);
        if (!p) return dlclose(h), mi_error_set("plugin '%s': out of memory", path), -1;
        plugins = p, cap_plugins = cap;
    }
    char *copy = strdup(path);
    if (!copy) return dlclose(h), mi_error_set("plugin '%s': out of memory", path), -1;

    /* What init adds is dropped again when it fails, so nothing points into
     * an object that is then closed. */
    registry_mark m;
    registry_mark_take(&m);
    bool pending = mi_error_pending();
    int rc = init();
    if (rc != 0) {
        registry_rollback(&m);
        if (!pending && mi_error_pending()) {
            char why[400];
            snprintf(why, sizeof why, "%s", mi_error());
            mi_error_clear();
            mi_error_set("plugin '%s': mi_plugin_init: %s", path, why);
        } else {
            mi_error_set("plugin '%s': mi_plugin_init returned %d", path, rc);
        }
        free(copy);
        dlclose(h);
        return -1;
    }
    plugins[n_plugins++] = (plugin){.handle = h, .path = copy};
    return 0;
}

int mi_plugin_load(const char *path)
{
    registry_plugins_env();
    lock_take();
    int rc = plugin_load_locked(path);
    lock_give();
    return rc;
}

/* Every path of MIRAS_PLUGINS in order, the empty ones skipped; the first
 * failure stops the list. Under the lock. */
static int env_load_locked(void)
{
    const char *list = getenv("MIRAS_PLUGINS");
    if (!list) return 0;
    for (const char *a = list; *a;) {
        size_t n = strcspn(a, ":");
        if (n) {
            char *path = strndup(a, n);
            if (!path) return mi_error_set("MIRAS_PLUGINS: out of memory"), -1;
            int rc = plugin_load_locked(path);
            free(path);
            if (rc != 0) return mi_error_prefix("MIRAS_PLUGINS"), -1;
        }
        a += n + (a[n] == ':');
    }
    return 0;
}

/* Reads MIRAS_PLUGINS unless done: the outcome, message in env_message. */
static int env_once(void)
{
    if (atomic_load(&env_state) == ENV_READ) return env_rc;
    lock_take();
    if (atomic_load(&env_state) == ENV_UNREAD) {
        atomic_store(&env_state, ENV_READING);
        /* the message of a failure is this call's own, not one pending before */
        char before[512];
        bool pending = mi_error_pending();
        snprintf(before, sizeof before, "%s", mi_error());
        mi_error_clear();
        env_rc = env_load_locked();
        snprintf(env_message, sizeof env_message, "%s", env_rc ? mi_error() : "");
        mi_error_clear();
        if (pending) mi_error_set("%s", before);
        atomic_store(&env_state, ENV_READ);
    }
    /* ENV_READING here: this thread is inside the list's own loading */
    int rc = atomic_load(&env_state) == ENV_READ ? env_rc : 0;
    lock_give();
    return rc;
}

int mi_plugin_load_env(void)
{
    if (env_once() != 0) return mi_error_set("%s", env_message), -1;
    return 0;
}

/* The registry's first use: a look-up returns a component or NULL and has
 * no error to return, so a plugin that was asked for and did not load is
 * said on stderr, once, and the registry goes on with what did load. A
 * program that wants the failure as a value reads the list itself first
 * (mi_plugin_load_env), as the driver programs do. */
void registry_plugins_env(void)
{
    if (atomic_load(&env_state) == ENV_READ) return;
    if (env_once() != 0) fprintf(stderr, "miras: warning: %s\n", env_message);
}

/* mi_registry_reset, after the tables were emptied: nothing points into the
 * plugins any more. MIRAS_PLUGINS is read again at the next use. */
void registry_plugins_close(void)
{
    lock_take();
    for (int i = n_plugins - 1; i >= 0; i--) {
        dlclose(plugins[i].handle);
        free(plugins[i].path);
    }
    free(plugins);
    plugins = NULL;
    n_plugins = cap_plugins = 0;
    env_rc = 0;
    env_message[0] = '\0';
    atomic_store(&env_state, ENV_UNREAD);
    lock_give();
}
