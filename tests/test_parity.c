/* Backend parity: every op, every backend kernel other than
 * REF, every dtype it provides, against the REF kernel of the same dtype on
 * the same inputs: the op's own examples and the examples grown to larger,
 * awkward sizes. Kernels are called directly, each into an output buffer
 * with guard bytes on both sides; agreement is measured by the normalised
 * MSE  Σ(y − ref)² / (Σref² + tiny).  Backward parity: the vjp of every
 * differentiable op with only REF allowed against the full backend set. */
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op_inputs.h"

/* ---------------------------------------------------------------- guarded outputs
 * GUARD bytes of a canary pattern before and after the data (which starts
 * 64-byte aligned, like mi_tensor_new's); the data itself starts as NaN
 * bytes, so an element a kernel leaves unwritten shows up as a mismatch. */
#define GUARD 64

static unsigned char canary(size_t i) { return (unsigned char)(0xA5u ^ (i * 37u)); }

static mi_tensor *guarded_new(mi_dtype dt, int rank, const int64_t *shape)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (!t) return NULL;
    size_t bytes = (size_t)t->numel * mi_dtype_size(dt);
    unsigned char *base = mi_scope_alloc(mi_scope_current(), bytes + 2 * GUARD);
    if (!base) return NULL;
    for (size_t i = 0; i < GUARD; i++) base[i] = base[GUARD + bytes + i] = canary(i);
    memset(base + GUARD, 0xFF, bytes);
    t->data = base + GUARD;
    return t;
}

static bool guards_intact(const mi_tensor *t)
{
    const unsigned char *base = (const unsigned char *)t->data - GUARD;
    size_t bytes = (size_t)t->numel * mi_dtype_size(t->dtype);
    for (size_t i = 0; i < GUARD; i++)
        if (base[i] != canary(i) || base[GUARD + bytes + i] != canary(i)) return false;
    return true;
}

/* ---------------------------------------------------------------- failures
 * Collected per op, so one run lists every disagreement. `cases` counts the
 * cases visited and `by_kernel` the forward comparisons of each kernel, so a
 * test that silently skipped everything cannot pass. */
typedef struct report {
    int cases, compared, failed;
    int by_kernel[MI_BACKEND_COUNT][2];
    char text[1536];
} report;

static void note_failure(report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_failure(report *rep, const char *fmt, ...)
{
    rep->failed++;
    size_t len = strlen(rep->text);
    if (len + 8 >= sizeof rep->text) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->text + len, sizeof rep->text - len, fmt, ap);
    va_end(ap);
    len = strlen(rep->text);
    if (len + 2 < sizeof rep->text) strcat(rep->text, "\n");
}

static mi_tensor *snapshot(const mi_tensor *t)
{
    mi_tensor *s = mi_tensor_new(t->dtype, t->rank, t->shape);
    if (s) memcpy(s->data, t->data, (size_t)t->numel * mi_dtype_size(t->dtype));
    return s;
}

/* The f32 error of y and of REF's f32 output ref against REF's f64 output
 * on the case in f64 (c64), as nMSE: where f32 rounding alone already moves
 * a case's output past the bound (an ill-conditioned example: kl rows near
 * uniform amplify it, mlp_scan.c's examples), a backend matches REF if its
 * error against the exact answer is within 10× REF's own. *e_ref < 0: no
 * f64 REF kernel. */
static double error_against_f64(const mi_op *op, const op_case *c64, const mi_tensor *y,
                                const mi_tensor *ref, double *e_ref)
{
    *e_ref = -1;
    if (!op->kernel[MI_BACKEND_REF][MI_F64]) return INFINITY;
    mi_tensor *exact = mi_tensor_new(MI_F64, ref->rank, ref->shape);
    ck_assert_ptr_nonnull(exact);
    op->kernel[MI_BACKEND_REF][MI_F64](exact, c64->in, &c64->attrs);
    *e_ref = nmse(ref, exact);
    return nmse(y, exact);
}

/* ---------------------------------------------------------------- forward parity
 * REF and backend b on one case in dtype dt, each kernel called directly
 * (c64: the case in f64). */
static void forward_parity(const mi_op *op, const op_case *c, const op_case *c64, mi_dtype dt,
                           mi_backend b, report *rep)
{
    mi_dtype odt;
    int rank;
    int64_t shape[MI_MAX_RANK];
    if (out_shape(op, c->in, c->n, &c->attrs, &odt, &rank, shape) != 0) {
        /* every case passed the shape rule in f64 when it was made */
        note_failure(rep, "%s %s %s: the shape rule rejects the case", op->name,
                     mi_dtype_name(dt), c->what);
        return;
    }
    if (odt != dt) return;
    mi_tensor *ref = guarded_new(dt, rank, shape), *y = guarded_new(dt, rank, shape);
    mi_tensor *before[MI_MAX_INPUTS];
    ck_assert_msg(ref && y, "%s: out of memory", op->name);
    for (int i = 0; i < c->n; i++) ck_assert_ptr_nonnull(before[i] = snapshot(c->in[i]));
    if (ref->numel == 0) return;
    op->kernel[MI_BACKEND_REF][dt](ref, c->in, &c->attrs);
    op->kernel[b][dt](y, c->in, &c->attrs);
    rep->compared++;
    rep->by_kernel[b][dt]++;
    const char *who = mi_backend_name(b), *dn = mi_dtype_name(dt);
    if (!guards_intact(y) || !guards_intact(ref))
        note_failure(rep, "%s %s %s %s: wrote outside its output", op->name, who, dn, c->what);
    for (int i = 0; i < c->n; i++)
        if (memcmp(before[i]->data, c->in[i]->data,
                   (size_t)c->in[i]->numel * mi_dtype_size(c->in[i]->dtype)) != 0)
            note_failure(rep, "%s %s %s %s: modified input %d", op->name, who, dn, c->what, i);
    double e = nmse(y, ref), bound = nmse_bound(op, dt), e_ref = -1, e_exact = e;
    if (!(e <= bound) && dt == MI_F32)
        e_exact = error_against_f64(op, c64, y, ref, &e_ref);
    if (!(e <= bound) && !(e_ref >= 0 && e_exact <= 10 * e_ref))
        note_failure(rep, "%s %s %s %s: nMSE %.3g > %.0e (against f64: %.3g, REF f32's %.3g)",
                     op->name, who, dn, c->what, e, bound, e_exact, e_ref);
}

/* The op's cases: each example, grown to medium and (for ops with a backend
 * kernel) big sizes, and the benchmark shapes. fn runs on every one. */
typedef void (*case_fn)(const mi_op *op, const op_case *c, report *rep);

static void for_each_case(const mi_op *op, unsigned seed, bool big, case_fn fn, report *rep)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    op_case ex, grown;
    for (int v = 0; op_example(op, &r, v, &ex) > 0; v++) {
        rep->cases++;
        fn(op, &ex, rep);
        for (int scale = 0; scale <= (big ? 1 : 0); scale++)
            if (op_example_grown(op, &r, &ex, scale, &grown)) {
                rep->cases++;
                fn(op, &grown, rep);
            }
    }
    for (int k = 0; k < N_BENCH_SHAPES; k++)
        if (big && op_bench_case(op, &r, k, &ex)) {
            rep->cases++;
            fn(op, &ex, rep);
        }
}

/* At least one comparison per case visited, and at least one case: a case
 * may skip a dtype the op does not produce, never everything. */
static void assert_compared(const mi_op *op, const report *rep, const char *what)
{
    ck_assert_msg(rep->cases > 0 && rep->compared >= rep->cases,
                  "%s: %d %s for %d cases (at least one per case expected)", op->name,
                  rep->compared, what, rep->cases);
}

static void forward_case(const mi_op *op, const op_case *c, report *rep)
{
    for (int dt = MI_F32; dt <= MI_F64; dt++) {
        op_case cd = op_case_to(c, (mi_dtype)dt), c64 = op_case_to(c, MI_F64);
        for (int b = 0; b < MI_BACKEND_COUNT; b++)
            if (b != MI_BACKEND_REF && op->kernel[b][dt] && op->kernel[MI_BACKEND_REF][dt])
                forward_parity(op, &cd, &c64, (mi_dtype)dt, (mi_backend)b, rep);
    }
}

START_TEST(forward_matches_ref)
{
    const mi_op *op = mi_op_at(_i);
    if (!op || (op->flags & MI_OP_VIEW) || !op_has_backend_kernel(op, -1)) return;
    report rep = {0};
    for_each_case(op, 100u + (unsigned)_i, true, forward_case, &rep);
    ck_assert_msg(rep.failed == 0, "%d failures, %d comparisons:\n%s", rep.failed, rep.compared,
                  rep.text);
    assert_compared(op, &rep, "comparisons");
    for (int b = 1; b < MI_BACKEND_COUNT; b++)
        for (int dt = 0; dt < 2; dt++)
            ck_assert_msg(!op->kernel[b][dt] || !op->kernel[MI_BACKEND_REF][dt] ||
                              rep.by_kernel[b][dt] > 0,
                          "%s: its %s %s kernel was compared on no case", op->name,
                          mi_backend_name((mi_backend)b), mi_dtype_name((mi_dtype)dt));
}
END_TEST

/* ---------------------------------------------------------------- backward parity
 * d⟨y, g⟩/d inputs for a random g, with only REF allowed and with every
 * backend: the vjp runs whatever kernels the ops it is built from have.
 * Returns the number of gradients, 0 when nothing takes a gradient (no input
 * or no output requires it), -1 when a call failed (mi_error says why). */
static int vjp(const mi_op *op, const op_case *c, unsigned mask, mi_rng *r, mi_tensor **grads,
               mi_tensor **wrt)
{
    unsigned was = mi_backends_allowed();
    mi_backends_allow(mask);
    int k = 0;
    for (int i = 0; i < c->n; i++)
        if (c->in[i]->requires_grad) wrt[k++] = c->in[i];
    mi_tensor *y = k ? mi_op_call(op, c->in, c->n, &c->attrs) : NULL;
    int rc = !k || (y && !y->requires_grad) ? 0 : -1;
    if (y && y->requires_grad) {
        mi_tensor *g = mi_randn(r, y->dtype, y->rank, y->shape, 0.0, 1.0);
        rc = mi_grad(&y, &g, 1, wrt, k, false, grads) == 0 ? k : -1;
    }
    mi_backends_allow(was);
    return rc;
}

static void backward_case(const mi_op *op, const op_case *c, report *rep)
{
    for (int dt = MI_F32; dt <= MI_F64; dt++) {
        op_case cd = op_case_to(c, (mi_dtype)dt);
        mi_tensor *g_ref[MI_MAX_INPUTS], *g_all[MI_MAX_INPUTS], *wrt[MI_MAX_INPUTS];
        mi_rng r1, r2;
        mi_rng_seed(&r1, 99);
        mi_rng_seed(&r2, 99);
        int k = vjp(op, &cd, 1u << MI_BACKEND_REF, &r1, g_ref, wrt);
        if (k <= 0) { /* k = 0: no input or output takes a gradient, nothing to compare */
            if (k < 0)
                note_failure(rep, "%s %s %s: %s", op->name, mi_dtype_name((mi_dtype)dt),
                             c->what, mi_error());
            mi_error_clear();
            continue;
        }
        int k_all = vjp(op, &cd, MI_BACKEND_ALL, &r2, g_all, wrt);
        ck_assert_msg(k_all == k, "%s %s %s: %d gradients with every backend, %d with REF: %s",
                      op->name, mi_dtype_name((mi_dtype)dt), c->what, k_all, k, mi_error());
        double bound = nmse_bound(op, (mi_dtype)dt);
        for (int j = 0; j < k; j++) {
            rep->compared++;
            double e = nmse(g_all[j], g_ref[j]);
            if (!(e <= bound))
                note_failure(rep, "%s %s %s: gradient %d: nMSE %.3g > %.0e", op->name,
                     mi_dtype_name((mi_dtype)dt), c->what, j, e, bound);
        }
    }
}

START_TEST(backward_matches_ref)
{
    const mi_op *op = mi_op_at(_i);
    if (!op || !mi_op_differentiable(op)) return;
    report rep = {0};
    for_each_case(op, 200u + (unsigned)_i, false, backward_case, &rep);
    ck_assert_msg(rep.failed == 0, "%d failures, %d gradients compared:\n%s", rep.failed,
                  rep.compared, rep.text);
    assert_compared(op, &rep, "gradients");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- forcing
 * mi_backends_allow(1 << b) runs b (or REF, where the op's select rule
 * prefers it for this shape), and mi_backend_last() says which. */
static void forcing_case(const mi_op *op, const op_case *c, report *rep)
{
    unsigned was = mi_backends_allowed();
    bool grad_was = mi_set_grad_enabled(false);
    for (int dt = MI_F32; dt <= MI_F64; dt++) {
        op_case cd = op_case_to(c, (mi_dtype)dt);
        for (int b = 1; b < MI_BACKEND_COUNT; b++) {
            if (!op->kernel[b][dt]) continue;
            mi_backends_allow(1u << b);
            mi_tensor *y = mi_op_call(op, cd.in, cd.n, &cd.attrs);
            if (!y) {
                note_failure(rep, "%s %s %s with only %s: %s", op->name,
                             mi_dtype_name((mi_dtype)dt), c->what,
                             mi_backend_name((mi_backend)b), mi_error());
                mi_error_clear();
                continue;
            }
            if (y->dtype != (mi_dtype)dt) continue;
            mi_backend got = mi_backend_last();
            rep->compared++;
            if (op->select ? (got != (mi_backend)b && got != MI_BACKEND_REF)
                           : got != (mi_backend)b)
                note_failure(rep, "%s %s: allowed %s, ran %s", op->name, c->what,
                     mi_backend_name((mi_backend)b), mi_backend_name(got));
            mi_backends_allow(1u << MI_BACKEND_REF);
            ck_assert_msg(mi_op_call(op, cd.in, cd.n, &cd.attrs), "%s %s with only ref: %s",
                          op->name, c->what, mi_error());
            if (mi_backend_last() != MI_BACKEND_REF)
                note_failure(rep, "%s %s: allowed ref, ran %s", op->name, c->what,
                     mi_backend_name(mi_backend_last()));
        }
    }
    mi_set_grad_enabled(grad_was);
    mi_backends_allow(was);
    mi_error_clear();
}

START_TEST(forcing_a_backend_runs_it)
{
    const mi_op *op = mi_op_at(_i);
    if (!op || (op->flags & MI_OP_VIEW) || !op_has_backend_kernel(op, -1)) return;
    report rep = {0};
    for_each_case(op, 300u + (unsigned)_i, false, forcing_case, &rep);
    ck_assert_msg(rep.failed == 0, "%s", rep.text);
    assert_compared(op, &rep, "forced calls");
}
END_TEST

/* MIRAS_BACKEND=ref (or a forced REF) reports REF for every op. */
START_TEST(ref_only_reports_ref)
{
    unsigned was = mi_backends_allowed();
    mi_backends_allow(1u << MI_BACKEND_REF);
    mi_tensor *a = mi_ones(MI_F32, MI_SHAPE(3, 4)), *b = mi_ones(MI_F32, MI_SHAPE(4, 2));
    ck_assert_ptr_nonnull(mi_matmul(a, b));
    ck_assert_int_eq(mi_backend_last(), MI_BACKEND_REF);
    ck_assert_ptr_nonnull(mi_tanh(a));
    ck_assert_int_eq(mi_backend_last(), MI_BACKEND_REF);
    mi_backends_allow(was);
}
END_TEST

/* What the suite covers, printed for the log (op × backend × dtype): every
 * backend kernel has a REF kernel of its dtype to be compared with, and the
 * libraries the build requires provide their kernels (OpenBLAS: matmul in
 * both dtypes; oneDNN: softmax and layer_norm in f32; the project's own
 * kernels: exp in f32, f64 staying exact REF). */
START_TEST(coverage_is_listed)
{
    char line[4096] = "";
    int kernels = 0;
    for (int i = 0; i < mi_op_count(); i++) {
        const mi_op *op = mi_op_at(i);
        for (int b = 1; op && b < MI_BACKEND_COUNT; b++)
            for (int dt = 0; dt < 2; dt++) {
                if (!op->kernel[b][dt]) continue;
                kernels++;
                ck_assert_msg(op->kernel[MI_BACKEND_REF][dt] != NULL,
                              "%s has a %s %s kernel and no REF kernel to compare it with",
                              op->name, mi_backend_name((mi_backend)b),
                              mi_dtype_name((mi_dtype)dt));
                size_t len = strlen(line);
                snprintf(line + len, sizeof line - len, " %s/%s/%s", op->name,
                         mi_backend_name((mi_backend)b), mi_dtype_name((mi_dtype)dt));
            }
    }
    printf("parity: %d backend kernels:%s\n", kernels, kernels ? line : " (none)");
    fflush(stdout);
    static const struct { const char *op; mi_backend b; int dt; } required[] = {
        {"matmul", MI_BACKEND_BLAS, MI_F32}, {"matmul", MI_BACKEND_BLAS, MI_F64},
        {"softmax", MI_BACKEND_DNNL, MI_F32}, {"layer_norm", MI_BACKEND_DNNL, MI_F32},
        {"exp", MI_BACKEND_OWN, MI_F32},      {"matmul_acc", MI_BACKEND_BLAS, MI_F64},
    };
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        const mi_op *op = mi_op_find(required[i].op);
        ck_assert_msg(op && op->kernel[required[i].b][required[i].dt], "no %s %s kernel for %s",
                      mi_backend_name(required[i].b), mi_dtype_name((mi_dtype)required[i].dt),
                      required[i].op);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("parity");
    TCase *tc = tcase_slow("coverage");
    tcase_add_test(tc, coverage_is_listed);
    tcase_add_test(tc, ref_only_reports_ref);
    suite_add_tcase(s, tc);
    tc = tcase_slow("forward");
    tcase_add_loop_test(tc, forward_matches_ref, 0, mi_op_count());
    suite_add_tcase(s, tc);
    tc = tcase_slow("forcing");
    tcase_add_loop_test(tc, forcing_a_backend_runs_it, 0, mi_op_count());
    suite_add_tcase(s, tc);
    tc = tcase_slow("backward");
    tcase_add_loop_test(tc, backward_matches_ref, 0, mi_op_count());
    suite_add_tcase(s, tc);
    return s;
}
