/* A MIRAS preset as a mixer: the layer block of models.h (block.c) made
 * from mi_miras_block_config_preset, with the mixer options' out_scale and
 * the caller's "key=value" overrides on top:
 *   1. component keys (anything mi_miras_config_set takes), in order;
 *      a lattice memory then gets slots = head_dim unless "memory.slots" was
 *      given (as mi_miras_block_config_preset does for the lattice presets);
 *   2. a gate the new components need that the preset left UNUSED takes
 *      mi_miras_block_config_default's spec (η 0.02, α 0.998, μ 0.9, δ 1);
 *   3. block keys, in order: gate_rank, conv_kernel, qk_eps, out_gate (true,
 *      false, silu or sigmoid: the output gate SiLU(x W_g), none (lattice-dec's
 *      default) or σ(x W_g)), and gate specs
 *      "eta=0.5" (the initial level; an UNUSED gate becomes HEAD),
 *      "eta=head:0.5", "eta=channel:0.5", "eta=const:1" (also alpha, mu, delta),
 *      and the ranges "eta_max=0.1", "alpha_max", "mu_max" (see block.c). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "components.h"
#include "mixer_internal.h"

static mi_tensor *miras_forward(const void *self, mi_tensor *x)
{
    return mi_miras_block_forward(self, x);
}

static const mi_named_tensor *miras_params(const void *self, int *count)
{
    return mi_miras_block_params(self, count);
}

static void *miras_state_new(const void *self, int64_t batch, mi_scope *scope)
{
    mi_miras_block_state *st = mi_scope_alloc(scope, sizeof *st);
    if (!st) return mi_error_set("out of memory"), NULL;
    return mi_miras_block_state_init(self, st, batch) == 0 ? st : NULL;
}

static mi_tensor *miras_step(const void *self, void *state, mi_tensor *x)
{
    return mi_miras_block_step(self, state, x);
}

static int miras_state_tensors(void *state, mi_tensor **slots[], int max)
{
    return mi_miras_block_state_tensors(state, slots, max);
}

/* Splits "key=value" into key (at most 63 bytes) and value. */
static int split(const char *kv, char key[64], const char **val)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq || eq == kv || (size_t)(eq - kv) >= 64)
        return mi_error_set("override: expected KEY=VALUE, got '%s'", kv ? kv : "(null)"), -1;
    memcpy(key, kv, (size_t)(eq - kv));
    key[eq - kv] = '\0';
    *val = eq + 1;
    return 0;
}

/* A key of the block's field table (gate_rank, out_gate, eta, …). */
static bool is_block_key(const char *assignment)
{
    int n;
    const mi_field *f = mi_miras_block_config_fields(&n);
    return mi_fields_has_key(f, n, assignment);
}

/* The block config of a preset with the overrides applied (steps 1–3 above). */
static int block_config(mi_miras_block_config *c, const char *preset, const mi_mixer_options *o)
{
    *c = mi_miras_block_config_default(o->d_model, o->heads, NULL);
    if (mi_miras_block_config_preset(c, preset) != 0) return -1;
    c->out_scale = o->out_scale;
    char key[64];
    const char *val;
    bool slots_given = false;
    for (int i = 0; i < o->n_overrides; i++) {
        if (split(o->overrides[i], key, &val) != 0) return -1;
        if (is_block_key(o->overrides[i])) continue;
        if (mi_miras_config_set(&c->miras, o->overrides[i]) != 0) return -1;
        slots_given |= !strcmp(key, "memory.slots");
    }
    const mi_memory_kind *mem = mi_memory_find(c->miras.memory);
    if (mem && mem->keys_are_slots && !slots_given)
        c->miras.slots = (int)(o->d_model / o->heads);
    mi_miras_block_config d = mi_miras_block_config_default(o->d_model, o->heads, &c->miras);
    mi_gate_spec *mine[] = {&c->eta, &c->alpha, &c->mu, &c->delta};
    const mi_gate_spec dflt[] = {d.eta, d.alpha, d.mu, d.delta};
    for (int g = 0; g < 4; g++)
        if (mine[g]->kind == MI_GATE_UNUSED) *mine[g] = dflt[g];
    int n;
    const mi_field *fields = mi_miras_block_config_fields(&n);
    for (int i = 0; i < o->n_overrides; i++)
        if (is_block_key(o->overrides[i]) &&
            mi_fields_set(fields, n, c, "override", o->overrides[i]) != 0)
            return -1;
    return 0;
}

int mi_mixer_create_miras(mi_mixer *out, const char *spec, const char *arg,
                          const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope)
{
    if (arg) return mi_error_set("a preset takes no ':' argument"), -1;
    mi_miras_block_config c;
    if (block_config(&c, spec, opt) != 0) return -1;
    mi_miras_block *b = mi_scope_alloc(scope, sizeof *b);
    if (!b) return mi_error_set("out of memory"), -1;
    if (mi_miras_block_init(b, &c, dt, rng, scope) != 0) return -1;
    *out = (mi_mixer){.name = spec, .self = b, .forward = miras_forward, .params = miras_params,
                      .state_new = miras_state_new, .step = miras_step,
                      .state_tensors = miras_state_tensors};
    return 0;
}
