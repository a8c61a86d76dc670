/* The MIRAS layer block's configuration errors: every bad setting is
 * reported with a message naming it, and nothing is built. */
#include "block_test_util.h"

/* ---------------------------------------------------------------- errors */

static void expect_init_error(mi_miras_block_config c, const char *needle)
{
    mi_miras_block b;
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_error_clear();
    ck_assert_int_eq(mi_miras_block_init(&b, &c, MI_F64, &r, test_scope), -1);
    ck_assert_error_has(needle);
    mi_error_clear();
}

START_TEST(bad_configurations_are_reported)
{
    mi_miras_block_config c = tiny_config("matrix", "l2", "l2", "gd");
    c.heads = 3;
    expect_init_error(c, "heads (3) must divide d_model (4)");
    c.head_dim = 2; /* an explicit head width decouples them */
    mi_miras_block b;
    make_block(&b, &c, MI_F64, 1);
    ck_assert_ptr_nonnull(mi_miras_block_forward(&b, input(1, MI_F64, 1, 3)));

    c = tiny_config("matrix", "l2", "l2", "gd");
    c.gate_rank = 0;
    expect_init_error(c, "gate_rank must be >= 1, got 0");
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.conv_kernel = 0;
    expect_init_error(c, "conv_kernel must be >= 1");
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.miras.memory = "tensor-train";
    expect_init_error(c, "unknown memory 'tensor-train'");
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.alpha.kind = MI_GATE_UNUSED;
    expect_init_error(c, "gate alpha is needed by matrix/l2/l2/gd");
    c = tiny_config("lattice", "l2", "l2", "gd"); /* a row is a slot, not a channel */
    c.miras.slots = DM / HEADS;
    c.eta.kind = MI_GATE_CHANNEL;
    expect_init_error(c, "memory 'lattice' takes one eta per head");
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.alpha.value = 1.5;
    expect_init_error(c, "gate alpha starts at 1.5");
    /* bounded gates: the max in (0, 1], on η, α, μ only, the level within reach */
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.eta.max = 1.5;
    expect_init_error(c, "gate eta: max 1.5 must be in (0, 1]");
    c.eta.max = -0.1;
    expect_init_error(c, "gate eta: max -0.1 must be in (0, 1]");
    c.eta.max = NAN;
    expect_init_error(c, "gate eta: max nan must be in (0, 1]");
    c = tiny_config("matrix", "l2", "l2", "momentum");
    c.mu.max = 2;
    expect_init_error(c, "gate mu: max 2 must be in (0, 1]");
    c = tiny_config("matrix", "yaad", "l2", "gd");
    c.delta.max = 0.5;
    expect_init_error(c, "gate delta: max 0.5 must be in (0, 1] and only eta, alpha, mu have one");
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.eta = (mi_gate_spec){MI_GATE_HEAD, 0.2, 0.1};
    expect_init_error(c, "gate eta starts at 0.2, which its activation cannot reach "
                         "(0.1 sigmoid: in (0, 0.1))");
    c.eta.value = 0.1;  /* the bound itself is out of reach too */
    expect_init_error(c, "gate eta starts at 0.1");
    c = tiny_config("matrix", "l2", "l2", "gd");
    c.alpha = (mi_gate_spec){MI_GATE_HEAD, 0.9, 0.05};
    expect_init_error(c, "gate alpha starts at 0.9, which its activation cannot reach "
                         "(1 - 0.05 sigmoid: in (0.95, 1))");
    c = tiny_config("matrix", "l2", "l2", "momentum");
    c.mu = (mi_gate_spec){MI_GATE_HEAD, 0.6, 0.5};
    expect_init_error(c, "gate mu starts at 0.6");
    /* max = 1 is the unbounded gate; a level just inside the bound is accepted */
    c = tiny_config("matrix", "l2", "l2", "momentum");
    c.eta = (mi_gate_spec){MI_GATE_HEAD, 0.099, 0.1};
    c.alpha = (mi_gate_spec){MI_GATE_HEAD, 0.951, 0.05};
    c.mu.max = 1;
    make_block(&b, &c, MI_F64, 1);
    c = tiny_config("matrix", "l2", "l2", "multistep");
    c.key_is_one_minus_alpha = true;
    expect_init_error(c, "key_is_one_minus_alpha (HGRN2) needs one write per token");

    mi_rng r;
    mi_rng_seed(&r, 1);
    ck_assert_int_eq(mi_miras_block_init_preset(&b, "no-such-model", DM, HEADS, MI_F64, &r,
                                                test_scope), -1);
    ck_assert_error_has("unknown preset 'no-such-model'");
    mi_error_clear();
    ck_assert_int_eq(mi_miras_block_init(&b, &c, MI_I32, &r, test_scope), -1);
    ck_assert_error_has("f32 or f64");
    mi_error_clear();

    /* inputs of the wrong width or dtype */
    c = tiny_config("matrix", "l2", "l2", "gd");
    make_block(&b, &c, MI_F64, 1);
    ck_assert_ptr_null(mi_miras_block_forward(&b, mi_zeros(MI_F64, MI_SHAPE(1, 3, DM + 1))));
    ck_assert_error_has("x is f64 [1,3,5]; expected f64 [B, T, 4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_miras_block_forward(&b, mi_zeros(MI_F32, MI_SHAPE(1, 3, DM))));
    ck_assert_error_has("expected f64");
    mi_error_clear();
}
END_TEST


Suite *make_suite(void)
{
    Suite *s = suite_create("block_config");
    TCase *tc = tcase_slow("errors");
    tcase_add_test(tc, bad_configurations_are_reported);
    suite_add_tcase(s, tc);
    return s;
}
