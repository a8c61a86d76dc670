/* miras-bench quality: the suites that evaluate each trained checkpoint
 * again with miras-eval (a suite's `eval`), e.g. needle-in-a-haystack exact
 * match at 1x … 16x the training length, or MQAR at a longer L and more
 * pairs. The case's points are miras-eval's accuracies, in its order; they
 * are printed as a table (rows: variants; columns: the points, as the S-NIAH
 * tables of the Titans and MIRAS papers) and drawn as a line chart. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bench_quality_internal.h"
#include "common.h"

/* The next number after `key` in s (from *at on), moving *at past it; NaN if none. */
static double json_number_after(const char **at, const char *end, const char *key)
{
    const char *p = strstr(*at, key);
    if (!p || p >= end) return NAN;
    p += strlen(key);
    char *stop;
    double v = strtod(p, &stop);
    if (stop == p) return NAN;
    *at = stop;
    return v;
}

/* miras-eval --json's "niah":[…] or "mqar":[…] entries into c->points. */
static int parse_points(quality_case *c, const char *json, char *msg, size_t n)
{
    const char *list = strstr(json, "\"niah\":[");
    bool niah = list != NULL;
    if (!list) list = strstr(json, "\"mqar\":[");
    if (!list) return snprintf(msg, n, "miras-eval's JSON has no niah or mqar list"), -1;
    const char *end = strchr(list, ']');
    if (!end) return snprintf(msg, n, "miras-eval's JSON: the list does not end"), -1;
    c->n_points = 0;
    for (const char *at = strchr(list, '{'); at && at < end; at = strchr(at, '{')) {
        const char *close = strchr(at, '}');
        if (!close || close > end) break;
        if (c->n_points == MAX_POINTS)
            return snprintf(msg, n, "more than %d points in miras-eval's output", MAX_POINTS), -1;
        quality_point *p = &c->points[c->n_points];
        const char *q = at;
        double len = json_number_after(&q, close, niah ? "\"length\":" : "\"seq_len\":");
        double pairs = niah ? 0 : json_number_after(&q, close, "\"pairs\":");
        double acc = json_number_after(&q, close, "\"accuracy\":");
        if (isnan(len) || isnan(pairs) || isnan(acc))
            return snprintf(msg, n, "miras-eval's JSON: an entry without its length or "
                            "accuracy"), -1;
        *p = (quality_point){.length = (int64_t)len, .pairs = (int64_t)pairs, .accuracy = acc};
        c->n_points++;
        at = close;
    }
    if (!c->n_points) return snprintf(msg, n, "miras-eval's JSON: an empty list"), -1;
    return 0;
}

void run_case_eval(quality_case *c, const char *eval_exe, int threads)
{
    char ckpt[PATH_LEN + 32], out[PATH_LEN + 32], err[PATH_LEN + 32], words[512], thr[16];
    char msg[1024];
    const char *argv[64];
    int argc = 0;
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.safetensors", c->dir);
    snprintf(out, sizeof out, "%s/eval.json", c->dir);
    snprintf(err, sizeof err, "%s/eval.err", c->dir);
    snprintf(words, sizeof words, "%s", c->suite->eval);
    argv[argc++] = eval_exe;
    argv[argc++] = ckpt;
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w && argc < 58;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    argv[argc++] = "--json";
    if (threads) snprintf(thr, sizeof thr, "%d", threads), argv[argc++] = "--threads",
                 argv[argc++] = thr;
    argv[argc] = NULL;
    int status = 0;
    c->status = CASE_FAILED;
    if (quality_spawn(eval_exe, argv, out, err, &status, &c->eval_wall_s, &c->eval_cpu_s, msg,
                      sizeof msg) != 0) {
        snprintf(c->message, sizeof c->message, "miras-eval: %.400s", msg);
        return;
    }
    FILE *f = fopen(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : err, "r");
    char text[8192] = "";
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = '\0';
    if (f) fclose(f);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        text[strcspn(text, "\n")] = '\0';
        snprintf(c->message, sizeof c->message, "miras-eval failed: %.300s", text);
        return;
    }
    if (parse_points(c, text, msg, sizeof msg) != 0) {
        snprintf(c->message, sizeof c->message, "%.400s", msg);
        return;
    }
    c->status = CASE_OK;
}

/* ---------------------------------------------------------------- tables */

/* The suite's columns: the points of its case that has the most (the first of them). */
static const quality_case *columns_of(const quality_case *cases, int n, const quality_suite *s)
{
    const quality_case *best = NULL;
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s && cases[i].status == CASE_OK && cases[i].n_points &&
            (!best || cases[i].n_points > best->n_points))
            best = &cases[i];
    return best;
}

/* A column's head: "256" (niah, bytes; "(2x)" against the first) or "L=128 N=4" (mqar). */
static void point_label(char *buf, size_t n, const quality_point *p, const quality_point *first,
                        bool times)
{
    if (p->pairs) snprintf(buf, n, "L=%lld N=%lld", (long long)p->length, (long long)p->pairs);
    else if (times && first->length > 0 && p->length % first->length == 0)
        snprintf(buf, n, "%lld (%lldx)", (long long)p->length,
                 (long long)(p->length / first->length));
    else snprintf(buf, n, "%lld", (long long)p->length);
}

/* "603 s (93 s CPU)": the wall time, and the CPU time where it was measured */
static void fmt_wall(char *buf, size_t n, double s, double cpu)
{
    if (!(s > 0)) snprintf(buf, n, "-");
    else if (!(cpu >= 0)) snprintf(buf, n, s < 10 ? "%.2f s" : "%.0f s", s);
    else snprintf(buf, n, s < 10 ? "%.2f s (%.2f s CPU)" : "%.0f s (%.0f s CPU)", s, cpu);
}

char *points_markdown(const quality_case *cases, int n, const quality_suite *s, size_t *size)
{
    const quality_case *head = columns_of(cases, n, s);
    strbuf b = {0};
    sb_printf(&b, "%s per column (`miras-eval %s`); %s: the training's last validation; "
              "wall: training, then evaluation.\n\n| variant | %s |",
              head && head->points[0].pairs ? "Recall accuracy"
              : "Exact match of the greedy answer up to the terminator", s->eval, s->metric,
              s->metric);
    int cols = head ? head->n_points : 0;
    for (int k = 0; k < cols; k++) {
        char l[48];
        point_label(l, sizeof l, &head->points[k], &head->points[0], true);
        sb_printf(&b, " %s |", l);
    }
    sb_printf(&b, " train | eval |\n|---|");
    for (int k = 0; k < cols + 3; k++) sb_printf(&b, "---:|");
    sb_printf(&b, "\n");
    for (int i = 0; i < n; i++) {
        const quality_case *c = &cases[i];
        if (c->suite != s) continue;
        char tw[48], ew[48];
        fmt_wall(tw, sizeof tw, c->wall_s, c->cpu_s);
        fmt_wall(ew, sizeof ew, c->eval_wall_s, c->eval_cpu_s);
        sb_printf(&b, "| `%s` |", c->variant);
        if (c->status == CASE_OK && isfinite(metric_of(c))) sb_printf(&b, " %.3f |", metric_of(c));
        else sb_printf(&b, " %s |", c->status == CASE_FAILED ? "failed" : "-");
        for (int k = 0; k < cols; k++)
            if (k < c->n_points) sb_printf(&b, " %.3f |", c->points[k].accuracy);
            else sb_printf(&b, " %s |", c->status == CASE_FAILED ? "failed" : "-");
        sb_printf(&b, " %s | %s |\n", tw, ew);
    }
    if (b.oom) return free(b.s), NULL;
    *size = b.len;
    return b.s;
}

/* ---------------------------------------------------------------- the chart
 * Accuracy (0 to 1) against the points, equally spaced (the lengths double
 * from one to the next), a polyline and markers per variant, its name in the
 * legend. The palette: Tableau's 10 and two more. */
static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
                                      "#17becf", "#000000"};
enum { CW = 560, CH = 300, CLEFT = 60, CTOP = 50, CLEGEND = 190 };

char *points_svg(const quality_case *cases, int n, const quality_suite *s, size_t *size)
{
    const quality_case *head = columns_of(cases, n, s);
    int cols = head ? head->n_points : 0, rows = 0;
    for (int i = 0; i < n; i++) rows += cases[i].suite == s;
    int h = CTOP + CH + 60, lh = CTOP + 18 * rows + 20;
    if (lh > h) h = lh;
    strbuf b = {0};
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "font-family=\"sans-serif\" font-size=\"12\">\n"
              "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
              "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">quality ",
              CLEFT + CW + CLEGEND, h);
    sb_xml(&b, s->name);
    bool mqar = head && head->points[0].pairs;
    sb_printf(&b, ": %s against length</text>\n<text x=\"10\" y=\"38\" fill=\"#555\">"
              "miras-eval ", mqar ? "recall accuracy" : "exact match");
    sb_xml(&b, s->eval);
    sb_printf(&b, "</text>\n");
    for (int t = 0; t <= 5; t++) { /* accuracy 0, 0.2, … 1 */
        double y = CTOP + CH - t * CH / 5.0;
        sb_printf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%.1f</text>\n",
                  CLEFT, y, CLEFT + CW, y, CLEFT - 6, y + 4, t / 5.0);
    }
#define CX(k) (CLEFT + (cols > 1 ? (double)(k) * CW / (cols - 1) : CW / 2.0))
    for (int k = 0; k < cols; k++) {
        char l[48];
        point_label(l, sizeof l, &head->points[k], &head->points[0], false);
        sb_printf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
                  CX(k), CTOP + CH + 16, l);
    }
    sb_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n"
              "<text x=\"16\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 16 %d)\">"
              "%s</text>\n", CLEFT + CW / 2, CTOP + CH + 36,
              mqar ? "MQAR length L and pairs N" : "prompt length (bytes)", CTOP + CH / 2,
              CTOP + CH / 2, mqar ? "recall accuracy" : "exact match");
    sb_printf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
              "stroke=\"#333\"/>\n", CLEFT, CTOP, CW, CH);
    for (int i = 0, r = 0; i < n; i++) {
        const quality_case *c = &cases[i];
        if (c->suite != s) continue;
        const char *color = palette[r % (int)(sizeof palette / sizeof *palette)];
        int m = c->n_points < cols ? c->n_points : cols;
        if (m) {
            sb_printf(&b, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" "
                      "stroke-width=\"1.8\" points=\"", color);
            for (int k = 0; k < m; k++)
                sb_printf(&b, "%s%.1f,%.1f", k ? " " : "", CX(k),
                          CTOP + CH - c->points[k].accuracy * CH);
            sb_printf(&b, "\"/>\n");
            for (int k = 0; k < m; k++)
                sb_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", CX(k),
                          CTOP + CH - c->points[k].accuracy * CH, color);
        }
        int ly = CTOP + 8 + 18 * r++;
        sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                  "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">", CLEFT + CW + 12, ly,
                  CLEFT + CW + 32, ly, color, CLEFT + CW + 38, ly + 4);
        sb_xml(&b, c->variant);
        sb_printf(&b, "%s</text>\n", c->status == CASE_OK ? "" : c->status == CASE_FAILED
                                                                  ? " (failed)" : " (skipped)");
    }
#undef CX
    sb_printf(&b, "</svg>\n");
    if (b.oom) return free(b.s), NULL;
    *size = b.len;
    return b.s;
}
