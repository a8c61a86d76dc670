/* Files (tensor.h, "files"): opening one that must be a regular file, and
 * the library's one atomic writer (checkpoints, safetensors, the tools' logs
 * and plots all write through it). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor.h"

int mi_open_regular(const char *path, int64_t *size, char *why, size_t n)
{
    /* O_NONBLOCK: opening a FIFO with no writer would wait for one before
     * fstat could say what it is */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (fd < 0) return snprintf(why, n, "%s", strerror(errno)), -1;
    const char *kind = NULL;
    if (fstat(fd, &sb) != 0) kind = strerror(errno);
    else if (S_ISFIFO(sb.st_mode)) kind = "not a regular file (a FIFO)";
    else if (S_ISDIR(sb.st_mode)) kind = "not a regular file (a directory)";
    else if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) kind = "not a regular file (a device)";
    else if (S_ISSOCK(sb.st_mode)) kind = "not a regular file (a socket)";
    else if (!S_ISREG(sb.st_mode)) kind = "not a regular file";
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) kind = strerror(errno);
    if (kind) {
        snprintf(why, n, "%s", kind);
        close(fd);
        return -1;
    }
    *size = (int64_t)sb.st_size;
    return fd;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : (size_t)1 << 30;
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Makes the rename durable; best effort (some file systems refuse). */
static void fsync_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) dir = strdup(".");
    else if (slash == path) dir = strdup("/");
    else dir = strndup(path, (size_t)(slash - path));
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int mi_write_atomic_parts(const char *path, const mi_bytes *parts, int count)
{
    if (!path || !*path) return mi_error_set("write: empty path"), -1;
    if (count < 0 || (count > 0 && !parts))
        return mi_error_set("write '%s': %d parts from %s", path, count,
                            parts ? "an array" : "NULL"), -1;
    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) return mi_error_set("write '%s': out of memory", path), -1;
    /* the pid marks whose file it is: a dead writer's can be told and removed */
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    const char *step = "create";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    step = "write";
    for (int i = 0; i < count; i++)
        if (parts[i].size && write_all(fd, parts[i].data, parts[i].size) != 0) goto fail;
    step = "fsync";
    if (fsync(fd) != 0) goto fail;
    step = "close";
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) goto fail;
    step = "rename";
    if (rename(tmp, path) != 0) goto fail;
    fsync_parent_dir(path);
    free(tmp);
    return 0;

fail:;
    int err = errno;
    if (fd >= 0) close(fd);
    if (strcmp(step, "create") != 0) unlink(tmp);
    mi_error_set("cannot %s '%s': %s", step, tmp, strerror(err));
    free(tmp);
    return -1;
}

int mi_write_atomic(const char *path, const void *data, size_t size)
{
    mi_bytes part = {data, size};
    return mi_write_atomic_parts(path, &part, 1);
}
