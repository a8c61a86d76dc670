#include "tool_run.h"

#include "harness.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

const char *tool_tmp_listing(void)
{
    static char out[2048];
    char names[32][256];
    int n = 0;
    DIR *d = opendir(test_tmpdir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < 32)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "|" : "", names[i]);
    return out;
}

static void slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    unlink(path);
}

const tool_result *tool_run(const char *path, const char *const *args)
{
    static tool_result r;
    char out_path[512], err_path[512];
    /* captured outside the scratch directory, so listings see only the tool's files */
    snprintf(out_path, sizeof out_path, "/tmp/miras-tool-out.%ld", (long)getpid());
    snprintf(err_path, sizeof err_path, "/tmp/miras-tool-err.%ld", (long)getpid());
    const char *argv[64] = {path};
    for (int i = 0; args[i] && i < 62; i++) argv[i + 1] = args[i];
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(out_path, r.out, sizeof r.out);
    slurp(err_path, r.err, sizeof r.err);
    return &r;
}
