/* miras-gradcheck: numerical gradient checks from the command line.
 *   --ops        gradcheck + gradgradcheck (f64) of every registered op
 *   --models     gradcheck (f64) of every preset's layer, end to end through
 *                the inner loop, at chunk 1 and chunk 2 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "extend.h"

#ifndef MIRAS_VERSION
#define MIRAS_VERSION "unknown"
#endif

static int check_ops(const char *only)
{
    int passed = 0, failed = 0;
    for (int i = 0; i < mi_op_count(); i++) {
        const mi_op *op = mi_op_at(i);
        const char *name = op ? op->name : mi_op_listed_name(i);
        if (only && strcmp(only, name) != 0) continue;
        mi_op_check_result r = mi_op_check(op, 1234u + (unsigned)i);
        if (r.ok) {
            passed++;
            printf("ok    %-22s %d examples, %d checks, f32 rel err %.1e\n", name, r.variants,
                   r.gradchecks, r.f32_rel_err);
        } else {
            failed++;
            printf("FAIL  %-22s %s\n", name, r.message);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* ---------------------------------------------------------------- presets
 * Each preset's layer at tiny size in f64: N = 2 sequences, T = 5 tokens,
 * dk = dv = 3 (the lattice memory's slots m = dk = 3). The inputs checked
 * are q, k, v, the preset's data-dependent gates and the initial weights
 * W_0; the function is Σ y ⊙ r for a fixed
 * random r. CONST gates are fixed tensors; HGRN2's key is 1 − α, computed
 * inside the function. Gate values stay inside the ranges where the rules
 * are smooth; Yaad's δ_t sits far from the error norm (alternately ≪ and
 * ≫ it), so no perturbation crosses its switch. */
enum { GC_N = 2, GC_T = 5, GC_D = 3 };

typedef struct model_ctx {
    const mi_preset *p;
    mi_miras m;
    int nw;
    int iq, ik, iv, igate[4], iw;     /* input slots; -1: not an input */
    mi_tensor *gate_const[4];          /* CONST gates */
    mi_tensor *r;                      /* the output weights */
} model_ctx;

static int model_fn(mi_tensor *const *in, int n, mi_tensor **out, void *vctx)
{
    model_ctx *c = vctx;
    mi_tensor *g[4];
    for (int j = 0; j < 4; j++) g[j] = c->igate[j] >= 0 ? in[c->igate[j]] : c->gate_const[j];
    mi_tensor *k = c->p->key_is_one_minus_alpha ? mi_add_scalar(mi_neg(g[1]), 1.0) : in[c->ik];
    mi_miras_gates gates = {.eta = g[0], .alpha = g[1], .mu = g[2], .delta = g[3]};
    mi_tensor *y = mi_miras_forward(&c->m, in[c->iq], k, in[c->iv], &gates, in + c->iw, NULL);
    out[0] = mi_sum(mi_mul(y, c->r), MI_ALL, false);
    return out[0] ? 1 : -1;
}

/* A data-dependent gate: HEAD [N,P], CHANNEL [N,P,width]; `which` picks the range. */
static mi_tensor *model_gate(mi_rng *rng, bool mlp, int which, mi_gate_spec spec, int P,
                             int steps, int width)
{
    int64_t shape[3] = {GC_N, P, width};
    int rank = spec.kind == MI_GATE_CHANNEL ? 3 : 2;
    if (spec.kind == MI_GATE_CONST) return mi_full(MI_F64, 2, shape, spec.value);
    mi_tensor *t = mi_zeros(MI_F64, rank, shape);
    if (!t) return NULL;
    double *d = t->data;
    int per = rank == 3 ? width : 1;
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t pos = (i / per) % P, seq = i / per / P;
        double u = mi_rng_uniform(rng), lo, hi;
        switch (which) {
        case 0: lo = mlp ? 0.05 : 0.2; hi = mlp ? 0.3 : 0.9; break;   /* eta */
        case 1: lo = 0.7; hi = 0.99; break;                           /* alpha */
        case 2: lo = 0.3; hi = 0.9; break;                            /* mu */
        default:                                                      /* delta */
            lo = (seq + pos) % 2 ? 0.05 : 5;
            hi = (seq + pos) % 2 ? 0.3 : 20;
        }
        d[i] = lo + (hi - lo) * u;
        if (which == 1 && pos % steps != 0) d[i] = 1; /* one α per token (DeltaProduct) */
    }
    return t;
}

/* One preset at one chunk size; 0 ok, -1 failed (why in msg). */
static int check_model_chunk(const mi_preset *p, int chunk, uint64_t seed, int64_t *entries,
                             double *max_err, char *msg, size_t msg_size)
{
    model_ctx c = {.p = p, .iq = -1, .ik = -1, .iv = -1, .iw = -1};
    mi_miras_config cfg;
    if (mi_preset_config(p, &cfg) != 0) {
        snprintf(msg, msg_size, "%s", mi_error());
        return -1;
    }
    cfg.chunk = chunk;
    cfg.slots = GC_D; /* the lattice memory's m is the key dimension */
    if (mi_miras_init(&c.m, &cfg) != 0) {
        snprintf(msg, msg_size, "chunk %d: %s", chunk, mi_error());
        return -1;
    }
    mi_rng rng;
    mi_rng_seed(&rng, seed);
    int steps = mi_miras_writes(&c.m), P = steps * GC_T;
    bool mlp = c.m.memory->rule == MI_MEMORY_RULE_MLP;
    mi_tensor *in[MI_MAX_INPUTS];
    int n_in = 0;
    const int max_in = MI_MAX_INPUTS;
    double scale = mlp ? 1 : 0.6;
    c.iq = n_in;
    in[n_in++] = mi_randn(&rng, MI_F64, MI_SHAPE(GC_N, GC_T, GC_D), 0, scale);
    if (!p->key_is_one_minus_alpha) {
        c.ik = n_in;
        in[n_in++] = mi_randn(&rng, MI_F64, MI_SHAPE(GC_N, P, GC_D), 0, scale);
    }
    c.iv = n_in;
    in[n_in++] = mi_randn(&rng, MI_F64, MI_SHAPE(GC_N, P, GC_D), 0, 1);
    const mi_gate_spec specs[4] = {p->eta, p->alpha, p->mu, p->delta};
    for (int j = 0; j < 4; j++) {
        c.igate[j] = -1;
        if (specs[j].kind == MI_GATE_UNUSED) continue;
        /* DFW's α decays both axes: dv + dk entries */
        int width = j == 1 && cfg.alpha_both_sides ? 2 * GC_D : GC_D;
        mi_tensor *g = model_gate(&rng, mlp, j, specs[j], P, steps, width);
        if (specs[j].kind == MI_GATE_CONST) c.gate_const[j] = g;
        else if (n_in < max_in) {
            c.igate[j] = n_in;
            in[n_in++] = g;
        } else n_in = max_in + 1;
    }
    int ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    if (c.m.memory->shapes(&cfg, GC_D, GC_D, &c.nw, ranks, shapes) != 0) {
        snprintf(msg, msg_size, "chunk %d: %s", chunk, mi_error());
        return -1;
    }
    if (n_in + c.nw > max_in) {
        snprintf(msg, msg_size, "chunk %d: %d inputs, gradcheck takes at most %d", chunk,
                 n_in + c.nw, max_in);
        return -1;
    }
    c.iw = n_in;
    bool kl = c.m.retention->rule == MI_RETENTION_RULE_KL;
    for (int i = 0; i < c.nw; i++) {
        /* matrix: random (not the zero start, so W_0's gradient is exercised);
         * MLP: N(0, 1/fan_in); Memora: logits of its simplex rows */
        double sd = !mlp ? 0.3 : kl ? 2 : 1 / sqrt((double)shapes[i][ranks[i] - 1]);
        in[n_in++] = mi_randn(&rng, MI_F64, ranks[i], shapes[i], 0, sd);
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i]) {
            snprintf(msg, msg_size, "chunk %d: %s", chunk, mi_error());
            return -1;
        }
    for (int i = 0; i < n_in; i++) mi_requires_grad(in[i], true);
    c.r = mi_randn(&rng, MI_F64, MI_SHAPE(GC_N, GC_T, GC_D), 0, 1);
    mi_gradcheck_opts opts = MI_GRADCHECK_DEFAULTS;
    opts.quiet = true;
    mi_gradcheck_result res = mi_gradcheck(model_fn, &c, in, n_in, &opts);
    *entries += res.entries;
    if (res.max_abs_err > *max_err) *max_err = res.max_abs_err;
    if (!res.ok) {
        snprintf(msg, msg_size, "chunk %d: %s", chunk, res.message);
        return -1;
    }
    return 0;
}

static int check_models(const char *only)
{
    int passed = 0, failed = 0;
    for (int i = 0; mi_preset_at(i); i++) {
        const mi_preset *p = mi_preset_at(i);
        if (only && strcmp(only, p->name) != 0) continue;
        char msg[320];
        int64_t entries = 0;
        double max_err = 0;
        int rc = 0;
        mi_scope *s = mi_scope_new("model-check");
        mi_scope_enter(s);
        for (int chunk = 1; chunk <= 2 && rc == 0; chunk++)
            rc = check_model_chunk(p, chunk, 4321u + 17u * (unsigned)i + (unsigned)chunk,
                                   &entries, &max_err, msg, sizeof msg);
        mi_scope_leave();
        mi_scope_free(s);
        mi_error_clear();
        if (rc == 0) {
            passed++;
            printf("ok    %-18s chunk 1,2  entries %lld  max err %.1e\n", p->name,
                   (long long)entries, max_err);
        } else {
            failed++;
            printf("FAIL  %-18s %s\n", p->name, msg);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* ---------------------------------------------------------------- --optim
 * Every optimizer's rule is differentiable: gradcheck (f64) of the parameter
 * after two functional steps, with respect to the parameter, both gradients,
 * the learning rate and the rule's second hyperparameter (momentum, β₁, or
 * ℓ2-GD's weight decay), all held as tensors. */
typedef struct optim_ctx {
    mi_optim *o;
    mi_tensor *x; /* ℓ2-regression GD's layer inputs */
} optim_ctx;

static int two_steps(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    optim_ctx *f = c;
    int kind = mi_optim_kind_of(f->o);
    mi_optim_fstate *fs = mi_optim_fstate_new(f->o);
    mi_hp_tensors hpt = {.lr = in[3], .momentum = in[4]};
    if (kind == MI_OPT_ADAM || kind == MI_OPT_ADAMW) hpt = (mi_hp_tensors){.lr = in[3], .beta1 = in[4]};
    if (kind == MI_OPT_L2_GD) hpt = (mi_hp_tensors){.lr = in[3], .weight_decay = in[4]};
    mi_tensor *p = in[0];
    for (int step = 0; step < 2; step++) {
        if (kind == MI_OPT_L2_GD && mi_optim_set_inputs(f->o, 0, f->x) != 0) return -1;
        if (!fs || mi_optim_step_functional(f->o, fs, &p, &in[1 + step], &hpt, &p) != 0) return -1;
    }
    out[0] = p;
    return 1;
}

static int check_optim(void)
{
    int passed = 0, failed = 0;
    mi_rng r;
    mi_rng_seed(&r, 120);
    for (int kind = 0; kind < MI_OPT_KIND_COUNT; kind++) {
        mi_scope *s = mi_scope_new("gradcheck-optim");
        mi_scope_enter(s);
        mi_tensor *like = mi_zeros(MI_F64, MI_SHAPE(3, 4));
        mi_optim_hparams h = mi_optim_defaults(kind);
        h.eps = 1e-3; /* keeps √v + ε away from its kink at 0 */
        h.momentum = kind == MI_OPT_SGD ? 0.9 : h.momentum;
        h.weight_decay = 0.1;
        h.mem_hidden = 3;
        h.mem_lr = 0.5;
        h.delta = 0.5;
        optim_ctx f = {.o = mi_optim_new_simple(kind, &like, 1, &h),
                       .x = mi_randn(&r, MI_F64, MI_SHAPE(2, 4), 0, 1)};
        mi_tensor *in[5] = {
            mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), true),
            mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), true),
            mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), true),
            mi_requires_grad(mi_scalar(MI_F64, 0.05), true),
            mi_requires_grad(mi_scalar(MI_F64, kind == MI_OPT_L2_GD ? 0.1 : 0.8), true),
        };
        mi_gradcheck_result res = {.ok = false};
        if (f.o) res = mi_gradcheck(two_steps, &f, in, 5, NULL);
        else snprintf(res.message, sizeof res.message, "%s", mi_error());
        if (res.ok) {
            passed++;
            printf("ok    %-18s 2 steps  entries %lld  max err %.1e\n", mi_optim_kind_name(kind),
                   (long long)res.entries, res.max_abs_err);
        } else {
            failed++;
            printf("FAIL  %-18s %s\n", mi_optim_kind_name(kind), res.message);
        }
        mi_optim_free(f.o);
        mi_scope_leave();
        mi_scope_free(s);
        mi_error_clear();
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: miras-gradcheck --ops [--op NAME] | --models [--model NAME] | --optim\n"
               "  --ops         gradcheck and gradgradcheck (f64, central differences,\n"
               "                eps 1e-6, atol 1e-5, rtol 1e-3) on every registered op\n"
               "  --op NAME     only that op\n"
               "  --models      gradcheck (f64) of every preset's layer at tiny size\n"
               "                (N=2, T=5, dk=dv=3, chunk 1 and 2) with respect to q, k, v,\n"
               "                the data-dependent gates and the initial weights\n"
               "  --model NAME  only that preset\n"
               "  --optim       gradcheck (f64) of every optimizer through two functional\n"
               "                steps, w.r.t. the parameter, the gradients, lr and momentum\n"
               "  --help, --version\n"
               "Ends with 'N passed, M failed'; exit 0 iff M = 0, 2 on usage errors.\n");
}

int main(int argc, char **argv)
{
    tool_start("miras-gradcheck");
    bool ops = false, models = false, optim = false;
    const char *only = NULL, *only_model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0) ops = true;
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
            ops = true;
            only = argv[++i];
        } else if (strcmp(argv[i], "--models") == 0) models = true;
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            models = true;
            only_model = argv[++i];
        } else if (strcmp(argv[i], "--optim") == 0) optim = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("miras-gradcheck %s\n", MIRAS_VERSION);
            return 0;
        } else {
            fprintf(stderr, "miras-gradcheck: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (ops + models + optim != 1) {
        usage(stderr);
        return 2;
    }
    if (optim) return check_optim();
    if (models) {
        if (only_model && !mi_preset_find(only_model)) {
            fprintf(stderr, "miras-gradcheck: no preset named '%s'; presets:", only_model);
            for (int i = 0; mi_preset_at(i); i++) fprintf(stderr, " %s", mi_preset_at(i)->name);
            fprintf(stderr, "\n");
            return 2;
        }
        return check_models(only_model);
    }
    if (only && !mi_op_find(only)) {
        fprintf(stderr, "miras-gradcheck: no op named '%s' (see miras-ops)\n", only);
        return 2;
    }
    return check_ops(only);
}
