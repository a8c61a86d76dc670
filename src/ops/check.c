/* Registry-driven checking of one op: its examples through gradcheck,
 * gradgradcheck and an f32-vs-f64 comparison. Used by the test suite and by
 * `miras-gradcheck --ops`. */
#include <stdlib.h>

#include "internal.h"

typedef struct call_ctx {
    const mi_op *op;
    mi_attrs attrs;
} call_ctx;

static int call_op(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    call_ctx *cc = c;
    out[0] = mi_op_call(cc->op, in, n, &cc->attrs);
    return out[0] ? 1 : -1;
}

/* f32 rounding of inputs and of every intermediate: ops whose result is
 * sensitive to it (long reductions) still land well inside this. */
#define F32_TOLERANCE 1e-4

mi_op_check_result mi_op_check(const mi_op *op, unsigned seed)
{
    mi_op_check_result res = {.ok = true};
    if (!op) {
        res.ok = false;
        snprintf(res.message, sizeof res.message, "op is NULL (listed but not defined)");
        return res;
    }
    if (!op->examples) {
        res.ok = false;
        snprintf(res.message, sizeof res.message, "%s: no examples", op->name);
        return res;
    }
    bool diff = mi_op_differentiable(op);
    if (!diff && !(op->flags & MI_OP_NONDIFF)) {
        res.ok = false;
        snprintf(res.message, sizeof res.message,
                 "%s: no vjp and not marked non-differentiable", op->name);
        return res;
    }
    mi_scope *s = mi_scope_new("op-check");
    if (!s) {
        res.ok = false;
        snprintf(res.message, sizeof res.message, "out of memory");
        return res;
    }
    mi_rng rng;
    mi_rng_seed(&rng, seed);
    mi_scope_enter(s);
    for (int v = 0; res.ok; v++) {
        mi_tensor *in[MI_MAX_INPUTS] = {0};
        call_ctx cc = {.op = op};
        mi_error_clear();
        int n = op->examples(&rng, v, in, &cc.attrs);
        if (n == 0) break;
        res.variants++;
        bool any_grad = false;
        for (int i = 0; i < n; i++) {
            if (!in[i]) {
                res.ok = false;
                snprintf(res.message, sizeof res.message, "%s: example %d: %s", op->name, v,
                         mi_error());
                break;
            }
            any_grad |= in[i]->requires_grad;
        }
        if (!res.ok) break;
        /* f32 against f64 */
        mi_tensor *in32[MI_MAX_INPUTS];
        for (int i = 0; i < n; i++)
            in32[i] = mi_dtype_is_float(in[i]->dtype) ? mi_tensor_to(in[i], MI_F32) : in[i];
        bool was = mi_set_grad_enabled(false);
        mi_tensor *y64 = mi_op_call(op, in, n, &cc.attrs);
        mi_tensor *y32 = mi_op_call(op, in32, n, &cc.attrs);
        mi_set_grad_enabled(was);
        if (!y64 || !y32) {
            res.ok = false;
            snprintf(res.message, sizeof res.message, "%s: example %d: %s", op->name, v,
                     mi_error());
            break;
        }
        double worst = 0, scale = 0;
        for (int64_t k = 0; k < y64->numel; k++) {
            double a32 = mi_get(y32, k), a64 = mi_get(y64, k);
            double d = a32 == a64 ? 0.0 : fabs(a32 - a64); /* equal infinities agree */
            if (!(d <= worst)) worst = d;
            if (fabs(mi_get(y64, k)) > scale) scale = fabs(mi_get(y64, k));
        }
        double rel = worst / (1.0 + scale);
        if (!(rel <= res.f32_rel_err)) res.f32_rel_err = rel;
        if (!(rel <= F32_TOLERANCE)) {
            res.ok = false;
            snprintf(res.message, sizeof res.message,
                     "%s: example %d: f32 differs from f64 by %.3g (relative)", op->name, v, rel);
            break;
        }
        if (!diff || !any_grad) continue;
        mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
        o.quiet = true;
        mi_gradcheck_result g = mi_gradcheck(call_op, &cc, in, n, &o);
        res.gradchecks++;
        if (!g.ok) {
            res.ok = false;
            snprintf(res.message, sizeof res.message, "%s: example %d: gradcheck: %s", op->name,
                     v, g.message);
            break;
        }
        if (op->flags & MI_OP_NO_GRADGRAD) continue;
        g = mi_gradgradcheck(call_op, &cc, in, n, &o);
        res.gradchecks++;
        if (!g.ok) {
            res.ok = false;
            snprintf(res.message, sizeof res.message, "%s: example %d: gradgradcheck: %s",
                     op->name, v, g.message);
        }
    }
    if (res.ok && res.variants == 0) {
        res.ok = false;
        snprintf(res.message, sizeof res.message, "%s: examples gave no case", op->name);
    }
    mi_scope_leave();
    mi_scope_free(s);
    return res;
}
