/* Checkpoints (train.h): parameters, optimizer state and the run's
 * configuration in one safetensors file, written atomically; loaded back
 * with every size, key and value checked before it is trusted. */
#include "train_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int mi_checkpoint_save(const char *path, const mi_lm *lm, const mi_optim *o,
                       const mi_run_config *rc, int64_t step, const mi_run_stats *stats)
{
    mi_run_stats zero = {0};
    mi_scope *s = mi_scope_new("checkpoint");
    if (!s) return mi_error_set("checkpoint: out of memory"), -1;
    mi_scope_enter(s);
    mi_metadata meta[2], all;
    mi_optim_state_list state;
    int n_params, status = -1;
    const mi_named_tensor *params = mi_lm_params(lm, &n_params);
    if (mi_lm_config_to_metadata(&lm->config, &meta[0]) == 0 &&
        mi_optim_state_export(o, &state) == 0) {
        meta[1] = state.metadata;
        int n = n_params + state.count;
        mi_named_tensor *t = mi_scope_alloc(s, sizeof *t * (size_t)n);
        if (!t) mi_error_set("checkpoint: out of memory");
        else if (mi_run_config_metadata(rc, step, stats ? stats : &zero, meta, 2, &all) == 0) {
            memcpy(t, params, sizeof *t * (size_t)n_params);
            memcpy(t + n_params, state.tensors, sizeof *t * (size_t)state.count);
            status = mi_safetensors_save(path, t, n, &all);
        }
    }
    mi_scope_leave();
    mi_scope_free(s);
    return status;
}

int mi_safetensors_check_finite(const mi_safetensors *st, const char *what)
{
    for (int i = 0; i < st->count; i++) {
        const mi_tensor *t = st->tensors[i].tensor;
        if (t->dtype != MI_F32 && t->dtype != MI_F64) continue;
        for (int64_t j = 0; j < t->numel; j++) {
            double v = mi_get(t, j);
            if (!isfinite(v))
                return train_fail("%s: tensor '%s' holds %g at index %lld (a corrupt file, or a "
                                  "run that diverged)", what, st->tensors[i].name, v,
                                  (long long)j);
        }
    }
    return 0;
}

/* The sizes in lm.* against the tensors the file holds, before a model is
 * made: the parameters outside the mixers follow from the sizes alone, and a
 * file holding fewer elements than those cannot be this model's checkpoint
 * (inflated sizes would otherwise have mi_lm_init allocate for minutes, or
 * until memory runs out, before the tensors were found missing). */
static int sizes_fit_tensors(const mi_checkpoint_file *c)
{
    int64_t need = mi_lm_backbone_numel(&c->lm), have = 0;
    if (need < 0) return train_fail("checkpoint '%s': %s", c->path, mi_error());
    for (int i = 0; i < c->st->count; i++)
        if (strncmp(c->st->tensors[i].name, "opt.", 4) != 0)
            have += c->st->tensors[i].tensor->numel;
    if (need <= have) return 0;
    const mi_lm_config *m = &c->lm;
    return train_fail("checkpoint '%s' does not fit its metadata: lm.vocab %lld, lm.d_model "
                      "%lld, lm.layers %d and lm.mlp_hidden %lld make at least %lld "
                      "parameters, the file holds %lld", c->path, (long long)m->vocab,
                      (long long)m->d_model, m->layers, (long long)m->mlp_hidden,
                      (long long)need, (long long)have);
}

int mi_checkpoint_load(mi_checkpoint_file *c, const char *path)
{
    *c = (mi_checkpoint_file){.path = path};
    if (!(c->st = mi_safetensors_load(path)))
        return train_fail("cannot load checkpoint '%s': %s", path, mi_error());
    char what[300];
    snprintf(what, sizeof what, "checkpoint '%s'", path);
    if (mi_safetensors_check_finite(c->st, what) != 0) return -1;
    if (mi_lm_config_from_metadata(&c->lm, &c->st->metadata) != 0)
        return train_fail("'%s' is not a miras language-model checkpoint: %s", path, mi_error());
    if (sizes_fit_tensors(c) != 0) return -1;
    if (mi_safetensors_meta(c->st, "train.format")) {
        c->has_run = true;
        if (train_run_from_metadata(c, c->st) != 0)
            return train_fail("checkpoint '%s' has bad run settings: %s", path, mi_error());
        c->rc.lm = c->lm;
    }
    return 0;
}

int mi_checkpoint_restore(const mi_checkpoint_file *c, mi_lm *lm)
{
    int count;
    const mi_named_tensor *p = mi_lm_params(lm, &count);
    char a[96], b[96];
    for (int i = 0; i < count; i++) {
        mi_tensor *t = mi_safetensors_get(c->st, p[i].name), *want = p[i].tensor;
        if (!t)
            return train_fail("checkpoint '%s' does not fit its model (%s): no tensor '%s'",
                              c->path, lm->config.mixer, p[i].name);
        if (!mi_same_shape(t, want) || t->dtype != want->dtype)
            return train_fail("checkpoint '%s' does not fit its model (%s): '%s' is %s %s, the "
                              "model needs %s %s", c->path, lm->config.mixer, p[i].name,
                              mi_dtype_name(t->dtype),
                              mi_shape_str(a, sizeof a, t->rank, t->shape),
                              mi_dtype_name(want->dtype),
                              mi_shape_str(b, sizeof b, want->rank, want->shape));
    }
    for (int i = 0; i < c->st->count; i++) {
        const char *name = c->st->tensors[i].name;
        bool known = !strncmp(name, "opt.", 4);
        for (int j = 0; j < count && !known; j++) known = !strcmp(name, p[j].name);
        if (!known)
            return train_fail("checkpoint '%s' does not fit its model (%s): unexpected tensor "
                              "'%s'", c->path, lm->config.mixer, name);
    }
    for (int i = 0; i < count; i++)
        if (mi_tensor_copy_into(p[i].tensor, mi_safetensors_get(c->st, p[i].name)) != 0)
            return -1;
    return 0;
}

int mi_checkpoint_restore_optim(const mi_checkpoint_file *c, mi_optim *o)
{
    if (mi_optim_state_import(o, c->st) != 0)
        return train_fail("checkpoint '%s' does not fit its optimizer: %s", c->path, mi_error());
    return 0;
}

int mi_checkpoint_load_model(mi_checkpoint_file *c, mi_lm *lm, const char *path,
                             mi_scope *scope)
{
    if (mi_checkpoint_load(c, path) != 0) return -1;
    if (mi_lm_init(lm, &c->lm, MI_F32, 0, scope) != 0)
        return train_fail("checkpoint '%s': its model cannot be built: %s", path, mi_error());
    return mi_checkpoint_restore(c, lm);
}
