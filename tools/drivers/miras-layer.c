/* miras-layer: runs one MIRAS memory layer on tensors read from a
 * safetensors file and writes its output y and the gradients of
 * sum(y ⊙ r) with respect to every input to another safetensors file, so
 * that another implementation (your PyTorch code, say) can be checked
 * against this one. docs/layer.md has the names, layouts and semantics. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "extend.h"

#ifndef MIRAS_VERSION
#define MIRAS_VERSION "unknown"
#endif

static void usage(FILE *f)
{
    fprintf(f,
        "usage: miras-layer --in FILE --out FILE [--model NAME] [--set KEY=VALUE]...\n"
        "                   [--chunk B] [--dtype f32|f64]\n"
        "Runs one MIRAS memory layer on the tensors in FILE (safetensors) and writes\n"
        "y and the gradients of sum(y * r) with respect to every input.\n"
        "\n"
        "  --in FILE        inputs (below)\n"
        "  --out FILE       outputs, written atomically (temp file + rename)\n"
        "  --model NAME     start from a preset (default: memory=matrix bias=l2\n"
        "                   retention=l2 algorithm=gd)\n"
        "  --set KEY=VALUE  change one setting, e.g. memory=mlp, memory.depth=3,\n"
        "                   bias=huber, retention=kl, algorithm=momentum, steps=3, p=4\n"
        "  --chunk B        tokens per chunk (1: the exact per-token recurrence)\n"
        "  --dtype f32|f64  compute dtype (default: the dtype of q in the file)\n"
        "  --help, --version\n"
        "\n"
        "Inputs (N sequences, T tokens, T' = steps*T for algorithm=multistep, else T):\n"
        "  q [N,T,dk]  k [N,T',dk]  v [N,T',dv]\n"
        "  eta, alpha, mu, delta   gates, [N,T'] per head, or per channel: [N,T',dv]\n"
        "      (matrix, vector), [N,T',dv+(depth-1)*h] for eta, alpha, mu of an mlp\n"
        "      memory (one per output row of each layer; delta stays [N,T',dv]);\n"
        "      eta always, alpha if the retention decays, mu for momentum, delta for\n"
        "      huber/huber-norm/yaad; a gate the layer does not use is ignored, and a\n"
        "      preset's constant gate (linear-attention's eta = 1) may be left out\n"
        "  w0.0, w0.1, ...   initial memory weights (matrix: w0.0 [dv,dk]; mlp: one per\n"
        "      layer), shared, or with [N] in front for one memory per sequence\n"
        "  r [N,T,dv]  weights of the output in the loss (default: ones)\n"
        "  k may be left out for hgrn2 (k = 1 - alpha); other tensors are ignored.\n"
        "Outputs: y [N,T,dv] (y_t = M_t(q_t), read after write) and grad.NAME for\n"
        "every input used: the gradient of sum(y * r) with respect to it.\n"
        "\n"
        "Names:\n");
    list_component_names(f);
    fprintf(f, "\nExit status: 0 ok, 1 runtime failure (unreadable file, missing tensor,\n"
               "shapes), 2 usage error.\n");
}

static int usage_error(const char *what, const char *detail)
{
    fprintf(stderr, "miras-layer: %s%s (try --help)\n", what, detail ? detail : "");
    return 2;
}

/* The inputs gradients are taken for, in the order they go to the output. */
typedef struct inputs {
    int n;
    mi_named_tensor t[8 + MI_MEMORY_MAX_WEIGHTS];
} inputs;

/* Tensor `name` of the file in dtype dt, as an input to differentiate;
 * NULL when the file has none. */
static mi_tensor *take(const mi_safetensors *st, const char *name, mi_dtype dt, inputs *in)
{
    mi_tensor *t = mi_requires_grad(mi_tensor_to(mi_safetensors_get(st, name), dt), true);
    if (t) {
        t->name = name;
        in->t[in->n++] = (mi_named_tensor){name, t};
    }
    return t;
}

static int missing(const char *path, const char *name, const char *why)
{
    mi_error_set("'%s' has no tensor '%s' (%s)", path, name, why);
    return -1;
}

/* Loads, runs, differentiates and saves; 0, or -1 with a message. */
static int run_layer(mi_miras *m, const mi_preset *preset, bool slots_set, const char *in_path,
                     const char *out_path, const char *dtype_name)
{
    mi_safetensors *st = mi_safetensors_load(in_path);
    if (!st) return -1;
    if (mi_safetensors_check_finite(st, in_path) != 0) return -1;
    mi_tensor *q_file = mi_safetensors_get(st, "q");
    mi_dtype dt = dtype_name ? (strcmp(dtype_name, "f32") ? MI_F64 : MI_F32)
                             : q_file && q_file->dtype == MI_F32 ? MI_F32 : MI_F64;
    inputs in = {0};
    mi_tensor *q = take(st, "q", dt, &in), *k = take(st, "k", dt, &in), *v = take(st, "v", dt, &in);
    if (!q) return missing(in_path, "q", "queries, [N,T,dk]");
    if (!v) return missing(in_path, "v", "values, [N,T',dv]");
    int64_t n_seq = v->shape[0], positions = v->rank > 1 ? v->shape[1] : 0;

    /* the gates this combination of components uses */
    const char *gate_name[4] = {"eta", "alpha", "mu", "delta"};
    char used_by[4][64] = {"every layer: the inner learning rate"};
    snprintf(used_by[1], sizeof used_by[1], "retention '%s': the kept fraction",
             m->retention->name);
    snprintf(used_by[2], sizeof used_by[2], "algorithm 'momentum': the momentum decay");
    snprintf(used_by[3], sizeof used_by[3], "bias '%s': the threshold", m->bias->name);
    bool needed[4] = {true, m->retention->uses_alpha, m->algorithm->uses_mu,
                      m->bias->needs_delta};
    mi_gate_spec spec[4] = {{MI_GATE_UNUSED}};
    if (preset) {
        spec[0] = preset->eta, spec[1] = preset->alpha;
        spec[2] = preset->mu, spec[3] = preset->delta;
    }
    mi_tensor *g[4] = {NULL};
    for (int j = 0; j < 4; j++) {
        if (!needed[j]) continue;
        g[j] = take(st, gate_name[j], dt, &in);
        if (!g[j] && spec[j].kind == MI_GATE_CONST)
            g[j] = mi_full(dt, MI_SHAPE(n_seq, positions), spec[j].value);
        char why[128];
        snprintf(why, sizeof why, "needed by %s, [N,T'] or [N,T',dv]", used_by[j]);
        if (!g[j]) return missing(in_path, gate_name[j], why);
    }
    if (!k && preset && preset->key_is_one_minus_alpha) k = mi_add_scalar(mi_neg(g[1]), 1.0);
    if (!k) return missing(in_path, "k", "keys, [N,T',dk]");

    /* the initial memory: as many weights as the memory kind has */
    int64_t dk = q->rank ? q->shape[q->rank - 1] : 1, dv = v->rank ? v->shape[v->rank - 1] : 1;
    if (!slots_set && m->memory->keys_are_slots) m->config.slots = (int)dk;
    int nw, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (m->memory->shapes(&m->config, dk, dv, &nw, ranks, shapes) != 0) return -1;
    static char w_name[MI_MEMORY_MAX_WEIGHTS][16];
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];
    for (int i = 0; i < nw; i++) {
        snprintf(w_name[i], sizeof w_name[i], "w0.%d", i);
        char why[128], s[64];
        snprintf(why, sizeof why, "initial weight %d of %d of the %s memory, %s", i, nw,
                 m->memory->name, mi_shape_str(s, sizeof s, ranks[i], shapes[i]));
        if (!(w0[i] = take(st, w_name[i], dt, &in))) return missing(in_path, w_name[i], why);
    }

    /* y, then the gradients of sum(y ⊙ r) */
    mi_miras_gates gates = {.eta = g[0], .alpha = g[1], .mu = g[2], .delta = g[3]};
    mi_tensor *y = mi_miras_forward(m, q, k, v, &gates, w0, NULL);
    if (!y) return -1;
    mi_tensor *r = mi_safetensors_get(st, "r");
    r = r ? mi_tensor_to(r, dt) : mi_ones(dt, y->rank, y->shape);
    if (r && !mi_same_shape(r, y)) {
        char a[64], b[64];
        mi_error_set("r is %s; it weighs y, which is %s",
                     mi_shape_str(a, sizeof a, r->rank, r->shape),
                     mi_shape_str(b, sizeof b, y->rank, y->shape));
        return -1;
    }
    mi_tensor *loss = mi_sum(mi_mul(y, r), MI_ALL, false);
    mi_tensor *x[8 + MI_MEMORY_MAX_WEIGHTS], *grads[8 + MI_MEMORY_MAX_WEIGHTS];
    for (int i = 0; i < in.n; i++) x[i] = in.t[i].tensor;
    if (mi_grad(&loss, NULL, 1, x, in.n, false, grads) != 0) return -1;

    static char grad_name[8 + MI_MEMORY_MAX_WEIGHTS][32];
    mi_named_tensor out[9 + MI_MEMORY_MAX_WEIGHTS] = {{"y", y}};
    for (int i = 0; i < in.n; i++) {
        snprintf(grad_name[i], sizeof grad_name[i], "grad.%s", in.t[i].name);
        out[i + 1] = (mi_named_tensor){grad_name[i], grads[i]};
    }
    const mi_miras_config *c = &m->config;
    char config[192];
    snprintf(config, sizeof config, "memory=%s bias=%s retention=%s algorithm=%s chunk=%d",
             c->memory, c->bias, c->retention, c->algorithm, c->chunk);
    const char *keys[] = {"model", "config", "dtype", "miras_version"};
    const char *values[] = {preset ? preset->name : "", config, mi_dtype_name(dt), MIRAS_VERSION};
    mi_metadata meta = {4, keys, values};
    if (mi_safetensors_save(out_path, out, in.n + 1, &meta) != 0) return -1;
    char s[64];
    printf("miras-layer: wrote y %s and %d gradients to %s (%s%s%s, %s)\n",
           mi_shape_str(s, sizeof s, y->rank, y->shape), in.n, out_path,
           preset ? preset->name : "", preset ? ": " : "", config, mi_dtype_name(dt));
    return 0;
}

int main(int argc, char **argv)
{
    tool_start("miras-layer");
    const char *in_path = NULL, *out_path = NULL, *model = NULL, *dtype = NULL, *chunk = NULL;
    const char *sets[64];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        if (!strcmp(a, "--version")) return printf("miras-layer %s\n", MIRAS_VERSION), 0;
        const char **value = !strcmp(a, "--in") ? &in_path : !strcmp(a, "--out") ? &out_path
                           : !strcmp(a, "--model") ? &model : !strcmp(a, "--dtype") ? &dtype
                           : !strcmp(a, "--chunk") ? &chunk
                           : !strcmp(a, "--set") && n_sets < 64 ? &sets[n_sets++] : NULL;
        if (!value) return usage_error("unknown option ", a);
        if (i + 1 == argc) return usage_error("missing value after ", a);
        *value = argv[++i];
    }
    if (!in_path || !out_path) return usage_error("both --in FILE and --out FILE are needed", NULL);
    if (dtype && strcmp(dtype, "f32") && strcmp(dtype, "f64"))
        return usage_error("--dtype must be f32 or f64, not ", dtype);

    const mi_preset *preset = model ? mi_preset_find(model) : NULL;
    if (model && !preset) {
        fprintf(stderr, "miras-layer: no preset named '%s'; presets:", model);
        for (int i = 0; mi_preset_at(i); i++) fprintf(stderr, " %s", mi_preset_at(i)->name);
        fprintf(stderr, "\n");
        return 2;
    }
    mi_miras_config cfg = mi_miras_config_default();
    if (preset && mi_preset_config(preset, &cfg) != 0) return usage_error(mi_error(), NULL);
    bool slots_set = false;  /* else the lattice memory gets one slot per key channel */
    for (int i = 0; i < n_sets; i++) {
        if (mi_miras_config_set(&cfg, sets[i]) != 0) return usage_error(mi_error(), NULL);
        slots_set |= !strncmp(sets[i], "memory.slots=", 13);
    }
    char chunk_set[64];
    snprintf(chunk_set, sizeof chunk_set, "chunk=%s", chunk ? chunk : "");
    if (chunk && mi_miras_config_set(&cfg, chunk_set) != 0) return usage_error(mi_error(), NULL);
    mi_miras m;
    if (mi_miras_init(&m, &cfg) != 0) return usage_error(mi_error(), NULL);

    mi_scope *scope = mi_scope_new("miras-layer");
    mi_scope_enter(scope);
    int rc = run_layer(&m, preset, slots_set, in_path, out_path, dtype);
    if (rc != 0) fprintf(stderr, "miras-layer: %s\n", mi_error());
    mi_scope_leave();
    mi_scope_free(scope);
    return rc ? 1 : 0;
}
