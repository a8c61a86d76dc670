/* The "hope" mixer: Nested Learning's HOPE (hope.c) behind the mixer
 * interface, so the language model can use it like any other mixer.
 * Overrides are HOPE's own keys (mi_hope_config_set: "chunk=16",
 * "cms=1,4,16", "cms=none", "cms_place=mixer", "adaptive_q=false", …).
 *
 * With a CMS and cms_place=ffn (the default) the mixer brings the block's
 * feed-forward: the CMS on the residual stream, in place of the backbone's
 * MLP (Nested Learning §3, Fig. 3; lm.h, mi_mixer.ffn).
 *
 * One token at a time. HOPE's memories and the CMS levels update at chunk
 * boundaries from the states their chunk started with, and no per-token
 * recurrence of the layer is written yet; the step keeps the inputs seen so
 * far (of the mixer and of the feed-forward) and runs the forward over them,
 * returning the last position. So step equals forward exactly, and its
 * state and cost grow with the tokens (as full attention's cache does). */
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

/* The inputs so far, [B, n, d] (NULL before the first token). */
typedef struct hope_state {
    int64_t batch;
    mi_tensor *x;   /* the mixer's */
    mi_tensor *h;   /* the feed-forward's */
} hope_state;

static void *hope_state_new(const void *self, int64_t batch, mi_scope *scope)
{
    (void)self;
    hope_state *s = mi_scope_alloc(scope, sizeof *s);
    if (!s) return mi_error_set("hope: state: out of memory"), NULL;
    *s = (hope_state){.batch = batch};
    return s;
}

/* Appends x [B, 1, d] to *seen and returns f over all of it at the last position. */
static mi_tensor *prefix_step(const void *self, mi_tensor **seen, mi_tensor *x, int64_t batch,
                              mi_tensor *(*f)(const mi_hope *, mi_tensor *))
{
    if (!x || x->rank != 3 || x->shape[0] != batch || x->shape[1] != 1)
        return mi_error_set("hope: step: needs x [%lld, 1, d_model]", (long long)batch), NULL;
    mi_tensor *all = *seen ? mi_concat((mi_tensor *[]){*seen, x}, 2, 1) : x;
    mi_tensor *y = all ? f(self, all) : NULL;
    if (!y) return NULL;
    *seen = all;
    int64_t n = all->shape[1];
    return mi_slice(y, 1, n - 1, n);
}

static mi_tensor *hope_step(const void *self, void *state, mi_tensor *x)
{
    hope_state *s = state;
    return prefix_step(self, &s->x, x, s->batch, mi_hope_forward);
}

static mi_tensor *hope_ffn_step(const void *self, void *state, mi_tensor *h)
{
    hope_state *s = state;
    return prefix_step(self, &s->h, h, s->batch, mi_hope_ffn_forward);
}

static int hope_state_tensors(void *state, mi_tensor **slots[], int max)
{
    hope_state *s = state;
    if (max < 2) return mi_error_set("hope: 2 state slots needed"), -1;
    slots[0] = &s->x;
    slots[1] = &s->h;
    return 2;
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
