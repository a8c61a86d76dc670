/* Numerical gradient checking in f64: the Jacobian from reverse mode,
 * row by row (one mi_grad per output element), against central differences
 * (f(x + eps) − f(x − eps)) / 2eps, column by column. An entry passes when
 * |analytic − numeric| ≤ atol + rtol·|numeric|. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

#define MAX_OUT 16

typedef struct jac {
    int n_out, n_in;
    int64_t out_numel[MAX_OUT], in_numel[MI_MAX_INPUTS];
    double *m[MAX_OUT][MI_MAX_INPUTS]; /* [out elem][in elem], row-major */
} jac;

static void jac_free(jac *J)
{
    for (int o = 0; o < MAX_OUT; o++)
        for (int i = 0; i < MI_MAX_INPUTS; i++) free(J->m[o][i]);
}

static int eval(mi_check_fn f, void *ctx, mi_tensor *const *in, int n_in, mi_tensor **out)
{
    int n = f(in, n_in, out, ctx);
    if (n <= 0 || n > MAX_OUT) {
        if (!mi_error_pending()) mi_error_set("gradcheck: function returned %d outputs", n);
        return -1;
    }
    for (int o = 0; o < n; o++)
        if (!out[o] || out[o]->dtype != MI_F64) {
            if (!mi_error_pending()) mi_error_set("gradcheck: output %d is NULL or not f64", o);
            return -1;
        }
    return n;
}

static mi_gradcheck_result fail(const char *why)
{
    mi_gradcheck_result r = {.ok = false};
    snprintf(r.message, sizeof r.message, "%s: %s", why, mi_error());
    return r;
}

mi_gradcheck_result mi_gradcheck(mi_check_fn f, void *ctx, mi_tensor *const *in, int n_in,
                                 const mi_gradcheck_opts *opts)
{
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    if (opts) o = *opts;
    if (o.eps <= 0) o.eps = 1e-6;
    mi_gradcheck_result res = {.ok = true};
    if (n_in > MI_MAX_INPUTS) return fail("gradcheck: too many inputs");
    for (int i = 0; i < n_in; i++)
        if (!in[i] || (in[i]->requires_grad && in[i]->dtype != MI_F64))
            return fail("gradcheck: inputs to check must be f64 tensors");

    mi_scope *keep = mi_scope_new("gradcheck"), *tmp = mi_scope_new("gradcheck-tmp");
    jac A = {0}, N = {0};
    mi_tensor *out[MAX_OUT], *x[MI_MAX_INPUTS];
    int nx = 0, idx[MI_MAX_INPUTS];
    for (int i = 0; i < n_in; i++)
        if (in[i]->requires_grad) {
            idx[nx] = i;
            x[nx++] = in[i];
        }
    if (!keep || !tmp) {
        res = fail("gradcheck: out of memory");
        goto done;
    }
    mi_scope_enter(keep);
    bool was = mi_set_grad_enabled(true);
    int n_out = eval(f, ctx, in, n_in, out);
    if (n_out < 0) {
        res = fail("gradcheck: evaluating the function");
        goto leave;
    }
    A.n_out = N.n_out = n_out;
    A.n_in = N.n_in = nx;
    for (int oi = 0; oi < n_out; oi++)
        for (int j = 0; j < nx; j++) {
            size_t cells = (size_t)out[oi]->numel * (size_t)x[j]->numel;
            A.m[oi][j] = calloc(cells ? cells : 1, sizeof(double));
            N.m[oi][j] = calloc(cells ? cells : 1, sizeof(double));
            if (!A.m[oi][j] || !N.m[oi][j]) {
                res = fail("gradcheck: out of memory");
                goto leave;
            }
        }

    /* analytic rows */
    for (int oi = 0; oi < n_out; oi++) {
        if (!out[oi]->requires_grad) continue; /* constant output: its rows are 0 */
        for (int64_t e = 0; e < out[oi]->numel; e++) {
            mi_scope_enter(tmp);
            mi_tensor *seed = mi_zeros(MI_F64, out[oi]->rank, out[oi]->shape), *g[MI_MAX_INPUTS];
            if (seed) ((double *)seed->data)[e] = 1.0;
            int rc = seed ? mi_grad(&out[oi], &seed, 1, x, nx, false, g) : -1;
            for (int j = 0; j < nx && rc == 0; j++)
                for (int64_t k = 0; k < x[j]->numel; k++)
                    A.m[oi][j][e * x[j]->numel + k] = ((double *)g[j]->data)[k];
            mi_scope_leave();
            mi_scope_reset(tmp);
            if (rc != 0) {
                res = fail("gradcheck: reverse mode");
                goto leave;
            }
        }
    }
    /* numeric columns */
    for (int j = 0; j < nx; j++) {
        double *xd = x[j]->data;
        for (int64_t k = 0; k < x[j]->numel; k++) {
            double x0 = xd[k];
            for (int side = 0; side < 2; side++) {
                xd[k] = x0 + (side ? -o.eps : o.eps);
                mi_scope_enter(tmp);
                mi_tensor *p[MAX_OUT];
                int n = eval(f, ctx, in, n_in, p);
                for (int oi = 0; oi < n_out && n == n_out; oi++) {
                    if (p[oi]->numel != out[oi]->numel) {
                        n = -1;
                        break;
                    }
                    for (int64_t e = 0; e < p[oi]->numel; e++)
                        N.m[oi][j][e * x[j]->numel + k] +=
                            (side ? -1.0 : 1.0) * ((double *)p[oi]->data)[e] / (2 * o.eps);
                }
                mi_scope_leave();
                mi_scope_reset(tmp);
                if (n != n_out) {
                    xd[k] = x0;
                    res = fail("gradcheck: perturbed evaluation");
                    goto leave;
                }
            }
            xd[k] = x0;
        }
    }
    /* compare */
    double worst = -1;
    for (int oi = 0; oi < n_out; oi++)
        for (int j = 0; j < nx; j++)
            for (int64_t e = 0; e < out[oi]->numel; e++)
                for (int64_t k = 0; k < x[j]->numel; k++) {
                    double a = A.m[oi][j][e * x[j]->numel + k];
                    double nv = N.m[oi][j][e * x[j]->numel + k];
                    double err = fabs(a - nv);
                    res.entries++;
                    if (!(err <= res.max_abs_err)) res.max_abs_err = err;
                    double excess = err - (o.atol + o.rtol * fabs(nv));
                    if (!(excess <= 0) && (isnan(excess) || excess > worst)) {
                        worst = isnan(excess) ? INFINITY : excess;
                        res.ok = false;
                        snprintf(res.message, sizeof res.message,
                                 "output %d element %lld, input %d element %lld: analytic %.10g, "
                                 "numeric %.10g",
                                 oi, (long long)e, idx[j], (long long)k, a, nv);
                    }
                }
    if (!res.ok && !o.quiet) fprintf(stderr, "gradcheck mismatch: %s\n", res.message);
leave:
    mi_set_grad_enabled(was);
    mi_scope_leave();
done:
    jac_free(&A);
    jac_free(&N);
    mi_scope_free(tmp);
    mi_scope_free(keep);
    return res;
}

/* (x, v) ↦ Σ_o vjp(f_o, x, v_o): the gradients are recorded (create_graph),
 * so gradcheck of this function checks second derivatives. */
typedef struct gg_ctx {
    mi_check_fn f;
    void *ctx;
    int n_in, n_out;
} gg_ctx;

static int vjp_fn(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    gg_ctx *g = c;
    mi_tensor *y[MAX_OUT], *x[MI_MAX_INPUTS];
    int ny = g->f(in, g->n_in, y, g->ctx), nx = 0;
    if (ny != g->n_out || n != g->n_in + ny) return -1;
    for (int i = 0; i < g->n_in; i++)
        if (in[i]->requires_grad) x[nx++] = in[i];
    /* outputs with no dependence on x contribute nothing */
    mi_tensor *ys[MAX_OUT], *vs[MAX_OUT];
    int m = 0;
    for (int o = 0; o < ny; o++)
        if (y[o] && y[o]->requires_grad) {
            ys[m] = y[o];
            vs[m++] = in[g->n_in + o];
        }
    if (m == 0) {
        for (int j = 0; j < nx; j++) out[j] = mi_zeros_like(x[j]);
        return nx;
    }
    return mi_grad(ys, vs, m, x, nx, true, out) == 0 ? nx : -1;
}

mi_gradcheck_result mi_gradgradcheck(mi_check_fn f, void *ctx, mi_tensor *const *in, int n_in,
                                     const mi_gradcheck_opts *opts)
{
    mi_scope *s = mi_scope_new("gradgradcheck");
    if (!s) return fail("gradgradcheck: out of memory");
    mi_scope_enter(s);
    mi_gradcheck_result r;
    mi_tensor *y[MAX_OUT], *all[MI_MAX_INPUTS];
    int ny = eval(f, ctx, in, n_in, y);
    if (ny < 0 || n_in + ny > MI_MAX_INPUTS) {
        r = fail("gradgradcheck: evaluating the function (or too many inputs + outputs)");
        goto out;
    }
    /* a fixed, input-independent direction v per output */
    mi_rng rng;
    mi_rng_seed(&rng, 0x5eed);
    for (int i = 0; i < n_in; i++) all[i] = in[i];
    for (int o = 0; o < ny; o++) {
        all[n_in + o] = mi_requires_grad(mi_randn(&rng, MI_F64, y[o]->rank, y[o]->shape, 0, 1),
                                         true);
        if (!all[n_in + o]) {
            r = fail("gradgradcheck: direction");
            goto out;
        }
    }
    gg_ctx g = {f, ctx, n_in, ny};
    r = mi_gradcheck(vjp_fn, &g, all, n_in + ny, opts);
out:
    mi_scope_leave();
    mi_scope_free(s);
    return r;
}
