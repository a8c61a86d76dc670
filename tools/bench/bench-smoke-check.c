/* bench-smoke-check: runs a miras-bench command line and checks its output,
 * for the 'bench-smoke' meson tests:
 *
 *   bench-smoke-check PATH/TO/miras-bench layer --variants gated-deltanet ...
 *
 * Passes (exit 0) when the command exits 0, prints at least one JSON line,
 * and every line starting with '{' is a JSON object (the library's strict
 * parser) with a string "name" and "config" and either a positive
 * "median_ms", "tokens_per_s" and "peak_rss_kb" and a non-negative
 * "minor_faults_per_step", "user_ms_per_step" and "sys_ms_per_step", or a
 * string "skipped".
 * An "error" member fails the check. Other lines (the table) are echoed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/io/json.h"

static const json_value *member(const json_value *obj, const char *key)
{
    for (size_t i = 0; i < obj->len; i++)
        if (!strcmp(obj->u.members[i].key, key)) return &obj->u.members[i].value;
    return NULL;
}

/* The problem with one JSON line, or NULL when it is fine. */
static const char *check_line(const char *line, size_t len, char *why, size_t n)
{
    json_doc doc;
    json_error err;
    if (mi_json_parse(&doc, line, len, &err) != 0) {
        snprintf(why, n, "not JSON at byte %zu: %s", err.pos, err.msg);
        mi_json_doc_free(&doc);
        return why;
    }
    const json_value *root = &doc.root, *v;
    const char *problem = NULL;
    if (root->type != JSON_OBJECT) problem = "not a JSON object";
    else if (!(v = member(root, "name")) || v->type != JSON_STRING) problem = "no string name";
    else if (!(v = member(root, "config")) || v->type != JSON_STRING)
        problem = "no string config";
    else if ((v = member(root, "error"))) problem = "the case failed (\"error\")";
    else if ((v = member(root, "skipped"))) {
        if (v->type != JSON_STRING) problem = "\"skipped\" is not a string";
    } else {
        static const char *const need[] = {"median_ms", "tokens_per_s", "peak_rss_kb"};
        for (int i = 0; i < 3 && !problem; i++) {
            v = member(root, need[i]);
            /* the literal's text: a positive number starts with a digit */
            if (!v || v->type != JSON_NUMBER || line[v->pos] < '0' || line[v->pos] > '9'
                || strtod(line + v->pos, NULL) <= 0) {
                snprintf(why, n, "no positive number \"%s\"", need[i]);
                problem = why;
            }
        }
        static const char *const counts[] = {"minor_faults_per_step", "user_ms_per_step",
                                             "sys_ms_per_step"};
        for (int i = 0; i < 3 && !problem; i++) {
            v = member(root, counts[i]);
            if (!v || v->type != JSON_NUMBER || line[v->pos] < '0' || line[v->pos] > '9') {
                snprintf(why, n, "no non-negative number \"%s\"", counts[i]);
                problem = why;
            }
        }
    }
    mi_json_doc_free(&doc);
    return problem;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench-smoke-check MIRAS-BENCH [ARGS...]\n");
        return 2;
    }
    int fd[2];
    if (pipe(fd) != 0) return perror("pipe"), 2;
    pid_t pid = fork();
    if (pid < 0) return perror("fork"), 2;
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        execv(argv[1], argv + 1);
        perror(argv[1]);
        _exit(127);
    }
    close(fd[1]);
    FILE *out = fdopen(fd[0], "r");
    char *line = NULL, why[160];
    size_t cap = 0;
    ssize_t len;
    int json_lines = 0, bad = 0;
    while (out && (len = getline(&line, &cap, out)) > 0) {
        fputs(line, stdout);
        if (line[0] != '{') continue;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        json_lines++;
        const char *problem = check_line(line, (size_t)len, why, sizeof why);
        if (problem) {
            fprintf(stderr, "bench-smoke-check: line %d: %s\n", json_lines, problem);
            bad++;
        }
    }
    free(line);
    if (out) fclose(out);
    int status;
    if (waitpid(pid, &status, 0) < 0) return perror("waitpid"), 2;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench-smoke-check: the command %s %d\n",
                WIFEXITED(status) ? "exited with status" : "died of signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        bad++;
    }
    if (json_lines == 0) {
        fprintf(stderr, "bench-smoke-check: no JSON line in the output\n");
        bad++;
    }
    return bad ? 1 : 0;
}
