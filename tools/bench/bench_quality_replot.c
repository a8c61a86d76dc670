/* miras-bench quality --replot FILE[,FILE...]: the cases back from the JSON
 * lines earlier runs printed (one object per line; the lines of a table in
 * the same file are passed over), so that the runs of several invocations,
 * or of several machines, make one table and one chart. A later line of the
 * same suite and variant replaces an earlier one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_quality_internal.h"
#include "common.h"
#include "tensor/io/json.h"

static const json_value *member(const json_value *o, const char *key)
{
    for (size_t i = 0; i < o->len; i++)
        if (!strcmp(o->u.members[i].key, key)) return &o->u.members[i].value;
    return NULL;
}

/* A number member (NaN: absent or null); text is the line the document was parsed from. */
static double number(const json_value *o, const char *key, const char *text)
{
    const json_value *v = member(o, key);
    return v && v->type == JSON_NUMBER ? strtod(text + v->pos, NULL) : NAN;
}

static const char *string(const json_value *o, const char *key)
{
    const json_value *v = member(o, key);
    return v && v->type == JSON_STRING ? v->u.s : NULL;
}

/* One case line into c: 0, or -1 with a message. */
static int read_case(const json_value *r, const char *text, quality_case *c, char *msg, size_t n)
{
    const char *suite = string(r, "suite"), *variant = string(r, "variant"),
               *status = string(r, "status");
    if (!suite || !variant || !status)
        return snprintf(msg, n, "a case needs string members suite, variant and status"), -1;
    const quality_suite *su = NULL;
    for (int s = 0; s < n_quality_suites && !su; s++)
        if (!strcmp(quality_suites[s].name, suite)) su = &quality_suites[s];
    if (!su) return snprintf(msg, n, "unknown suite '%.64s'", suite), -1;
    if (strlen(variant) >= sizeof c->variant)
        return snprintf(msg, n, "variant '%.64s...' is too long", variant), -1;
    case_status st = !strcmp(status, "ok") ? CASE_OK
                   : !strcmp(status, "failed") ? CASE_FAILED
                   : !strcmp(status, "skipped") ? CASE_SKIPPED : (case_status)-1;
    if ((int)st < 0) return snprintf(msg, n, "status '%.32s' is not ok, failed or skipped", status), -1;
    *c = (quality_case){.suite = su, .status = st, .params = -1};
    snprintf(c->variant, sizeof c->variant, "%s", variant);
    double steps = number(r, "steps", text), params = number(r, "params", text);
    c->steps = isfinite(steps) ? (int64_t)steps : 0;
    if (isfinite(params)) c->params = (int64_t)params;
    c->val_loss = number(r, "val_loss", text);
    c->val_acc = number(r, "val_acc", text);
    c->train_loss = number(r, "train_loss", text);
    c->wall_s = number(r, "wall_s", text);
    c->cpu_s = number(r, "cpu_s", text);
    c->eval_wall_s = number(r, "eval_wall_s", text);
    c->eval_cpu_s = number(r, "eval_cpu_s", text);
    double floor = number(r, "floor", text);
    c->floor = isfinite(floor) ? floor : 0;
    const char *m = string(r, "message"), *out = string(r, "out");
    if (m) snprintf(c->message, sizeof c->message, "%s", m);
    if (out) snprintf(c->dir, sizeof c->dir, "%s", out);
    const json_value *pts = member(r, "points");
    if (pts && pts->type == JSON_ARRAY) {
        if (pts->len > MAX_POINTS) return snprintf(msg, n, "more than %d points", MAX_POINTS), -1;
        for (size_t k = 0; k < pts->len; k++) {
            const json_value *p = &pts->u.items[k];
            double len = p->type == JSON_OBJECT ? number(p, "length", text) : NAN;
            if (!(len > 0)) return snprintf(msg, n, "point %zu has no positive length", k), -1;
            double pairs = number(p, "pairs", text);
            c->points[c->n_points++] = (quality_point){
                .length = (int64_t)len, .pairs = isfinite(pairs) ? (int64_t)pairs : 0,
                .accuracy = number(p, "accuracy", text)};
        }
    }
    return 0;
}

/* The cases of one file into cases[*count..max): 0, or -1 with a message. */
static int read_file(const char *path, quality_case *cases, int *count, int max, char *msg,
                     size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(msg, n, "cannot open %s", path), -1;
    char *line = NULL;
    size_t cap = 0;
    long len, at = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        at++;
        if (line[0] != '{') continue; /* a table's line */
        json_doc doc;
        json_error err;
        char why[256];
        quality_case c;
        if (mi_json_parse(&doc, line, (size_t)len, &err) != 0)
            snprintf(why, sizeof why, "not JSON at byte %zu: %s", err.pos, err.msg), rc = -1;
        else if (doc.root.type != JSON_OBJECT) snprintf(why, sizeof why, "not an object"), rc = -1;
        else if (!member(&doc.root, "suite")) rc = 0; /* not a case (a target, a summary) */
        else rc = read_case(&doc.root, line, &c, why, sizeof why);
        if (rc == 0 && doc.root.type == JSON_OBJECT && member(&doc.root, "suite")) {
            int i = 0;
            while (i < *count && !(cases[i].suite == c.suite && !strcmp(cases[i].variant, c.variant)))
                i++;
            if (i == *count && *count == max) snprintf(why, sizeof why, "more than %d cases", max), rc = -1;
            else {
                cases[i] = c;
                if (i == *count) (*count)++;
            }
        }
        mi_json_doc_free(&doc);
        if (rc != 0) snprintf(msg, n, "%s:%ld: %s", path, at, why);
    }
    if (rc == 0 && ferror(f)) rc = -1, snprintf(msg, n, "cannot read %s", path);
    free(line);
    fclose(f);
    return rc;
}

int quality_read_cases(const char *files, quality_case *cases, int max, char *msg, size_t n)
{
    char list[4096];
    if (snprintf(list, sizeof list, "%s", files) >= (int)sizeof list)
        return snprintf(msg, n, "the file list is too long"), -1;
    int count = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        if (read_file(p, cases, &count, max, msg, n) != 0) return -1;
    return count;
}
