/* The "hope" mixer: Nested Learning's HOPE (hope.c) behind the mixer
 * interface, so the language model can use it like any other mixer.
 * Overrides are HOPE's own keys (mi_hope_config_set: "chunk=16",
 * "cms=1,4,16", "cms=none", "cms_place=mixer", "adaptive_q=false", …).
 *
 * With a CMS and cms_place=ffn (the default) the mixer brings the block's
 * feed-forward: the CMS on the residual stream, in place of the backbone's
 * MLP (Nested Learning §3, Fig. 3; lm.h, mi_mixer.ffn).
 *
 * One token at a time: HOPE's step and the CMS's (mi_hope_step,
 * mi_cms_step), each equal to its forward at that position and constant in
 * cost per token. */
#include "mixer_internal.h"
#include "models.h"

static int hope_config(mi_hope_config *c, const char *arg, const mi_mixer_options *opt)
{
    if (arg) return mi_error_set("takes no argument after 'hope' (got '%s')", arg), -1;
    *c = mi_hope_config_default(opt->d_model, opt->heads);
    c->out_scale = opt->out_scale;
    for (int i = 0; i < opt->n_overrides; i++)
        if (mi_hope_config_set(c, opt->overrides[i]) != 0) return -1;
    return 0;
}

int mi_mixer_hope_own_ffn(const char *arg, const mi_mixer_options *opt)
{
    mi_hope_config c;
    if (hope_config(&c, arg, opt) != 0) return -1;
    return c.cms.n_blocks > 0 && c.cms_place == MI_HOPE_CMS_FFN;
}

static mi_tensor *hope_forward(const void *self, mi_tensor *x) { return mi_hope_forward(self, x); }

static const mi_named_tensor *hope_params(const void *self, int *count)
{
    return mi_hope_params(self, count);
}

static mi_tensor *hope_ffn(const void *self, mi_tensor *h) { return mi_hope_ffn_forward(self, h); }

static const mi_named_tensor *hope_ffn_params(const void *self, int *count)
{
    return mi_hope_ffn_params(self, count);
}

/* The layer's state and, when the CMS is the feed-forward, the CMS's. */
typedef struct hope_state {
    mi_hope_state *mixer;
    mi_cms_state *ffn;
} hope_state;

static void *hope_state_new(const void *self, int64_t batch, mi_scope *scope)
{
    const mi_hope *h = self;
    hope_state *s = mi_scope_alloc(scope, sizeof *s);
    if (!s) return mi_error_set("hope: state: out of memory"), NULL;
    *s = (hope_state){.mixer = mi_hope_state_new(h, batch, scope)};
    if (!s->mixer) return NULL;
    if (mi_hope_has_ffn(h) && !(s->ffn = mi_cms_state_new(&h->cms, batch, scope))) return NULL;
    return s;
}

static mi_tensor *hope_step(const void *self, void *state, mi_tensor *x)
{
    return mi_hope_step(self, ((hope_state *)state)->mixer, x);
}

static mi_tensor *hope_ffn_step(const void *self, void *state, mi_tensor *h)
{
    mi_tensor *y = mi_cms_step(&((const mi_hope *)self)->cms, ((hope_state *)state)->ffn, h);
    if (!y) mi_error_prefix("hope");
    return y;
}

static int hope_state_tensors(void *state, mi_tensor **slots[], int max)
{
    hope_state *s = state;
    int n = mi_hope_state_tensors(s->mixer, slots, max);
    if (n < 0 || !s->ffn) return n;
    int m = mi_cms_state_tensors(s->ffn, slots + n, max - n);
    return m < 0 ? -1 : n + m;
}

int mi_mixer_create_hope(mi_mixer *out, const char *spec, const char *arg,
                         const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    mi_hope_config c;
    if (hope_config(&c, arg, opt) != 0) return -1;
    mi_hope *h = mi_scope_alloc(scope, sizeof *h);
    if (!h) return mi_error_set("out of memory"), -1;
    if (mi_hope_init(h, &c, dt, rng, scope) != 0) return -1;
    *out = (mi_mixer){.name = spec, .self = h, .forward = hope_forward, .params = hope_params,
                      .state_new = hope_state_new, .step = hope_step,
                      .state_tensors = hope_state_tensors};
    if (mi_hope_has_ffn(h)) {
        out->ffn = hope_ffn;
        out->ffn_params = hope_ffn_params;
        out->ffn_step = hope_ffn_step;
    }
    return 0;
}
