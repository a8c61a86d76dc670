/* Thread-local error message: the first failure of a chain is kept. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tensor.h"

static _Thread_local char message[1024];
static _Thread_local bool pending;

const char *mi_error(void) { return message; }
bool mi_error_pending(void) { return pending; }

void mi_error_clear(void)
{
    message[0] = '\0';
    pending = false;
}

void mi_error_set(const char *fmt, ...)
{
    if (pending) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    pending = true;
}

void mi_error_prefix(const char *who)
{
    size_t n = strlen(who);
    if (!pending || (strncmp(message, who, n) == 0 && message[n] == ':')) return;
    char old[sizeof message];
    memcpy(old, message, sizeof old);
    int w = snprintf(message, sizeof message, "%s: ", who);
    if (w > 0 && (size_t)w < sizeof message) snprintf(message + w, sizeof message - (size_t)w, "%.*s", (int)(sizeof message - (size_t)w - 1), old);
}

const char *mi_shape_str(char *buf, size_t n, int rank, const int64_t *shape)
{
    size_t used = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}
