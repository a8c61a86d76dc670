/* A component of your own, from outside the library: the Cauchy attentional
 * bias (not in src/), a preset that uses it, a float64 gradient check of a
 * MIRAS block with it, and a short MQAR training run that shows it learns.
 *
 *   ℓ(y; v) = Σ_j c²/2 · log(1 + (e_j/c)²),   e = y − v,  c = cauchy_c
 *   ∂ℓ/∂y   = e / (1 + (e/c)²)
 *
 * ½‖e‖² for |e| ≪ c, but only logarithmic in a large error, whose gradient
 * falls back towards 0 (at most c/2, at |e| = c): a write barely moves the
 * memory for a value far from what it predicts (an outlier), where ℓ2 would
 * write it in full. On a matrix memory one GD step is
 *   W_t = W_{t-1} − η_t (e_t / (1 + (e_t/c)²)) k_tᵀ,  e_t = W_{t-1} k_t − v_t.
 *
 * The same file builds two ways:
 *   a program:  cc custom_component.c $(pkg-config --cflags --libs miras)
 *               ./a.out [--quick]   (--quick: the gradient checks and a few steps)
 *   a plugin:   cc -shared -fPIC -DMIRAS_PLUGIN custom_component.c \
 *                  -o libcauchy_plugin.so $(pkg-config --cflags --libs miras)
 *               MIRAS_PLUGINS=./libcauchy_plugin.so miras-train --model titans \
 *                  --set bias=cauchy --set cauchy_c=0.5 …
 *   (the plugin's mi_plugin_init registers what main registers below). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extend.h"

/* ---------------------------------------------------------------- the bias */

/* Its own parameter, set as "cauchy_c=0.5" like any config key once
 * bias=cauchy is chosen; it lives in the config's bias_params block. */
typedef struct cauchy_params {
    double c;
} cauchy_params;

static const mi_field cauchy_fields[] = {
    MI_FIELD_REAL_AT(cauchy_params, "cauchy_c", c, "1", 0, INFINITY,
                     MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN,
                     "cauchy: c, the error scale (l2 for |e| << c)"),
};

static double cauchy_c(const mi_miras_config *c)
{
    cauchy_params p;
    memcpy(&p, &c->bias_params, sizeof p);
    return p.c;
}

/* ℓ_t per token, [N, n]: Σ_j c²/2 · log(1 + (e_j/c)²). Written with
 * registered ops, so autodiff gives the inner gradient and the outer
 * gradients through the inner loop. */
static mi_tensor *cauchy_loss(const mi_miras_config *cfg, mi_tensor *y, mi_tensor *v,
                              mi_tensor *delta)
{
    double c = cauchy_c(cfg);
    mi_tensor *u = mi_square(mi_mul_scalar(mi_sub(y, v), 1 / c));   /* (e/c)² */
    return mi_mul_scalar(mi_sum(mi_log(mi_add_scalar(u, 1)), -1, false), c * c / 2);
}

/* The optional closed form, e / (1 + (e/c)²): checked against the loss's
 * autodiff gradient below. */
static mi_tensor *cauchy_error(const mi_miras_config *cfg, mi_tensor *y, mi_tensor *v,
                               mi_tensor *delta)
{
    double c = cauchy_c(cfg);
    mi_tensor *e = mi_sub(y, v);
    return mi_div(e, mi_add_scalar(mi_square(mi_mul_scalar(e, 1 / c)), 1));
}

/* No .rule: none of the fused paths computes this bias, so the recurrence
 * runs the composed one. Static storage: the registry keeps the pointer. */
static const mi_bias_kind cauchy_bias = {
    .name = "cauchy", .formula = "l = sum_j c^2/2 log(1 + ((y_j - v_j)/c)^2)",
    .loss = cauchy_loss, .error = cauchy_error,
    MI_PARAMS(cauchy_params, cauchy_fields),
};

/* Titans (MLP memory, momentum, ℓ2 retention) with the Cauchy bias; its
 * gates start where the titans preset's do. */
static const mi_preset titans_cauchy = {
    .name = "titans-cauchy",
    .update = "S_t = mu_t S_{t-1} - eta_t grad cauchy(M_{t-1}; k_t, v_t), "
              "M_t = alpha_t M_{t-1} + S_t",
    .config = "memory=mlp bias=cauchy retention=l2 algorithm=momentum",
    .eta = {MI_GATE_HEAD, 0.005, 0}, .alpha = {MI_GATE_HEAD, 0.998, 0},
    .mu = {MI_GATE_HEAD, 0.5, 0},
};

/* The bias first: the preset's config must parse when it is registered. */
static int cauchy_register(void)
{
    if (mi_register_bias(&cauchy_bias) != 0) return -1;
    return mi_register_preset(&titans_cauchy);
}

#ifdef MIRAS_PLUGIN
/* ---------------------------------------------------------------- as a plugin */
int mi_plugin_init(void) { return cauchy_register(); }
#else
/* ---------------------------------------------------------------- as a program */

/* Prints the message, returns 1 (the exit status). */
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "custom_component: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* (a1) error = ∂ℓ/∂y: the closed form against autodiff of the loss, f64. */
static int check_error(const mi_miras_config *cfg, mi_rng *r)
{
    mi_tensor *y = mi_requires_grad(mi_randn(r, MI_F64, MI_SHAPE(2, 3, 5), 0, 2), true);
    mi_tensor *v = mi_randn(r, MI_F64, MI_SHAPE(2, 3, 5), 0, 1), *dy;
    mi_tensor *l = mi_sum(cauchy_loss(cfg, y, v, NULL), MI_ALL, false);
    if (mi_grad(&l, NULL, 1, &y, 1, false, &dy) != 0) return fail("grad: %s", mi_error());
    mi_tensor *diff = mi_max(mi_abs(mi_sub(cauchy_error(cfg, y, v, NULL), dy)), MI_ALL, false);
    if (!diff) return fail("error: %s", mi_error());
    printf("closed-form error vs autodiff of the loss: max |difference| %.1e\n", mi_item(diff));
    return mi_item(diff) < 1e-12 ? 0 : fail("the closed-form error is not dl/dy");
}

static int block_fn(mi_tensor *const *in, int n, mi_tensor **out, void *block)
{
    out[0] = mi_miras_block_forward(block, in[0]);
    return out[0] ? 1 : -1;
}

/* (a2) A MIRAS block of the preset (d_model 8, 2 heads, 5 tokens, f64):
 * reverse mode against central differences, w.r.t. the input and every
 * parameter (through the inner loop's writes). gradcheck takes at most
 * MI_MAX_INPUTS tensors: x and seven parameters at a time. */
static int check_block(mi_rng *r)
{
    mi_miras_block_config c = mi_miras_block_config_default(8, 2, NULL);
    if (mi_miras_block_config_preset(&c, "titans-cauchy") != 0 ||
        mi_miras_config_set(&c.miras, "cauchy_c=0.5") != 0)   /* the bias's own key */
        return fail("%s", mi_error());
    c.gate_rank = 4;
    c.eta.value = 0.2; /* a larger inner step than training's, so the writes matter */
    mi_miras_block b;
    if (mi_miras_block_init(&b, &c, MI_F64, r, mi_scope_current()) != 0)
        return fail("block: %s", mi_error());
    int n;
    const mi_named_tensor *p = mi_miras_block_params(&b, &n);
    mi_tensor *x = mi_requires_grad(mi_randn(r, MI_F64, MI_SHAPE(1, 5, 8), 0, 1), true);
    int64_t entries = 0;
    double worst = 0;
    for (int g = 0; g < n; g += MI_MAX_INPUTS - 1) {
        mi_tensor *in[MI_MAX_INPUTS] = {x};
        int m = 1;
        for (int i = g; i < n && m < MI_MAX_INPUTS; i++) in[m++] = p[i].tensor;
        mi_gradcheck_result res = mi_gradcheck(block_fn, &b, in, m, NULL);
        if (!res.ok) return fail("gradcheck of the block, %s..: %s", p[g].name, res.message);
        entries += res.entries;
        worst = fmax(worst, res.max_abs_err);
        x->requires_grad = false; /* x is checked once */
    }
    printf("gradcheck of a titans-cauchy block (f64, %d parameters): ok, %lld entries, "
           "max error %.1e\n", n, (long long)entries, worst);
    return 0;
}

/* (b) MQAR (Zoology's multi-query associative recall): 2 key-value pairs in
 * 32 tokens of a 64-token vocabulary, then the keys again; the model must
 * answer each with its value. A 2-layer titans-cauchy LM, AdamW, one thread.
 * Chance is 1/32 (a value drawn from the vocabulary's upper half). */
enum { VOCAB = 64, SEQ = 32, PAIRS = 2, BATCH = 32, EVAL_BATCHES = 8 };

static double evaluate(const mi_lm *lm, const mi_mqar_config *task, mi_scope *work)
{
    double acc = 0;
    bool was = mi_set_grad_enabled(false);
    for (int i = 0; i < EVAL_BATCHES && acc >= 0; i++) {
        mi_scope_enter(work);
        mi_tensor *in, *tg;
        double a = -1;
        if (mi_mqar_batch(task, 1, MI_SPLIT_VALID, (int64_t)i * BATCH, BATCH, &in, &tg) == 0)
            a = mi_task_accuracy(mi_lm_forward(lm, in), tg);
        acc = a < 0 ? -1 : acc + a / EVAL_BATCHES;
        mi_scope_leave();
        mi_scope_reset(work);
    }
    mi_set_grad_enabled(was);
    return acc;
}

static int train_mqar(int steps, bool judge)
{
    mi_mqar_config task = mi_mqar_config_default();
    task.vocab = VOCAB, task.seq_len = SEQ, task.pairs = PAIRS;
    mi_lm_config lc = mi_lm_config_default();
    const char *set[] = {"vocab=64", "d_model=32", "layers=2", "heads=2", "mixer=titans-cauchy",
                         "mixer.chunk=8", "mixer.cauchy_c=1"};   /* chunk: mini-batch form */
    for (size_t i = 0; i < sizeof set / sizeof *set; i++)
        if (mi_lm_config_set(&lc, set[i]) != 0) return fail("%s: %s", set[i], mi_error());
    mi_scope *params = mi_scope_new("params"), *work = mi_scope_new("step");
    mi_lm lm;
    mi_optim *opt = NULL;
    mi_tensor **p = NULL;
    int rc = 1;
    if (mi_lm_init(&lm, &lc, MI_F32, 1, params) != 0) {
        fail("lm: %s", mi_error());
        goto done;
    }
    int n;
    const mi_named_tensor *np = mi_lm_params(&lm, &n);
    p = malloc(sizeof *p * (size_t)n);
    for (int i = 0; p && i < n; i++) p[i] = np[i].tensor;
    mi_optim_hparams hp = mi_optim_defaults(MI_OPT_ADAMW);
    hp.lr = 1e-2;
    opt = p ? mi_optim_new_simple(MI_OPT_ADAMW, p, n, &hp) : NULL;
    /* warmup over the first tenth, then cosine down to a tenth of the rate */
    mi_schedule sched = {MI_SCHED_WARMUP_COSINE, hp.lr, hp.lr / 10, steps / 10, steps};
    if (!opt) {
        fail("optimizer: %s", mi_error());
        goto done;
    }
    printf("training a 2-layer titans-cauchy LM (%lld parameters) on MQAR: vocab %d, %d "
           "tokens, %d pairs, batch %d, %d steps\n", (long long)mi_lm_param_numel(&lm), VOCAB,
           SEQ, PAIRS, BATCH, steps);
    fflush(stdout);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; step < steps; step++) {
        /* batch → loss → backward → clip → update; the step's tensors in `work` */
        mi_optim_zero_grad(opt);
        mi_scope_enter(work);
        mi_tensor *in, *tg, *loss = NULL;
        if (mi_mqar_batch(&task, 1, MI_SPLIT_TRAIN, (int64_t)step * BATCH, BATCH, &in, &tg) == 0)
            loss = mi_lm_loss(&lm, in, tg);
        bool ok = loss && mi_backward(loss) == 0 && mi_optim_clip_grad_norm(opt, 1.0) >= 0 &&
                  mi_optim_apply_schedule(opt, &sched) == 0 && mi_optim_step(opt) == 0;
        double value = ok ? mi_item(loss) : NAN;
        mi_scope_leave();
        mi_scope_reset(work);
        if (!ok || !isfinite(value)) {
            fail("step %d: %s", step + 1, ok ? "the loss is not finite" : mi_error());
            goto done;
        }
        if ((step + 1) % 100 == 0 || step + 1 == steps)
            printf("  step %4d  loss %.3f\n", step + 1, value), fflush(stdout);
    }
    double acc = evaluate(&lm, &task, work), chance = 2.0 / VOCAB;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (acc < 0) {
        fail("eval: %s", mi_error());
        goto done;
    }
    printf("held-out recall accuracy %.3f, chance %.3f (%.1fx), %.0f s\n", acc, chance,
           acc / chance, seconds);
    rc = !judge || acc > 3 * chance ? 0 : fail("accuracy %.3f is not above 3x chance", acc);
done:
    mi_optim_free(opt);
    free(p);
    mi_scope_free(work);
    mi_scope_free(params);
    return rc;
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    mi_set_threads(1);
    if (cauchy_register() != 0) return fail("register: %s", mi_error());
    /* From here "bias=cauchy", "cauchy_c=…" and the preset "titans-cauchy"
     * work wherever a built-in's name does. */
    mi_scope *s = mi_scope_new("checks");
    mi_scope_enter(s);
    mi_rng r;
    mi_rng_seed(&r, 7);
    mi_miras_config cfg = mi_miras_config_default();
    int rc = mi_miras_config_set(&cfg, "bias=cauchy") != 0 ||
             mi_miras_config_set(&cfg, "cauchy_c=0.7") != 0
                 ? fail("config: %s", mi_error())
                 : check_error(&cfg, &r);
    if (rc == 0) rc = check_block(&r);
    mi_scope_leave();
    mi_scope_free(s);
    /* --quick: a few steps, that the training runs, not what it learns */
    if (rc == 0) rc = train_mqar(quick ? 5 : 600, !quick);
    mi_registry_reset();
    return rc;
}
#endif
