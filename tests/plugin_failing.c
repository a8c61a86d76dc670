/* A plugin whose mi_plugin_init fails half-way (tests/test_plugin.c): it
 * registers a bias, then a preset whose config names a bias nobody
 * registered, and returns that failure. The loader must drop the bias again
 * before it closes this object. */
#include "extend.h"

static mi_tensor *half_l2(const mi_miras_config *c, mi_tensor *y, mi_tensor *v, mi_tensor *delta)
{
    return mi_mul_scalar(mi_sum(mi_square(mi_sub(y, v)), -1, false), 0.5);   /* ½‖y − v‖² */
}

static const mi_bias_kind partial = {
    .name = "test-plugin-partial", .formula = "l = 1/2 ||y - v||^2", .loss = half_l2,
};

static const mi_preset broken = {
    .name = "test-plugin-broken", .config = "memory=matrix bias=test-plugin-nowhere",
};

int mi_plugin_init(void)
{
    if (mi_register_bias(&partial) != 0) return -1;
    return mi_register_preset(&broken);
}
