/* The MIRAS layer at chunk 1 through mi_scan (scan=auto) for combinations no
 * fused kernel covers: titans with the log-cosh bias, a matrix memory with
 * channel-wise gates and the Huber bias, an MLP memory of depth 3, a bias
 * registered here (its gradient by autodiff inside the body), a matrix
 * memory with the FTRL elastic-net retention (a read that takes the last η,
 * carried by the scan) and one with the elastic retention's boundary under
 * the multistep algorithm (two writes per token); and chunked (b > 1, a chunk
 * a body, a last chunk shorter than b): titans (the rank-one chunk form),
 * memora (a lag token and the KL boundary), Moneta's ℓq read, the FTRL
 * retention (η carried) and DeltaProduct's mini-batch rule:
 * - the layer's output, final state and f64 gradients (to q, k, v, the
 *   gates and W_0) equal the composed per-token ops' (scan=composed) to
 *   1e-10 relative, and the output is made by mi_scan;
 * - an f64 central-difference gradcheck of the layer through mi_scan;
 * - with recording off the two agree too; a second derivative through the
 *   scan path is refused with a message, and scan=composed gives one;
 * - a bad value of the key is refused with a message naming it;
 * - scan=mi_scan runs titans and gated DeltaNet, which the fused kernels
 *   cover, through mi_scan, to the kernels' numbers. */
#include <math.h>

#include "harness.h"

enum { N = 2, DK = 3, DV = 3, W_MAX = MI_MEMORY_MAX_WEIGHTS };

/* ---------------------------------------------------------------- a user's bias */

/* ℓ(y; v) = Σ_j log(1 + (y_j − v_j)²), the Cauchy loss; no closed form, so the
 * layer differentiates it with mi_grad inside the body. */
static mi_tensor *cauchy_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                              mi_tensor *delta)
{
    (void)c, (void)delta;
    return mi_sum(mi_log(mi_add_scalar(mi_square(mi_sub(y, v)), 1)), -1, false);
}

static const mi_bias_kind cauchy_bias = {
    .name = "test-scan-cauchy", .formula = "l = sum log(1 + (y - v)^2)", .loss = cauchy_loss,
};

static void register_user(void)
{
    if (!mi_bias_find(cauchy_bias.name))
        ck_assert_msg(mi_register_bias(&cauchy_bias) == 0, "%s", mi_error());
}

static void reset(void)
{
    mi_registry_reset();
}

/* ---------------------------------------------------------------- cases */

typedef struct kase {
    const char *label;
    const char *set[8];
    bool channel; /* η, α and δ channel-wise, [N, P, dv] */
} kase;

static const kase cases[] = {
    {"titans bias=logcosh",
     {"memory=mlp", "memory.expansion=1", "bias=logcosh", "retention=l2",
      "algorithm=momentum"}, false},
    {"matrix huber channel-wise gates", {"memory=matrix", "bias=huber", "retention=l2"}, true},
    {"mlp depth 3", {"memory=mlp", "memory.depth=3", "memory.expansion=1", "bias=l2"}, false},
    {"registered bias", {"memory=matrix", "bias=test-scan-cauchy", "retention=l2",
                         "algorithm=momentum"}, false},
    {"matrix elastic-ftrl", {"memory=matrix", "bias=l2", "retention=elastic-ftrl"}, false},
    {"matrix elastic multistep", {"memory=matrix", "bias=l2", "retention=elastic",
                                  "algorithm=multistep", "steps=2"}, false},
    {"titans chunk 3", {"memory=mlp", "memory.expansion=1", "bias=l2", "retention=l2",
                        "algorithm=momentum", "chunk=3"}, false},
    {"memora chunk 3", {"memory=mlp", "memory.expansion=1", "bias=l2", "retention=kl",
                        "kl_scale=4", "chunk=3"}, false},
    {"moneta chunk 2", {"memory=mlp", "memory.expansion=1", "bias=lp", "retention=lq",
                        "chunk=2"}, false},
    {"matrix elastic-ftrl chunk 2", {"memory=matrix", "bias=l2", "retention=elastic-ftrl",
                                     "chunk=2"}, true},
    {"deltaproduct mini-batch chunk 2", {"memory=matrix", "bias=l2", "retention=l2",
                                         "algorithm=multistep", "steps=2", "form=minibatch",
                                         "chunk=2"}, false},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* A chunked case's states are too small for scan=auto to take mi_scan
 * (auto_scans_large_chunked_states below): its "auto" is scan=mi_scan. */
static bool chunked(const kase *c)
{
    for (int i = 0; i < 8 && c->set[i]; i++)
        if (!strncmp(c->set[i], "chunk=", 6) && strcmp(c->set[i], "chunk=1")) return true;
    return false;
}

static mi_miras make_miras(const kase *c, const char *scan)
{
    register_user();
    mi_miras_config cfg = mi_miras_config_default();
    for (int i = 0; i < 8 && c->set[i]; i++) config_set(&cfg, c->set[i]);
    if (chunked(c) && !strcmp(scan, "auto")) scan = "mi_scan";
    config_setf(&cfg, "scan=%s", scan);
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s: %s", c->label, mi_error());
    return m;
}

/* The layer's inputs: q, k, v, the gates η, α, μ, δ (NULL where unused) and W_0. */
typedef struct inputs {
    mi_tensor *t[7 + W_MAX];
    int nw;
} inputs;
enum { Q, K, V, ETA, ALPHA, MU, DELTA, W0 };

static mi_tensor *uniform(mi_rng *r, double lo, double hi, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_zeros(MI_F64, rank, shape);
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < t->numel; i++)
        ((double *)t->data)[i] = lo + (hi - lo) * mi_rng_uniform(r);
    return t;
}

static inputs make_inputs(const mi_miras *m, const kase *c, int64_t T, uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    inputs in = {0};
    int64_t P = T * mi_miras_writes(m);
    in.t[Q] = uniform(&r, -1, 1, MI_SHAPE(N, T, DK));
    in.t[K] = mi_l2_normalize(uniform(&r, -1, 1, MI_SHAPE(N, P, DK)), 1e-6);
    in.t[V] = uniform(&r, -1, 1, MI_SHAPE(N, P, DV));
    const int64_t gate_shape[3] = {N, P, DV};
    int rank = c->channel ? 3 : 2;
    in.t[ETA] = uniform(&r, 0.1, 0.6, rank, gate_shape);
    if (m->retention->uses_alpha) in.t[ALPHA] = uniform(&r, 0.8, 0.99, rank, gate_shape);
    if (m->algorithm->uses_mu) in.t[MU] = uniform(&r, 0.2, 0.9, 2, gate_shape);
    if (m->bias->needs_delta) in.t[DELTA] = uniform(&r, 0.3, 1.5, rank, gate_shape);
    int ranks[W_MAX];
    int64_t shapes[W_MAX][MI_MAX_RANK];
    ck_assert_int_eq(m->memory->shapes(&m->config, DK, DV, &in.nw, ranks, shapes), 0);
    for (int i = 0; i < in.nw; i++)
        in.t[W0 + i] = uniform(&r, -0.5, 0.5, ranks[i], shapes[i]);
    return in;
}

/* y and the final state of every weight: 1 + nw outputs. */
static int layer(const mi_miras *m, mi_tensor *const *t, int nw, mi_tensor **out)
{
    mi_miras_gates g = {.eta = t[ETA], .alpha = t[ALPHA], .mu = t[MU], .delta = t[DELTA]};
    out[0] = mi_miras_forward(m, t[Q], t[K], t[V], &g, t + W0, out + 1);
    return out[0] ? 1 + nw : -1;
}

/* The inputs that are used, in order: their indices into inputs.t. */
static int used(const inputs *in, int *idx)
{
    int n = 0;
    for (int i = 0; i < W0 + in->nw; i++)
        if (in->t[i]) idx[n++] = i;
    return n;
}

/* ---------------------------------------------------------------- against the composed ops */

/* The layer by two values of `scan`, made by the ops named `by` and `other`
 * (or not by mi_scan, NULL): outputs, final states and every f64 gradient
 * equal to 1e-10 relative. */
static void compare_scans(const kase *c, uint64_t seed, const char *scan, const char *by,
                          const char *scan2, const char *by2)
{
    mi_miras ms = make_miras(c, scan), mc = make_miras(c, scan2);
    for (int64_t T = 1; T <= 7; T += 6) {
        inputs in = make_inputs(&ms, c, T, seed);
        int idx[7 + W_MAX], n = used(&in, idx);
        for (int j = 0; j < n; j++) mi_requires_grad(in.t[idx[j]], true);
        mi_tensor *out[2][1 + W_MAX], *grads[2][7 + W_MAX], *wrt[7 + W_MAX];
        for (int j = 0; j < n; j++) wrt[j] = in.t[idx[j]];
        mi_rng r;
        mi_rng_seed(&r, 5);
        mi_tensor *weights[1 + W_MAX];
        int n_out = 0;
        for (int p = 0; p < 2; p++) {
            n_out = layer(p ? &mc : &ms, in.t, in.nw, out[p]);
            ck_assert_msg(n_out > 0, "%s: %s", c->label, mi_error());
            mi_tensor *loss = mi_scalar(MI_F64, 0);
            for (int o = 0; o < n_out; o++) {
                if (!p) weights[o] = uniform(&r, -1, 1, out[p][o]->rank, out[p][o]->shape);
                loss = mi_add(loss, mi_sum(mi_mul(out[p][o], weights[o]), MI_ALL, false));
            }
            ck_assert_msg(mi_grad(&loss, NULL, 1, wrt, n, false, grads[p]) == 0, "%s: %s",
                          c->label, mi_error());
        }
        /* past the first token, which a read's missing η keeps outside */
        if (T > 1) ck_assert_msg(computed_within(out[0][0], by, 4), "%s: not by %s", c->label, by);
        ck_assert_msg(out[1][0]->node &&
                          (by2 ? computed_within(out[1][0], by2, 4)
                               : !computed_within(out[1][0], "mi_scan", 2)),
                      "%s: %s", c->label, by2 ? by2 : "by mi_scan");
        int worst;
        double e = max_rel_err(out[0], out[1], n_out, &worst, NULL);
        ck_assert_msg(e <= 1e-10, "%s T %lld: output %d differs by %g", c->label, (long long)T,
                      worst, e);
        e = max_rel_err(grads[0], grads[1], n, &worst, NULL);
        ck_assert_msg(e <= 1e-10, "%s T %lld: gradient of input %d differs by %g", c->label,
                      (long long)T, idx[worst], e);
    }
}

/* mi_scan against the composed per-token ops (scan=composed records them) */
START_TEST(scan_equals_composed)
{
    compare_scans(&cases[_i], 11 + (uint64_t)_i, "auto", "mi_scan", "composed", NULL);
}
END_TEST

/* scan=mi_scan runs a combination a fused kernel covers through mi_scan
 * too (to measure the kernel against it): the same numbers as the kernel */
static const struct {
    kase k;
    const char *kernel;
} fused[] = {
    {{"titans", {"memory=mlp", "memory.expansion=1", "bias=l2", "retention=l2",
                 "algorithm=momentum"}, false}, "mlp_scan"},
    {{"gated deltanet", {"memory=matrix", "bias=l2", "retention=l2"}, false}, "delta_scan"},
};

START_TEST(forced_scan_equals_fused_kernel)
{
    compare_scans(&fused[_i].k, 31 + (uint64_t)_i, "mi_scan", "mi_scan", "auto",
                  fused[_i].kernel);
}
END_TEST

/* ---------------------------------------------------------------- gradcheck */

typedef struct gc_ctx {
    mi_miras m;
    inputs in;
    int idx[MI_MAX_INPUTS]; /* which of in.t the checked inputs stand for */
} gc_ctx;

static int layer_fn(mi_tensor *const *x, int n, mi_tensor **out, void *ctx)
{
    gc_ctx *g = ctx;
    mi_tensor *t[7 + W_MAX];
    memcpy(t, g->in.t, sizeof t);
    for (int j = 0; j < n; j++) t[g->idx[j]] = x[j];
    return layer(&g->m, t, g->in.nw, out);
}

START_TEST(gradcheck_through_scan)
{
    const kase *c = &cases[_i];
    gc_ctx g = {.m = make_miras(c, "auto")};
    /* T 5: the default segment of ⌈√(T−1)⌉ or ⌈√T⌉ tokens leaves a short last one */
    g.in = make_inputs(&g.m, c, 5, 23 + (uint64_t)_i);
    int idx[7 + W_MAX], n = used(&g.in, idx);
    for (int at = 0; at < n; at += MI_MAX_INPUTS) {
        int m = n - at < MI_MAX_INPUTS ? n - at : MI_MAX_INPUTS;
        mi_tensor *x[MI_MAX_INPUTS];
        for (int j = 0; j < m; j++) {
            g.idx[j] = idx[at + j];
            x[j] = g.in.t[g.idx[j]];
            mi_requires_grad(x[j], true);
        }
        mi_gradcheck_result res = mi_gradcheck(layer_fn, &g, x, m, NULL);
        ck_assert_msg(res.ok, "%s: %s", c->label, res.message);
    }
}
END_TEST

/* With recording off (evaluation) the scan path gives the composed path's
 * output; through it a second derivative is refused with a message, and
 * scan=composed still gives one. */
START_TEST(no_grad_and_second_derivatives)
{
    const kase *c = &cases[0];
    mi_miras ms = make_miras(c, "auto"), mc = make_miras(c, "composed");
    inputs in = make_inputs(&ms, c, 6, 31);
    mi_tensor *out[2][1 + W_MAX];
    bool was = mi_set_grad_enabled(false);
    int n_out = layer(&ms, in.t, in.nw, out[0]);
    ck_assert_msg(n_out > 0 && layer(&mc, in.t, in.nw, out[1]) == n_out, "%s", mi_error());
    mi_set_grad_enabled(was);
    int worst;
    double e = max_rel_err(out[0], out[1], n_out, &worst, NULL);
    ck_assert_msg(e <= 1e-10, "no grad: output %d differs by %g", worst, e);

    mi_requires_grad(in.t[Q], true);
    ck_assert_int_gt(layer(&ms, in.t, in.nw, out[0]), 0);
    assert_no_second_derivative(out[0][0], in.t[Q]);
    ck_assert_int_gt(layer(&mc, in.t, in.nw, out[1]), 0);
    mi_tensor *loss = mi_sum(mi_square(out[1][0]), MI_ALL, false), *g, *gg;
    ck_assert_msg(mi_grad(&loss, NULL, 1, &in.t[Q], 1, true, &g) == 0, "%s", mi_error());
    mi_tensor *l2 = mi_sum(mi_square(g), MI_ALL, false);
    ck_assert_msg(mi_grad(&l2, NULL, 1, &in.t[Q], 1, false, &gg) == 0 && gg, "%s", mi_error());
}
END_TEST

/* scan=auto runs chunks through mi_scan once the states the chunks start
 * from come to 16 MiB, and records them below: Titans' memory with yaad's
 * bias (two weights of 128 × 32 and their momentum, f32: 64 KiB a sequence)
 * over 4 chunks of 2, 64 sequences (16 MiB) and 32 (8 MiB); and at any size
 * where a chunk makes a state per token (the KL retention's softmax read: 2
 * sequences). The fused op takes Titans' own chunks (ℓ2 bias) and kl's. */
/* Titans' memory at chunk 2 (MLP, momentum, ℓ2 retention) with `scan`, for
 * heads of 32, and its initial weights w0 (requiring grad when asked). */
static mi_miras titans_chunk2(const char *scan, mi_rng *r, bool grad, mi_tensor **w0)
{
    mi_miras_config cfg = mi_miras_config_default();
    config_set(&cfg, "memory=mlp");
    config_set(&cfg, "algorithm=momentum");
    config_set(&cfg, "retention=l2");
    config_set(&cfg, "chunk=2");
    config_setf(&cfg, "scan=%s", scan);
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s", mi_error());
    int ranks[W_MAX], nw;
    int64_t shapes[W_MAX][MI_MAX_RANK];
    ck_assert_int_eq(m.memory->shapes(&m.config, 32, 32, &nw, ranks, shapes), 0);
    for (int i = 0; i < nw; i++)
        w0[i] = mi_requires_grad(mi_randn(r, MI_F32, ranks[i], shapes[i], 0, 0.1), grad);
    return m;
}

START_TEST(auto_scans_large_chunked_states)
{
    mi_rng r;
    mi_rng_seed(&r, 3);
    mi_tensor *w0[W_MAX];
    mi_miras titans = titans_chunk2("auto", &r, false, w0), m;
    mi_miras_config cfg = titans.config;
    /* Titans' own chunks run as mlp_scan's mini-batch rule (no chunk
     * states); with yaad's bias they keep the rank-one form */
    config_set(&cfg, "bias=yaad");
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s", mi_error());
    for (int big = 0; big < 2; big++) {
        int64_t n = big ? 64 : 32;
        mi_tensor *q = mi_randn(&r, MI_F32, MI_SHAPE(n, 8, 32), 0, 1);
        mi_tensor *k = mi_randn(&r, MI_F32, MI_SHAPE(n, 8, 32), 0, 1);
        mi_tensor *v = mi_randn(&r, MI_F32, MI_SHAPE(n, 8, 32), 0, 1);
        mi_tensor *g = mi_full(MI_F32, MI_SHAPE(n, 8), 0.5);
        mi_requires_grad(q, true);
        mi_miras_gates gt = {.eta = g, .alpha = g, .mu = g, .delta = g};
        mi_tensor *y = mi_miras_forward(&m, q, k, v, &gt, w0, NULL);
        ck_assert_msg(y != NULL, "%s", mi_error());
        ck_assert_msg(computed_within(y, "mi_scan", 4) == big, "%lld sequences: %s mi_scan",
                      (long long)n, big ? "not by" : "by");
        if (!big) continue;
        y = mi_miras_forward(&titans, q, k, v, &gt, w0, NULL); /* the op at any size */
        ck_assert_msg(y != NULL, "%s", mi_error());
        ck_assert_msg(computed_within(y, "mlp_scan", 4), "titans: not by mlp_scan");
    }
    config_set(&cfg, "retention=kl");
    config_set(&cfg, "algorithm=gd");
    ck_assert_msg(mi_miras_init(&m, &cfg) == 0, "%s", mi_error());
    mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(2, 8, 32), 0, 1);
    mi_tensor *g = mi_full(MI_F32, MI_SHAPE(2, 8), 0.5);
    mi_requires_grad(x, true);
    mi_miras_gates gt = {.eta = g, .alpha = g, .delta = g};
    mi_tensor *y = mi_miras_forward(&m, x, x, x, &gt, w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    /* kl's chunks: mlp_scan's mini-batch rule, no state per token */
    ck_assert_msg(computed_within(y, "mlp_scan", 4), "kl: not by mlp_scan");
}
END_TEST

/* The scope's bytes after the forward and after the backward of a chunked
 * titans layer (16 chunks of 2 tokens, 4 sequences, heads of 32) run with
 * `scan`. */
static void chunked_layer_bytes(const char *scan, size_t *forward, size_t *total)
{
    mi_rng r;
    mi_rng_seed(&r, 5);
    mi_tensor *w0[W_MAX];
    mi_miras m = titans_chunk2(scan, &r, true, w0);
    mi_tensor *x = mi_requires_grad(mi_randn(&r, MI_F32, MI_SHAPE(4, 32, 32), 0, 1), true);
    mi_tensor *g = mi_full(MI_F32, MI_SHAPE(4, 32), 0.5);
    mi_miras_gates gt = {.eta = g, .alpha = g, .mu = g};
    mi_scope *step = mi_scope_new("step");
    mi_scope_enter(step);
    mi_tensor *y = mi_miras_forward(&m, x, x, x, &gt, w0, NULL);
    mi_tensor *loss = mi_sum(mi_square(y), MI_ALL, false);
    ck_assert_msg(loss != NULL, "%s", mi_error());
    *forward = mi_scope_stats_get(step).bytes_used;
    ck_assert_msg(mi_backward(loss) == 0, "%s", mi_error());
    *total = mi_scope_stats_get(step).bytes_used;
    mi_scope_leave();
    mi_scope_free(step);
}

/* Through mi_scan a chunked layer keeps the chunks' starting states, not
 * their records: its forward's bytes are the 16 starting states (a state, A
 * and S of both weights, is 256 KiB here: 4 MiB) and less than a MiB more
 * (the input, the output, the gates), and fewer than the recorded forward's. */
START_TEST(chunks_through_scan_keep_less)
{
    size_t rec_fwd, rec_total, scan_fwd, scan_total;
    chunked_layer_bytes("composed", &rec_fwd, &rec_total);
    chunked_layer_bytes("mi_scan", &scan_fwd, &scan_total);
    printf("miras_scan: chunked titans layer, forward %zu -> %zu bytes, step %zu -> %zu\n",
           rec_fwd, scan_fwd, rec_total, scan_total);
    size_t states = 16 * 256 * 1024;
    ck_assert_uint_ge(scan_fwd, states);
    ck_assert_uint_lt(scan_fwd, states + (1u << 20));
    ck_assert_uint_lt(scan_fwd, rec_fwd);
    ck_assert_uint_lt(scan_total, rec_total);
}
END_TEST

START_TEST(bad_scan_value_is_refused)
{
    mi_miras_config cfg = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&cfg, "scan=fused"), -1);
    ck_assert_msg(strstr(mi_error(), "scan"), "%s", mi_error());
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("miras_scan");
    TCase *tc = tcase_slow("miras_scan");
    tcase_add_checked_fixture(tc, NULL, reset);
    tcase_add_loop_test(tc, scan_equals_composed, 0, N_CASES);
    tcase_add_loop_test(tc, forced_scan_equals_fused_kernel, 0,
                        (int)(sizeof fused / sizeof fused[0]));
    tcase_add_loop_test(tc, gradcheck_through_scan, 0, N_CASES);
    tcase_add_test(tc, no_grad_and_second_derivatives);
    tcase_add_test(tc, auto_scans_large_chunked_states);
    tcase_add_test(tc, chunks_through_scan_keep_less);
    tcase_add_test(tc, bad_scan_value_is_refused);
    suite_add_tcase(s, tc);
    return s;
}
