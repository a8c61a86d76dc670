/* Optimizer state as named tensors and metadata strings, for safetensors
 * checkpoints: tensors "opt.<param>.<state>", metadata "opt.kind",
 * "opt.params", "opt.step", "opt.lr_scale", "opt.<param>.step". Doubles are
 * written with %.17g, so every value round-trips exactly and a resumed run is
 * bit-identical to an uninterrupted one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

static char *scope_strdup(mi_scope *s, const char *text)
{
    size_t n = strlen(text) + 1;
    char *d = mi_scope_alloc(s, n);
    if (d) memcpy(d, text, n);
    return d;
}

int mi_optim_state_export(const mi_optim *o, mi_optim_state_list *out)
{
    if (!o || !out) {
        mi_error_set("optim: state_export: NULL argument");
        return -1;
    }
    mi_scope *s = mi_scope_current();
    if (!s) {
        mi_error_set("%s: state_export: no current scope", o->rule->name);
        return -1;
    }
    int count = 0;
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < OPT_MAX_STATE; k++) count += o->live[i][k];
    int n_meta = 4 + o->n;
    memset(out, 0, sizeof *out);
    out->tensors = mi_scope_alloc(s, sizeof *out->tensors * (size_t)(count ? count : 1));
    out->metadata.keys = mi_scope_alloc(s, sizeof(char *) * (size_t)n_meta);
    out->metadata.values = mi_scope_alloc(s, sizeof(char *) * (size_t)n_meta);
    if (!out->tensors || !out->metadata.keys || !out->metadata.values) return -1;
    char buf[128];
    for (int i = 0; i < o->n; i++) {
        opt_state_spec sp;
        opt_spec_of(o, i, &sp);
        for (int k = 0; k < OPT_MAX_STATE; k++) {
            if (!o->live[i][k]) continue;
            snprintf(buf, sizeof buf, "opt.%d.%s", i, k < sp.count ? sp.names[k] : "?");
            mi_named_tensor *t = &out->tensors[out->count++];
            t->name = scope_strdup(s, buf);
            t->tensor = o->store[i][k];
            if (!t->name) return -1;
        }
    }
    const char **keys = out->metadata.keys, **vals = out->metadata.values;
    int m = 0;
    keys[m] = "opt.kind";
    vals[m++] = o->rule->name;
    snprintf(buf, sizeof buf, "%d", o->n);
    keys[m] = "opt.params";
    vals[m++] = scope_strdup(s, buf);
    snprintf(buf, sizeof buf, "%lld", (long long)mi_optim_steps(o));
    keys[m] = "opt.step";
    vals[m++] = scope_strdup(s, buf);
    snprintf(buf, sizeof buf, "%.17g", o->lr_scale);
    keys[m] = "opt.lr_scale";
    vals[m++] = scope_strdup(s, buf);
    for (int i = 0; i < o->n; i++) {
        snprintf(buf, sizeof buf, "opt.%d.step", i);
        keys[m] = scope_strdup(s, buf);
        snprintf(buf, sizeof buf, "%lld", (long long)o->steps[i]);
        vals[m++] = scope_strdup(s, buf);
    }
    for (int j = 0; j < m; j++)
        if (!keys[j] || !vals[j]) return -1;
    out->metadata.count = m;
    return 0;
}

static int parse_int(const char *text, long long *v)
{
    if (!text || !*text) return -1;
    char *end;
    errno = 0;
    *v = strtoll(text, &end, 10);
    return errno || *end ? -1 : 0;
}

int mi_optim_state_import(mi_optim *o, const mi_safetensors *st)
{
    if (!o || !st) {
        mi_error_set("optim: state_import: NULL argument (optimizer %p, file %p)", (void *)o,
                     (const void *)st);
        return -1;
    }
    const char *who = o->rule->name;
    const char *kind = mi_safetensors_meta(st, "opt.kind");
    if (!kind) {
        mi_error_set("%s: load: no \"opt.kind\" metadata: not an optimizer state", who);
        return -1;
    }
    if (strcmp(kind, who) != 0) {
        mi_error_set("%s: load: the state is for optimizer '%s'", who, kind);
        return -1;
    }
    long long n, v = 0;
    if (parse_int(mi_safetensors_meta(st, "opt.params"), &n) != 0 || n != o->n) {
        mi_error_set("%s: load: the state is for %s parameters, the optimizer has %d", who,
                     mi_safetensors_meta(st, "opt.params") ? mi_safetensors_meta(st, "opt.params")
                                                           : "an unknown number of",
                     o->n);
        return -1;
    }
    double scale = 1.0;
    const char *sc = mi_safetensors_meta(st, "opt.lr_scale");
    if (sc) {
        char *end;
        scale = strtod(sc, &end);
        if (*end || !isfinite(scale) || scale < 0) {
            mi_error_set("%s: load: bad opt.lr_scale '%s'", who, sc);
            return -1;
        }
    }
    const char *total = mi_safetensors_meta(st, "opt.step");
    if (total && (parse_int(total, &v) != 0 || v < 0)) {
        mi_error_set("%s: load: opt.step: '%s' is not a whole number in [0, %lld]", who, total,
                     (long long)INT64_MAX);
        return -1;
    }
    char key[64];
    for (int i = 0; i < o->n; i++) {
        snprintf(key, sizeof key, "opt.%d.step", i);
        if (parse_int(mi_safetensors_meta(st, key), &v) != 0 || v < 0) {
            mi_error_set("%s: load: metadata %s missing or not a count", who, key);
            return -1;
        }
    }
    /* Validate every "opt." tensor before changing anything. */
    for (int j = 0; j < st->count; j++) {
        const char *name = st->tensors[j].name;
        const mi_tensor *t = st->tensors[j].tensor;
        if (strncmp(name, "opt.", 4) != 0) continue;
        char *end;
        errno = 0;
        long i = strtol(name + 4, &end, 10);
        if (errno || end == name + 4 || *end != '.' || i < 0 || i >= o->n) {
            mi_error_set("%s: load: tensor '%s' does not name a parameter 0..%d", who, name,
                         o->n - 1);
            return -1;
        }
        opt_state_spec sp;
        opt_spec_of(o, (int)i, &sp);
        int k = 0;
        while (k < sp.count && strcmp(sp.names[k], end + 1) != 0) k++;
        if (k == sp.count) {
            mi_error_set("%s: load: parameter %ld has no state '%s' under this optimizer's "
                         "hyperparameters", who, i, end + 1);
            return -1;
        }
        const mi_tensor *p = o->params[i];
        if (t->dtype != p->dtype || t->rank != sp.rank[k] ||
            memcmp(t->shape, sp.shape[k], sizeof(int64_t) * (size_t)t->rank) != 0) {
            char ts[64], ws[64];
            mi_error_set("%s: load: state '%s' is %s %s, expected %s %s", who, name,
                         mi_dtype_name(t->dtype), mi_shape_str(ts, sizeof ts, t->rank, t->shape),
                         mi_dtype_name(p->dtype),
                         mi_shape_str(ws, sizeof ws, sp.rank[k], sp.shape[k]));
            return -1;
        }
    }
    /* Apply: allocate what is missing first, so failure changes nothing. */
    for (int i = 0; i < o->n; i++) {
        opt_state_spec sp;
        opt_spec_of(o, i, &sp);
        for (int k = 0; k < sp.count; k++) {
            snprintf(key, sizeof key, "opt.%d.%s", i, sp.names[k]);
            mi_tensor *have = o->store[i][k];
            if (!mi_safetensors_get(st, key) ||
                (have && have->numel == mi_shape_numel(sp.rank[k], sp.shape[k])))
                continue;
            mi_scope_enter(o->scope);
            o->store[i][k] = mi_tensor_new(o->params[i]->dtype, sp.rank[k], sp.shape[k]);
            mi_scope_leave();
            if (!o->store[i][k]) return -1;
        }
    }
    for (int i = 0; i < o->n; i++) {
        opt_state_spec sp;
        opt_spec_of(o, i, &sp);
        for (int k = 0; k < OPT_MAX_STATE; k++) {
            snprintf(key, sizeof key, "opt.%d.%s", i, k < sp.count ? sp.names[k] : "?");
            const mi_tensor *t = k < sp.count ? mi_safetensors_get(st, key) : NULL;
            o->live[i][k] = t != NULL;
            if (t) mi_tensor_copy_into(o->store[i][k], t);
        }
        snprintf(key, sizeof key, "opt.%d.step", i);
        parse_int(mi_safetensors_meta(st, key), &v);
        o->steps[i] = v;
        o->inputs[i] = NULL;
    }
    o->lr_scale = scale;
    return 0;
}

int mi_optim_save(const mi_optim *o, const char *path)
{
    if (!o || !path) {
        mi_error_set("optim: save: NULL argument");
        return -1;
    }
    mi_scope *tmp = mi_scope_new("optim-save");
    if (!tmp) return -1;
    mi_scope_enter(tmp);
    mi_optim_state_list l;
    int rc = mi_optim_state_export(o, &l);
    if (rc == 0) rc = mi_safetensors_save(path, l.tensors, l.count, &l.metadata);
    mi_scope_leave();
    mi_scope_free(tmp);
    return rc;
}

int mi_optim_load(mi_optim *o, const char *path)
{
    if (!o || !path) {
        mi_error_set("optim: load: NULL argument");
        return -1;
    }
    mi_scope *tmp = mi_scope_new("optim-load");
    if (!tmp) return -1;
    mi_scope_enter(tmp);
    mi_safetensors *st = mi_safetensors_load(path);
    int rc = st ? mi_optim_state_import(o, st) : -1;
    mi_scope_leave();
    mi_scope_free(tmp);
    return rc;
}
