/* Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_, norm 2)
 * and gradient accumulation over micro-batches. Both change param->grad in
 * place, with ops, recording off. */
#include "internal.h"

/* Σ‖g_i‖² over the parameters that have a gradient, computed with ops in a
 * scratch scope; -1 with a message on bad arguments. */
static double sum_squares(const char *who, mi_tensor *const *params, int n)
{
    if (!params || n < 0) {
        mi_error_set("%s: params is NULL (n %d)", who, n);
        return -1;
    }
    mi_scope *tmp = mi_scope_new("clip");
    if (!tmp) return -1;
    bool was = mi_set_grad_enabled(false);
    mi_scope_enter(tmp);
    double total = 0;
    for (int i = 0; i < n; i++) {
        if (!params[i]) {
            mi_error_set("%s: parameter %d is NULL", who, i);
            total = -1;
            break;
        }
        if (!params[i]->grad) continue;
        mi_tensor *s = mi_sum(mi_square(params[i]->grad), MI_ALL, false);
        if (!s) {
            total = -1;
            break;
        }
        total += mi_item(s);
    }
    mi_scope_leave();
    mi_scope_free(tmp);
    mi_set_grad_enabled(was);
    return total;
}

double mi_grad_norm(mi_tensor *const *params, int n)
{
    double s = sum_squares("grad_norm", params, n);
    return s < 0 ? -1 : sqrt(s);
}

int mi_grads_scale(mi_tensor *const *params, int n, double s)
{
    if (!params || n < 0) {
        mi_error_set("grads_scale: params is NULL (n %d)", n);
        return -1;
    }
    if (!isfinite(s)) {
        mi_error_set("grads_scale: scale must be finite, got %g", s);
        return -1;
    }
    mi_scope *tmp = mi_scope_new("grads-scale");
    if (!tmp) return -1;
    bool was = mi_set_grad_enabled(false);
    mi_scope_enter(tmp);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!params[i]) {
            mi_error_set("grads_scale: parameter %d is NULL", i);
            rc = -1;
        } else if (params[i]->grad) {
            rc = mi_tensor_copy_into(params[i]->grad, mi_mul_scalar(params[i]->grad, s));
        }
        mi_scope_reset(tmp);
    }
    mi_scope_leave();
    mi_scope_free(tmp);
    mi_set_grad_enabled(was);
    return rc;
}

double mi_clip_grad_norm(mi_tensor *const *params, int n, double max_norm)
{
    if (!isfinite(max_norm) || max_norm < 0) {
        mi_error_set("clip_grad_norm: max_norm must be ≥ 0, got %g", max_norm);
        return -1;
    }
    double total = mi_grad_norm(params, n);
    if (total < 0) return -1;
    double coef = max_norm / (total + 1e-6);
    if (coef < 1 && mi_grads_scale(params, n, coef) != 0) return -1;
    return total;
}

double mi_optim_clip_grad_norm(mi_optim *o, double max_norm)
{
    if (!o) {
        mi_error_set("clip_grad_norm: NULL optimizer");
        return -1;
    }
    return mi_clip_grad_norm(o->params, o->n, max_norm);
}

int mi_optim_accumulated(mi_optim *o, int micro_batches)
{
    if (!o || micro_batches < 1) {
        mi_error_set("accumulated: need an optimizer and micro_batches ≥ 1 (got %d)",
                     micro_batches);
        return -1;
    }
    return micro_batches == 1 ? 0 : mi_grads_scale(o->params, o->n, 1.0 / micro_batches);
}
