/* Opening a file that must be a regular file (tensor.h, "files"). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
