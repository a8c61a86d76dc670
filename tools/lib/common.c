/* What the driver programs share (common.h). */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "miras.h"

const char *tool_name = "miras";

void tool_start(const char *name)
{
    tool_name = name;
    if (mi_plugin_load_env() != 0) die("%s", mi_error());
}

_Noreturn void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tool_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s --help)\n", tool_name);
    va_end(ap);
    exit(2);
}

/* "tool: <what>message" on stderr, after whatever stdout holds. */
static void report(const char *what, const char *fmt, va_list ap)
{
    fflush(stdout);
    fprintf(stderr, "%s: %s", tool_name, what);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

_Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("", fmt, ap);
    va_end(ap);
    exit(1);
}

void warning(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("warning: ", fmt, ap);
    va_end(ap);
}

bool opt_is(int argc, char **argv, int *i, const char *name, const char **value)
{
    if (strcmp(argv[*i], name) != 0) return false;
    if (value) {
        if (*i + 1 >= argc) die_usage("option %s needs a value", name);
        *value = argv[++*i];
    }
    return true;
}

bool opt_given(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return true;
    return false;
}

int64_t parse_int(const char *opt, const char *text, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        die_usage("%s: '%s' is not a whole number in [%lld, %lld]", opt, text, (long long)lo,
                  (long long)hi);
    return v;
}

double parse_real(const char *opt, const char *text, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= lo && v <= hi))
        die_usage("%s: '%s' is not a number in [%g, %g]", opt, text, lo, hi);
    return v;
}

/* ---------------------------------------------------------------- progress */

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(progress *p, int64_t first, int64_t total)
{
    *p = (progress){.tty = isatty(STDOUT_FILENO) == 1, .first = first, .total = total,
                    .t0 = now_seconds()};
}

double progress_rate(const progress *p, int64_t step, int64_t tokens_per_step)
{
    double dt = now_seconds() - p->t0;
    return dt > 0 ? (double)(step - p->first) * (double)tokens_per_step / dt : 0;
}

void progress_eta(const progress *p, int64_t step, char *buf, size_t n)
{
    double dt = now_seconds() - p->t0;
    int64_t done = step - p->first, left = p->total - step;
    if (done <= 0) {
        snprintf(buf, n, "?");
        return;
    }
    long s = lround(dt / (double)done * (double)left);
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60) snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, n, "%lds", s);
}

void progress_show(progress *p, int64_t step, double loss, double norm, int64_t tokens_per_step)
{
    if (!p->tty) return;
    enum { WIDTH = 24 };
    char bar[WIDTH + 1], eta[32], gn[32] = "";
    int fill = p->total > 0 ? (int)(WIDTH * step / p->total) : WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '-';
    bar[WIDTH] = '\0';
    progress_eta(p, step, eta, sizeof eta);
    if (!isnan(norm)) snprintf(gn, sizeof gn, "  norm %.4f", norm);
    printf("\r\033[Kstep %lld/%lld [%s]  loss %.4f%s  %.0f tok/s  ETA %s", (long long)step,
           (long long)p->total, bar, loss, gn, progress_rate(p, step, tokens_per_step), eta);
    fflush(stdout);
    p->shown = true;
}

void progress_clear(progress *p)
{
    if (p->tty && p->shown) printf("\r\033[K");
    p->shown = false;
}

/* ---------------------------------------------------------------- files */

int make_dir(const char *path, char *msg, size_t n)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return snprintf(msg, n, "output directory name is too long"), -1;
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return snprintf(msg, n, "cannot create directory '%s': %s", buf,
                                strerror(errno)), -1;
            if (end) break;
            *p = '/';
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return snprintf(msg, n, "'%s' is not a directory", path), -1;
    if (access(path, W_OK) != 0)
        return snprintf(msg, n, "cannot write in directory '%s': %s", path, strerror(errno)), -1;
    return 0;
}

int dir_lock(const char *dir, char *msg, size_t n)
{
    char path[4200], pid[32];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return snprintf(msg, n, "cannot create '%s': %s", path, strerror(errno)), -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        ssize_t got = pread(fd, pid, sizeof pid - 1, 0);
        pid[got > 0 ? got : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (err == EWOULDBLOCK) /* no pid yet: the holder is between flock and pwrite */
            return snprintf(msg, n, "'%s' is in use by another run (process %s holds '%s'); "
                            "give another --out or wait for it to end", dir,
                            pid[0] ? pid : "(starting)", path), -1;
        return snprintf(msg, n, "cannot lock '%s': %s", path, strerror(err)), -1;
    }
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        snprintf(msg, n, "cannot write '%s': %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int remove_stale_temps(const char *dir, char *msg, size_t n)
{
    DIR *d = opendir(dir);
    if (!d) return snprintf(msg, n, "cannot list '%s': %s", dir, strerror(errno)), -1;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *tag = strstr(e->d_name, ".tmp.");
        while (tag && strstr(tag + 1, ".tmp.")) tag = strstr(tag + 1, ".tmp.");
        if (!tag || !tag[5] || strspn(tag + 5, "0123456789") != strlen(tag + 5)) continue;
        char *end;
        errno = 0;
        long pid = strtol(tag + 5, &end, 10);
        /* EPERM: the writer lives under another user; only ESRCH means gone */
        if (errno || pid <= 0 || pid == (long)getpid() || (pid_t)pid != pid ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) removed++;
        else warning("cannot remove the stale temporary file '%s': %s", path, strerror(errno));
    }
    closedir(d);
    return removed;
}

int write_atomic(const char *path, const char *bytes, size_t size, char *msg, size_t n)
{
    mi_error_clear();
    if (mi_write_atomic(path, bytes, size) == 0) return 0;
    snprintf(msg, n, "%s", mi_error());
    mi_error_clear();
    return -1;
}

/* ---------------------------------------------------------------- text buffers */

void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || b->oom) return;
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = 2 * (b->len + (size_t)need + 1) + 256;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

/* s with XML's five special characters escaped. */
void sb_xml(strbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        case '\'': sb_printf(b, "&#39;"); break;
        default: sb_printf(b, "%c", *s);
        }
    }
}

/* ---------------------------------------------------------------- the log */

void log_add(train_log *l, log_row r)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        if (!(l->rows = realloc(l->rows, sizeof *l->rows * (size_t)l->cap))) die("out of memory");
    }
    l->rows[l->n++] = r;
}

void log_free(train_log *l)
{
    free(l->rows);
    *l = (train_log){0};
}

static void put_value(strbuf *t, double v)
{
    if (isnan(v)) sb_printf(t, ",");
    else sb_printf(t, ",%.9g", v);
}

/* The log's columns, in the order log_csv writes them. */
static const struct column {
    const char *name;
    size_t offset;            /* of the double in log_row; the step is an int64_t */
    bool required;            /* log_read refuses a file without it */
} columns[] = {
    {"step", offsetof(log_row, step), true},
    {"lr", offsetof(log_row, lr), false},
    {"train_loss", offsetof(log_row, train_loss), true},
    {"grad_norm", offsetof(log_row, grad_norm), false},
    {"val_loss", offsetof(log_row, val_loss), false},
    {"val_acc", offsetof(log_row, val_acc), false},
};
enum { N_COLUMNS = sizeof columns / sizeof columns[0], MAX_CSV_COLUMNS = 32 };

char *log_csv(const train_log *l, size_t *size)
{
    strbuf t = {0};
    for (int k = 0; k < N_COLUMNS; k++) sb_printf(&t, "%s%s", k ? "," : "", columns[k].name);
    sb_printf(&t, "\n");
    for (int i = 0; i < l->n; i++) {
        const log_row *r = &l->rows[i];
        sb_printf(&t, "%lld", (long long)r->step);
        for (int k = 1; k < N_COLUMNS; k++)
            put_value(&t, *(const double *)((const char *)r + columns[k].offset));
        sb_printf(&t, "\n");
    }
    *size = t.len;
    if (t.oom) die("out of memory");
    return t.s;
}

/* The fields of one CSV line, split at commas: each one's start and length
 * (up to max); their number, or -1 if there are more. */
static int csv_split(const char *line, const char **at, size_t *len, int max)
{
    int k = 0;
    for (const char *p = line;; p += len[k++] + 1) {
        if (k == max) return -1;
        at[k] = p, len[k] = strcspn(p, ",\r\n");
        if (p[len[k]] != ',') return k + 1;
    }
}

/* The header: for each of its fields, the index in columns[] (-1: a column
 * this version does not know, skipped); the number of fields, or -1. */
static int log_header(const char *line, int *which, const char *path, char *msg, size_t n)
{
    const char *at[MAX_CSV_COLUMNS];
    size_t len[MAX_CSV_COLUMNS];
    int count = csv_split(line, at, len, MAX_CSV_COLUMNS);
    if (count < 0) return snprintf(msg, n, "%s: more than %d columns", path, MAX_CSV_COLUMNS), -1;
    bool seen[N_COLUMNS] = {false};
    for (int i = 0; i < count; i++) {
        which[i] = -1;
        for (int k = 0; k < N_COLUMNS; k++) {
            if (strlen(columns[k].name) != len[i] || strncmp(at[i], columns[k].name, len[i]))
                continue;
            if (seen[k])
                return snprintf(msg, n, "%s: column '%s' appears twice", path, columns[k].name),
                       -1;
            seen[k] = true, which[i] = k;
        }
    }
    for (int k = 0; k < N_COLUMNS; k++)
        if (columns[k].required && !seen[k])
            return snprintf(msg, n, "%s: not a miras-train log (no '%s' column)", path,
                            columns[k].name), -1;
    return count;
}

/* One data line into r: as many fields as the header, numbers or empty
 * (NaN), a whole step ≥ 0. -1 if not. */
static int log_line(const char *line, const int *which, int count, log_row *r)
{
    const char *at[MAX_CSV_COLUMNS];
    size_t len[MAX_CSV_COLUMNS];
    if (csv_split(line, at, len, MAX_CSV_COLUMNS) != count) return -1;
    if (strspn(at[count - 1] + len[count - 1], "\r\n") != strlen(at[count - 1] + len[count - 1]))
        return -1; /* after the last field, nothing but the line's end */
    *r = (log_row){.lr = NAN, .train_loss = NAN, .grad_norm = NAN, .val_loss = NAN,
                   .val_acc = NAN};
    double step = NAN;
    for (int i = 0; i < count; i++) {
        double v = NAN;
        char *end;
        if (len[i] > 0 && (v = strtod(at[i], &end), end != at[i] + len[i])) return -1;
        if (which[i] == 0) step = v;
        else if (which[i] > 0) *(double *)((char *)r + columns[which[i]].offset) = v;
    }
    if (!(step >= 0 && step < 0x1p62 && step == floor(step))) return -1;
    r->step = (int64_t)step;
    return 0;
}

FILE *fopen_regular(const char *path, char *why, size_t n)
{
    int64_t size;
    int fd = mi_open_regular(path, &size, why, n);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (fd >= 0 && !f) snprintf(why, n, "%s", strerror(errno)), close(fd);
    return f;
}

int log_read(train_log *l, const char *path, int64_t max_step, char *msg, size_t n)
{
    char why[128];
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return 0; /* no log yet */
    FILE *f = fopen_regular(path, why, sizeof why);
    if (!f) return snprintf(msg, n, "cannot read '%s': %s", path, why), -1;
    char line[1024];
    int lineno = 0, rc = 0, which[MAX_CSV_COLUMNS], count = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        log_row r;
        if (++lineno == 1) rc = (count = log_header(line, which, path, msg, n)) < 0 ? -1 : 0;
        else if (log_line(line, which, count, &r) != 0)
            rc = -1, snprintf(msg, n, "%s:%d: not a line of a miras-train log", path, lineno);
        else if (r.step <= max_step) log_add(l, r);
    }
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------------- the plot */

/* A "nice" tick spacing (1, 2 or 5 × 10^k) giving about 5 ticks over range. */
static double tick_step(double range)
{
    double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

typedef struct series {
    const char *id, *label, *color;
    size_t offset;  /* of the double in log_row */
} series;

enum { W = 720, LEFT = 70, RIGHT = 160, TOP = 40, PANEL = 240, GAP = 60 };

/* One panel at vertical offset y0: axes, ticks, labels, a polyline per
 * series with values, a legend. ylo/yhi NaN: fitted to the data. */
static void panel(strbuf *t, const train_log *l, int y0, const char *ylabel, const series *s,
                  int ns, double ylo, double yhi)
{
    double xlo = 0, xhi = l->rows[l->n - 1].step, dlo = INFINITY, dhi = -INFINITY;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < l->n; i++) {
            double v = *(const double *)((const char *)&l->rows[i] + s[k].offset);
            if (isfinite(v)) dlo = fmin(dlo, v), dhi = fmax(dhi, v);
        }
    if (isnan(ylo)) {
        if (!isfinite(dlo)) dlo = 0, dhi = 1;
        double pad = dhi > dlo ? 0.05 * (dhi - dlo) : 0.5;
        ylo = dlo - pad, yhi = dhi + pad;
    }
    if (xhi <= xlo) xhi = xlo + 1;
    int pw = W - LEFT - RIGHT, ph = PANEL;
#define PX(x) (LEFT + ((x) - xlo) / (xhi - xlo) * pw)
#define PY(y) (y0 + ph - ((y) - ylo) / (yhi - ylo) * ph)
    sb_printf(t, "<g class=\"panel\">\n");
    sb_printf(t, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000\"/>\n",
        LEFT, y0, pw, ph);
    double dx = tick_step(xhi - xlo), dy = tick_step(yhi - ylo);
    for (double x = ceil(xlo / dx) * dx; x <= xhi + 1e-9 * dx; x += dx)
        sb_printf(t, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#000\"/>"
               "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
            PX(x), y0 + ph, PX(x), y0 + ph + 5, PX(x), y0 + ph + 18, x);
    for (double y = ceil(ylo / dy) * dy; y <= yhi + 1e-9 * dy; y += dy) {
        double v = fabs(y) < 1e-9 * dy ? 0 : y;
        sb_printf(t, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
               "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n",
            LEFT, PY(y), LEFT + pw, PY(y), LEFT - 6, PY(y) + 4, v);
    }
    sb_printf(t, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">step</text>\n",
        LEFT + pw / 2, y0 + ph + 34);
    sb_printf(t, "<text x=\"16\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" "
           "transform=\"rotate(-90 16 %d)\">%s</text>\n", y0 + ph / 2, y0 + ph / 2, ylabel);
    for (int k = 0; k < ns; k++) {
        sb_printf(t, "<polyline class=\"series\" id=\"%s\" fill=\"none\" stroke=\"%s\" "
               "stroke-width=\"1.5\" points=\"", s[k].id, s[k].color);
        for (int i = 0, first = 1; i < l->n; i++) {
            double v = *(const double *)((const char *)&l->rows[i] + s[k].offset);
            if (!isfinite(v)) continue;
            sb_printf(t, "%s%.1f,%.1f", first ? "" : " ", PX((double)l->rows[i].step),
                PY(fmin(fmax(v, ylo), yhi)));
            first = 0;
        }
        sb_printf(t, "\"/>\n");
        int ly = y0 + 14 + 18 * k;
        sb_printf(t, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
               "<text x=\"%d\" y=\"%d\" font-size=\"12\">%s</text>\n",
            LEFT + pw + 12, ly, LEFT + pw + 32, ly, s[k].color, LEFT + pw + 38, ly + 4,
            s[k].label);
    }
    sb_printf(t, "</g>\n");
#undef PX
#undef PY
}

char *log_svg(const train_log *l, const char *title, size_t *size)
{
    strbuf t = {0};
    int h = TOP + 2 * (PANEL + GAP) + (l->has_acc ? PANEL + GAP : 0);
    sb_printf(&t, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
            "<text x=\"%d\" y=\"24\" font-size=\"14\" text-anchor=\"middle\">",
        W, h, W, h, W, h, W / 2);
    sb_xml(&t, title);
    sb_printf(&t, "</text>\n");
    if (l->n > 0) {
        const series loss[2] = {
            {"train_loss", "train loss", "#1f77b4", offsetof(log_row, train_loss)},
            {"val_loss", "validation loss", "#d62728", offsetof(log_row, val_loss)}};
        panel(&t, l, TOP, "loss (nats/token)", loss, 2, NAN, NAN);
        const series norm = {"grad_norm", "gradient norm", "#ff7f0e",
                             offsetof(log_row, grad_norm)};
        panel(&t, l, TOP + PANEL + GAP, "gradient norm (before clipping)", &norm, 1, NAN, NAN);
        const series acc = {"val_acc", "validation accuracy", "#2ca02c",
                            offsetof(log_row, val_acc)};
        if (l->has_acc) panel(&t, l, TOP + 2 * (PANEL + GAP), "accuracy", &acc, 1, 0, 1);
    }
    sb_printf(&t, "</svg>\n");
    *size = t.len;
    if (t.oom) die("out of memory");
    return t.s;
}

/* The names --model and --set take, for --help. */
static const char *name_at(int what, int i)
{
    switch (what) {
    case 0: return mi_preset_at(i) ? mi_preset_at(i)->name : NULL;
    case 1: return mi_memory_at(i) ? mi_memory_at(i)->name : NULL;
    case 2: return mi_bias_at(i) ? mi_bias_at(i)->name : NULL;
    case 3: return mi_retention_at(i) ? mi_retention_at(i)->name : NULL;
    default: return mi_algorithm_at(i) ? mi_algorithm_at(i)->name : NULL;
    }
}

void list_component_names(FILE *f)
{
    const char *title[5] = {"--model", "memory=", "bias=", "retention=", "algorithm="};
    for (int what = 0; what < 5; what++) {
        int col = fprintf(f, "  %-10s", title[what]);
        for (int i = 0; name_at(what, i); i++) {
            if (col + 1 + (int)strlen(name_at(what, i)) > 79) col = fprintf(f, "\n%12s", "");
            col += fprintf(f, " %s", name_at(what, i));
        }
        fprintf(f, "\n");
    }
}
