/* miras-bench quality: what it prints and draws — a JSON line per case, a
 * table per suite (text and Markdown) and an SVG bar chart per suite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_quality_internal.h"
#include "common.h"

/* s as a JSON string; bytes < 0x20 escaped, the rest (UTF-8 included) as is. */
void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

void json_num(const char *key, double v)
{
    if (isfinite(v)) printf(",\"%s\":%.6g", key, v);
    else printf(",\"%s\":null", key);
}

/* ================================================================ output */

static const char *status_name(case_status s)
{
    return s == CASE_OK ? "ok" : s == CASE_FAILED ? "failed" : "skipped";
}

void print_case_json_line(const quality_case *c)
{
    printf("{\"suite\":");
    json_str(c->suite->name);
    printf(",\"variant\":");
    json_str(c->variant);
    printf(",\"command\":");
    if (c->command) json_str(c->command);
    else printf("null");
    printf(",\"steps\":%lld", (long long)c->steps);
    if (c->params >= 0) printf(",\"params\":%lld", (long long)c->params);
    else printf(",\"params\":null");
    printf(",\"metric\":\"%s\"", c->suite->metric);
    json_num("val_loss", c->val_loss);
    json_num("val_acc", c->val_acc);
    json_num("train_loss", c->train_loss);
    json_num("wall_s", c->wall_s);
    json_num("cpu_s", c->cpu_s);
    if (c->suite->eval) {
        json_num("eval_wall_s", c->eval_wall_s);
        json_num("eval_cpu_s", c->eval_cpu_s);
        printf(",\"points\":[");
        for (int k = 0; k < c->n_points; k++) {
            printf("%s{\"length\":%lld", k ? "," : "", (long long)c->points[k].length);
            if (c->points[k].pairs) printf(",\"pairs\":%lld", (long long)c->points[k].pairs);
            json_num("accuracy", c->points[k].accuracy);
            printf("}");
        }
        printf("]");
    }
    if (c->status == CASE_OK) printf(",\"mixer_overrides\":"), json_str(c->overrides);
    else printf(",\"mixer_overrides\":null");
    printf(",\"status\":\"%s\"", status_name(c->status));
    if (c->status != CASE_OK) printf(",\"message\":"), json_str(c->message);
    json_num("floor", c->floor != 0 ? c->floor : NAN);
    if (c->status == CASE_SKIPPED) printf(",\"ok\":null");
    else printf(",\"ok\":%s", c->status == CASE_OK && !below_floor(c) ? "true" : "false");
    printf(",\"out\":");
    json_str(c->dir);
    printf("}\n");
    fflush(stdout);
}

/* The baseline case of c's suite that ran, or NULL. */
const quality_case *baseline_of(const quality_case *cases, int n, const quality_suite *s)
{
    if (!s->baseline) return NULL;
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s && !strcmp(cases[i].variant, s->baseline)
            && cases[i].status == CASE_OK)
            return &cases[i];
    return NULL;
}

static void fmt_params(char *buf, size_t n, int64_t p)
{
    if (p < 0) snprintf(buf, n, "-");
    else if (p >= 1000000) snprintf(buf, n, "%.2fM", (double)p / 1e6);
    else if (p >= 1000) snprintf(buf, n, "%.1fk", (double)p / 1e3);
    else snprintf(buf, n, "%lld", (long long)p);
}

static void fmt_floor(char *buf, size_t n, const quality_case *c)
{
    if (c->floor == 0) snprintf(buf, n, "-");
    else snprintf(buf, n, "%s %g", lower_is_better(c->suite->metric) ? "<=" : ">=", c->floor);
}

static int64_t suite_steps_run(const quality_case *cases, int n, const quality_suite *s)
{
    int64_t steps = 0;
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s) steps = cases[i].steps;
    return steps;
}

/* The table of one suite's cases: the metric, its delta to the baseline
 * (when the suite has one and it ran), val_loss beside an accuracy, the
 * last train_loss, parameters, wall time, floor and status. */
void print_suite_table(const quality_case *cases, int n, const quality_suite *s,
                       const char *data_name, const char *svg)
{
    const quality_case *base = baseline_of(cases, n, s);
    bool acc = !lower_is_better(s->metric);
    int64_t steps = suite_steps_run(cases, n, s);
    int w = 22; /* the variant column: the longest name */
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s && (int)strlen(cases[i].variant) > w)
            w = (int)strlen(cases[i].variant);
    printf("\nquality %s: %s after %lld step%s (%s)%s%s%s%s\n", s->name, s->metric,
           (long long)steps, steps == 1 ? "" : "s", acc ? "higher is better" : "lower is better",
           base ? "; delta vs " : "", base ? s->baseline : "", data_name ? "; text " : "",
           data_name ? data_name : "");
    printf("%-*s %9s", w, "variant", s->metric);
    if (base) printf(" %9s", "delta");
    if (acc) printf(" %9s", "val_loss");
    printf(" %10s %8s %9s %7s  %s\n", "train_loss", "params", "wall", "floor", "status");
    for (int i = 0; i < n; i++) {
        const quality_case *c = &cases[i];
        if (c->suite != s) continue;
        char floor[24], params[24], wall[24] = "-";
        fmt_floor(floor, sizeof floor, c);
        fmt_params(params, sizeof params, c->params);
        if (c->status != CASE_SKIPPED && c->wall_s > 0)
            snprintf(wall, sizeof wall, c->wall_s < 10 ? "%.2f s" : "%.1f s", c->wall_s);
        if (c->status != CASE_OK) {
            printf("%-*s %9s", w, c->variant, "-");
            if (base) printf(" %9s", "-");
            if (acc) printf(" %9s", "-");
            printf(" %10s %8s %9s %7s  %s: %.100s%s\n", "-", params, wall, floor,
                   c->status == CASE_FAILED ? "FAILED" : "skipped", c->message,
                   strlen(c->message) > 100 ? "..." : "");
            continue;
        }
        printf("%-*s %9.4f", w, c->variant, metric_of(c));
        if (base && c == base) printf(" %9s", "base");
        else if (base) printf(" %+9.4f", metric_of(c) - metric_of(base));
        if (acc) printf(" %9.4f", c->val_loss);
        printf(" %10.4f %8s %9s %7s  %s\n", c->train_loss, params, wall, floor,
               below_floor(c) ? "BELOW FLOOR" : "ok");
    }
    if (svg) printf("chart: %s\n", svg);
}

/* s for a Markdown table cell: '|' escaped, line breaks as spaces. */
static void sb_md(strbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') sb_printf(b, "\\|");
        else sb_printf(b, "%c", *s == '\n' || *s == '\r' ? ' ' : *s);
    }
}

/* The same table in Markdown (DIR/quality-<suite>.md): a line saying what
 * the metric is, then the table; the variant names in code spans. The rows
 * in the suite's order; a failed or skipped case says why. */
char *suite_markdown(const quality_case *cases, int n, const quality_suite *s,
                     const char *data_name, size_t *size)
{
    const quality_case *base = baseline_of(cases, n, s);
    bool acc = !lower_is_better(s->metric);
    int64_t steps = suite_steps_run(cases, n, s);
    strbuf b = {0};
    sb_printf(&b, "`%s` after %lld step%s (%s)", s->metric, (long long)steps,
              steps == 1 ? "" : "s", acc ? "higher is better" : "lower is better");
    if (base) sb_printf(&b, "; Δ vs `%s`", s->baseline);
    if (data_name) sb_printf(&b, "; text `%s`", data_name);
    sb_printf(&b, ".\n\n| variant | %s |%s%s train_loss | params | wall | status |\n", s->metric,
              base ? " Δ |" : "", acc ? " val_loss |" : "");
    sb_printf(&b, "|---|---:|%s%s---:|---:|---:|---|\n", base ? "---:|" : "", acc ? "---:|" : "");
    for (int i = 0; i < n; i++) {
        const quality_case *c = &cases[i];
        if (c->suite != s) continue;
        char params[24], wall[24] = "-";
        fmt_params(params, sizeof params, c->params);
        if (c->status != CASE_SKIPPED && c->wall_s > 0)
            snprintf(wall, sizeof wall, c->wall_s < 10 ? "%.2f s" : "%.1f s", c->wall_s);
        sb_printf(&b, "| `");
        sb_md(&b, c->variant);
        if (c->status != CASE_OK) {
            sb_printf(&b, "` | - |%s%s - | %s | %s | %s: ", base ? " - |" : "", acc ? " - |" : "",
                      params, wall, c->status == CASE_FAILED ? "FAILED" : "skipped");
            sb_md(&b, c->message);
            sb_printf(&b, " |\n");
            continue;
        }
        sb_printf(&b, "` | %.4f |", metric_of(c));
        if (base && c == base) sb_printf(&b, " base |");
        else if (base) sb_printf(&b, " %+.4f |", metric_of(c) - metric_of(base));
        if (acc) sb_printf(&b, " %.4f |", c->val_loss);
        sb_printf(&b, " %.4f | %s | %s | %s |\n", c->train_loss, params, wall,
                  below_floor(c) ? "BELOW FLOOR" : "ok");
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *size = b.len;
    return b.s;
}

/* ---------------------------------------------------------------- the chart
 * Horizontal bars, best first, one per variant, the value (and its delta to
 * the baseline) beside each; the baseline's bar in its own colour with a
 * dashed line at its value across the chart; a floor as a black tick on its
 * row; a failed or skipped case as a word instead of a bar. */
#define SVG_RIGHT_W 170 /* the value and delta beside the longest bar */
#define SVG_LABEL_W 190 /* variant names; a longer name takes 16 + 8 px a character */
#define SVG_BAR_W 400   /* the axis from 0 to the scale's top */
#define SVG_ROW 22
#define SVG_TOP 58

static const quality_case *sort_cases_base;
static int cmp_by_metric(const void *a, const void *b)
{
    const quality_case *x = &sort_cases_base[*(const int *)a];
    const quality_case *y = &sort_cases_base[*(const int *)b];
    bool rx = x->status == CASE_OK, ry = y->status == CASE_OK;
    if (rx != ry) return rx ? -1 : 1;
    if (!rx) return *(const int *)a - *(const int *)b;
    double mx = metric_of(x), my = metric_of(y);
    if (!lower_is_better(x->suite->metric)) mx = -mx, my = -my;
    return mx < my ? -1 : mx > my ? 1 : *(const int *)a - *(const int *)b;
}

/* A round top for the axis and its tick step (1, 2 or 5 times a power of 10). */
static double axis_top(double max, double *tick)
{
    if (!(max > 0)) max = 1;
    double mag = pow(10, floor(log10(max)));
    const double m[] = {0.1, 0.2, 0.5, 1, 2, 5, 10};
    *tick = mag;
    for (int i = 0; i < 7; i++)
        if (max / (m[i] * mag) <= 6) {
            *tick = m[i] * mag;
            break;
        }
    return ceil(max / *tick - 1e-9) * *tick;
}

char *suite_svg(const quality_case *cases, int n, const quality_suite *s, int64_t steps,
                size_t *size)
{
    int idx[MAX_CASES], rows = 0;
    double max = 0;
    for (int i = 0; i < n; i++) {
        if (cases[i].suite != s) continue;
        idx[rows++] = i;
        if (cases[i].status == CASE_OK) max = fmax(max, metric_of(&cases[i]));
        if (cases[i].floor != 0) max = fmax(max, cases[i].floor);
    }
    sort_cases_base = cases;
    qsort(idx, (size_t)rows, sizeof *idx, cmp_by_metric);
    bool acc = !lower_is_better(s->metric);
    double tick, top = acc ? 1.0 : axis_top(max, &tick);
    if (acc) tick = 0.2;
    const quality_case *base = baseline_of(cases, n, s);
    int h = SVG_TOP + rows * SVG_ROW + 44, label_w = SVG_LABEL_W;
    for (int r = 0; r < rows; r++)
        if (16 + 8 * (int)strlen(cases[idx[r]].variant) > label_w)
            label_w = 16 + 8 * (int)strlen(cases[idx[r]].variant);
    strbuf b = {0};
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "font-family=\"sans-serif\" font-size=\"12\">\n"
              "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
              label_w + SVG_BAR_W + SVG_RIGHT_W, h);
    sb_printf(&b, "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">quality ");
    sb_xml(&b, s->name);
    sb_printf(&b, ": %s after %lld step%s</text>\n", s->metric, (long long)steps,
              steps == 1 ? "" : "s");
    sb_printf(&b, "<text x=\"10\" y=\"38\" fill=\"#555\">%s; best first%s", acc
              ? "validation accuracy, higher is better" : "validation loss, lower is better",
              base ? "; dashed line: the baseline, " : "");
    if (base) sb_xml(&b, s->baseline);
    bool floors = false;
    for (int r = 0; r < rows; r++) floors |= cases[idx[r]].floor != 0;
    sb_printf(&b, "%s</text>\n", floors ? "; black tick: a floor" : "");
    double x0 = label_w, scale = SVG_BAR_W / top;
    int y_axis = SVG_TOP + rows * SVG_ROW;
    for (double t = 0; t <= top + 1e-9; t += tick) {
        double x = x0 + t * scale;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g</text>\n",
                  x, SVG_TOP - 4, x, y_axis, x, y_axis + 16, t);
    }
    for (int r = 0; r < rows; r++) {
        const quality_case *c = &cases[idx[r]];
        int y = SVG_TOP + r * SVG_ROW;
        sb_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", label_w - 8, y + 15);
        sb_xml(&b, c->variant);
        sb_printf(&b, "</text>\n");
        if (c->status != CASE_OK) {
            sb_printf(&b, "<text x=\"%.1f\" y=\"%d\" fill=\"%s\">%s</text>\n", x0 + 4, y + 15,
                      c->status == CASE_FAILED ? "#c62828" : "#888",
                      c->status == CASE_FAILED ? "failed" : "skipped");
            continue;
        }
        double m = metric_of(c), w = fmax(0.0, fmin(m, top)) * scale;
        const char *fill = c == base ? "#f58518" : below_floor(c) ? "#e45756" : "#4c78a8";
        sb_printf(&b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"16\" fill=\"%s\"/>\n",
                  x0, y + 3, w, fill);
        sb_printf(&b, "<text x=\"%.1f\" y=\"%d\">%.4f", x0 + w + 5, y + 15, m);
        if (base && c != base) sb_printf(&b, " (%+.4f)", m - metric_of(base));
        if (c == base) sb_printf(&b, " (baseline)");
        if (below_floor(c)) sb_printf(&b, " below floor");
        sb_printf(&b, "</text>\n");
        if (c->floor != 0) {
            double fx = x0 + fmin(c->floor, top) * scale;
            sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#222\" "
                      "stroke-width=\"2\"/>\n", fx, y + 1, fx, y + 21);
        }
    }
    if (base) {
        double bx = x0 + fmin(metric_of(base), top) * scale;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#f58518\" "
                  "stroke-dasharray=\"4 3\"/>\n", bx, SVG_TOP - 4, bx, y_axis);
    }
    sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", x0,
              SVG_TOP - 4, x0, y_axis);
    sb_printf(&b, "</svg>\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *size = b.len;
    return b.s;
}
