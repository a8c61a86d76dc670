/* The delta rule with a channel-wise decay on the key axis (alpha_on_keys)
 * in chunks: its exact chunkwise form (diagonal plus low rank) against a
 * per-token loop written here, in f64:
 *   S_t = S_{t−1} Diag(α_t)(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ      (decay_first)
 *   S_t = S_{t−1} Diag(α_t) − β_t (S_{t−1} k_t − v_t) k_tᵀ          (otherwise)
 *   y_t = S_t q_t
 * (β per head or per value row: row i with β_{t,i}), y and S_T to 1e-12 at
 * chunks 2, 5, 16, 64 (T = 37 or 67: a short last chunk), with decays near
 * 1, moderate, and near 0 (where a chunk of 64 spans more than the f64 range
 * of one block: the form halves it); the gradients equal chunk 1's; an f64
 * gradcheck of the chunk form (a split one included). The presets: gla by
 * default equals a GLA written here, S_t = S_{t−1} Diag(α_t) + v_t k_tᵀ,
 * at chunks 1 and 16, and rwkv7 by default at chunk 16 equals rwkv7 at
 * chunk 1 and the loop above, to 1e-10; their value-row variants
 * (alpha_on_keys=false) do not equal these loops. Multistep with a key-side
 * decay has no chunk form: form=exact says so. Chunk 1 (the reference of
 * the gradients) runs the fused delta_scan op with its key-side flag. */
#include <stdio.h>

#include "harness.h"

enum { N = 2, D = 4, T_MAX = 67 };

typedef struct inputs {
    int n_seq, t, d;
    mi_tensor *q, *k, *v, *w0, *eta, *alpha; /* leaves that require grad */
    mi_tensor *gy, *gs;                      /* random projections of y and S_T */
} inputs;

static mi_tensor *leaf(mi_tensor *t)
{
    t->requires_grad = true;
    return t;
}

/* q, k, v, W_0; β in [0.2, 0.9] per head ([N, T]) or per value row ([N, T, d]);
 * α in [lo, hi] per key channel [N, T, d]. */
static void make_inputs(inputs *x, int n_seq, int t, int d, double lo, double hi, bool beta_rows,
                        uint64_t seed)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    x->n_seq = n_seq, x->t = t, x->d = d;
    x->q = leaf(mi_randn(&r, MI_F64, MI_SHAPE(n_seq, t, d), 0, 0.5));
    x->k = leaf(mi_randn(&r, MI_F64, MI_SHAPE(n_seq, t, d), 0, 0.5));
    x->v = leaf(mi_randn(&r, MI_F64, MI_SHAPE(n_seq, t, d), 0, 1));
    x->w0 = leaf(mi_randn(&r, MI_F64, MI_SHAPE(d, d), 0, 0.3));
    x->eta = leaf(beta_rows ? mi_rand(&r, MI_F64, MI_SHAPE(n_seq, t, d), 0.2, 0.9)
                            : mi_rand(&r, MI_F64, MI_SHAPE(n_seq, t), 0.2, 0.9));
    x->alpha = leaf(mi_rand(&r, MI_F64, MI_SHAPE(n_seq, t, d), lo, hi));
    x->gy = mi_randn(&r, MI_F64, MI_SHAPE(n_seq, t, d), 0, 1);
    x->gs = mi_randn(&r, MI_F64, 4, (int64_t[]){n_seq, 1, d, d}, 0, 1);
}

/* The rule above one token at a time (or GLA's, hebbian: S_t = S_{t−1}
 * Diag(α_t) + v_t k_tᵀ); y [N·T·d], s [N·d·d]. */
static void loop(const inputs *x, bool decay_first, bool hebbian, double *y, double *s)
{
    int d = x->d, t_len = x->t;
    bool rows = x->eta->rank == 3;
    for (int n = 0; n < x->n_seq; n++) {
        double S[D][D], P[D][D];
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) S[i][j] = mi_get(x->w0, i * d + j);
        for (int t = 0; t < t_len; t++) {
            int64_t at = ((int64_t)n * t_len + t) * d;
            double k[D], v[D], q[D], a[D];
            for (int j = 0; j < d; j++) {
                k[j] = mi_get(x->k, at + j), v[j] = mi_get(x->v, at + j);
                q[j] = mi_get(x->q, at + j), a[j] = mi_get(x->alpha, at + j);
            }
            for (int i = 0; i < d; i++) {
                double beta = hebbian ? 1 : mi_get(x->eta, rows ? at + i : (int64_t)n * t_len + t);
                /* the error at S_{t−1} Diag(α_t) (decay_first) or S_{t−1} */
                double e = -v[i];
                for (int j = 0; j < d; j++)
                    if (!hebbian) e += (decay_first ? a[j] : 1) * S[i][j] * k[j];
                for (int j = 0; j < d; j++) P[i][j] = S[i][j] * a[j] - beta * e * k[j];
            }
            for (int i = 0; i < d; i++) {
                double yi = 0;
                for (int j = 0; j < d; j++) yi += (S[i][j] = P[i][j]) * q[j];
                y[at + i] = yi;
            }
        }
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) s[((int64_t)n * d + i) * d + j] = S[i][j];
    }
}

static mi_miras_config rule_config(bool decay_first, int chunk)
{
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "memory=matrix");
    config_set(&c, "bias=l2");
    config_set(&c, "retention=l2");
    config_set(&c, "algorithm=gd");
    config_set(&c, "alpha_on_keys=true");
    config_setf(&c, "decay_first=%s", decay_first ? "true" : "false");
    config_setf(&c, "chunk=%d", chunk);
    config_set(&c, chunk > 1 ? "form=exact" : "form=auto");
    return c;
}

/* y, S_T and the gradients wrt q, k, v, W_0, η, α: out[0..7]. */
static int results(const mi_miras_config *cfg, const inputs *x, mi_tensor **out)
{
    mi_miras m;
    if (mi_miras_init(&m, cfg) != 0) return -1;
    mi_miras_gates g = {.eta = x->eta, .alpha = x->alpha};
    mi_tensor *s[MI_MEMORY_MAX_WEIGHTS], *w0 = x->w0;
    mi_tensor *y = mi_miras_forward(&m, x->q, x->k, x->v, &g, &w0, s);
    if (!y) return -1;
    mi_tensor *outs[2] = {y, s[0]}, *seeds[2] = {x->gy, x->gs};
    mi_tensor *in[6] = {x->q, x->k, x->v, x->w0, x->eta, x->alpha};
    out[0] = y;
    out[1] = s[0];
    return mi_grad(outs, seeds, 2, in, 6, false, out + 2);
}

/* max |got − want| / (1 + |want|) over y and S_T */
static double err_to_loop(mi_tensor *const *got, const double *y, const double *s)
{
    double e = 0;
    for (int64_t i = 0; i < got[0]->numel; i++) {
        double d = fabs(mi_get(got[0], i) - y[i]) / (1 + fabs(y[i]));
        e = d > e || isnan(d) ? d : e;
    }
    for (int64_t i = 0; i < got[1]->numel; i++) {
        double d = fabs(mi_get(got[1], i) - s[i]) / (1 + fabs(s[i]));
        e = d > e || isnan(d) ? d : e;
    }
    return e;
}

static const char *const what[8] = {"y", "S_T", "dq", "dk", "dv", "dW0", "deta", "dalpha"};

/* _i: ordering (2) × decays (3: near 1, moderate, near 0) × β per head or per row (2) */
static const struct { double lo, hi; const char *name; } decays[] = {
    {0.999, 1.0, "near 1"}, {0.3, 0.99, "moderate"}, {1e-7, 1e-5, "near 0"}};

START_TEST(chunks_equal_the_loop)
{
    bool decay_first = _i % 2, rows = _i / 6;
    int which = (_i / 2) % 3, t_len = which == 2 ? 67 : 37;
    inputs x;
    make_inputs(&x, N, t_len, D, decays[which].lo, decays[which].hi, rows, 500u + (unsigned)_i);
    double *wy = malloc(sizeof(double) * N * T_MAX * D), ws[N * D * D];
    loop(&x, decay_first, false, wy, ws);
    mi_tensor *ref[8], *got[8];
    mi_miras_config c1 = rule_config(decay_first, 1);
    ck_assert_msg(results(&c1, &x, ref) == 0, "%s", mi_error());
    double e = err_to_loop(ref, wy, ws);
    ck_assert_msg(e <= 1e-12, "chunk 1 differs from the loop by %.3g", e);
    static const int chunks[] = {2, 5, 16, 64};
    for (int b = 0; b < 4; b++) {
        mi_miras_config cb = rule_config(decay_first, chunks[b]);
        ck_assert_msg(results(&cb, &x, got) == 0, "chunk %d: %s", chunks[b], mi_error());
        e = err_to_loop(got, wy, ws);
        int worst = 0;
        double eg = max_rel_err(got, ref, 8, &worst, NULL);
        printf("dplr %-11s %-8s beta per %-4s b %2d: y, S_T %.2e from the loop, %.2e (%s) "
               "from chunk 1\n", decay_first ? "decay_first" : "delta", decays[which].name,
               rows ? "row" : "head", chunks[b], e, eg, what[worst]);
        ck_assert_msg(e <= 1e-12, "chunk %d: y or S_T differs from the loop by %.3g", chunks[b], e);
        ck_assert_msg(eg <= 1e-12, "chunk %d: %s differs from chunk 1 by %.3g", chunks[b],
                      what[worst], eg);
    }
    free(wy);
}
END_TEST

typedef struct check_ctx {
    mi_miras_config cfg;
} check_ctx;

static int call_layer(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    check_ctx *c = ctx;
    mi_miras m;
    if (mi_miras_init(&m, &c->cfg) != 0) return -1;
    mi_miras_gates g = {.eta = in[4], .alpha = in[5]};
    mi_tensor *w0 = in[3], *s[MI_MEMORY_MAX_WEIGHTS];
    out[0] = mi_miras_forward(&m, in[0], in[1], in[2], &g, &w0, s);
    out[1] = s[0];
    return out[0] ? 2 : -1;
}

/* _i: ordering (2) × {chunk 5 of T 11, moderate decays; chunk 64 of T 67 near 0 (split)} */
START_TEST(chunk_form_gradcheck)
{
    bool decay_first = _i % 2, split = _i / 2;
    inputs x;
    make_inputs(&x, 1, split ? 67 : 11, split ? 2 : 3, split ? 1e-5 : 0.3, split ? 4e-5 : 0.99,
                false, 700u + (unsigned)_i);
    check_ctx c = {rule_config(decay_first, split ? 64 : 5)};
    mi_tensor *in[6] = {x.q, x.k, x.v, x.w0, x.eta, x.alpha};
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    o.quiet = true;
    mi_gradcheck_result g = mi_gradcheck(call_layer, &c, in, 6, &o);
    printf("dplr %-11s chunk %d gradcheck: %lld entries, max abs err %.2e\n",
           decay_first ? "decay_first" : "delta", c.cfg.chunk, (long long)g.entries, g.max_abs_err);
    ck_assert_msg(g.ok, "%s", g.message);
}
END_TEST

/* The forward of preset `name` (with `set` on top, or NULL) at `chunk`:
 * out[0..7] as results(). */
static int preset_results(const char *name, const char *set, int chunk, const inputs *x,
                          mi_tensor **out)
{
    mi_miras_config c = preset_config(mi_preset_find(name));
    if (set) config_set(&c, set);
    c.chunk = chunk;
    return results(&c, x, out);
}

START_TEST(gla_by_default_is_gla)
{
    inputs x;
    make_inputs(&x, N, 37, D, 0.3, 0.99, false, 800);
    x.eta = leaf(mi_ones(MI_F64, MI_SHAPE(N, 37))); /* the preset's η ≡ 1 */
    double *wy = malloc(sizeof(double) * N * T_MAX * D), ws[N * D * D];
    loop(&x, false, true, wy, ws);
    mi_tensor *got[8];
    for (int b = 1; b <= 16; b += 15) {
        ck_assert_msg(preset_results("gla", NULL, b, &x, got) == 0, "%s", mi_error());
        double e = err_to_loop(got, wy, ws);
        printf("gla chunk %2d: %.2e from GLA's loop\n", b, e);
        ck_assert_msg(e <= 1e-10, "gla chunk %d differs from GLA by %.3g", b, e);
        ck_assert_msg(preset_results("gla", "alpha_on_keys=false", b, &x, got) == 0, "%s",
                      mi_error());
        ck_assert_msg(err_to_loop(got, wy, ws) > 1e-3, "gla with the value-row decay equals GLA");
    }
    free(wy);
}
END_TEST

START_TEST(rwkv7_chunks_equal_chunk_1)
{
    inputs x;
    make_inputs(&x, N, 37, D, 0.3, 0.99, false, 900);
    double *wy = malloc(sizeof(double) * N * T_MAX * D), ws[N * D * D];
    loop(&x, true, false, wy, ws);
    mi_tensor *ref[8], *got[8];
    ck_assert_msg(preset_results("rwkv7", NULL, 1, &x, ref) == 0, "%s", mi_error());
    ck_assert_msg(preset_results("rwkv7", NULL, 16, &x, got) == 0, "%s", mi_error());
    int worst = 0;
    double e = max_rel_err(got, ref, 8, &worst, NULL), el = err_to_loop(got, wy, ws);
    printf("rwkv7 chunk 16: %.2e (%s) from chunk 1, %.2e from the loop\n", e, what[worst], el);
    ck_assert_msg(e <= 1e-10, "rwkv7 chunk 16: %s differs from chunk 1 by %.3g", what[worst], e);
    ck_assert_msg(el <= 1e-10, "rwkv7 chunk 16 differs from the key-side loop by %.3g", el);
    /* the chunkwise form, which form=auto takes for states over 48 × 48 */
    ck_assert_msg(preset_results("rwkv7", "form=exact", 16, &x, got) == 0, "%s", mi_error());
    e = max_rel_err(got, ref, 8, &worst, NULL);
    printf("rwkv7 chunk 16, form=exact: %.2e (%s) from chunk 1\n", e, what[worst]);
    ck_assert_msg(e <= 1e-10, "rwkv7 form=exact chunk 16: %s differs from chunk 1 by %.3g",
                  what[worst], e);
    ck_assert_msg(preset_results("rwkv7", "alpha_on_keys=false", 16, &x, got) == 0, "%s",
                  mi_error());
    ck_assert_msg(err_to_loop(got, wy, ws) > 1e-3, "rwkv7 with the value-row decay equals the loop");
    free(wy);
}
END_TEST

START_TEST(multistep_has_no_key_side_chunk_form)
{
    mi_miras_config c = preset_config(mi_preset_find("deltaproduct"));
    config_set(&c, "alpha_on_keys=true");
    config_set(&c, "chunk=4");
    config_set(&c, "form=exact");
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    int p = 6 * c.steps;
    mi_rng r;
    mi_rng_seed(&r, 3);
    mi_tensor *q = mi_randn(&r, MI_F64, MI_SHAPE(1, 6, D), 0, 0.5);
    mi_tensor *kv = mi_randn(&r, MI_F64, MI_SHAPE(1, p, D), 0, 0.5);
    mi_tensor *w0 = mi_zeros(MI_F64, MI_SHAPE(D, D));
    mi_miras_gates g = {.eta = mi_full(MI_F64, MI_SHAPE(1, p), 0.5),
                        .alpha = mi_full(MI_F64, MI_SHAPE(1, p, D), 0.9)};
    ck_assert_ptr_null(mi_miras_forward(&m, q, kv, kv, &g, &w0, NULL));
    ck_assert_error_has("alpha_on_keys");
    ck_assert_error_has("multistep");
    mi_error_clear();
    c.form = MI_FORM_AUTO; /* auto: the mini-batch rule */
    ck_assert_int_eq(mi_miras_init(&m, &c), 0);
    ck_assert_ptr_nonnull(mi_miras_forward(&m, q, kv, kv, &g, &w0, NULL));
}
END_TEST

/* Whether the forward of c on x computes y through the fused delta_scan op. */
static bool runs_scan(const mi_miras_config *c, const inputs *x)
{
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, c), 0);
    mi_miras_gates g = {.eta = x->eta, .alpha = x->alpha};
    mi_tensor *w0 = x->w0;
    mi_tensor *y = mi_miras_forward(&m, x->q, x->k, x->v, &g, &w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    return computed_within(y, "delta_scan", 3);
}

/* At chunk 1 (and with form=auto for a small state at any chunk) the
 * key-side decay runs as the fused delta_scan op with its ALPHA_KEYS flag
 * (chunks_equal_the_loop compares its y, S_T and gradients); the op takes
 * α [N, T, dk] with the flag and says so when given [N, T, dv]. */
START_TEST(scan_takes_the_key_side_decay)
{
    inputs x;
    make_inputs(&x, N, 9, D, 0.3, 0.99, false, 950);
    for (int b = 1; b <= 16; b += 15) {
        mi_miras_config c = rule_config(true, b);
        c.form = MI_FORM_AUTO;
        ck_assert_msg(runs_scan(&c, &x), "chunk %d: not the fused scan", b);
    }
    mi_rng r;
    mi_rng_seed(&r, 5);
    mi_tensor *s0 = mi_zeros(MI_F64, MI_SHAPE(1, 3, 2));
    mi_tensor *qk = mi_randn(&r, MI_F64, MI_SHAPE(1, 4, 2), 0, 1);
    mi_tensor *v = mi_randn(&r, MI_F64, MI_SHAPE(1, 4, 3), 0, 1);
    mi_tensor *beta = mi_full(MI_F64, MI_SHAPE(1, 4), 0.5);
    mi_tensor *rows = mi_full(MI_F64, MI_SHAPE(1, 4, 3), 0.9);
    mi_delta_rule keys = (mi_delta_rule)(MI_DELTA_RULE_DELTA | MI_DELTA_RULE_ALPHA_KEYS);
    ck_assert_ptr_null(mi_delta_scan(s0, qk, qk, v, beta, rows, keys, NULL));
    ck_assert_error_has("[N,T,dk]");
    mi_error_clear();
    mi_tensor *cols = mi_full(MI_F64, MI_SHAPE(1, 4, 2), 0.9);
    ck_assert_ptr_nonnull(mi_delta_scan(s0, qk, qk, v, beta, cols, keys, NULL));
}
END_TEST

/* gla's chunks (a Hebbian rule with a key-side decay) run the scan at any
 * state size with form=auto, and equal the mini-batch path, which is the
 * same recurrence with a copy of the state per token: y, S_T and every
 * gradient. Heads of 50 (2500 state entries) are past the delta rule's
 * DELTA_SCAN_MAX_STATE. */
START_TEST(gla_chunks_run_the_scan)
{
    enum { DW = 50 };
    inputs x;
    make_inputs(&x, 1, 9, DW, 0.3, 0.99, false, 960);
    x.eta = leaf(mi_ones(MI_F64, MI_SHAPE(1, 9)));
    mi_tensor *scan[8], *ref[8];
    mi_miras_config c = preset_config(mi_preset_find("gla"));
    c.chunk = 4;
    ck_assert_msg(runs_scan(&c, &x), "gla chunk 4: not the fused scan");
    ck_assert_msg(results(&c, &x, scan) == 0, "%s", mi_error());
    c.form = MI_FORM_MINIBATCH;
    ck_assert_msg(results(&c, &x, ref) == 0, "%s", mi_error());
    int worst = 0;
    double e = max_rel_err(scan, ref, 8, &worst, NULL);
    printf("gla heads of %d, chunk 4: the scan %.2e from the mini-batch path\n", DW, e);
    ck_assert_msg(e <= 1e-12, "gla chunk 4: the scan differs from the mini-batch path by %.3g", e);
}
END_TEST

/* The unit write (delta_write=unit) with a key-side decay has neither a
 * scan kernel nor a chunkwise form: at chunk 1 it runs as the composed ops
 * (equal to materialize=true), and form=exact at chunk 4 says why it cannot. */
START_TEST(unit_write_on_the_key_side)
{
    inputs x;
    make_inputs(&x, N, 9, D, 0.3, 0.99, false, 970);
    mi_tensor *got[8], *ref[8];
    mi_miras_config c = rule_config(true, 1);
    config_set(&c, "delta_write=unit");
    ck_assert_msg(!runs_scan(&c, &x), "the scan has no unit write on the key side");
    ck_assert_msg(results(&c, &x, got) == 0, "%s", mi_error());
    mi_miras_config cm = c;
    config_set(&cm, "materialize=true");
    ck_assert_msg(results(&cm, &x, ref) == 0, "%s", mi_error());
    int worst = 0;
    ck_assert_double_le(max_rel_err(got, ref, 8, &worst, NULL), 1e-12);
    mi_miras_config ce = rule_config(true, 4);
    config_set(&ce, "delta_write=unit");
    ck_assert_int_ne(results(&ce, &x, got), 0);
    ck_assert_error_has("delta_write=unit");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("delta_dplr");
    TCase *tc = tcase_slow("dplr");
    tcase_add_loop_test(tc, chunks_equal_the_loop, 0, 12);
    tcase_add_loop_test(tc, chunk_form_gradcheck, 0, 4);
    tcase_add_test(tc, gla_by_default_is_gla);
    tcase_add_test(tc, gla_chunks_run_the_scan);
    tcase_add_test(tc, unit_write_on_the_key_side);
    tcase_add_test(tc, rwkv7_chunks_equal_chunk_1);
    tcase_add_test(tc, multistep_has_no_key_side_chunk_form);
    tcase_add_test(tc, scan_takes_the_key_side_decay);
    suite_add_tcase(s, tc);
    return s;
}
