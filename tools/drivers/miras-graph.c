/* miras-graph: the op graph of a MIRAS variant as Graphviz DOT. Builds tiny
 * random inputs that require grad, runs the memory layer over them (one
 * token by default: one inner-loop step) and writes mi_graph_dot of the
 * output. Render it with `dot -Tsvg graph.dot > graph.svg`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "extend.h"

#ifndef MIRAS_VERSION
#define MIRAS_VERSION "unknown"
#endif

static void usage(FILE *f)
{
    fprintf(f,
        "usage: miras-graph [--model NAME] [--set KEY=VALUE]... [--chunk B]\n"
        "                   [--tokens T] [--dim D] [--out FILE]\n"
        "Writes the op graph of one memory layer as Graphviz DOT: ops are boxes,\n"
        "inputs ellipses (bold: requires grad), edges carry dtype and shape.\n"
        "\n"
        "  --model NAME     start from a preset (default: memory=matrix bias=l2\n"
        "                   retention=l2 algorithm=gd)\n"
        "  --set KEY=VALUE  change one setting, e.g. memory=mlp, bias=huber,\n"
        "                   algorithm=momentum, closed_form=false\n"
        "  --chunk B        tokens per chunk\n"
        "  --tokens T       tokens in the sequence (default 1: one inner-loop step)\n"
        "  --dim D          key and value width (default 4)\n"
        "  --out FILE       write there (atomically) instead of to stdout\n"
        "  --help, --version\n"
        "\n"
        "Names:\n");
    list_component_names(f);
    fprintf(f, "\nExit status: 0 ok, 1 runtime failure, 2 usage error.\n");
}

static int usage_error(const char *what, const char *detail)
{
    fprintf(stderr, "miras-graph: %s%s (try --help)\n", what, detail ? detail : "");
    return 2;
}

/* A whole number from 1 to 64 written in decimal, else -1. */
static int count(const char *text)
{
    size_t len = strlen(text);
    int n = len >= 1 && len <= 2 && strspn(text, "0123456789") == len ? atoi(text) : -1;
    return n >= 1 && n <= 64 ? n : -1;
}

/* A leaf input named for the graph: N(0, sd) noise, or `level` everywhere. */
static mi_tensor *input(mi_rng *rng, const char *name, int rank, const int64_t *shape,
                        double sd, double level, bool grad)
{
    mi_tensor *t = sd > 0 ? mi_randn(rng, MI_F32, rank, shape, 0, sd)
                          : mi_full(MI_F32, rank, shape, level);
    if (t) {
        t->name = name;
        mi_requires_grad(t, grad);
    }
    return t;
}

/* Runs the layer on T tokens and writes the graph of y to f; 0 or -1. */
static int write_graph(FILE *f, mi_miras *m, const mi_preset *preset, int64_t tokens,
                       int64_t dim)
{
    mi_rng rng;
    mi_rng_seed(&rng, 1);
    int64_t n = 1, positions = tokens * mi_miras_writes(m);
    mi_tensor *q = input(&rng, "q", MI_SHAPE(n, tokens, dim), 1, 0, true);
    mi_tensor *k = input(&rng, "k", MI_SHAPE(n, positions, dim), 1, 0, true);
    mi_tensor *v = input(&rng, "v", MI_SHAPE(n, positions, dim), 1, 0, true);

    /* gates: the preset's kind and level, else one per head at a typical level */
    static const char *name[4] = {"eta", "alpha", "mu", "delta"};
    const double level[4] = {0.1, 0.9, 0.9, 1.0};
    mi_gate_spec spec[4] = {{MI_GATE_UNUSED}};
    if (preset) {
        spec[0] = preset->eta, spec[1] = preset->alpha;
        spec[2] = preset->mu, spec[3] = preset->delta;
    }
    mi_tensor *g[4];
    for (int j = 0; j < 4; j++) {
        /* a fixed decay per head (slopes) is a constant α of one head here */
        if (spec[j].kind == MI_GATE_UNUSED || spec[j].kind == MI_GATE_SLOPES)
            spec[j] = (mi_gate_spec){MI_GATE_HEAD, level[j], 0};
        int rank = spec[j].kind == MI_GATE_CHANNEL ? 3 : 2;
        int64_t width = j == 1 && m->config.alpha_both_sides ? 2 * dim : dim; /* DFW: dv + dk */
        g[j] = input(&rng, name[j], rank, (int64_t[]){n, positions, width}, 0, spec[j].value,
                     spec[j].kind != MI_GATE_CONST);
    }
    if (preset && preset->key_is_one_minus_alpha) k = mi_add_scalar(mi_neg(g[1]), 1.0);

    static char w_name[MI_MEMORY_MAX_WEIGHTS][16];
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];
    int nw, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (m->memory->shapes(&m->config, dim, dim, &nw, ranks, shapes) != 0 ||
        m->memory->init(&m->config, dim, dim, &rng, MI_F32, w0) != 0)
        return -1;
    for (int i = 0; i < nw; i++) {
        snprintf(w_name[i], sizeof w_name[i], "w0.%d", i);
        w0[i]->name = w_name[i];
        mi_requires_grad(w0[i], true);
    }
    mi_miras_gates gates = {.eta = g[0], .alpha = g[1], .mu = g[2], .delta = g[3]};
    mi_tensor *y = mi_miras_forward(m, q, k, v, &gates, w0, NULL);
    if (!y) return -1;
    y->name = "y";
    return mi_graph_dot(f, &y, 1);
}

int main(int argc, char **argv)
{
    tool_start("miras-graph");
    const char *model = NULL, *out = NULL, *chunk = NULL, *tokens = "1", *dim = "4";
    const char *sets[64];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        if (!strcmp(a, "--version")) return printf("miras-graph %s\n", MIRAS_VERSION), 0;
        const char **value = !strcmp(a, "--model") ? &model : !strcmp(a, "--out") ? &out
                           : !strcmp(a, "--chunk") ? &chunk : !strcmp(a, "--tokens") ? &tokens
                           : !strcmp(a, "--dim") ? &dim
                           : !strcmp(a, "--set") && n_sets < 64 ? &sets[n_sets++] : NULL;
        if (!value) return usage_error("unknown option ", a);
        if (i + 1 == argc) return usage_error("missing value after ", a);
        *value = argv[++i];
    }
    int n_tokens = count(tokens), width = count(dim);
    if (n_tokens < 1)
        return usage_error("--tokens must be a whole number from 1 to 64, not ", tokens);
    if (width < 1) return usage_error("--dim must be a whole number from 1 to 64, not ", dim);

    const mi_preset *preset = model ? mi_preset_find(model) : NULL;
    if (model && !preset) {
        fprintf(stderr, "miras-graph: no preset named '%s'; presets:", model);
        for (int i = 0; mi_preset_at(i); i++) fprintf(stderr, " %s", mi_preset_at(i)->name);
        fprintf(stderr, "\n");
        return 2;
    }
    mi_miras_config cfg = mi_miras_config_default();
    if (preset && mi_preset_config(preset, &cfg) != 0) return usage_error(mi_error(), NULL);
    cfg.slots = (int)width; /* the lattice memory has one slot per key channel */
    for (int i = 0; i < n_sets; i++)
        if (mi_miras_config_set(&cfg, sets[i]) != 0) return usage_error(mi_error(), NULL);
    char chunk_set[64];
    snprintf(chunk_set, sizeof chunk_set, "chunk=%s", chunk ? chunk : "");
    if (chunk && mi_miras_config_set(&cfg, chunk_set) != 0) return usage_error(mi_error(), NULL);
    mi_miras m;
    if (mi_miras_init(&m, &cfg) != 0) return usage_error(mi_error(), NULL);

    /* to stdout, or to FILE through a temporary file and a rename */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out ? out : "", (long)getpid());
    FILE *f = out ? fopen(tmp, "w") : stdout;
    if (!f) {
        fprintf(stderr, "miras-graph: cannot write '%s': %s\n", out, strerror(errno));
        return 1;
    }
    mi_scope *scope = mi_scope_new("miras-graph");
    mi_scope_enter(scope);
    int rc = write_graph(f, &m, preset, n_tokens, width);
    mi_scope_leave();
    mi_scope_free(scope);
    if (rc != 0) fprintf(stderr, "miras-graph: %s\n", mi_error());
    if (out && (fclose(f) != 0 || (rc == 0 && rename(tmp, out) != 0))) {
        fprintf(stderr, "miras-graph: cannot write '%s': %s\n", out, strerror(errno));
        rc = -1;
    }
    if (out && rc != 0) remove(tmp);
    if (out && rc == 0)
        printf("miras-graph: wrote %s (render it: dot -Tsvg %s -o graph.svg)\n", out, out);
    return rc ? 1 : 0;
}
