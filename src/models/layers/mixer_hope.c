/* The "hope" mixer: Nested Learning's HOPE (hope.c) behind the mixer
 * interface, so the language model can use it like any other mixer.
 * Overrides are HOPE's own keys (mi_hope_config_set: "chunk=16",
 * "cms=1,4,16", "cms=none", "adaptive_q=false", …). */
#include "mixer_internal.h"
#include "models.h"

static mi_tensor *hope_forward(const void *self, mi_tensor *x) { return mi_hope_forward(self, x); }

static const mi_named_tensor *hope_params(const void *self, int *count)
{
    return mi_hope_params(self, count);
}

int mi_mixer_create_hope(mi_mixer *out, const char *spec, const char *arg,
                         const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    if (arg) return mi_error_set("takes no argument after 'hope' (got '%s')", arg), -1;
    mi_hope_config c = mi_hope_config_default(opt->d_model, opt->heads);
    c.out_scale = opt->out_scale;
    for (int i = 0; i < opt->n_overrides; i++)
        if (mi_hope_config_set(&c, opt->overrides[i]) != 0) return -1;
    mi_hope *h = mi_scope_alloc(scope, sizeof *h);
    if (!h) return mi_error_set("out of memory"), -1;
    if (mi_hope_init(h, &c, dt, rng, scope) != 0) return -1;
    *out = (mi_mixer){.name = spec, .self = h, .forward = hope_forward, .params = hope_params};
    return 0;
}
