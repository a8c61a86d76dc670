/* The Samba-style hybrid (MIRAS "Hybrid Models": "we follow the Samba
 * architecture, in which we sequentially combine our MIRAS layer with
 * Sliding Window Attention"; Ren et al. 2024). Spec "samba:<preset>[:W]".
 *
 * Where the norms and residuals sit. The mixer owns the residual stream
 * (residual_inside): given the stream h of a backbone block,
 *
 *   h' = h  + MIRAS(RMSNorm(h)  ⊙ g_miras)     the MIRAS layer block of <preset>
 *   h''= h' + SWA(RMSNorm(h') ⊙ g_swa)         sliding-window attention, window W, RoPE
 *
 * and the backbone continues with its own RMSNorm → SwiGLU MLP → residual
 * on h''. Every sub-layer is pre-norm with its own residual and its own
 * learnable RMSNorm weight (initialised to 1), as every layer of Samba is.
 * Samba itself interleaves an MLP between the two (Mamba → MLP → SWA →
 * MLP); here one backbone block holds MIRAS → SWA → MLP, so a model has as
 * many MIRAS layers as SWA layers and one MLP per pair.
 *
 * Overrides go to the MIRAS block; W is the mixer spec's, else the options'
 * window (default 64). Initialisation: the MIRAS block's (block.c), then
 * the SWA layer's (attention.c), from the same rng in that order; both
 * output projections scaled by the options' out_scale. */
#include <stdio.h>
#include <string.h>

#include "mixer_internal.h"
#include "models.h"

typedef struct samba {
    mi_mixer miras;
    mi_attention_layer swa;
    mi_tensor *miras_norm, *swa_norm;  /* [D] */
    double eps;
    int n_params;
    mi_named_tensor *params;
} samba;

static mi_tensor *samba_forward(const void *self, mi_tensor *h)
{
    const samba *s = self;
    mi_tensor *m = s->miras.forward(s->miras.self, mi_rms_norm_gain(h, s->miras_norm, s->eps));
    h = mi_add(h, m);
    mi_tensor *a = mi_attention_layer_forward(&s->swa, mi_rms_norm_gain(h, s->swa_norm, s->eps));
    mi_tensor *y = mi_add(h, a);
    if (!y) mi_error_prefix("samba");
    return y;
}

/* The state: the MIRAS block's and the SWA layer's. */
typedef struct samba_state {
    void *miras;
    mi_attention_state swa;
} samba_state;

static void *samba_state_new(const void *self, int64_t batch, mi_scope *scope)
{
    const samba *s = self;
    samba_state *st = mi_scope_alloc(scope, sizeof *st);
    if (!st) return mi_error_set("out of memory"), NULL;
    *st = (samba_state){.miras = s->miras.state_new(s->miras.self, batch, scope)};
    return st->miras && mi_attention_state_init(&s->swa, &st->swa, batch, scope) == 0 ? st : NULL;
}

static mi_tensor *samba_step(const void *self, void *state, mi_tensor *h)
{
    const samba *s = self;
    samba_state *st = state;
    mi_tensor *m = s->miras.step(s->miras.self, st->miras,
                                 mi_rms_norm_gain(h, s->miras_norm, s->eps));
    h = mi_add(h, m);
    mi_tensor *a = mi_attention_layer_step(&s->swa, &st->swa,
                                           mi_rms_norm_gain(h, s->swa_norm, s->eps));
    mi_tensor *y = mi_add(h, a);
    if (!y) mi_error_prefix("samba");
    return y;
}

/* The MIRAS block's tensors; the SWA layer's ring is written in place. */
static int samba_state_tensors(void *state, mi_tensor **slots[], int max)
{
    samba_state *st = state;
    return mi_miras_block_state_tensors(st->miras, slots, max);
}

static int samba_state_reserve(const void *self, void *state, int64_t tokens)
{
    return mi_attention_state_reserve(&((const samba *)self)->swa, &((samba_state *)state)->swa,
                                      tokens);
}

static const mi_named_tensor *samba_params(const void *self, int *count)
{
    const samba *s = self;
    if (count) *count = s->n_params;
    return s->params;
}

static mi_tensor *norm_weight(const char *name, int64_t d, mi_dtype dt, mi_scope *scope)
{
    mi_scope_enter(scope);
    mi_tensor *w = mi_ones(dt, MI_SHAPE(d));
    mi_scope_leave();
    if (w) {
        w->name = name;
        mi_requires_grad(w, true);
    }
    return w;
}

static char *prefixed(mi_scope *scope, const char *prefix, const char *name)
{
    size_t n = strlen(prefix) + strlen(name) + 1;
    char *s = mi_scope_alloc(scope, n);
    if (s) snprintf(s, n, "%s%s", prefix, name);
    return s;
}

/* "<preset>" or "<preset>:<W>" (preset names hold no ':'): the preset's name
 * into preset[n] and the window (fallback when none is given), or -1. */
static int samba_arg(const char *arg, char *preset, size_t n, int64_t fallback, int64_t *window)
{
    if (!arg || !*arg) return mi_error_set("expected samba:<preset>[:W]"), -1;
    const char *colon = strchr(arg, ':');
    size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
    if (len >= n) return mi_error_set("'%.40s...' is not a MIRAS preset", arg), -1;
    memcpy(preset, arg, len);
    preset[len] = '\0';
    *window = mi_mixer_window_arg(colon ? colon + 1 : NULL, fallback);
    if (*window < 1) return -1;
    if (!mi_preset_find(preset))
        return mi_error_set("'%s' is not a MIRAS preset (samba:<preset>[:W])", preset), -1;
    return 0;
}

int mi_mixer_samba_arg(const char *arg)
{
    char preset[MI_LM_TEXT];
    int64_t window;
    return samba_arg(arg, preset, sizeof preset, 64, &window);
}

int mi_mixer_create_samba(mi_mixer *out, const char *spec, const char *arg,
                          const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    char *preset = mi_scope_alloc(scope, MI_LM_TEXT);
    samba *s = mi_scope_alloc(scope, sizeof *s);
    if (!preset || !s) return mi_error_set("out of memory"), -1;
    int64_t window;
    if (samba_arg(arg, preset, MI_LM_TEXT, opt->window, &window) != 0) return -1;
    memset(s, 0, sizeof *s);
    if (mi_mixer_create_miras(&s->miras, preset, NULL, opt, dt, rng, scope) != 0) return -1;
    if (mi_attention_layer_init(&s->swa, opt->d_model, opt->heads, window, opt->rope_base,
                                opt->out_scale, dt, rng, scope) != 0)
        return -1;
    s->eps = opt->norm_eps;
    s->miras_norm = norm_weight("miras_norm.weight", opt->d_model, dt, scope);
    s->swa_norm = norm_weight("swa_norm.weight", opt->d_model, dt, scope);
    if (!s->miras_norm || !s->swa_norm) return -1;

    int nm;
    const mi_named_tensor *pm = s->miras.params(s->miras.self, &nm);
    s->params = mi_scope_alloc(scope, sizeof(mi_named_tensor) * (size_t)(nm + 6));
    if (!s->params) return mi_error_set("out of memory"), -1;
    s->params[s->n_params++] = (mi_named_tensor){"miras_norm.weight", s->miras_norm};
    for (int i = 0; i < nm; i++)
        s->params[s->n_params++] = (mi_named_tensor){prefixed(scope, "miras.", pm[i].name),
                                                     pm[i].tensor};
    s->params[s->n_params++] = (mi_named_tensor){"swa_norm.weight", s->swa_norm};
    for (int i = 0; i < 4; i++)
        s->params[s->n_params++] = (mi_named_tensor){prefixed(scope, "swa.", s->swa.params[i].name),
                                                     s->swa.params[i].tensor};
    for (int i = 0; i < s->n_params; i++)
        if (!s->params[i].name) return mi_error_set("out of memory"), -1;
    *out = (mi_mixer){.name = spec, .self = s, .forward = samba_forward, .params = samba_params,
                      .residual_inside = true, .state_new = samba_state_new, .step = samba_step,
                      .state_tensors = samba_state_tensors,
                      .state_reserve = samba_state_reserve};
    return 0;
}
