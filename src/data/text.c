/* Byte-level language-model data over a text file: the first
 * floor(0.9 · size) bytes train, the rest validate, as nanoGPT's
 * data[:int(n*0.9)]; windows of T+1 bytes give inputs and next-byte targets.
 * The file is checked before it is trusted: a regular file, non-empty, at
 * most MI_TEXT_MAX_BYTES, read in full. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tasks_internal.h"

static char *scope_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = mi_scope_alloc(mi_scope_current(), n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A mi_text over `size` uninitialised bytes in the current scope. */
static mi_text *text_new(int64_t size, const char *name)
{
    if (!mi_scope_current()) return mi_error_set("text: no current scope"), NULL;
    mi_text *t = mi_scope_alloc(mi_scope_current(), sizeof *t);
    uint8_t *data = t ? mi_scope_alloc(mi_scope_current(), (size_t)size) : NULL;
    char *copy = data ? scope_strdup(name) : NULL;
    if (!copy)
        return mi_error_set("text: out of memory for %lld bytes of '%s'", (long long)size, name), NULL;
    *t = (mi_text){.name = copy, .data = data, .size = size, .valid_begin = size / 10 * 9 + size % 10 * 9 / 10};
    return t;
}

mi_text *mi_text_load(const char *path)
{
    if (!path) return mi_error_set("text: NULL path"), NULL;
    char why[128];
    int64_t size;
    int fd = mi_open_regular(path, &size, why, sizeof why);
    if (fd < 0) return mi_error_set("text: cannot open '%s': %s", path, why), NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        mi_error_set("text: cannot open '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    mi_text *t = NULL;
    if (size == 0) {
        mi_error_set("text: '%s' is empty", path);
    } else if (size > MI_TEXT_MAX_BYTES) {
        mi_error_set("text: '%s' has %lld bytes, more than the limit of %lld", path,
                     (long long)size, (long long)MI_TEXT_MAX_BYTES);
    } else if ((t = text_new(size, path)) != NULL) {
        size_t got = fread(t->data, 1, (size_t)t->size, f);
        if (got != (size_t)t->size) {
            if (ferror(f))
                mi_error_set("text: reading '%s': %s", path, strerror(errno));
            else
                mi_error_set("text: '%s': read %zu of %lld bytes (the file shrank?)", path, got,
                             (long long)t->size);
            t = NULL; /* its memory stays in the scope until the scope ends */
        }
    }
    fclose(f);
    return t;
}

mi_text *mi_text_from_bytes(const void *bytes, int64_t size, const char *name)
{
    if (!name) name = "(memory)";
    if (!bytes) return mi_error_set("text: NULL bytes for '%s'", name), NULL;
    if (size < 1 || size > MI_TEXT_MAX_BYTES)
        return mi_error_set("text: '%s' has %lld bytes; needs 1 to %lld", name, (long long)size,
                            (long long)MI_TEXT_MAX_BYTES), NULL;
    mi_text *t = text_new(size, name);
    if (t) memcpy(t->data, bytes, (size_t)size);
    return t;
}

void mi_text_split_range(const mi_text *t, mi_split split, int64_t *begin, int64_t *end)
{
    *begin = split == MI_SPLIT_TRAIN ? 0 : t->valid_begin;
    *end = split == MI_SPLIT_TRAIN ? t->valid_begin : t->size;
}

static const char *split_name(mi_split s) { return s == MI_SPLIT_TRAIN ? "train" : "validation"; }

/* Checks the arguments and that the split holds one window of T+1 bytes. */
static int check_windows(const mi_text *t, int64_t T, mi_split split, int64_t *begin, int64_t *n)
{
    if (!t) return mi_error_set("text: NULL text"), -1;
    if (split != MI_SPLIT_TRAIN && split != MI_SPLIT_VALID)
        return mi_error_set("text: unknown split %d", (int)split), -1;
    if (T < 1) return mi_error_set("text: seq_len T must be >= 1, got %lld", (long long)T), -1;
    int64_t end;
    mi_text_split_range(t, split, begin, &end);
    *n = end - *begin;
    if (*n < T + 1 || T >= MI_TEXT_MAX_BYTES)
        return mi_error_set("text: the %s split of '%s' has %lld bytes, fewer than a window of "
                            "T + 1 = %lld", split_name(split), t->name, (long long)*n,
                            (long long)T + 1), -1;
    return 0;
}

static void window(const mi_text *t, int64_t start, int64_t T, int64_t *x, int64_t *y)
{
    for (int64_t i = 0; i < T; i++) {
        x[i] = t->data[start + i];
        y[i] = t->data[start + i + 1];
    }
}

int mi_text_batch(const mi_text *t, int64_t seq_len, uint64_t seed, mi_split split,
                  int64_t first, int64_t batch, mi_tensor **inputs, mi_tensor **targets)
{
    int64_t begin, n, T = seq_len;
    if (check_windows(t, T, split, &begin, &n) != 0) return -1;
    if (tasks_batch_new("text", first, batch, T, inputs, targets) != 0) return -1;
    for (int64_t b = 0; b < batch; b++) {
        mi_rng r;
        mi_task_rng(&r, seed, split, first + b);
        int64_t start = begin + (int64_t)mi_rng_below(&r, (uint64_t)(n - T));
        window(t, start, T, (int64_t *)(*inputs)->data + b * T, (int64_t *)(*targets)->data + b * T);
    }
    return 0;
}

int64_t mi_text_window_count(const mi_text *t, int64_t seq_len, mi_split split)
{
    int64_t begin, n;
    if (check_windows(t, seq_len, split, &begin, &n) != 0) return -1;
    return (n - 1) / seq_len;
}

int mi_text_windows(const mi_text *t, int64_t seq_len, mi_split split, int64_t first,
                    int64_t batch, mi_tensor **inputs, mi_tensor **targets)
{
    int64_t begin, n, T = seq_len;
    if (check_windows(t, T, split, &begin, &n) != 0) return -1;
    int64_t count = (n - 1) / T;
    if (first < 0 || batch < 1 || first > count - batch)
        return mi_error_set("text: windows %lld..%lld of the %s split of '%s' asked for; it has "
                            "%lld windows of %lld bytes", (long long)first,
                            (long long)first + batch - 1, split_name(split), t->name,
                            (long long)count, (long long)T), -1;
    if (tasks_batch_new("text", first, batch, T, inputs, targets) != 0) return -1;
    for (int64_t b = 0; b < batch; b++)
        window(t, begin + (first + b) * T, T, (int64_t *)(*inputs)->data + b * T,
               (int64_t *)(*targets)->data + b * T);
    return 0;
}
