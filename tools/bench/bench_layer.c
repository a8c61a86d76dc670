/* miras-bench layer: one memory layer, forward + backward, per MIRAS preset
 * (with overrides as miras-bench quality writes them: titans+bias=logcosh)
 * and chunk size; each case in a child process of its own (bench_common). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_quality_internal.h"

/* ================================================================ layer
 * One memory layer, forward + backward (the benchmark's "layer" configuration): N = B·H
 * sequences of T tokens, q, k, v [N, T, 32] already projected (q and k
 * unit-norm, as the layer block gives them), the gates the preset uses per
 * head and token near its initial levels, W_0 the memory's own init shared
 * by the sequences. Loss ⟨y, r⟩ for a fixed random r, so backward fills the
 * gradients of q, k, v, every data-dependent gate and W_0. */
#define LAYER_HEADS 4
#define LAYER_HEAD_DIM 32
#define LAYER_BATCH 4
#define LAYER_SEQ_LEN 512
#define LAYER_PROBE_T 32         /* probes at 32 and 64 tokens (rounded up to chunks) */

static const char layer_default_variants[] =
    "titans,moneta,yaad,memora,gated-deltanet,linear-attention";
static const char layer_default_chunks[] = "1,16,64";

typedef struct layer_case {
    const bench_opts *o;
    const mi_preset *preset;
    mi_miras_config config; /* the preset's, with chunk b */
    int64_t batch, T;
} layer_case;

typedef struct layer_state {
    mi_miras m;
    mi_tensor *q, *k, *v, *r;
    mi_miras_gates gates;
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];
    int n_leaves;
    mi_tensor *leaves[4 + 4 + MI_MEMORY_MAX_WEIGHTS];
    mi_scope *step;
    uint64_t flops; /* mi_flops over the last forward+backward */
    bool failed;
} layer_state;

static mi_tensor *layer_leaf(layer_state *s, mi_tensor *t)
{
    if (t) s->leaves[s->n_leaves++] = mi_requires_grad(t, true);
    return t;
}

/* A gate the components use, near the preset's level: σ(logit(level) + z)
 * for η, α, μ and level·e^z for δ, z ~ N(0, 0.5²). CONST gates are
 * constants (not differentiated), like the layer block's. */
static mi_tensor *layer_gate(layer_state *s, mi_rng *rng, mi_gate_spec g, bool is_delta,
                             int64_t N, int64_t P, int64_t width)
{
    int64_t shape[3] = {N, P, width};
    /* a fixed decay per head (slopes): one head's, Lightning Attention's at H = 4, h = 1 */
    if (g.kind == MI_GATE_SLOPES) return mi_full(MI_F32, 2, shape, exp(-pow(2, -g.value / 2)));
    int rank = g.kind == MI_GATE_CHANNEL ? 3 : 2;
    if (g.kind == MI_GATE_CONST) return mi_full(MI_F32, rank, shape, g.value);
    mi_tensor *z = mi_randn(rng, MI_F32, rank, shape, 0.0, 0.5);
    return layer_leaf(s, is_delta ? mi_mul_scalar(mi_exp(z), g.value)
                                  : mi_sigmoid(mi_add_scalar(z, log(g.value / (1 - g.value)))));
}

/* The inputs of a T-token case, in the current scope. 0 or -1. */
static int layer_setup(layer_state *s, const layer_case *lc, int64_t T)
{
    memset(s, 0, sizeof *s);
    if (mi_miras_init(&s->m, &lc->config) != 0) return -1;
    const mi_miras *m = &s->m;
    int64_t N = lc->batch * LAYER_HEADS, dk = LAYER_HEAD_DIM, dv = LAYER_HEAD_DIM;
    int64_t P = T * mi_miras_writes(m);
    mi_rng rng;
    mi_rng_seed(&rng, 7);
    bool was = mi_set_grad_enabled(false);
    s->q = layer_leaf(s, mi_l2_normalize(mi_randn(&rng, MI_F32, MI_SHAPE(N, T, dk), 0, 1), 1e-6));
    s->k = layer_leaf(s, mi_l2_normalize(mi_randn(&rng, MI_F32, MI_SHAPE(N, P, dk), 0, 1), 1e-6));
    s->v = layer_leaf(s, mi_randn(&rng, MI_F32, MI_SHAPE(N, P, dv), 0, 1));
    s->r = mi_randn(&rng, MI_F32, MI_SHAPE(N, T, dv), 0, 1);
    const mi_preset *p = lc->preset;
    int64_t hd = LAYER_HEAD_DIM, a_width = m->config.alpha_both_sides ? 2 * hd : hd;
    s->gates.eta = layer_gate(s, &rng, p->eta, false, N, P, hd);
    if (m->retention->uses_alpha)
        s->gates.alpha = layer_gate(s, &rng, p->alpha, false, N, P, a_width);
    if (m->algorithm->uses_mu) s->gates.mu = layer_gate(s, &rng, p->mu, false, N, P, hd);
    if (m->bias->needs_delta) s->gates.delta = layer_gate(s, &rng, p->delta, true, N, P, hd);
    int n_w = 0, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    int rc = m->memory->shapes(&lc->config, dk, dv, &n_w, ranks, shapes);
    if (rc == 0) rc = m->memory->init(&lc->config, dk, dv, &rng, MI_F32, s->w0);
    for (int i = 0; rc == 0 && i < n_w; i++) layer_leaf(s, s->w0[i]);
    mi_set_grad_enabled(was);
    return rc == 0 && !mi_error_pending() ? 0 : -1;
}

static void layer_body(void *ctx)
{
    layer_state *s = ctx;
    if (s->failed) return;
    uint64_t f0 = mi_flops();
    mi_scope_reset(s->step);
    mi_scope_enter(s->step);
    mi_zero_grad(s->leaves, s->n_leaves);
    mi_tensor *y = mi_miras_forward(&s->m, s->q, s->k, s->v, &s->gates, s->w0, NULL);
    mi_tensor *loss = y ? mi_sum(mi_mul(y, s->r), MI_ALL, false) : NULL;
    if (!loss || mi_backward(loss) != 0) s->failed = true;
    mi_scope_leave();
    s->flops = mi_flops() - f0;
}

/* Runs once at T tokens (a probe); the kB the step allocated, or -1. */
static long layer_probe(const layer_case *lc, int64_t T, mi_scope *scope, mi_scope *step,
                        result *out)
{
    layer_state s;
    mi_scope_reset(scope);
    mi_scope_enter(scope);
    int rc = layer_setup(&s, lc, T);
    mi_scope_leave();
    s.step = step;
    if (rc == 0) layer_body(&s);
    if (rc != 0 || s.failed) return note_error(out, "probe"), -1;
    return (long)(mi_scope_stats_get(step).bytes_used / 1024);
}

static void layer_child(const void *ctx, result *out)
{
    const layer_case *lc = ctx;
    const bench_opts *o = lc->o;
    mi_scope *inputs = mi_scope_new("bench-layer-inputs"), *step = mi_scope_new("bench-step");
    int64_t b = lc->config.chunk, T1 = b * ((LAYER_PROBE_T + b - 1) / b);
    if (lc->T >= 4 * T1) {
        long base = peak_rss_kb();
        long u1 = layer_probe(lc, T1, inputs, step, out);
        long u2 = u1 < 0 ? -1 : layer_probe(lc, 2 * T1, inputs, step, out);
        char from[96];
        snprintf(from, sizeof from, "from probes at T = %lld and %lld", (long long)T1,
                 (long long)(2 * T1));
        if (u2 < 0 || over_budget(out, base + extrapolate_kb(u1, u2, (double)T1,
                                                             2.0 * (double)T1, (double)lc->T),
                                  o, from))
            goto done;
    }
    layer_state s;
    mi_scope_reset(inputs);
    mi_scope_enter(inputs);
    int rc = layer_setup(&s, lc, lc->T);
    mi_scope_leave();
    if (rc != 0) {
        note_error(out, "setup");
        goto done;
    }
    s.step = step;
    time_policy pol = step_policy(o);
    out->t = time_body_with(layer_body, &s, 1, o->reps, &pol);
    if (s.failed) {
        note_error(out, "forward/backward");
        goto done;
    }
    out->flops = (double)s.flops; /* the last timed forward+backward's */
    for (int i = 0; i < s.n_leaves; i++)
        if (!s.leaves[i]->grad) {
            out->failed = true;
            snprintf(out->note, sizeof out->note, "input %d of %d got no gradient", i,
                     s.n_leaves);
        }
done:
    out->rss_kb = peak_rss_kb();
    mi_scope_free(step);
    mi_scope_free(inputs);
}

static void layer_config_text(char *buf, size_t n, const layer_case *lc)
{
    const mi_miras_config *c = &lc->config;
    const mi_preset *p = lc->preset;
    char mem[64];
    const mi_memory_kind *kind = mi_memory_find(c->memory);
    if (kind && kind->rule == MI_MEMORY_RULE_MLP)
        snprintf(mem, sizeof mem, "mlp depth %d x%d residual+LN", c->mlp_depth,
                 c->mlp_expansion);
    else snprintf(mem, sizeof mem, "%s", c->memory);
    const mi_gate_spec *g[4] = {&p->eta, &p->alpha, &p->mu, &p->delta};
    static const char *const gname[4] = {"eta", "alpha", "mu", "delta"};
    char gates[96] = "";
    for (int i = 0; i < 4; i++) {
        if (g[i]->kind == MI_GATE_UNUSED) continue;
        size_t u = strlen(gates);
        snprintf(gates + u, sizeof gates - u, "%s%s %s", u ? ", " : "", gname[i],
                 g[i]->kind == MI_GATE_CONST ? "const" : g[i]->kind == MI_GATE_HEAD
                                                  ? "per head" : "per channel");
    }
    snprintf(buf, n, "B=%lld H=%d hd=%d T=%lld chunk=%d; memory %s, bias %s, retention %s, %s; "
             "gates %s; f32; forward+backward, grads of q,k,v, data-dependent gates, W0",
             (long long)lc->batch, LAYER_HEADS, LAYER_HEAD_DIM, (long long)lc->T, c->chunk, mem,
             c->bias, c->retention, c->algorithm, gates);
}

int bench_layer(const bench_opts *o)
{
    char vbuf[512], cbuf[128];
    const char *variants[32], *chunk_txt[16];
    int nv = split_list(o->variants ? o->variants : layer_default_variants, vbuf, sizeof vbuf,
                        variants, 32);
    int nc = split_list(o->chunks ? o->chunks : layer_default_chunks, cbuf, sizeof cbuf,
                        chunk_txt, 16);
    int chunks[16];
    if (nv < 1 || nc < 1) {
        fprintf(stderr, "miras-bench: --variants and --chunks want 1 to 32 and 1 to 16 "
                        "comma-separated values\n");
        return 2;
    }
    for (int i = 0; i < nc; i++)
        if (parse_count(chunk_txt[i], &chunks[i]) != 0) {
            fprintf(stderr, "miras-bench: --chunks: '%s' is not a positive integer\n",
                    chunk_txt[i]);
            return 2;
        }
    char spec[NAME_MAX_LEN];
    for (int i = 0; i < nv; i++)
        if (!mi_preset_find(variant_spec(variants[i], spec, sizeof spec))) {
            fprintf(stderr, "miras-bench: layer: '%s' is not a MIRAS preset (", spec);
            for (int k = 0; mi_preset_at(k); k++)
                fprintf(stderr, "%s%s", k ? ", " : "", mi_preset_at(k)->name);
            fprintf(stderr, ")\n");
            return 2;
        }
    layer_case *cases = malloc(sizeof *cases * MAX_RESULTS);
    if (!cases) {
        fprintf(stderr, "miras-bench: out of memory\n");
        return 2;
    }
    int first = n_results;
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < nc; j++) {
            layer_case lc = {.o = o,
                             .preset = mi_preset_find(variant_spec(variants[i], spec, sizeof spec)),
                             .batch = o->batch ? o->batch : LAYER_BATCH};
            if (mi_preset_config(lc.preset, &lc.config) != 0) {
                fprintf(stderr, "miras-bench: %s\n", mi_error());
                free(cases);
                return 2;
            }
            /* the variant's own +KEY=VALUE overrides of the preset's config */
            char kv[NAME_MAX_LEN];
            for (const char *at = variants[i]; next_override(&at, kv, sizeof kv);)
                if (mi_miras_config_set(&lc.config, kv) != 0) {
                    fprintf(stderr, "miras-bench: layer: variant '%s': %s\n", variants[i],
                            mi_error());
                    free(cases);
                    return 2;
                }
            lc.config.chunk = chunks[j];
            const mi_memory_kind *mem = mi_memory_find(lc.config.memory);
            if (mem && mem->keys_are_slots) lc.config.slots = LAYER_HEAD_DIM;
            lc.T = o->seq_len ? o->seq_len : LAYER_SEQ_LEN;
            /* the per-token recurrence is the slow reference: by default it
             * runs at T <= 64 (tokens/s still compare) */
            if (chunks[j] == 1 && !o->seq_len && lc.T > LAYER_PER_TOKEN_MAX_T)
                lc.T = LAYER_PER_TOKEN_MAX_T;
            if (n_results == MAX_RESULTS) break;
            result *r = &results[n_results++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "layer.%s.b%d", variants[i], chunks[j]);
            layer_config_text(r->config, sizeof r->config, &lc);
            r->threads = o->threads;
            r->raw = -1;
            r->loss = NAN;
            r->tokens = (double)(lc.batch * lc.T);
            r->default_size = lc.batch == LAYER_BATCH && lc.T == LAYER_SEQ_LEN;
            cases[n_results - 1 - first] = lc;
        }
    int failed = run_rounds(layer_child, cases, sizeof *cases, first, n_results - first, o);
    free(cases);
    if (!o->json_only) {
        print_case_table(first, "forward+backward", o->rounds);
        print_targets(first);
        print_relative_targets(first);
    }
    return failed ? 1 : 0;
}
