/* The optimizer a run's settings describe (train.h). */
#include "train_internal.h"

#include <string.h>

mi_optim *mi_run_optimizer(const mi_lm *lm, const mi_run_config *rc, mi_tensor **params)
{
    int n;
    const mi_named_tensor *p = mi_lm_params(lm, &n);
    mi_scope *s = mi_scope_current();
    size_t m = (size_t)(n ? n : 1);
    bool *decay = mi_scope_alloc(s, sizeof(bool) * m);
    mi_tensor **order = params ? params : mi_scope_alloc(s, sizeof(mi_tensor *) * m);
    if (!decay || !order) return mi_error_set("optimizer: out of memory"), NULL;
    int inner = 0, outer = n;
    for (int i = 0; i < n; i++) {
        bool io = rc->optim == MI_OPT_MUON && (!strcmp(p[i].name, "embeddings.weight") ||
                                               !strcmp(p[i].name, "lm_head.weight"));
        order[io ? --outer : inner++] = p[i].tensor;
    }
    mi_decay_mask_matrices(order, n, decay);
    mi_param_group g[2] = {{order, inner, rc->hp, decay},
                           {order + inner, n - inner, rc->hp, decay + inner}};
    g[1].hp.adamw_only = true;
    return mi_optim_new(rc->optim, g, n - inner ? 2 : 1);
}
