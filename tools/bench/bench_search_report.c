/* miras-bench search: what a search reports (bench_search.h). Each candidate
 * stands at the last rung it reached in a task: its metric there (the mean
 * over the seeds), that trial's CPU time per step (the run's user + system
 * CPU over its steps: start-up and validation included, as a real run pays
 * them) and its parameters. The frontier of a task is the Pareto set of the
 * last rung's candidates: none other there is both better and faster. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_search.h"
#include "common.h"

typedef struct standing {
    int rung;          /* the last rung with a trial (-1: none) */
    int64_t steps;
    double value;      /* mean over the seeds; NaN unless every seed's trial is ok */
    double ms;         /* mean CPU ms per step over the seeds */
    double loss;       /* mean validation loss: an accuracy's tie-break, as the rungs' */
    int64_t params;
    trial_status status;
    const trial *first; /* the rung's first seed's trial (its command, its message) */
} standing;

/* The candidate's standing in task k. */
static standing stand(const trial *ts, int n, const search_task_report *k, const char *cand)
{
    standing s = {.rung = -1, .value = NAN, .ms = NAN, .loss = NAN, .params = -1};
    for (int r = k->rungs - 1; r >= 0 && s.rung < 0; r--) {
        double sum = 0, ms = 0, loss = 0;
        int count = 0;
        bool all_ok = true;
        for (int i = 0; i < n; i++) {
            const trial *t = &ts[i];
            if (strcmp(t->task, k->task) || strcmp(t->candidate, cand) || t->steps != k->budgets[r])
                continue;
            if (!s.first) s.first = t, s.status = t->status;
            if (t->status != TRIAL_OK) {
                all_ok = false;
                s.status = t->status, s.first = t;
            } else {
                sum += t->value, ms += t->ms_per_step, loss += t->val_loss, count++;
                if (t->params >= 0) s.params = t->params;
            }
        }
        if (!s.first) continue;
        s.rung = r, s.steps = k->budgets[r];
        if (all_ok && count) s.value = sum / count, s.ms = ms / count, s.loss = loss / count;
    }
    return s;
}

/* The candidate's --set string: "memory=mlp bias=l2 …" (the base's name
 * dropped), or "NAME (preset)". */
static void set_string(char *buf, size_t n, const char *cand, const char *base)
{
    size_t bl = strlen(base);
    if (strncmp(cand, base, bl) || cand[bl] != '+') {
        snprintf(buf, n, "%s (preset)", cand);
        return;
    }
    snprintf(buf, n, "%s", cand + bl + 1);
    for (char *p = buf; *p; p++)
        if (*p == '+' && p[1] && strchr(p + 1, '=')) *p = ' ';
}

static bool better(const char *metric, double a, double b)
{
    return metric_lower_better(metric) ? a < b : a > b;
}

/* ================================================================ the chart */

static const char *const rung_colors[] = {"#c8c8c8", "#8fb4d9", "#3b75af", "#1f3f66", "#0b1d33"};

/* Quality against CPU ms per step (log scale), each candidate at its last rung
 * (darker: a later rung), the last rung's frontier as a line, the presets
 * named. */
static char *task_svg(const standing *st, const char *const *cands, int nc,
                      const search_task_report *k, const char *base, size_t *size)
{
    const int W = 800, H = 480, L = 70, R = 210, T = 40, B = 50;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < nc; i++) {
        if (!isfinite(st[i].value) || !(st[i].ms > 0)) continue;
        x0 = fmin(x0, log10(st[i].ms)), x1 = fmax(x1, log10(st[i].ms));
        y0 = fmin(y0, st[i].value), y1 = fmax(y1, st[i].value);
    }
    if (!isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (x1 - x0 < 0.1) x0 -= 0.05, x1 += 0.05;
    if (y1 - y0 < 1e-3) y0 -= 0.01, y1 += 0.01;
    double pad = 0.05 * (y1 - y0);
    y0 -= pad, y1 += pad, x0 -= 0.03 * (x1 - x0), x1 += 0.03 * (x1 - x0);
#define PX(v) (L + ((v) - x0) / (x1 - x0) * (W - L - R))
#define PY(v) (H - B - ((v) - y0) / (y1 - y0) * (H - T - B))
    strbuf b = {0};
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "font-family=\"sans-serif\" font-size=\"11\">\n"
                  "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    sb_printf(&b, "<text x=\"%d\" y=\"20\" font-size=\"13\">search ", L);
    sb_xml(&b, k->task);
    sb_printf(&b, ": %s (%s is better) against CPU ms per step; base ", k->metric,
              metric_lower_better(k->metric) ? "lower" : "higher");
    sb_xml(&b, base);
    sb_printf(&b, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                  "stroke=\"#888\"/>\n", L, T, W - L - R, H - T - B);
    for (int i = 0; i <= 4; i++) { /* ticks */
        double xv = x0 + (x1 - x0) * i / 4, yv = y0 + (y1 - y0) * i / 4;
        sb_printf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.3g</text>\n", PX(xv),
                  H - B + 15, pow(10, xv));
        sb_printf(&b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3f</text>\n", L - 5,
                  PY(yv) + 4, yv);
    }
    sb_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">CPU ms per step (log scale)"
                  "</text>\n", (L + W - R) / 2, H - 12);
    sb_printf(&b, "<text x=\"15\" y=\"%d\" transform=\"rotate(-90 15 %d)\" "
                  "text-anchor=\"middle\">%s</text>\n", (T + H - B) / 2, (T + H - B) / 2,
              k->metric);
    /* the frontier: the last rung's points by time, each better than all faster ones */
    int last = -1;
    for (int i = 0; i < nc; i++)
        if (isfinite(st[i].value) && st[i].rung > last) last = st[i].rung;
    int *order = malloc((size_t)(nc ? nc : 1) * sizeof *order), n_o = 0;
    for (int i = 0; order && i < nc; i++)
        if (isfinite(st[i].value) && st[i].rung == last) order[n_o++] = i;
    for (int i = 1; i < n_o; i++) /* insertion sort by time, then by quality */
        for (int j = i; j > 0; j--) {
            const standing *p = &st[order[j - 1]], *q = &st[order[j]];
            if (p->ms < q->ms || (p->ms == q->ms && !better(k->metric, q->value, p->value))) break;
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    sb_printf(&b, "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" "
                  "class=\"frontier\" points=\"");
    bool have = false;
    double best = NAN;
    int n_front = 0;
    for (int i = 0; i < n_o; i++) {
        const standing *p = &st[order[i]];
        if (have && !better(k->metric, p->value, best)) continue;
        if (have) sb_printf(&b, " %.1f,%.1f", PX(log10(p->ms)), PY(best)); /* a step */
        sb_printf(&b, " %.1f,%.1f", PX(log10(p->ms)), PY(p->value));
        best = p->value, have = true, n_front++;
    }
    sb_printf(&b, "\"/>\n");
    for (int i = 0; i < nc; i++) {
        const standing *p = &st[i];
        if (!isfinite(p->value) || !(p->ms > 0)) continue;
        bool preset = strncmp(cands[i], base, strlen(base)) || cands[i][strlen(base)] != '+';
        const char *color = rung_colors[p->rung < 5 ? p->rung : 4];
        sb_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\" stroke=\"%s\">"
                      "<title>", PX(log10(p->ms)), PY(p->value), preset ? 5 : 3,
                  preset ? "#ff7f0e" : color, preset ? "black" : "none");
        sb_xml(&b, cands[i]);
        sb_printf(&b, ": %.4f at %lld steps, %.2f ms/step</title></circle>\n", p->value,
                  (long long)p->steps, p->ms);
        if (preset) {
            sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#a04000\">", PX(log10(p->ms)) + 7,
                      PY(p->value) - 5);
            sb_xml(&b, cands[i]);
            sb_printf(&b, "</text>\n");
        }
    }
    /* the legend */
    int ly = T + 10;
    for (int r = 0; r < k->rungs && r < 5; r++, ly += 16)
        sb_printf(&b, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">"
                      "rung %d: %lld steps</text>\n", W - R + 12, ly, rung_colors[r],
                  W - R + 20, ly + 4, r, (long long)k->budgets[r]);
    sb_printf(&b, "<circle cx=\"%d\" cy=\"%d\" r=\"5\" fill=\"#ff7f0e\" stroke=\"black\"/>"
                  "<text x=\"%d\" y=\"%d\">preset (named)</text>\n", W - R + 12, ly, W - R + 20,
              ly + 4);
    ly += 16;
    sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
                  "stroke-width=\"1.5\"/><text x=\"%d\" y=\"%d\">Pareto frontier, last rung ("
                  "%d)</text>\n", W - R + 6, ly, W - R + 18, ly, W - R + 20, ly + 4, n_front);
    sb_printf(&b, "</svg>\n");
#undef PX
#undef PY
    free(order);
    if (b.oom) free(b.s), b.s = NULL;
    *size = b.len;
    return b.s;
}

/* ================================================================ the tables */

typedef struct row_order {
    int cand;
    const standing *s;
    const char *metric;
    const char *name;
} row_order;

/* The last rung first, then by the metric, the validation loss, the name. */
static int by_standing(const void *a, const void *b)
{
    const row_order *x = a, *y = b;
    if (x->s->rung != y->s->rung) return x->s->rung > y->s->rung ? -1 : 1;
    bool fx = isfinite(x->s->value), fy = isfinite(y->s->value);
    if (fx != fy) return fx ? -1 : 1;
    if (fx && x->s->value != y->s->value) return better(x->metric, x->s->value, y->s->value) ? -1 : 1;
    if (fx && x->s->loss != y->s->loss) return x->s->loss < y->s->loss ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void cell(strbuf *b, const standing *s)
{
    if (s->rung < 0) sb_printf(b, " - | - |");
    else if (isfinite(s->value))
        sb_printf(b, " %.4f (%lld) | %.2f |", s->value, (long long)s->steps, s->ms);
    else sb_printf(b, " %s (%lld) | - |", trial_status_names[s->status], (long long)s->steps);
}

int search_report(const trial *ts, int n, const search_task_report *tasks, int n_tasks,
                  const char *const *cands, int nc, const char *base, int top, const char *out,
                  bool json_only)
{
    standing *st = calloc((size_t)(nc ? nc : 1) * (size_t)(n_tasks ? n_tasks : 1), sizeof *st);
    row_order *rows = calloc((size_t)(nc ? nc : 1), sizeof *rows);
    if (!st || !rows) return free(st), free(rows), fprintf(stderr, "miras-bench: out of memory\n"), -1;
    for (int k = 0; k < n_tasks; k++)
        for (int i = 0; i < nc; i++) st[k * nc + i] = stand(ts, n, &tasks[k], cands[i]);
    int rc = 0;
    char path[4096 + 96], msg[1024], set[512];
    strbuf md = {0};
    sb_printf(&md, "## Every candidate\n\nbase %s; each task's cell: its metric at the last rung "
                   "the candidate reached (its steps), mean over the seeds, and CPU ms per step.\n\n"
                   "| candidate (--set) | params |", base);
    for (int k = 0; k < n_tasks; k++)
        sb_printf(&md, " %s %s | ms/step |", tasks[k].task, tasks[k].metric);
    sb_printf(&md, " status |\n|---|---:|");
    for (int k = 0; k < n_tasks; k++) sb_printf(&md, "---:|---:|");
    sb_printf(&md, "---|\n");
    for (int i = 0; i < nc; i++)
        rows[i] = (row_order){i, &st[i], tasks[0].metric, cands[i]};
    qsort(rows, (size_t)nc, sizeof *rows, by_standing);
    for (int r = 0; r < nc; r++) {
        int i = rows[r].cand;
        int64_t params = -1;
        strbuf status = {0};
        for (int k = 0; k < n_tasks; k++) {
            const standing *s = &st[k * nc + i];
            if (s->params >= 0) params = s->params;
            if (s->rung < 0)
                sb_printf(&status, "%s%s: not run", status.len ? "; " : "", tasks[k].task);
            if (s->rung >= 0 && s->status != TRIAL_OK)
                sb_printf(&status, "%s%s: %s", status.len ? "; " : "", tasks[k].task,
                          trial_status_names[s->status]);
        }
        set_string(set, sizeof set, cands[i], base);
        sb_printf(&md, "| %s | %lld |", set, (long long)params);
        for (int k = 0; k < n_tasks; k++) cell(&md, &st[k * nc + i]);
        sb_printf(&md, " %s |\n", status.len ? status.s : "ok");
        free(status.s);
    }
    for (int k = 0; k < n_tasks; k++) {
        const search_task_report *t = &tasks[k];
        size_t size;
        char *svg = task_svg(&st[k * nc], cands, nc, t, base, &size);
        snprintf(path, sizeof path, "%s/search-%s.svg", out, t->task);
        if (!svg || write_atomic(path, svg, size, msg, sizeof msg) != 0)
            fprintf(stderr, "miras-bench: %s\n", svg ? msg : "out of memory for the chart"), rc = -1;
        free(svg);
        /* the top: the last rung's, by the metric */
        for (int i = 0; i < nc; i++)
            rows[i] = (row_order){i, &st[k * nc + i], t->metric, cands[i]};
        qsort(rows, (size_t)nc, sizeof *rows, by_standing);
        sb_printf(&md, "\n## %s: the top %d\n\n%s after the last rung's steps (%s is better); "
                       "chart: search-%s.svg\n\n| # | candidate (--set) | %s | steps | ms/step | "
                       "params |\n|---:|---|---:|---:|---:|---:|\n", t->task, top, t->metric,
                  metric_lower_better(t->metric) ? "lower" : "higher", t->task, t->metric);
        int shown = 0;
        strbuf cmds = {0};
        for (int r = 0; r < nc && shown < top; r++) {
            const standing *s = rows[r].s;
            if (!isfinite(s->value)) continue;
            set_string(set, sizeof set, cands[rows[r].cand], base);
            shown++;
            sb_printf(&md, "| %d | %s | %.4f | %lld | %.2f | %lld |\n", shown, set, s->value,
                      (long long)s->steps, s->ms, (long long)s->params);
            sb_printf(&cmds, "%d. `%s`\n", shown, s->first && s->first->command ? s->first->command : "");
        }
        sb_printf(&md, "\nThe commands that reproduce them (the first seed's run):\n\n%s",
                  cmds.s ? cmds.s : "");
        free(cmds.s);
    }
    snprintf(path, sizeof path, "%s/search.md", out);
    if (md.oom || write_atomic(path, md.s, md.len, msg, sizeof msg) != 0)
        fprintf(stderr, "miras-bench: %s\n", md.oom ? "out of memory for the table" : msg), rc = -1;
    if (!json_only && md.s) printf("%s\nreport: %s/search.md; charts: %s/search-<task>.svg\n", md.s, out, out);
    free(md.s);
    free(st), free(rows);
    return rc;
}
