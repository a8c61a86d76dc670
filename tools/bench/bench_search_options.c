/* miras-bench search: its options, their defaults and --help (bench_search.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_search.h"
#include "extend.h"

const char *const search_axis_options[4] = {"--memories", "--biases", "--retentions",
                                            "--algorithms"};

void bench_search_usage(FILE *f)
{
    fprintf(f,
        "search (the MIRAS design space by successive halving; docs/search.md):\n"
        "  miras-bench search [options]   every memory x bias x retention x algorithm of the\n"
        "                    registry that builds, as BASE+memory=M+bias=B+retention=R+algorithm=A\n"
        "  --suite A,B       the tasks: quality suites (default " SEARCH_DEFAULT_TASKS "), each its own\n"
        "                    successive halving\n"
        "  --budget N        rung 0's steps (default 100); rung r trains budget*eta^r steps\n"
        "  --rungs R         rungs (default 3)\n"
        "  --eta E           keep the best ceil(n/E) of a rung, budget times E (default 3)\n"
        "  --budgets B0,B1,. every rung's steps, in place of --budget and --rungs (--eta\n"
        "                    still sets the fraction kept)\n"
        "  --seeds A,B,..    seeds of every trial; a rung ranks the mean (default: the suite's)\n"
        "  --base PRESET     the preset the components replace: its gates and block (titans)\n"
        "  --memories, --biases, --retentions, --algorithms A,B,..  restrict an axis\n"
        "  --grid KEY=V1,V2  every candidate once per value (repeatable: the product)\n"
        "  --only C1,C2,..   only these candidates (names as --list prints them): a re-check\n"
        "                    of a search's best on more seeds or another task\n"
        "  --set KEY=VALUE   for every candidate and preset (repeatable)\n"
        "  --presets A,B,..  reference presets run at every rung (default\n"
        "                    " SEARCH_DEFAULT_PRESETS "; '' none)\n"
        "  --jobs N          trials at once on this process (default 1); under mpirun each rank\n"
        "                    takes every size-th trial of a rung (--out on a shared directory)\n"
        "  --max-seconds S   CPU seconds per trial; past it the trial is over-time\n"
        "  --max-rss-mb M    peak RSS per trial; past it over-memory (address space capped at\n"
        "                    2M + 1024 MB)\n"
        "  --top K           configurations listed per task (default 5)\n"
        "  --out DIR         trials.jsonl (trials.rankR.jsonl), candidates.txt, search.md,\n"
        "                    search-<task>.svg and the runs (default " SEARCH_DEFAULT_OUT "); a rerun\n"
        "                    with the same DIR runs only the trials it has no line for\n"
        "  --list            the candidates and the invalid combinations with the reason, no run\n"
        "  --report          no run: the report from DIR's lines as they are (a search under\n"
        "                    way or stopped: its rungs as far as they got)\n"
        "  --quick           the test suite's search: quick-mqar, 4 candidates and\n"
        "                    gated-deltanet, budget 8, 2 rungs, eta 2\n"
        "  --train, --data, --json-only  as for quality\n");
}

int search_usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "miras-bench: search: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see miras-bench --help)\n");
    return 2;
}

int search_parse_opts(int argc, char **argv, search_opts *o)
{
    *o = (search_opts){.tasks = SEARCH_DEFAULT_TASKS, .base = "titans", .presets = SEARCH_DEFAULT_PRESETS,
                       .budget = 100, .rungs = 3, .eta = 3, .jobs = 1, .top = 5,
                       .out = SEARCH_DEFAULT_OUT};
    bool budget = false, rungs = false, eta = false, tasks = false, axes = false, presets = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_search_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--list")) { o->list = true; continue; }
        if (!strcmp(a, "--report")) { o->report = true; continue; }
        if (!strcmp(a, "--quick")) { o->quick = true; continue; }
        if (!strcmp(a, "--json-only")) { o->json_only = true; continue; }
        if (a[0] != '-') return search_usage_error("unexpected argument '%s'%s", a, "");
        if (!v) return search_usage_error("%s wants a value%s", a, "");
        char *end;
        double x = strtod(v, &end);
        bool number = *v && !*end && isfinite(x);
        int ax = -1;
        for (int k = 0; k < 4; k++) if (!strcmp(a, search_axis_options[k])) ax = k;
        if (ax >= 0) o->axes[ax] = v, axes = true;
        else if (!strcmp(a, "--suite")) o->tasks = v, tasks = true;
        else if (!strcmp(a, "--base")) o->base = v;
        else if (!strcmp(a, "--presets")) o->presets = v, presets = true;
        else if (!strcmp(a, "--seeds")) o->seeds = v;
        else if (!strcmp(a, "--only")) o->only = v;
        else if (!strcmp(a, "--budgets")) o->budgets = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--train")) o->train = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--grid") || !strcmp(a, "--set")) {
            bool g = !strcmp(a, "--grid");
            int *cnt = g ? &o->n_grids : &o->n_sets;
            if (*cnt == SEARCH_MAX_LIST) return search_usage_error("%s given too often%s", a, "");
            if (!strchr(v, '=') || v[0] == '=' || strchr(v, ' '))
                return search_usage_error(g ? "%s wants KEY=V1,V2,..., got '%s'" : "%s wants KEY=VALUE, "
                                   "got '%s'", a, v);
            (g ? o->grids : o->sets)[(*cnt)++] = v;
        } else if (!strcmp(a, "--budget") || !strcmp(a, "--rungs") || !strcmp(a, "--jobs") ||
                   !strcmp(a, "--top")) {
            if (!number || x < 1 || x > 1e7 || x != floor(x))
                return search_usage_error("%s wants a positive integer, got '%s'", a, v);
            if (!strcmp(a, "--budget")) o->budget = (int64_t)x, budget = true;
            else if (!strcmp(a, "--rungs")) o->rungs = (int)x, rungs = true;
            else if (!strcmp(a, "--jobs")) o->jobs = (int)x;
            else o->top = (int)x;
        } else if (!strcmp(a, "--eta") || !strcmp(a, "--max-seconds") || !strcmp(a, "--max-rss-mb")) {
            if (!number || !(x > 0)) return search_usage_error("%s wants a positive number, got '%s'", a, v);
            if (!strcmp(a, "--eta")) {
                if (!(x > 1)) return search_usage_error("%s wants a number above 1, got '%s'", a, v);
                o->eta = x, eta = true;
            } else if (!strcmp(a, "--max-seconds")) o->max_seconds = x;
            else o->max_rss_mb = x;
        } else return search_usage_error("unknown option '%s'%s", a, "");
        i++;
    }
    if (o->budgets) { /* rung r's steps: increasing positive integers */
        if (budget || rungs) return search_usage_error("--budgets replaces --budget and --rungs%s%s", "", "");
        o->rungs = 0;
        int64_t prev = 0;
        for (const char *p = o->budgets; *p;) {
            char *end;
            long long b = strtoll(p, &end, 10);
            if (end == p || (*end && *end != ',') || b <= prev || o->rungs == 16)
                return search_usage_error("--budgets wants up to 16 increasing step counts, got '%s'%s",
                                   o->budgets, "");
            o->rung_steps[o->rungs++] = prev = b;
            p = *end ? end + 1 : end;
        }
        budget = rungs = true; /* --quick's defaults do not replace them */
    }
    if (o->rungs > 16) return search_usage_error("--rungs: at most 16, got %s%s", "more", "");
    if (o->jobs > 64) return search_usage_error("--jobs: at most 64%s%s", "", "");
    if (o->quick) {
        if (!tasks) o->tasks = "quick-mqar";
        if (!budget) o->budget = 8;
        if (!rungs) o->rungs = 2;
        if (!eta) o->eta = 2;
        if (!presets) o->presets = "gated-deltanet";
        if (!axes) o->axes[0] = "matrix", o->axes[1] = "dot,l2", o->axes[2] = "none,l2",
                   o->axes[3] = "gd";
    }
    if (!mi_preset_find(o->base))
        return search_usage_error("--base: no MIRAS preset '%s'%s", o->base, "");
    if (o->data && access(o->data, R_OK) != 0)
        return search_usage_error("--data '%s': %s", o->data, strerror(errno));
    return 0;
}
