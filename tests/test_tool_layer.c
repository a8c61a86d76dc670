/* miras-layer, run as a program: what it writes equals the library's
 * layer computed in-process (f64, to 1e-12), and every misuse gets a
 * message, the right exit status and no file left behind. */
#include <stdio.h>

#include "harness.h"
#include "tool_run.h"

enum { N = 2, T = 5, D = 3 };

/* ---------------------------------------------------------------- helpers */
typedef struct layer_case {
    int n;
    mi_named_tensor t[16];
} layer_case;

static mi_tensor *get(const layer_case *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) return c->t[i].tensor;
    return NULL;
}

/* Adds or replaces a tensor. */
static void put(layer_case *c, const char *name, mi_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) {
            c->t[i].tensor = t;
            return;
        }
    c->t[c->n++] = (mi_named_tensor){name, t};
}

static void drop(layer_case *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name)) c->t[i] = c->t[--c->n];
}

static const char *w_names[] = {"w0.0", "w0.1", "w0.2", "w0.3", "w0.4", "w0.5", "w0.6", "w0.7"};

/* Every input a layer of `memory` might read, f64: q, k, v with `steps`
 * writes per token, all four gates per head (in ranges where every rule
 * is smooth), the memory's own initial weights and r. */
static layer_case make_case(const mi_miras_config *cfg, int steps, uint64_t seed)
{
    mi_rng rng;
    mi_rng_seed(&rng, seed);
    layer_case c = {0};
    int P = steps * T;
    bool mlp = !strcmp(cfg->memory, "mlp");
    put(&c, "q", mi_randn(&rng, MI_F64, MI_SHAPE(N, T, D), 0, mlp ? 1 : 0.6));
    put(&c, "k", mi_randn(&rng, MI_F64, MI_SHAPE(N, P, D), 0, mlp ? 1 : 0.6));
    put(&c, "v", mi_randn(&rng, MI_F64, MI_SHAPE(N, P, D), 0, 1));
    put(&c, "eta", mi_rand(&rng, MI_F64, MI_SHAPE(N, P), mlp ? 0.05 : 0.2, mlp ? 0.3 : 0.9));
    put(&c, "alpha", mi_rand(&rng, MI_F64, MI_SHAPE(N, P), 0.7, 0.99));
    put(&c, "mu", mi_rand(&rng, MI_F64, MI_SHAPE(N, P), 0.3, 0.9));
    put(&c, "delta", mi_rand(&rng, MI_F64, MI_SHAPE(N, P), 0.5, 2));
    mi_tensor *w[MI_MEMORY_MAX_WEIGHTS];
    int nw, ranks[MI_MEMORY_MAX_WEIGHTS];
    int64_t shapes[MI_MEMORY_MAX_WEIGHTS][MI_MAX_RANK];
    const mi_memory_kind *mem = mi_memory_find(cfg->memory);
    ck_assert_int_eq(mem->shapes(cfg, D, D, &nw, ranks, shapes), 0);
    ck_assert_int_eq(mem->init(cfg, D, D, &rng, MI_F64, w), 0);
    for (int i = 0; i < nw; i++) put(&c, w_names[i], w[i]);
    put(&c, "r", mi_randn(&rng, MI_F64, MI_SHAPE(N, T, D), 0, 1));
    return c;
}

static void save_case(const char *path, const layer_case *c)
{
    ck_assert_msg(mi_safetensors_save(path, c->t, c->n, NULL) == 0, "%s", mi_error());
}

/* y and the gradients of Σ y ⊙ r (r absent: ones) with respect to the
 * inputs named in `used`, computed in-process. A tensor of the case not in
 * `used` still goes to the layer, without a gradient. */
static mi_tensor *reference(const mi_miras_config *cfg, const layer_case *c,
                            const char *const *used, mi_tensor **grads)
{
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, cfg) == 0, "%s", mi_error());
    layer_case x = *c;
    mi_tensor *leaves[16];
    int n = 0;
    for (; used[n]; n++) {
        leaves[n] = mi_requires_grad(mi_detach(get(c, used[n])), true);
        put(&x, used[n], leaves[n]);
    }
    mi_miras_gates g = {get(&x, "eta"), get(&x, "alpha"), get(&x, "mu"), get(&x, "delta")};
    mi_tensor *w0[MI_MEMORY_MAX_WEIGHTS];
    for (int i = 0; i < MI_MEMORY_MAX_WEIGHTS; i++) w0[i] = get(&x, w_names[i]);
    mi_tensor *y = mi_miras_forward(&m, get(&x, "q"), get(&x, "k"), get(&x, "v"), &g, w0, NULL);
    ck_assert_msg(y != NULL, "%s", mi_error());
    mi_tensor *r = get(c, "r") ? get(c, "r") : mi_ones(MI_F64, y->rank, y->shape);
    mi_tensor *loss = mi_sum(mi_mul(y, r), MI_ALL, false);
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, leaves, n, false, grads), 0);
    return y;
}

static double max_abs_diff(const mi_tensor *a, const mi_tensor *b)
{
    ck_assert_msg(mi_same_shape(a, b), "shapes differ");
    double m = 0;
    for (int64_t i = 0; i < a->numel; i++) m = fmax(m, fabs(mi_get(a, i) - mi_get(b, i)));
    return m;
}

/* The tool's output file holds exactly y and grad.<used>, each within tol. */
static void expect_output(const char *path, const mi_miras_config *cfg, const layer_case *c,
                          const char *const *used, double tol)
{
    mi_tensor *grads[16];
    mi_tensor *y = reference(cfg, c, used, grads);
    mi_safetensors *st = mi_safetensors_load(path);
    ck_assert_msg(st != NULL, "%s", mi_error());
    int n = 0;
    while (used[n]) n++;
    ck_assert_int_eq(st->count, 1 + n);
    ck_assert_ptr_nonnull(mi_safetensors_get(st, "y"));
    ck_assert_double_le(max_abs_diff(mi_safetensors_get(st, "y"), y), tol);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "grad.%s", used[i]);
        mi_tensor *g = mi_safetensors_get(st, name);
        ck_assert_msg(g != NULL, "output lacks %s", name);
        double err = max_abs_diff(g, grads[i]);
        ck_assert_msg(err <= tol, "%s differs by %g", name, err);
    }
}

#define RUN(...) tool_run(MIRAS_TOOL, (const char *const[]){__VA_ARGS__, NULL})

static mi_miras_config preset_at_chunk(const char *name, int chunk)
{
    mi_miras_config c = preset_config(mi_preset_find(name));
    c.chunk = chunk;
    return c;
}

/* ---------------------------------------------------------------- agreement */
START_TEST(titans_chunked_matches_the_library)
{
    mi_miras_config cfg = preset_at_chunk("titans", 2);
    layer_case c = make_case(&cfg, 1, 11);
    save_case(tmp_path("in.safetensors"), &c);
    const tool_result *r = RUN("--in", tmp_path("in.safetensors"), "--out",
                               tmp_path("out.safetensors"), "--model", "titans", "--chunk", "2",
                               "--dtype", "f64");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "wrote y [2,5,3]"));
    /* delta is in the file but titans has no Huber threshold: no grad.delta */
    const char *used[16] = {"q", "k", "v", "eta", "alpha", "mu"};
    for (int i = 0; get(&c, w_names[i]); i++) used[6 + i] = w_names[i];
    expect_output(tmp_path("out.safetensors"), &cfg, &c, used, 1e-12);
    mi_safetensors *st = mi_safetensors_load(tmp_path("out.safetensors"));
    ck_assert_str_eq(mi_safetensors_meta(st, "model"), "titans");
    ck_assert_str_eq(tool_tmp_listing(), "in.safetensors|out.safetensors");
}
END_TEST

/* --set builds gated DeltaNet from DeltaNet; a channel-wise η, one initial
 * memory per sequence ([N] in front) and no r (ones). */
START_TEST(set_overrides_channel_gates_and_per_sequence_memory)
{
    mi_miras_config cfg = preset_at_chunk("gated-deltanet", 1);
    layer_case c = make_case(&cfg, 1, 12);
    mi_rng rng;
    mi_rng_seed(&rng, 5);
    put(&c, "eta", mi_rand(&rng, MI_F64, MI_SHAPE(N, T, D), 0.2, 0.9));
    put(&c, "w0.0", mi_randn(&rng, MI_F64, MI_SHAPE(N, D, D), 0, 0.3));
    drop(&c, "r");
    save_case(tmp_path("in.safetensors"), &c);
    const tool_result *r = RUN("--in", tmp_path("in.safetensors"), "--out",
                               tmp_path("out.safetensors"), "--model", "deltanet", "--set",
                               "retention=l2", "--set", "decay_first=true");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    expect_output(tmp_path("out.safetensors"), &cfg, &c,
                  (const char *const[]){"q", "k", "v", "eta", "alpha", "w0.0", NULL}, 1e-12);
}
END_TEST

/* DeltaProduct: k, v and the gates have steps·T positions, q has T. */
START_TEST(multistep_takes_steps_times_t_positions)
{
    mi_miras_config cfg = preset_at_chunk("deltaproduct", 2);
    layer_case c = make_case(&cfg, cfg.steps, 13);
    save_case(tmp_path("in.safetensors"), &c);
    const tool_result *r = RUN("--in", tmp_path("in.safetensors"), "--out",
                               tmp_path("out.safetensors"), "--model", "deltaproduct", "--chunk",
                               "2");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    expect_output(tmp_path("out.safetensors"), &cfg, &c,
                  (const char *const[]){"q", "k", "v", "eta", "alpha", "w0.0", NULL}, 1e-12);
}
END_TEST

/* Linear attention's η ≡ 1 may be left out; --dtype f32 computes in f32. */
START_TEST(constant_gate_filled_in_and_f32)
{
    mi_miras_config cfg = preset_at_chunk("linear-attention", 1);
    layer_case c = make_case(&cfg, 1, 14);
    drop(&c, "eta");
    save_case(tmp_path("in.safetensors"), &c);
    const tool_result *r = RUN("--in", tmp_path("in.safetensors"), "--out",
                               tmp_path("out.safetensors"), "--model", "linear-attention",
                               "--dtype", "f32");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    mi_safetensors *st = mi_safetensors_load(tmp_path("out.safetensors"));
    ck_assert_int_eq(mi_safetensors_get(st, "y")->dtype, MI_F32);
    put(&c, "eta", mi_ones(MI_F64, MI_SHAPE(N, T)));
    expect_output(tmp_path("out.safetensors"), &cfg, &c,
                  (const char *const[]){"q", "k", "v", "w0.0", NULL}, 1e-5);
}
END_TEST

/* ---------------------------------------------------------------- misuse */
START_TEST(help_and_version)
{
    const tool_result *r = RUN("--help");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "usage: miras-layer"));
    ck_assert_ptr_nonnull(strstr(r->out, "grad.NAME"));
    r = RUN("--version");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "miras-layer 0."));
}
END_TEST

/* Status 2 and a message on stderr that contains `says`. */
#define EXPECT_USAGE(says, ...)                                                         \
    do {                                                                                \
        const tool_result *r_ = RUN(__VA_ARGS__);                                       \
        ck_assert_msg(r_->status == 2, "status %d for %s", r_->status, says);           \
        ck_assert_msg(strstr(r_->err, says), "\"%s\" lacks \"%s\"", r_->err, says);     \
    } while (0)

START_TEST(usage_errors_exit_2)
{
    mi_miras_config cfg = preset_at_chunk("titans", 1);
    layer_case c = make_case(&cfg, 1, 15);
    char in[512], out[512];
    snprintf(in, sizeof in, "%s", tmp_path("in.safetensors"));
    snprintf(out, sizeof out, "%s", tmp_path("out.safetensors"));
    save_case(in, &c);
    EXPECT_USAGE("unknown option --bogus", "--in", in, "--out", out, "--bogus");
    EXPECT_USAGE("--out FILE", "--in", in);
    EXPECT_USAGE("missing value after --out", "--in", in, "--out");
    EXPECT_USAGE("no preset named 'nosuch'; presets:", "--in", in, "--out", out, "--model",
                 "nosuch");
    EXPECT_USAGE("unknown memory 'tape'", "--in", in, "--out", out, "--set", "memory=tape");
    EXPECT_USAGE("unknown key 'colour'", "--in", in, "--out", out, "--set", "colour=blue");
    EXPECT_USAGE("chunk must be >= 1", "--in", in, "--out", out, "--chunk", "0");
    EXPECT_USAGE("f32 or f64", "--in", in, "--out", out, "--dtype", "f16");
    EXPECT_USAGE("implicit GD needs memory=matrix", "--in", in, "--out", out, "--set",
                 "memory=mlp", "--set", "algorithm=implicit");
    ck_assert_str_eq(tool_tmp_listing(), "in.safetensors");
}
END_TEST

/* Runs the tool on `in`; expects status 1, a one-line message containing
 * `says` and no new file. */
static void expect_failure(const char *in, const char *out, const char *model, const char *says)
{
    const char *before = strdup(tool_tmp_listing());
    const tool_result *r = RUN("--in", in, "--out", out, "--model", model);
    ck_assert_msg(r->status == 1, "status %d: %s", r->status, r->err);
    ck_assert_msg(strstr(r->err, says), "\"%s\" lacks \"%s\"", r->err, says);
    ck_assert_msg(strncmp(r->err, "miras-layer: ", 13) == 0 && strchr(r->err, '\n') ==
                  r->err + strlen(r->err) - 1, "not one line: \"%s\"", r->err);
    ck_assert_str_eq(tool_tmp_listing(), before);
    free((void *)before);
}

START_TEST(runtime_errors_exit_1_and_write_nothing)
{
    mi_miras_config cfg = preset_at_chunk("gated-deltanet", 1);
    layer_case c = make_case(&cfg, 1, 16);
    char in[512], out[512];
    snprintf(in, sizeof in, "%s", tmp_path("in.safetensors"));
    snprintf(out, sizeof out, "%s", tmp_path("out.safetensors"));
    save_case(in, &c);
    expect_failure(tmp_path("absent.safetensors"), out, "gated-deltanet", "absent.safetensors");

    /* truncated: the header promises more data than there is */
    FILE *f = fopen(in, "rb");
    char bytes[8192];
    size_t size = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    f = fopen(tmp_path("short.safetensors"), "wb");
    fwrite(bytes, 1, size - 40, f);
    fclose(f);
    expect_failure(tmp_path("short.safetensors"), out, "gated-deltanet", "safetensors");
    /* corrupted: a brace of the JSON header overwritten */
    bytes[8] = '#';
    f = fopen(tmp_path("bad.safetensors"), "wb");
    fwrite(bytes, 1, size, f);
    fclose(f);
    expect_failure(tmp_path("bad.safetensors"), out, "gated-deltanet", "safetensors");

    layer_case bad = c;
    drop(&bad, "alpha");
    save_case(tmp_path("noalpha.safetensors"), &bad);
    expect_failure(tmp_path("noalpha.safetensors"), out, "gated-deltanet", "no tensor 'alpha'");
    expect_failure(in, out, "titans", "no tensor 'w0.1'");  /* the mlp memory has more */

    bad = c;
    put(&bad, "k", mi_zeros(MI_F64, MI_SHAPE(N, T + 1, D)));
    save_case(tmp_path("shape.safetensors"), &bad);
    expect_failure(tmp_path("shape.safetensors"), out, "gated-deltanet", "must be [N,T,dk]");
    bad = c;
    put(&bad, "w0.0", mi_zeros(MI_F64, MI_SHAPE(D, D + 1)));
    save_case(tmp_path("w0.safetensors"), &bad);
    expect_failure(tmp_path("w0.safetensors"), out, "gated-deltanet", "initial weight 0");
    bad = c;
    put(&bad, "r", mi_zeros(MI_F64, MI_SHAPE(N, T, D + 1)));
    save_case(tmp_path("r.safetensors"), &bad);
    expect_failure(tmp_path("r.safetensors"), out, "gated-deltanet", "r is [2,5,4]");
    /* a non-finite input is named, not run */
    bad = c;
    mi_tensor *v = mi_full(MI_F64, MI_SHAPE(N, T, D), 0.5);
    mi_set(v, 7, INFINITY);
    put(&bad, "v", v);
    save_case(tmp_path("inf.safetensors"), &bad);
    expect_failure(tmp_path("inf.safetensors"), out, "gated-deltanet",
                   "tensor 'v' holds inf at index 7");
}
END_TEST

START_TEST(unwritable_output_leaves_nothing)
{
    mi_miras_config cfg = preset_at_chunk("deltanet", 1);
    layer_case c = make_case(&cfg, 1, 17);
    char in[512];
    snprintf(in, sizeof in, "%s", tmp_path("in.safetensors"));
    save_case(in, &c);
    expect_failure(in, tmp_path("no/such/dir/out.safetensors"), "deltanet", "cannot");
    /* an earlier output stays as it was when a run fails */
    const char *out = tmp_path("out.safetensors");
    FILE *f = fopen(out, "w");
    fputs("earlier", f);
    fclose(f);
    expect_failure(in, out, "titans", "no tensor");
    char buf[16] = {0};
    f = fopen(out, "r");
    ck_assert_uint_eq(fread(buf, 1, sizeof buf - 1, f), 7);
    fclose(f);
    ck_assert_str_eq(buf, "earlier");
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("tool_layer");
    TCase *tc = tcase_slow("tool_layer");
    tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
    tcase_add_test(tc, titans_chunked_matches_the_library);
    tcase_add_test(tc, set_overrides_channel_gates_and_per_sequence_memory);
    tcase_add_test(tc, multistep_takes_steps_times_t_positions);
    tcase_add_test(tc, constant_gate_filled_in_and_f32);
    tcase_add_test(tc, help_and_version);
    tcase_add_test(tc, usage_errors_exit_2);
    tcase_add_test(tc, runtime_errors_exit_1_and_write_nothing);
    tcase_add_test(tc, unwritable_output_leaves_nothing);
    suite_add_tcase(s, tc);
    return s;
}
