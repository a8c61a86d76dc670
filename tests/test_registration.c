/* Registration from a user's program (components.h): a memory, bias,
 * retention, algorithm and preset defined here, not in src/, are found by
 * name wherever a built-in is; a clash or an invalid registration is an error
 * with a message and adds nothing; a copy of a built-in under a new name (the
 * same functions and rule) gives bitwise the built-in's outputs through the
 * same fused op, while the same functions without the rule take the composed
 * path; the tables hold more entries than any fixed size they had. Every test
 * ends with mi_registry_reset (the suite runs unforked, under LeakSanitizer). */
#include <stdio.h>

#include "harness.h"

/* ---------------------------------------------------------------- a user's components */

/* ℓ(y; v) = s/2 ‖y − v‖², s = the bias's own parameter "half_scale". */
typedef struct scaled_params {
    double scale;
} scaled_params;

static const mi_field scaled_fields[] = {
    MI_FIELD_REAL_AT(scaled_params, "half_scale", scale, "1", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "scaled: s in s/2 |y - v|^2"),
};

static double scale_of(const mi_miras_config *c)
{
    scaled_params p;
    memcpy(&p, &c->bias_params, sizeof p);
    return p.scale;
}

static mi_tensor *scaled_loss(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                              mi_tensor *delta)
{
    return mi_mul_scalar(mi_sum(mi_square(mi_sub(y, v)), -1, false), 0.5 * scale_of(c));
}

static mi_tensor *scaled_error(const mi_miras_config *c, mi_tensor *y, mi_tensor *v,
                               mi_tensor *delta)
{
    return mi_mul_scalar(mi_sub(y, v), scale_of(c));
}

static const mi_bias_kind scaled_bias = {
    .name = "test-scaled", .formula = "l = s/2 ||y - v||^2", .loss = scaled_loss,
    .error = scaled_error, MI_PARAMS(scaled_params, scaled_fields),
};

static const mi_retention_kind keep_all = {
    .name = "test-keep", .formula = "W_t = W_{t-1} + step_t", .rule = MI_RETENTION_RULE_DECAY,
};

static const mi_algorithm_kind plain_gd = {
    .name = "test-gd", .formula = "A_t = A_{t-1} - eta_t grad", .delta_rule = true,
    .factored = true,
};

/* Copies of built-ins, made at run time (their functions are the built-ins'
 * own): static storage, as a registration needs. */
static mi_memory_kind matrix_copy, mlp_copy;
static mi_bias_kind l2_copy, l2_no_rule, yaad_copy;
static mi_retention_kind lq_copy;

static void make_copies(void)
{
    matrix_copy = *mi_memory_find("matrix");
    matrix_copy.name = "test-matrix";
    mlp_copy = *mi_memory_find("mlp");
    mlp_copy.name = "test-mlp";
    l2_copy = *mi_bias_find("l2");
    l2_copy.name = "test-l2";
    l2_no_rule = l2_copy;
    l2_no_rule.name = "test-l2-own";
    l2_no_rule.rule = MI_BIAS_RULE_OWN;
    yaad_copy = *mi_bias_find("yaad");
    yaad_copy.name = "test-yaad";
    lq_copy = *mi_retention_find("lq");
    lq_copy.name = "test-lq";
}

static void reset(void)
{
    mi_registry_reset();
}

/* ---------------------------------------------------------------- graph look-up */

/* Whether op `name` computed t or anything it came from. */
static bool computed_by(const mi_tensor *t, const char *name)
{
    const mi_tensor **todo = NULL, **seen = NULL;
    size_t n_todo = 0, n_seen = 0, cap = 0;
    bool found = false;
#define PUSH(x)                                                                        \
    do {                                                                               \
        if (n_todo == cap || n_seen == cap) {                                          \
            cap = cap ? 2 * cap : 64;                                                  \
            todo = realloc(todo, sizeof *todo * cap);                                  \
            seen = realloc(seen, sizeof *seen * cap);                                  \
            ck_assert(todo && seen);                                                   \
        }                                                                              \
        todo[n_todo++] = (x);                                                          \
        seen[n_seen++] = (x);                                                          \
    } while (0)
    if (t) PUSH(t);
    while (n_todo && !found) {
        const mi_tensor *x = todo[--n_todo];
        if (!x->node) continue;
        if (!strcmp(x->node->op->name, name)) found = true;
        for (int i = 0; i < x->node->n_inputs; i++) {
            const mi_tensor *in = x->node->inputs[i];
            bool known = !in;
            for (size_t j = 0; j < n_seen && !known; j++) known = seen[j] == in;
            if (!known) PUSH(in);
        }
    }
#undef PUSH
    free(todo);
    free(seen);
    return found;
}

static bool same_bits(const mi_tensor *a, const mi_tensor *b)
{
    return a && b && a->numel == b->numel && a->dtype == b->dtype &&
           !memcmp(a->data, b->data, (size_t)a->numel * mi_dtype_size(a->dtype));
}

/* ---------------------------------------------------------------- tests */

START_TEST(registered_components_are_found_by_name)
{
    make_copies();
    ck_assert_int_eq(mi_register_bias(&scaled_bias), 0);
    ck_assert_int_eq(mi_register_retention(&keep_all), 0);
    ck_assert_int_eq(mi_register_algorithm(&plain_gd), 0);
    ck_assert_int_eq(mi_register_memory(&matrix_copy), 0);
    ck_assert_ptr_eq(mi_bias_find("test-scaled"), &scaled_bias);
    ck_assert_ptr_eq(mi_retention_find("test-keep"), &keep_all);
    ck_assert_ptr_eq(mi_algorithm_find("test-gd"), &plain_gd);
    ck_assert_ptr_eq(mi_memory_find("test-matrix"), &matrix_copy);

    /* by key, with the bias's own parameter */
    mi_miras_config c = mi_miras_config_default();
    config_set(&c, "memory=test-matrix");
    config_set(&c, "bias=test-scaled");
    config_set(&c, "retention=test-keep");
    config_set(&c, "algorithm=test-gd");
    config_set(&c, "half_scale=0.5");
    ck_assert_str_eq(c.bias, "test-scaled");
    ck_assert_close(config_real(&c, "half_scale"), 0.5, 0);
    mi_miras m;
    ck_assert_msg(mi_miras_init(&m, &c) == 0, "%s", mi_error());
    ck_assert_ptr_eq(m.bias, &scaled_bias);

    /* --keys lists it with its parameter */
    size_t n = mi_miras_config_describe(NULL, 0);
    char *text = malloc(n + 1);
    mi_miras_config_describe(text, n + 1);
    ck_assert_msg(strstr(text, "bias=test-scaled:") && strstr(text, "half_scale"),
                  "describe lacks the registered bias:\n%s", text);
    free(text);

    /* a preset of them, found by name by the layer block */
    static const mi_preset mine = {
        .name = "test-preset", .update = "W_t = W_{t-1} - eta_t s (W k_t - v_t) k_t^T",
        .config = "memory=test-matrix bias=test-scaled retention=test-keep algorithm=test-gd "
                  "half_scale=2",
        .eta = {MI_GATE_HEAD, 0.5, 0},
    };
    ck_assert_msg(mi_register_preset(&mine) == 0, "%s", mi_error());
    ck_assert_ptr_eq(mi_preset_find("test-preset"), &mine);
    mi_miras_config pc = preset_config(&mine);
    ck_assert_close(config_real(&pc, "half_scale"), 2, 0);
    mi_miras_block b;
    mi_rng r;
    mi_rng_seed(&r, 3);
    ck_assert_msg(mi_miras_block_init_preset(&b, "test-preset", 8, 2, MI_F64, &r, test_scope) == 0,
                  "%s", mi_error());
    ck_assert_ptr_eq(b.miras.memory, &matrix_copy);
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(1, 5, 8), 0, 1);
    ck_assert_ptr_nonnull(mi_miras_block_forward(&b, x));

    /* gone after a reset; the built-ins stay */
    mi_registry_reset();
    ck_assert_ptr_null(mi_bias_find("test-scaled"));
    ck_assert_ptr_null(mi_preset_find("test-preset"));
    ck_assert_ptr_nonnull(mi_bias_find("l2"));
    ck_assert_ptr_nonnull(mi_preset_find("titans"));
    c = mi_miras_config_default();
    ck_assert_int_eq(mi_miras_config_set(&c, "bias=test-scaled"), -1);
    mi_error_clear();
}
END_TEST

START_TEST(a_clash_is_an_error)
{
    make_copies();
    static mi_bias_kind named_l2;
    named_l2 = l2_copy;
    named_l2.name = "l2";
    mi_error_clear();
    ck_assert_int_eq(mi_register_bias(&named_l2), -1);
    ck_assert_error_has("attentional bias named 'l2' is already registered");
    mi_error_clear();
    ck_assert_int_eq(mi_register_bias(&scaled_bias), 0);
    ck_assert_int_eq(mi_register_bias(&scaled_bias), -1);
    ck_assert_error_has("'test-scaled' is already registered");
    mi_error_clear();
    /* a retention may share a bias's name (l2 is both) */
    static mi_retention_kind ret_named_l2;
    ret_named_l2 = keep_all;
    ret_named_l2.name = "test-scaled";
    ck_assert_int_eq(mi_register_retention(&ret_named_l2), 0);
    static const mi_preset dup = {.name = "deltanet", .config = "memory=matrix"};
    ck_assert_int_eq(mi_register_preset(&dup), -1);
    ck_assert_error_has("preset named 'deltanet' is already registered");
    mi_error_clear();
    ck_assert_ptr_ne(mi_preset_find("deltanet"), &dup);
}
END_TEST

START_TEST(an_invalid_registration_is_an_error)
{
    mi_error_clear();
    ck_assert_int_eq(mi_register_bias(NULL), -1);
    ck_assert_error_has("needs a name");
    mi_error_clear();
    static mi_bias_kind no_name, no_loss, rule_no_error;
    no_name = scaled_bias;
    no_name.name = NULL;
    ck_assert_int_eq(mi_register_bias(&no_name), -1);
    ck_assert_error_has("attentional bias needs a name");
    mi_error_clear();
    no_loss = scaled_bias;
    no_loss.name = "test-no-loss";
    no_loss.loss = NULL;
    ck_assert_int_eq(mi_register_bias(&no_loss), -1);
    ck_assert_error_has("'test-no-loss' needs loss");
    mi_error_clear();
    ck_assert_ptr_null(mi_bias_find("test-no-loss"));
    static mi_bias_kind spaced;
    spaced = scaled_bias;
    spaced.name = "test spaced";
    ck_assert_int_eq(mi_register_bias(&spaced), -1);
    ck_assert_error_has("no spaces and no '='");
    mi_error_clear();
    rule_no_error = scaled_bias;
    rule_no_error.name = "test-rule";
    rule_no_error.error = NULL;
    rule_no_error.rule = MI_BIAS_RULE_RESIDUAL;
    ck_assert_int_eq(mi_register_bias(&rule_no_error), -1);
    ck_assert_error_has("closed-form error");
    mi_error_clear();

    make_copies();
    static mi_memory_kind no_forward;
    no_forward = matrix_copy;
    no_forward.name = "test-no-forward";
    no_forward.forward = NULL;
    ck_assert_int_eq(mi_register_memory(&no_forward), -1);
    ck_assert_error_has("'test-no-forward' needs shapes, init and forward");
    mi_error_clear();
    ck_assert_ptr_null(mi_memory_find("test-no-forward"));
    ck_assert_int_eq(mi_register_memory(NULL), -1);
    mi_error_clear();
    static mi_memory_kind of_alone;
    of_alone = *mi_memory_find("mlp");
    of_alone.name = "test-of-alone";
    of_alone.grad_factors = NULL;
    of_alone.forward_linear = NULL;
    ck_assert_int_eq(mi_register_memory(&of_alone), -1);
    ck_assert_error_has("'test-of-alone': grad_factors_of needs grad_factors");
    mi_error_clear();
    static mi_retention_kind half_split;
    half_split = lq_copy;
    half_split.name = "test-half";
    half_split.read_split = half_split.read;
    ck_assert_int_eq(mi_register_retention(&half_split), -1);
    ck_assert_error_has("read_split and boundary_split come together");
    mi_error_clear();
    static mi_algorithm_kind no_alg_name;
    ck_assert_int_eq(mi_register_algorithm(&no_alg_name), -1);
    ck_assert_error_has("learning algorithm needs a name");
    mi_error_clear();

    static const mi_preset no_config = {.name = "test-no-config"};
    ck_assert_int_eq(mi_register_preset(&no_config), -1);
    ck_assert_error_has("needs a config");
    mi_error_clear();
    static const mi_preset unknown = {.name = "test-unknown", .config = "bias=test-nowhere"};
    ck_assert_int_eq(mi_register_preset(&unknown), -1);
    ck_assert_error_has("test-nowhere");
    mi_error_clear();
    ck_assert_ptr_null(mi_preset_find("test-unknown"));
    static const mi_preset nameless = {.config = "memory=matrix"};
    ck_assert_int_eq(mi_register_preset(&nameless), -1);
    ck_assert_error_has("preset needs a name");
    mi_error_clear();
}
END_TEST

/* A block of preset `preset` with `set` on top, its output for a fixed input,
 * and whether op `op` computed it. */
static mi_tensor *block_output(const char *preset, const char *set, const char *op, bool *fused)
{
    mi_miras_block_config c = mi_miras_block_config_default(8, 2, NULL);
    ck_assert_msg(mi_miras_block_config_preset(&c, preset) == 0, "%s", mi_error());
    if (set) config_set(&c.miras, set);
    mi_miras_block b;
    mi_rng r;
    mi_rng_seed(&r, 11);
    ck_assert_msg(mi_miras_block_init(&b, &c, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(2, 9, 8), 0, 1);
    x->requires_grad = true;
    mi_tensor *y = mi_miras_block_forward(&b, x);
    ck_assert_msg(y != NULL, "%s", mi_error());
    *fused = computed_by(y, op);
    return y;
}

/* The built-in and the copy give the same bits through the same fused op. */
static void expect_same(const char *preset, const char *builtin, const char *copy,
                        const char *op)
{
    bool fused_builtin, fused_copy;
    mi_tensor *a = block_output(preset, builtin, op, &fused_builtin);
    mi_tensor *b = block_output(preset, copy, op, &fused_copy);
    ck_assert_msg(fused_builtin, "%s with %s does not run %s", preset, builtin, op);
    ck_assert_msg(fused_copy, "%s with %s does not run %s", preset, copy, op);
    ck_assert_msg(same_bits(a, b), "%s: %s and %s differ", preset, builtin, copy);
}

START_TEST(a_copy_reaches_the_same_fused_path_bitwise)
{
    make_copies();
    ck_assert_int_eq(mi_register_bias(&l2_copy), 0);
    ck_assert_int_eq(mi_register_bias(&l2_no_rule), 0);
    ck_assert_int_eq(mi_register_bias(&yaad_copy), 0);
    ck_assert_int_eq(mi_register_memory(&matrix_copy), 0);
    ck_assert_int_eq(mi_register_memory(&mlp_copy), 0);
    ck_assert_int_eq(mi_register_retention(&lq_copy), 0);
    /* the delta rule: delta_scan at chunk 1, and at chunk 16 for a small state */
    expect_same("gated-deltanet", "bias=l2", "bias=test-l2", "delta_scan");
    expect_same("deltanet", "memory=matrix", "memory=test-matrix", "delta_scan");
    expect_same("longhorn", "bias=l2", "bias=test-l2", "delta_scan");
    ck_assert_int_eq(mi_register_algorithm(&plain_gd), 0);
    expect_same("deltanet", "algorithm=gd", "algorithm=test-gd", "delta_scan");
    /* the MLP memory: mlp_scan */
    expect_same("titans", "bias=l2", "bias=test-l2", "mlp_scan");
    expect_same("yaad", "bias=yaad", "bias=test-yaad", "mlp_scan");
    expect_same("moneta", "retention=lq", "retention=test-lq", "mlp_scan");
    expect_same("ttt-mlp", "memory=mlp", "memory=test-mlp", "mlp_scan");

    /* the same functions without the rule: the composed path, the same
     * numbers to rounding (so the rule, not the functions, chose the op) */
    bool fused_builtin, fused_own;
    mi_tensor *a = block_output("deltanet", "bias=l2", "delta_scan", &fused_builtin);
    mi_tensor *b = block_output("deltanet", "bias=test-l2-own", "delta_scan", &fused_own);
    ck_assert(fused_builtin);
    ck_assert_msg(!fused_own, "a bias without a rule ran delta_scan");
    double worst = 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = fabs(mi_get(a, i) - mi_get(b, i));
        if (d > worst) worst = d;
    }
    ck_assert_msg(worst < 1e-10, "composed and fused differ by %g", worst);
    /* and the exact chunk form needs the rule too */
    mi_miras_config c = preset_config(mi_preset_find("deltanet"));
    config_set(&c, "bias=test-l2-own");
    config_set(&c, "chunk=8");
    config_set(&c, "form=exact");
    mi_miras m;
    ck_assert_int_eq(mi_miras_init(&m, &c), -1);
    ck_assert_error_has("it needs bias=l2");
    mi_error_clear();
    config_set(&c, "bias=test-l2");
    ck_assert_msg(mi_miras_init(&m, &c) == 0, "%s", mi_error());
}
END_TEST

enum { MANY = 300 };

START_TEST(many_registrations)
{
    static mi_bias_kind biases[MANY];
    static mi_preset presets[MANY];
    static char names[MANY][24], preset_names[MANY][24], configs[MANY][48];
    int builtin_biases = 0, builtin_presets = 0;
    while (mi_bias_at(builtin_biases)) builtin_biases++;
    while (mi_preset_at(builtin_presets)) builtin_presets++;
    const mi_bias_kind *dot = mi_bias_find("dot");
    for (int i = 0; i < MANY; i++) {
        snprintf(names[i], sizeof names[i], "test-many-%d", i);
        biases[i] = *dot;
        biases[i].name = names[i];
        ck_assert_msg(mi_register_bias(&biases[i]) == 0, "bias %d: %s", i, mi_error());
        snprintf(preset_names[i], sizeof preset_names[i], "test-preset-%d", i);
        snprintf(configs[i], sizeof configs[i], "memory=matrix bias=%s", names[i]);
        presets[i] = (mi_preset){.name = preset_names[i], .config = configs[i],
                                 .eta = {MI_GATE_CONST, 1, 0}};
        ck_assert_msg(mi_register_preset(&presets[i]) == 0, "preset %d: %s", i, mi_error());
    }
    int count = 0;
    while (mi_bias_at(count)) count++;
    ck_assert_int_eq(count, builtin_biases + MANY);
    count = 0;
    while (mi_preset_at(count)) count++;
    ck_assert_int_eq(count, builtin_presets + MANY);
    for (int i = 0; i < MANY; i += 37) {
        ck_assert_ptr_eq(mi_bias_find(names[i]), &biases[i]);
        ck_assert_ptr_eq(mi_bias_at(builtin_biases + i), &biases[i]);
        ck_assert_ptr_eq(mi_preset_find(preset_names[i]), &presets[i]);
        mi_miras_config c = preset_config(&presets[i]);
        ck_assert_str_eq(c.bias, names[i]);
    }
    /* the built-ins are still first and found */
    ck_assert_ptr_eq(mi_bias_at(0), dot);
    ck_assert_ptr_nonnull(mi_preset_find("lattice-sim"));
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("registration");
    TCase *tc = tcase_slow("registration");
    tcase_add_checked_fixture(tc, NULL, reset); /* beside tcase_slow's scope */
    tcase_add_test(tc, registered_components_are_found_by_name);
    tcase_add_test(tc, a_clash_is_an_error);
    tcase_add_test(tc, an_invalid_registration_is_an_error);
    tcase_add_test(tc, a_copy_reaches_the_same_fused_path_bitwise);
    tcase_add_test(tc, many_registrations);
    suite_add_tcase(s, tc);
    return s;
}
