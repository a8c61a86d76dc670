/* miras-bench search: the trials' JSON lines. Each finished trial is one line
 * of DIR/trials.jsonl (DIR/trials.rankR.jsonl under an MPI launcher), written
 * with one write() and fsync, so a search killed at any moment (kill -9)
 * leaves every line whole or absent; a rerun reads every such file and runs
 * only the trials whose key no line holds. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_search.h"
#include "common.h"

const char *const trial_status_names[TRIAL_STATUSES] = {"ok", "failed", "diverged",
                                                        "over-time", "over-memory"};

/* ================================================================ writing */

static void sb_json_str(strbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

/* %.17g: a metric read back is the same double, so reruns compare exactly */
static void sb_json_num(strbuf *b, const char *key, double v)
{
    if (isfinite(v)) sb_printf(b, ",\"%s\":%.17g", key, v);
    else sb_printf(b, ",\"%s\":null", key);
}

char *trial_json(const trial *t)
{
    strbuf b = {0};
    sb_printf(&b, "{\"key\":");
    sb_json_str(&b, t->key);
    sb_printf(&b, ",\"task\":");
    sb_json_str(&b, t->task);
    sb_printf(&b, ",\"candidate\":");
    sb_json_str(&b, t->candidate);
    sb_printf(&b, ",\"preset\":%s,\"rung\":%d,\"steps\":%lld,\"seed\":%lld", t->preset ? "true" : "false",
              t->rung, (long long)t->steps, (long long)t->seed);
    sb_printf(&b, ",\"status\":\"%s\",\"metric\":\"%s\"", trial_status_names[t->status], t->metric);
    sb_json_num(&b, "value", t->value);
    sb_json_num(&b, "val_loss", t->val_loss);
    sb_json_num(&b, "val_acc", t->val_acc);
    sb_json_num(&b, "cpu_s", t->cpu_s);
    sb_json_num(&b, "wall_s", t->wall_s);
    sb_json_num(&b, "ms_per_step", t->ms_per_step);
    sb_json_num(&b, "peak_rss_mb", t->peak_rss_mb);
    sb_json_num(&b, "params", t->params >= 0 ? (double)t->params : NAN);
    sb_printf(&b, ",\"command\":");
    sb_json_str(&b, t->command ? t->command : "");
    sb_printf(&b, ",\"message\":");
    sb_json_str(&b, t->message);
    sb_printf(&b, "}\n");
    if (b.oom) free(b.s), b.s = NULL;
    return b.s;
}

int trial_append(const char *path, const char *line, char *msg, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return snprintf(msg, n, "cannot open %s: %s", path, strerror(errno)), -1;
    size_t len = strlen(line);
    ssize_t w = write(fd, line, len);
    int rc = 0;
    if (w != (ssize_t)len)
        rc = -1, snprintf(msg, n, "cannot append to %s: %s", path,
                          w < 0 ? strerror(errno) : "short write");
    else if (fsync(fd) != 0)
        rc = -1, snprintf(msg, n, "cannot fsync %s: %s", path, strerror(errno));
    close(fd);
    return rc;
}

/* ================================================================ reading
 * A flat JSON object of strings, numbers, true/false and null: what
 * trial_json writes. */

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* A JSON string at p (after its opening quote) into buf (cut to n); the
 * character after its closing quote, or NULL. */
static const char *parse_str(const char *p, char *buf, size_t n)
{
    size_t k = 0;
    for (; *p && *p != '"'; p++) {
        char c = *p;
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                unsigned v = 0;
                for (int i = 1; i <= 4; i++) {
                    if (!isxdigit((unsigned char)p[i])) return NULL;
                    v = v * 16 + (unsigned)(isdigit((unsigned char)p[i])
                                                ? p[i] - '0' : (tolower((unsigned char)p[i]) - 'a' + 10));
                }
                c = v < 0x80 ? (char)v : '?';
                p += 4;
            } else if (*p == 'n') c = '\n';
            else if (*p == 't') c = '\t';
            else if (*p == '"' || *p == '\\' || *p == '/') c = *p;
            else return NULL;
        }
        if (k + 1 < n) buf[k++] = c;
    }
    if (n) buf[k] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

int trial_parse(const char *line, trial *t)
{
    *t = (trial){.value = NAN, .val_loss = NAN, .val_acc = NAN, .cpu_s = NAN, .wall_s = NAN,
                 .ms_per_step = NAN, .peak_rss_mb = NAN, .params = -1};
    size_t cap = strlen(line) + 1;
    char *sval = malloc(cap);
    if (!sval) return -1;
    const char *p = skip_ws(line);
    bool ok = *p == '{', closed = false;
    int seen = 0; /* the members a trial must have */
    p++;
    while (ok && !closed) {
        p = skip_ws(p);
        if (*p == '}') { closed = true; break; }
        char key[32];
        if (*p != '"' || !(p = parse_str(p + 1, key, sizeof key))) { ok = false; break; }
        p = skip_ws(p);
        if (*p++ != ':') { ok = false; break; }
        p = skip_ws(p);
        double num = NAN;
        bool is_str = false, boolean = false;
        if (*p == '"') {
            if (!(p = parse_str(p + 1, sval, cap))) { ok = false; break; }
            is_str = true;
        } else if (!strncmp(p, "null", 4)) p += 4;
        else if (!strncmp(p, "true", 4)) p += 4, boolean = true, num = 1;
        else if (!strncmp(p, "false", 5)) p += 5, boolean = true, num = 0;
        else {
            char *end;
            num = strtod(p, &end);
            if (end == p) { ok = false; break; }
            p = end;
        }
        (void)boolean;
        if (is_str && !strcmp(key, "key")) snprintf(t->key, sizeof t->key, "%s", sval), seen |= 1;
        else if (is_str && !strcmp(key, "task")) snprintf(t->task, sizeof t->task, "%s", sval);
        else if (is_str && !strcmp(key, "candidate"))
            snprintf(t->candidate, sizeof t->candidate, "%s", sval);
        else if (is_str && !strcmp(key, "metric")) snprintf(t->metric, sizeof t->metric, "%s", sval);
        else if (is_str && !strcmp(key, "message")) snprintf(t->message, sizeof t->message, "%s", sval);
        else if (is_str && !strcmp(key, "command")) free(t->command), t->command = strdup(sval);
        else if (is_str && !strcmp(key, "status")) {
            for (int s = 0; s < TRIAL_STATUSES; s++)
                if (!strcmp(sval, trial_status_names[s])) t->status = (trial_status)s, seen |= 2;
        } else if (!strcmp(key, "preset")) t->preset = num == 1;
        else if (!strcmp(key, "rung")) t->rung = isfinite(num) ? (int)num : 0;
        else if (!strcmp(key, "steps")) t->steps = isfinite(num) ? (int64_t)num : 0, seen |= 4;
        else if (!strcmp(key, "seed")) t->seed = isfinite(num) ? (int64_t)num : 0;
        else if (!strcmp(key, "value")) t->value = num;
        else if (!strcmp(key, "val_loss")) t->val_loss = num;
        else if (!strcmp(key, "val_acc")) t->val_acc = num;
        else if (!strcmp(key, "cpu_s")) t->cpu_s = num;
        else if (!strcmp(key, "wall_s")) t->wall_s = num;
        else if (!strcmp(key, "ms_per_step")) t->ms_per_step = num;
        else if (!strcmp(key, "peak_rss_mb")) t->peak_rss_mb = num;
        else if (!strcmp(key, "params")) t->params = isfinite(num) ? (int64_t)num : -1;
        p = skip_ws(p);
        if (*p == ',') p++;
        else if (*p != '}') ok = false;
    }
    free(sval);
    if (!ok || !closed || seen != 7) {
        free(t->command);
        t->command = NULL;
        return -1;
    }
    return 0;
}

void trials_free(trial *t, int n)
{
    for (int i = 0; i < n; i++) free(t[i].command);
    free(t);
}

const trial *trials_find(const trial *ts, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].key, key)) return &ts[i];
    return NULL;
}

/* Whether name is trials.jsonl or trials.rankR.jsonl. */
static bool trial_file(const char *name)
{
    size_t len = strlen(name);
    return !strncmp(name, "trials", 6) && len > 6 && !strcmp(name + len - 6, ".jsonl");
}

int trials_read(const char *dir, trial **out, char *msg, size_t n)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : (snprintf(msg, n, "cannot read %s: %s", dir, strerror(errno)), -1);
    /* the files in name order: every reader sees the lines in the same order */
    char names[64][256];
    int n_files = 0;
    for (struct dirent *e; (e = readdir(d)) && n_files < 64;)
        if (trial_file(e->d_name) && strlen(e->d_name) < 256) snprintf(names[n_files++], 256, "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n_files, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    int count = 0, cap = 0;
    trial *ts = NULL;
    for (int f = 0; f < n_files; f++) {
        char path[4096 + 260], why[128];
        snprintf(path, sizeof path, "%.3800s/%.250s", dir, names[f]);
        FILE *fp = fopen_regular(path, why, sizeof why);
        if (!fp) continue; /* removed meanwhile */
        char *line = NULL;
        size_t line_cap = 0;
        ssize_t len;
        while ((len = getline(&line, &line_cap, fp)) > 0) {
            if (line[len - 1] != '\n') break; /* a line still being written, or cut by a kill */
            trial t;
            if (trial_parse(line, &t) != 0) continue;
            if (trials_find(ts, count, t.key)) { free(t.command); continue; }
            if (count == cap) {
                int nc = cap ? 2 * cap : 256;
                trial *grown = realloc(ts, (size_t)nc * sizeof *ts);
                if (!grown) {
                    free(t.command), free(line), fclose(fp), trials_free(ts, count);
                    return snprintf(msg, n, "out of memory reading %s", path), -1;
                }
                ts = grown, cap = nc;
            }
            ts[count++] = t;
        }
        free(line);
        fclose(fp);
    }
    *out = ts;
    return count;
}
