/* The mixer factory: a spec names a row of the table below ("name" or
 * "name:arg"), or a MIRAS preset. A new kind is one row plus its create
 * function (declared in lm.h). */
#include <stdio.h>
#include <string.h>

#include "mixer_internal.h"
#include "models.h"

static const mi_mixer_kind kinds[] = {
    {"attention", "attention", mi_mixer_create_attention, NULL, NULL, NULL},
    {"swa", "swa[:W]", mi_mixer_create_swa, NULL, mi_mixer_swa_arg, NULL},
    {"samba", "samba:<preset>[:W]", mi_mixer_create_samba, NULL, mi_mixer_samba_arg, NULL},
    {"hope", "hope", mi_mixer_create_hope, mi_mixer_hope_own_ffn, NULL, mi_hope_config_fields},
    /* every MIRAS preset, by name; its overrides also take the block's and gates' keys */
    {NULL, "<preset>", mi_mixer_create_miras, NULL, NULL, mi_miras_config_fields},
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

const mi_mixer_kind *mi_mixer_kind_at(int i)
{
    return i >= 0 && i < N_KINDS ? &kinds[i] : NULL;
}

mi_mixer_options mi_mixer_options_default(int64_t d_model, int64_t heads)
{
    return (mi_mixer_options){.d_model = d_model, .heads = heads, .window = 64,
                              .rope_base = 10000, .out_scale = 1, .norm_eps = 1e-6};
}

static void unknown_spec(const char *spec)
{
    char known[768];
    size_t used = 0;
    for (int i = 0; i < N_KINDS && used < sizeof known; i++)
        if (kinds[i].name)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s, ", kinds[i].usage);
    for (int i = 0; mi_preset_at(i) && used < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                 mi_preset_at(i)->name);
    mi_error_set("mixer: unknown spec '%s' (known: %s)", spec, known);
}

/* The row a spec names, and its argument (NULL: none); NULL when none does. */
static const mi_mixer_kind *find_kind(const char *spec, const char **arg)
{
    *arg = NULL;
    for (int i = 0; i < N_KINDS; i++) {
        size_t n = kinds[i].name ? strlen(kinds[i].name) : 0;
        if (!kinds[i].name) {
            if (mi_preset_find(spec)) return &kinds[i];
        } else if (!strcmp(spec, kinds[i].name)) {
            return &kinds[i];
        } else if (!strncmp(spec, kinds[i].name, n) && spec[n] == ':') {
            *arg = spec + n + 1;
            return &kinds[i];
        }
    }
    return NULL;
}

int mi_mixer_spec_check(const char *spec)
{
    if (!spec) return mi_error_set("mixer: NULL spec"), -1;
    const char *arg;
    const mi_mixer_kind *kind = find_kind(spec, &arg);
    if (!kind) return unknown_spec(spec), 0;
    if (kind->check_arg ? kind->check_arg(arg) != 0 : arg != NULL) {
        if (!kind->check_arg) mi_error_set("%s takes no ':' argument", kind->name);
        char who[MI_LM_TEXT + 16];
        snprintf(who, sizeof who, "mixer '%s'", spec);
        mi_error_prefix(who);
        return -1;
    }
    return 1;
}

int mi_mixer_has_key(const char *spec, const char *key)
{
    if (!spec || !key) return mi_error_set("mixer: NULL spec or key"), -1;
    const char *arg;
    const mi_mixer_kind *kind = find_kind(spec, &arg);
    if (!kind) return unknown_spec(spec), -1;
    int n = 0;
    const mi_field *f = kind->fields ? kind->fields(&n) : NULL;
    return f && mi_fields_find(f, n, key) ? 1 : 0;
}

int mi_mixer_own_ffn(const char *spec, const mi_mixer_options *opt)
{
    if (!spec || !opt) return mi_error_set("mixer: NULL spec or options"), -1;
    const char *arg;
    const mi_mixer_kind *kind = find_kind(spec, &arg);
    if (!kind) return unknown_spec(spec), -1;
    if (!kind->own_ffn) return 0;
    int r = kind->own_ffn(arg, opt);
    if (r < 0) {
        char who[MI_LM_TEXT + 16];
        snprintf(who, sizeof who, "mixer '%s'", spec);
        mi_error_prefix(who);
    }
    return r;
}

int mi_mixer_create(mi_mixer *out, const char *spec, const mi_mixer_options *opt, mi_dtype dt,
                    mi_rng *rng, mi_scope *scope)
{
    if (!out || !spec || !opt || !rng || !scope)
        return mi_error_set("mixer: NULL output, spec, options, rng or scope"), -1;
    memset(out, 0, sizeof *out);
    if (dt != MI_F32 && dt != MI_F64)
        return mi_error_set("mixer '%s': parameters must be f32 or f64, not %s", spec,
                            mi_dtype_name(dt)), -1;
    if (opt->d_model < 1 || opt->heads < 1 || opt->d_model % opt->heads)
        return mi_error_set("mixer '%s': heads (%lld) must be >= 1 and divide d_model (%lld)",
                            spec, (long long)opt->heads, (long long)opt->d_model), -1;
    if (opt->n_overrides < 0 || (opt->n_overrides > 0 && !opt->overrides))
        return mi_error_set("mixer '%s': n_overrides %d without overrides", spec,
                            opt->n_overrides), -1;
    const char *arg;
    const mi_mixer_kind *kind = find_kind(spec, &arg);
    if (!kind) return unknown_spec(spec), -1;
    /* the name outlives the caller's spec text */
    char *name = mi_scope_alloc(scope, strlen(spec) + 1);
    if (!name) return mi_error_set("mixer '%s': out of memory", spec), -1;
    strcpy(name, spec);
    if (kind->create(out, name, arg ? name + (arg - spec) : NULL, opt, dt, rng, scope) != 0) {
        char who[MI_LM_TEXT + 16];
        snprintf(who, sizeof who, "mixer '%s'", spec);
        mi_error_prefix(who);
        return -1;
    }
    out->name = name;
    return 0;
}
