/* matmul and outer on every backend (OpenBLAS, oneDNN, reference) against
 * the reference kernel: every form (plain, trans_a, trans_b, both; batched,
 * broadcast batch, the batch folded into one GEMM; K = 0) on awkward sizes
 * (1, 7, 33, 65), f32 and f64 where the library has it. Each case runs
 * twice: through the op with only that backend allowed, asserting with
 * mi_backend_last() that it really ran, and through the kernel directly on
 * an output surrounded by guard elements, asserting that every element is
 * written and nothing outside. Shapes large enough for the OpenMP paths
 * (batch loop, row and column splits) are included. */
#include <pthread.h>

#include "harness.h"

static mi_rng rng;
/* Allowing backends first also reads MIRAS_BACKEND / MIRAS_THREADS, which
 * would otherwise reset a thread count a test sets before its first op. */
static void seed_setup(void)
{
    mi_backends_allow(MI_BACKEND_ALL);
    mi_rng_seed(&rng, 20240503);
}
static void allow_all(void) { mi_backends_allow(MI_BACKEND_ALL); }

#define GUARD 16
#define SENTINEL 1234.5

typedef struct mm_case {
    int ra, rb;
    int64_t sa[MI_MAX_RANK], sb[MI_MAX_RANK];
    bool ta, tb;
} mm_case;

/* Operand shapes as stored (the flags say how matmul reads them). */
static const mm_case matmul_cases[] = {
    {2, 2, {1, 1}, {1, 1}, false, false},
    {2, 2, {7, 33}, {33, 1}, false, false},
    {2, 2, {1, 65}, {65, 7}, false, false},
    {2, 2, {33, 7}, {7, 65}, false, false},
    {2, 2, {7, 65}, {7, 33}, true, false},     /* [65,7]·[7,33] */
    {2, 2, {65, 33}, {7, 33}, false, true},    /* [65,33]·[33,7] */
    {2, 2, {33, 1}, {7, 33}, true, true},      /* [1,33]·[33,7] */
    {3, 3, {3, 7, 33}, {3, 33, 65}, false, false},
    {3, 3, {3, 33, 7}, {3, 1, 33}, true, true},
    {4, 3, {2, 1, 7, 33}, {3, 33, 7}, false, false},       /* broadcast both ways */
    {2, 3, {33, 7}, {5, 33, 1}, true, false},              /* A shared by the batch */
    {3, 2, {4, 7, 33}, {33, 65}, false, false},            /* B shared: folded */
    {3, 2, {4, 7, 33}, {65, 33}, false, true},             /* folded, trans_b */
    {3, 2, {4, 33, 7}, {33, 65}, true, false},             /* B shared, not folded */
    {3, 3, {1, 7, 33}, {2, 33, 7}, false, false},          /* size-1 batch dim */
    {5, 5, {2, 1, 3, 7, 1}, {1, 4, 1, 1, 7}, false, false},/* rank 5, K = 1 */
    {6, 3, {2, 1, 2, 1, 7, 33}, {3, 33, 1}, false, false}, /* rank 6 */
    {2, 2, {130, 65}, {65, 129}, false, false},            /* one product, row split */
    {2, 2, {130, 7}, {700, 130}, true, true},              /* column split */
    {3, 3, {5, 33, 33}, {5, 33, 33}, false, true},         /* parallel over the batch */
    {3, 2, {9, 65, 33}, {33, 65}, false, false},           /* folded, then split */
    {2, 2, {3, 0}, {0, 4}, false, false},                  /* K = 0: zeros */
};

/* outer: a [..., M] ⊗ b [..., N]. */
static const mm_case outer_cases[] = {
    {1, 1, {1}, {1}, false, false},
    {1, 1, {7}, {33}, false, false},
    {2, 2, {3, 65}, {1, 7}, false, false},
    {3, 2, {2, 1, 7}, {4, 33}, false, false},
    {2, 1, {5, 33}, {7}, false, false}, /* b shared: folded */
    {1, 2, {7}, {5, 33}, false, false},
    {1, 1, {800}, {700}, false, false}, /* 2^19 outputs and up: OpenBLAS too */
    {2, 2, {4, 300}, {4, 130}, false, false},
};

static mi_tensor *operand(mi_dtype dt, int rank, const int64_t *shape)
{
    return mi_randn(&rng, dt, rank, shape, 0.0, 1.0);
}

/* max |x − r| / max(1, max |r|). */
static double rel_err(const mi_tensor *x, const mi_tensor *r)
{
    double err = 0, scale = 1;
    for (int64_t i = 0; i < r->numel; i++) {
        double d = fabs(mi_get(x, i) - mi_get(r, i));
        err = d > err ? d : err;
        scale = fabs(mi_get(r, i)) > scale ? fabs(mi_get(r, i)) : scale;
    }
    return err / scale;
}

static mi_tensor *call(bool outer, mi_tensor *a, mi_tensor *b, const mm_case *c)
{
    return outer ? mi_outer(a, b) : mi_matmul_t(a, b, c->ta, c->tb);
}

/* Runs the backend's kernel on a fresh output framed by guard elements;
 * asserts every output element is written and no guard is touched. */
static void check_kernel_direct(const mi_op *op, mi_backend be, mi_tensor *a, mi_tensor *b,
                                const mm_case *c, const mi_tensor *ref, double tol,
                                const char *what)
{
    mi_kernel_fn k = op->kernel[be][a->dtype];
    ck_assert_ptr_nonnull(k);
    mi_tensor *frame = mi_full(a->dtype, MI_SHAPE(ref->numel + 2 * GUARD), SENTINEL);
    mi_tensor *o = mi_tensor_alias(frame, ref->rank, ref->shape, GUARD * mi_dtype_size(a->dtype));
    mi_attrs at = {.trans_a = c->ta, .trans_b = c->tb};
    k(o, (mi_tensor *[]){a, b}, &at);
    for (int64_t i = 0; i < GUARD; i++) {
        ck_assert_msg(mi_get(frame, i) == SENTINEL, "%s: guard before output written", what);
        ck_assert_msg(mi_get(frame, GUARD + ref->numel + i) == SENTINEL,
                      "%s: guard after output written", what);
    }
    for (int64_t i = 0; i < o->numel; i++)
        ck_assert_msg(mi_get(o, i) != SENTINEL, "%s: output element %lld not written", what,
                      (long long)i);
    double e = rel_err(o, ref);
    ck_assert_msg(e <= tol, "%s (direct): relative error %g > %g", what, e, tol);
}

/* Products matmul's select rule may leave on the reference loop, where a
 * library call costs more than the arithmetic: M·N·K ≤ 64, or fewer than
 * 1024 multiply-adds in all (linalg.c gives the timings). outer's rule
 * keeps all but large outputs on it: its cases only count how many ran on
 * the backend. */
static bool tiny(const mi_tensor *y, const mm_case *c)
{
    int64_t K = c->ta ? c->sa[c->ra - 2] : c->sa[c->ra - 1];
    int64_t mnk = y->shape[y->rank - 2] * y->shape[y->rank - 1] * K;
    return mnk <= 64 || y->numel * K < 1024;
}

/* One case on one backend and dtype, against the reference kernel;
 * whether it ran on that backend. */
static bool check_case(bool outer, const mm_case *c, mi_backend be, mi_dtype dt)
{
    const mi_op *op = mi_op_find(outer ? "outer" : "matmul");
    char what[160];
    snprintf(what, sizeof what, "%s %s %s case [%d,%d]%s%s", op->name, mi_backend_name(be),
             mi_dtype_name(dt), c->ra, c->rb, c->ta ? " trans_a" : "", c->tb ? " trans_b" : "");
    mi_tensor *a = operand(dt, c->ra, c->sa), *b = operand(dt, c->rb, c->sb);
    mi_backends_allow(1u << MI_BACKEND_REF);
    mi_tensor *ref = call(outer, a, b, c);
    ck_assert_msg(ref != NULL, "%s: %s", what, mi_error());
    ck_assert_int_eq(mi_backend_last(), MI_BACKEND_REF);

    double tol = dt == MI_F32 ? 1e-5 : 1e-12;
    mi_backends_allow(1u << be);
    mi_tensor *y = call(outer, a, b, c);
    ck_assert_msg(y != NULL, "%s: %s", what, mi_error());
    mi_backend ran = mi_backend_last();
    ck_assert_msg(ran == be || (ran == MI_BACKEND_REF && (outer || tiny(ref, c))),
                  "%s: ran on %s", what, mi_backend_name(ran));
    ck_assert(mi_same_shape(y, ref));
    double e = rel_err(y, ref);
    ck_assert_msg(e <= tol, "%s: relative error %g > %g", what, e, tol);
    check_kernel_direct(op, be, a, b, c, ref, tol, what);
    mi_backends_allow(MI_BACKEND_ALL);
    return ran == be;
}

static const mi_backend backends[] = {MI_BACKEND_BLAS, MI_BACKEND_DNNL, MI_BACKEND_REF};

/* Loop index: backend × dtype. oneDNN 2.6 has no f64. */
static bool pick(int i, mi_backend *be, mi_dtype *dt)
{
    *be = backends[i / 2];
    *dt = i % 2 ? MI_F64 : MI_F32;
    return !(*be == MI_BACKEND_DNNL && *dt == MI_F64);
}

START_TEST(matmul_backends_match_ref)
{
    mi_backend be;
    mi_dtype dt;
    if (!pick(_i, &be, &dt)) return;
    for (size_t i = 0; i < sizeof matmul_cases / sizeof *matmul_cases; i++)
        check_case(false, &matmul_cases[i], be, dt);
}
END_TEST

START_TEST(outer_backends_match_ref)
{
    mi_backend be;
    mi_dtype dt;
    if (!pick(_i, &be, &dt)) return;
    int ran = 0;
    for (size_t i = 0; i < sizeof outer_cases / sizeof *outer_cases; i++)
        ran += check_case(true, &outer_cases[i], be, dt);
    ck_assert_msg(ran > 0, "outer: no case ran on %s", mi_backend_name(be));
}
END_TEST

/* The project's own f32 kernel on batched products with one column (a
 * matrix times a vector, plain and transposed) or K = 1 (an outer product,
 * each form of the flags), and outer's: it must take them (OWN's select
 * rules), and agree with the reference loop. */
static const mm_case own_vector_cases[] = {
    {3, 3, {5, 33, 65}, {5, 65, 1}, false, false},  /* A x */
    {3, 3, {5, 33, 65}, {5, 1, 65}, false, true},   /* A x, x as a row */
    {3, 3, {5, 65, 33}, {5, 65, 1}, true, false},   /* Aᵀ x */
    {3, 3, {5, 65, 33}, {5, 1, 65}, true, true},    /* Aᵀ x, x as a row */
    {4, 4, {3, 2, 33, 7}, {3, 2, 7, 1}, false, false},
    {3, 3, {5, 33, 1}, {5, 1, 65}, false, false},   /* a bᵀ */
    {3, 3, {5, 1, 33}, {5, 1, 65}, true, false},
    {3, 3, {5, 33, 1}, {5, 65, 1}, false, true},
    {3, 3, {5, 1, 33}, {5, 65, 1}, true, true},
};

START_TEST(own_vector_products_match_ref)
{
    const mi_op *op = mi_op_find("matmul");
    for (size_t i = 0; i < sizeof own_vector_cases / sizeof *own_vector_cases; i++) {
        const mm_case *c = &own_vector_cases[i];
        char what[96];
        snprintf(what, sizeof what, "matmul own case %zu", i);
        mi_tensor *a = operand(MI_F32, c->ra, c->sa), *b = operand(MI_F32, c->rb, c->sb);
        mi_backends_allow(1u << MI_BACKEND_REF);
        mi_tensor *ref = call(false, a, b, c);
        ck_assert_msg(ref != NULL, "%s: %s", what, mi_error());
        mi_backends_allow(MI_BACKEND_ALL);
        mi_tensor *y = call(false, a, b, c);
        ck_assert_msg(y != NULL, "%s: %s", what, mi_error());
        ck_assert_msg(mi_backend_last() == MI_BACKEND_OWN, "%s: ran on %s", what,
                      mi_backend_name(mi_backend_last()));
        double e = rel_err(y, ref);
        ck_assert_msg(e <= 1e-5, "%s: relative error %g > 1e-5", what, e);
        check_kernel_direct(op, MI_BACKEND_OWN, a, b, c, ref, 1e-5, what);
    }
    /* outer on a batch of products between oneDNN's sizes and OpenBLAS's */
    const mi_op *outer = mi_op_find("outer");
    const mm_case oc = {2, 2, {9, 65}, {9, 33}, false, false};
    mi_tensor *a = operand(MI_F32, oc.ra, oc.sa), *b = operand(MI_F32, oc.rb, oc.sb);
    mi_backends_allow(1u << MI_BACKEND_REF);
    mi_tensor *ref = mi_outer(a, b);
    mi_backends_allow(MI_BACKEND_ALL);
    mi_tensor *y = mi_outer(a, b);
    ck_assert_msg(ref && y, "%s", mi_error());
    ck_assert_msg(mi_backend_last() == MI_BACKEND_OWN, "outer ran on %s",
                  mi_backend_name(mi_backend_last()));
    ck_assert_double_le(rel_err(y, ref), 1e-5);
    check_kernel_direct(outer, MI_BACKEND_OWN, a, b, &oc, ref, 1e-5, "outer own");
}
END_TEST

/* The own kernel's products with few rows against a transposed B, C = A Bᵀ
 * (M ≤ 8: a chunk of tokens against a weight matrix, as cms_scan takes
 * them): its output columns come in blocks of one vector's width with their
 * sums folded together, then a tail one at a time, so N runs through fewer
 * than one block, whole blocks and a tail, and K through a whole number of
 * vectors and a remainder, for every M the kernel tiles differently. */
START_TEST(own_small_transposed_products_match_ref)
{
    const mi_op *op = mi_op_find("matmul");
    const int64_t Ms[] = {1, 2, 3, 4, 5, 8}, Ns[] = {5, 16, 37, 64}, Ks[] = {7, 32, 65};
    for (size_t m = 0; m < 6; m++)
        for (size_t n = 0; n < 4; n++)
            for (size_t k = 0; k < 3; k++) {
                mm_case c = {3, 3, {2, Ms[m], Ks[k]}, {2, Ns[n], Ks[k]}, false, true};
                char what[96];
                snprintf(what, sizeof what, "matmul own A Bᵀ, M %lld N %lld K %lld",
                         (long long)Ms[m], (long long)Ns[n], (long long)Ks[k]);
                mi_tensor *a = operand(MI_F32, c.ra, c.sa), *b = operand(MI_F32, c.rb, c.sb);
                mi_backends_allow(1u << MI_BACKEND_REF);
                mi_tensor *ref = call(false, a, b, &c);
                ck_assert_msg(ref != NULL, "%s: %s", what, mi_error());
                mi_backends_allow(MI_BACKEND_ALL);
                check_kernel_direct(op, MI_BACKEND_OWN, a, b, &c, ref, 1e-5, what);
            }
}
END_TEST

/* matmul_acc, Y = γ ⊙ C + s op(A) op(B), on OpenBLAS, oneDNN (f32) and the
 * reference kernel against γ ⊙ C + s · (matmul on the reference kernel), for
 * every matmul case (K = 0: Y = γ ⊙ C; the row and column splits: C formed
 * block by block) and five forms of C and γ: without a gate, C the
 * product's shape, its last two dims (repeated) or [1, N]; with a gate, C
 * the product's shape and γ one per row of every batch entry, and C [1, N]
 * with γ one per batch entry. */
START_TEST(matmul_acc_matches_matmul)
{
    static const mi_backend acc_backends[] = {MI_BACKEND_BLAS, MI_BACKEND_REF, MI_BACKEND_DNNL};
    mi_backend be = acc_backends[_i / 2];
    mi_dtype dt = _i % 2 ? MI_F64 : MI_F32;
    if (be == MI_BACKEND_DNNL && dt == MI_F64) return; /* oneDNN 2.6 has no f64 */
    double tol = dt == MI_F32 ? 1e-5 : 1e-12;
    for (size_t i = 0; i < sizeof matmul_cases / sizeof *matmul_cases; i++) {
        const mm_case *c = &matmul_cases[i];
        mi_tensor *a = operand(dt, c->ra, c->sa), *b = operand(dt, c->rb, c->sb);
        mi_backends_allow(1u << MI_BACKEND_REF);
        mi_tensor *prod = mi_matmul_t(a, b, c->ta, c->tb);
        ck_assert_ptr_nonnull(prod);
        int r = prod->rank;
        int64_t last2[2] = {prod->shape[r - 2], prod->shape[r - 1]};
        int64_t row[2] = {1, prod->shape[r - 1]};
        int64_t rows[MI_MAX_RANK], entries[MI_MAX_RANK];
        for (int d = 0; d < r; d++) {
            rows[d] = d == r - 1 ? 1 : prod->shape[d];
            entries[d] = d >= r - 2 ? 1 : prod->shape[d];
        }
        mi_tensor *cs[5] = {operand(dt, r, prod->shape), operand(dt, 2, last2),
                            operand(dt, 2, row), operand(dt, r, prod->shape),
                            operand(dt, 2, row)};
        mi_tensor *gates[5] = {NULL, NULL, NULL, operand(dt, r, rows), operand(dt, r, entries)};
        for (int f = 0; f < 5; f++) {
            mi_tensor *gc = gates[f] ? mi_mul(gates[f], cs[f]) : cs[f];
            mi_tensor *want = mi_add(gc, mi_mul_scalar(prod, -0.5));
            mi_backends_allow(1u << be);
            mi_tensor *y = gates[f] ? mi_matmul_acc_gated(cs[f], gates[f], a, b, c->ta, c->tb, -0.5)
                                    : mi_matmul_acc(cs[f], a, b, c->ta, c->tb, -0.5);
            ck_assert_msg(y != NULL, "case %zu: %s", i, mi_error());
            ck_assert_msg(mi_backend_last() == be, "case %zu ran on %s", i,
                          mi_backend_name(mi_backend_last()));
            mi_backends_allow(1u << MI_BACKEND_REF);
            ck_assert(mi_same_shape(y, want));
            double e = rel_err(y, want);
            ck_assert_msg(e <= tol, "matmul_acc %s %s case %zu, C form %d: relative error %g",
                          mi_backend_name(be), mi_dtype_name(dt), i, f, e);
        }
    }
    mi_backends_allow(MI_BACKEND_ALL);
    /* C that does not broadcast to the product */
    mi_tensor *a = operand(dt, 2, (int64_t[]){3, 4}), *b = operand(dt, 2, (int64_t[]){4, 5});
    ck_assert_ptr_null(mi_matmul_acc(operand(dt, 2, (int64_t[]){3, 4}), a, b, false, false, 1));
    ck_assert_msg(strstr(mi_error(), "matmul_acc: C [3,4] does not broadcast to the product's "
                                     "shape [3,5]"), "%s", mi_error());
    mi_error_clear();
    /* a gate with more than one column */
    mi_tensor *c35 = operand(dt, 2, (int64_t[]){3, 5});
    ck_assert_ptr_null(mi_matmul_acc_gated(c35, c35, a, b, false, false, 1));
    ck_assert_msg(strstr(mi_error(), "matmul_acc: the gate [3,5] does not broadcast to the "
                                     "product's shape [3,5] with its last axis 1"),
                  "%s", mi_error());
    mi_error_clear();
}
END_TEST

/* More threads than batch entries (each product split over the threads),
 * and a single thread (no OpenMP region at all). */
START_TEST(matmul_backends_thread_counts)
{
    static const mm_case c = {3, 3, {2, 70, 40}, {2, 90, 40}, false, true};
    static const int counts[] = {3, 1};
    for (int t = 0; t < 2; t++) {
        mi_set_threads(counts[t]);
        check_case(false, &c, MI_BACKEND_BLAS, MI_F32);
        check_case(false, &c, MI_BACKEND_BLAS, MI_F64);
        check_case(false, &c, MI_BACKEND_DNNL, MI_F32);
    }
    mi_set_threads(0);
}
END_TEST

/* Bitwise the same at 1 and 2 threads on every backend: long K (where a
 * library could split the reduction across threads), a product cut into
 * blocks, a batch. */
START_TEST(matmul_backends_thread_independent)
{
    static const mm_case cases[] = {
        {2, 2, {1024, 48}, {1024, 80}, true, false},
        {2, 2, {300, 64}, {96, 64}, false, true},
        {3, 3, {6, 40, 72}, {6, 72, 56}, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int b = 0; b < 2; b++) {
            const mm_case *c = &cases[i];
            mi_tensor *a = operand(MI_F32, c->ra, c->sa), *bb = operand(MI_F32, c->rb, c->sb);
            mi_tensor *y[2];
            mi_backends_allow(1u << backends[b]);
            for (int t = 0; t < 2; t++) {
                mi_set_threads(t + 1);
                y[t] = mi_matmul_t(a, bb, c->ta, c->tb);
                ck_assert_ptr_nonnull(y[t]);
                ck_assert_int_eq(mi_backend_last(), backends[b]);
            }
            ck_assert_msg(memcmp(y[0]->data, y[1]->data, (size_t)y[0]->numel * 4) == 0,
                          "case %zu on %s differs at 1 and 2 threads", i,
                          mi_backend_name(backends[b]));
        }
    mi_set_threads(0);
}
END_TEST

/* oneDNN has no f64 kernel: with only it allowed, f64 runs on the reference. */
START_TEST(dnnl_f64_runs_on_ref)
{
    mi_tensor *a = operand(MI_F64, MI_SHAPE(7, 33)), *b = operand(MI_F64, MI_SHAPE(33, 7));
    mi_backends_allow(1u << MI_BACKEND_DNNL);
    ck_assert_ptr_nonnull(mi_matmul(a, b));
    ck_assert_int_eq(mi_backend_last(), MI_BACKEND_REF);
}
END_TEST

/* With every backend allowed the select rule picks a library for f32 and
 * f64 products, and forward + backward agree with the reference. */
START_TEST(matmul_select_and_gradients)
{
    for (int d = 0; d < 2; d++) {
        mi_dtype dt = d ? MI_F64 : MI_F32;
        mi_tensor *a = mi_requires_grad(operand(dt, MI_SHAPE(3, 33, 65)), true);
        mi_tensor *b = mi_requires_grad(operand(dt, MI_SHAPE(7, 65)), true);
        mi_tensor *g[2][2];
        for (int pass = 0; pass < 2; pass++) {
            mi_backends_allow(pass ? MI_BACKEND_ALL : 1u << MI_BACKEND_REF);
            mi_tensor *y = mi_matmul_t(a, b, false, true);
            ck_assert_ptr_nonnull(y);
            if (pass) ck_assert_int_ne(mi_backend_last(), MI_BACKEND_REF);
            mi_tensor *loss = mi_sum(mi_mul(y, y), MI_ALL, false);
            ck_assert_int_eq(mi_grad(&loss, NULL, 1, (mi_tensor *[]){a, b}, 2, false, g[pass]),
                             0);
        }
        double tol = dt == MI_F32 ? 1e-5 : 1e-12;
        for (int i = 0; i < 2; i++) ck_assert_double_le(rel_err(g[1][i], g[0][i]), tol);
    }
}
END_TEST

/* A and B each read by two products: the second gradient of each is added
 * into the first in place (matmul's vjp_into: OWN, BLAS or REF GEMM with
 * beta = 1, or a sum over a broadcast batch), and must equal the two vjps
 * taken apart and summed, for every form on every backend. */
START_TEST(matmul_gradients_add_in_place)
{
    static const unsigned masks[] = {MI_BACKEND_ALL, 1u << MI_BACKEND_BLAS, 1u << MI_BACKEND_REF};
    mi_dtype dt = _i % 2 ? MI_F64 : MI_F32;
    double tol = dt == MI_F32 ? 1e-5 : 1e-12;
    mi_backends_allow(masks[_i / 2]);
    for (size_t i = 0; i < sizeof matmul_cases / sizeof *matmul_cases; i++) {
        const mm_case *c = &matmul_cases[i];
        mi_tensor *a = mi_requires_grad(operand(dt, c->ra, c->sa), true);
        mi_tensor *b = mi_requires_grad(operand(dt, c->rb, c->sb), true);
        mi_tensor *y1 = mi_matmul_t(a, b, c->ta, c->tb), *y2 = mi_matmul_t(a, b, c->ta, c->tb);
        ck_assert_msg(y1 && y2, "case %zu: %s", i, mi_error());
        mi_tensor *s1 = operand(dt, y1->rank, y1->shape), *s2 = operand(dt, y1->rank, y1->shape);
        mi_tensor *both[2], *one[2], *other[2];
        ck_assert_int_eq(mi_grad((mi_tensor *[]){y1, y2}, (mi_tensor *[]){s1, s2}, 2,
                                 (mi_tensor *[]){a, b}, 2, false, both), 0);
        ck_assert_int_eq(mi_grad(&y1, &s1, 1, (mi_tensor *[]){a, b}, 2, false, one), 0);
        ck_assert_int_eq(mi_grad(&y2, &s2, 1, (mi_tensor *[]){a, b}, 2, false, other), 0);
        for (int k = 0; k < 2; k++) {
            double e = rel_err(both[k], mi_add(one[k], other[k]));
            ck_assert_msg(e <= tol, "case %zu, input %d, %s, mask %u: relative error %g", i, k,
                          mi_dtype_name(dt), masks[_i / 2], e);
        }
    }
    mi_backends_allow(MI_BACKEND_ALL);
}
END_TEST

/* oneDNN from threads of the caller's own, at once on one shape: each
 * thread has its own primitive cache and stream (dnnl_common.c), and gives
 * them back when it exits (the sanitizer pass's LSan reports them if not). */
typedef struct mm_job {
    mi_tensor *a, *b, *want;
    double err;
    int rc;
    mi_backend ran;
} mm_job;

static void *matmul_thread(void *p)
{
    mm_job *j = p;
    mi_scope *s = mi_scope_new("matmul thread");
    mi_scope_enter(s);
    for (int i = 0; i < 20 && j->rc == 0; i++) {
        mi_tensor *c = mi_matmul(j->a, j->b);
        if (!c) {
            j->rc = -1;
            break;
        }
        j->ran = mi_backend_last();
        for (int64_t k = 0; k < c->numel; k++)
            j->err = fmax(j->err, fabs(mi_get(c, k) - mi_get(j->want, k)));
    }
    mi_scope_leave();
    mi_scope_free(s);
    return NULL;
}

START_TEST(dnnl_from_two_threads_at_once)
{
    mi_tensor *a = mi_randn(&rng, MI_F32, MI_SHAPE(96, 80), 0, 1);
    mi_tensor *b = mi_randn(&rng, MI_F32, MI_SHAPE(80, 72), 0, 1);
    mi_backends_allow(1u << MI_BACKEND_REF);
    mi_tensor *want = mi_matmul(a, b);
    mi_backends_allow(1u << MI_BACKEND_DNNL);
    mm_job job[2] = {{a, b, want, 0, 0, MI_BACKEND_REF}, {a, b, want, 0, 0, MI_BACKEND_REF}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, matmul_thread, &job[t]), 0);
    for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    mi_backends_allow(MI_BACKEND_ALL);
    for (int t = 0; t < 2; t++) {
        ck_assert_msg(job[t].rc == 0, "thread %d: %s", t, mi_error());
        ck_assert_msg(job[t].ran == MI_BACKEND_DNNL, "thread %d ran backend %d", t, job[t].ran);
        ck_assert_msg(job[t].err <= 1e-3, "thread %d: max |dnnl - ref| %g", t, job[t].err);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("matmul_backends");
    TCase *tc = tcase_slow("parity");
    tcase_add_checked_fixture(tc, seed_setup, allow_all);
    tcase_add_loop_test(tc, matmul_backends_match_ref, 0, 6);
    tcase_add_loop_test(tc, outer_backends_match_ref, 0, 6);
    tcase_add_loop_test(tc, matmul_acc_matches_matmul, 0, 6);
    tcase_add_test(tc, matmul_backends_thread_counts);
    tcase_add_test(tc, matmul_backends_thread_independent);
    tcase_add_test(tc, dnnl_f64_runs_on_ref);
    tcase_add_test(tc, matmul_select_and_gradients);
    tcase_add_loop_test(tc, matmul_gradients_add_in_place, 0, 6);
    tcase_add_test(tc, own_vector_products_match_ref);
    tcase_add_test(tc, own_small_transposed_products_match_ref);
    tcase_add_test(tc, dnnl_from_two_threads_at_once);
    suite_add_tcase(s, tc);
    return s;
}
