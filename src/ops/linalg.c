/* Linear algebra: batched matmul with transpose flags, and the outer
 * product. Batch dims (all but the last two of matmul's operands, all but
 * the last of outer's) broadcast by NumPy's rules; the vjps return
 * gradients at the broadcast batch shape and the engine sums them back.
 *
 * The kernels here are the plain-C reference (loops ordered so that the
 * inner loop runs over contiguous memory); the OpenBLAS (blas.c) and
 * oneDNN (dnnl_matmul.c) kernels sit beside them in the descriptors, and
 * each op's select rule picks one per call by shape class. */
#include "blas.h"
#include "dnnl_common.h"
#include "own_kernels.h"
#include "own_unary.h"

/* Broadcasts two batch shapes without touching the error state. */
static bool batch_broadcast(int ra, const int64_t *sa, int rb, const int64_t *sb, int *r,
                            int64_t *s)
{
    *r = ra > rb ? ra : rb;
    for (int i = 0; i < *r; i++) {
        int ia = ra - *r + i, ib = rb - *r + i;
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        s[i] = da == 1 ? db : da;
    }
    return true;
}

static inline void batch_next(int64_t *idx, const int64_t *shape, int nb, const int64_t *sa,
                              const int64_t *sb, int64_t *oa, int64_t *ob)
{
    for (int d = nb - 1; d >= 0; d--) {
        *oa += sa[d];
        *ob += sb[d];
        if (++idx[d] < shape[d]) return;
        *oa -= sa[d] * shape[d];
        *ob -= sb[d] * shape[d];
        idx[d] = 0;
    }
}

/* ---------------------------------------------------------------- matmul
 * C[..., i, j] = Σ_k op(A)[..., i, k] · op(B)[..., k, j],  op = ᵀ when trans_a / trans_b.
 * For C = A·B:  dA = g·Bᵀ,  dB = Aᵀ·g; with the flags:
 *   dA = ta ? op(B)·gᵀ = matmul_t(B, g, tb, 1) : g·op(B)ᵀ = matmul_t(g, B, 0, !tb)
 *   dB = tb ? gᵀ·op(A) = matmul_t(g, A, 1, ta) : op(A)ᵀ·g = matmul_t(A, g, !ta, 0) */
#define MM_T float
#define MM_NAME(x) x##_f32
#include "matmul_impl.h"
#undef MM_T
#undef MM_NAME
#define MM_T double
#define MM_NAME(x) x##_f64
#include "matmul_impl.h"
#undef MM_T
#undef MM_NAME

static int matmul_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt, int *rank,
                        int64_t *shape)
{
    const mi_tensor *a = in[0], *b = in[1];
    char sa[96], sb[96];
    const char *flags = at->trans_a && at->trans_b ? " (trans_a, trans_b)"
                        : at->trans_a              ? " (trans_a)"
                        : at->trans_b              ? " (trans_b)"
                                                   : "";
    if (require_float("matmul", in, 0) != 0 || require_float("matmul", in, 1) != 0) return -1;
    for (int i = 0; i < 2; i++)
        if (in[i]->rank < 2) {
            mi_error_set("matmul: input %d must have rank 2 to %d, got %s", i, MI_MAX_RANK,
                         mi_shape_str(sa, sizeof sa, in[i]->rank, in[i]->shape));
            return -1;
        }
    int ra = a->rank, rb = b->rank;
    int64_t m = at->trans_a ? a->shape[ra - 1] : a->shape[ra - 2];
    int64_t ka = at->trans_a ? a->shape[ra - 2] : a->shape[ra - 1];
    int64_t kb = at->trans_b ? b->shape[rb - 1] : b->shape[rb - 2];
    int64_t nn = at->trans_b ? b->shape[rb - 2] : b->shape[rb - 1];
    /* the shapes formatted only for a message (a per-token op's shape check
     * is on the hot path) */
    if (ka != kb) {
        mi_error_set("matmul: inner dims differ: %s x %s%s",
                     mi_shape_str(sa, sizeof sa, a->rank, a->shape),
                     mi_shape_str(sb, sizeof sb, b->rank, b->shape), flags);
        return -1;
    }
    int r;
    if (!batch_broadcast(ra - 2, a->shape, rb - 2, b->shape, &r, shape)) {
        mi_error_set("matmul: batch dims do not broadcast: %s x %s",
                     mi_shape_str(sa, sizeof sa, a->rank, a->shape),
                     mi_shape_str(sb, sizeof sb, b->rank, b->shape));
        return -1;
    }
    shape[r] = m;
    shape[r + 1] = nn;
    *rank = r + 2;
    *dt = a->dtype;
    return 0;
}

/* The gradient of a shared b (rank 2: a layer's weight) against a batched,
 * untransposed a [..., M, K]: Σ over the batch of aᵀ g is one product with
 * the batch folded into its inner dimension, a as [rows, K] and g as
 * [rows, N], rather than a batch of products summed afterwards (a GEMM of
 * inner dimension B·T instead of B GEMMs of T and a [B, K, N] temporary).
 * False, a and g untouched, where it does not apply (a broadcast over g's
 * batch, a transposed, b batched). */
static bool fold_into_inner(mi_tensor **a, mi_tensor **g, bool ta, const mi_tensor *b)
{
    const mi_tensor *x = *a, *y = *g;
    if (ta || b->rank != 2 || x->rank <= 2 || y->rank != x->rank) return false;
    int64_t K = x->shape[x->rank - 1], N = y->shape[y->rank - 1];
    if (K < 1 || N < 1 || x->numel / K != y->numel / N) return false;
    int64_t rows = x->numel / K;
    mi_tensor *a2 = mi_reshape(*a, 2, (int64_t[]){rows, K});
    mi_tensor *g2 = a2 ? mi_reshape(*g, 2, (int64_t[]){rows, N}) : NULL;
    if (!g2) return false;
    *a = a2, *g = g2;
    return true;
}

static mi_tensor *matmul_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1];
    bool ta = n->attrs.trans_a, tb = n->attrs.trans_b;
    if (i == 0) return ta ? mi_matmul_t(b, g, tb, true) : mi_matmul_t(g, b, false, !tb);
    fold_into_inner(&a, &g, ta, b);
    return tb ? mi_matmul_t(g, a, true, ta) : mi_matmul_t(a, g, !ta, false);
}

/* Plain; both transposed with a broadcast batch; trans_a against a
 * batched b; trans_b with a size-1 batch dim; a batched against a shared
 * b, plain and transposed. */
static int ex_matmul(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = ex_normal(r, MI_SHAPE(3, 4));
        in[1] = ex_normal(r, MI_SHAPE(4, 5));
        break;
    case 1: /* [2,1,3,2]ᵀ · [3,4,3]ᵀ → [2,3,2,4] */
        in[0] = ex_normal(r, MI_SHAPE(2, 1, 3, 2));
        in[1] = ex_normal(r, MI_SHAPE(3, 4, 3));
        a->trans_a = a->trans_b = true;
        break;
    case 2: /* [3,2]ᵀ · [2,3,3] → [2,2,3] */
        in[0] = ex_normal(r, MI_SHAPE(3, 2));
        in[1] = ex_normal(r, MI_SHAPE(2, 3, 3));
        a->trans_a = true;
        break;
    case 3: /* [1,5,3] · [2,2,3]ᵀ → [2,5,2] */
        in[0] = ex_normal(r, MI_SHAPE(1, 5, 3));
        in[1] = ex_normal(r, MI_SHAPE(2, 2, 3));
        a->trans_b = true;
        break;
    case 4: /* [2,3,4,3] · [3,2]: a shared b's gradient with the batch folded (fold_into_inner) */
        in[0] = ex_normal(r, MI_SHAPE(2, 3, 4, 3));
        in[1] = ex_normal(r, MI_SHAPE(3, 2));
        break;
    case 5: /* [3,4,3] · [2,3]ᵀ, folded likewise */
        in[0] = ex_normal(r, MI_SHAPE(3, 4, 3));
        in[1] = ex_normal(r, MI_SHAPE(2, 3));
        a->trans_b = true;
        break;
    default: return 0;
    }
    return 2;
}

/* Backend by shape class, from mi_matmul timings on this machine (2 cores,
 * AMD Zen 5 with AVX-512; OpenBLAS 0.3.21 at 1 thread under our OpenMP,
 * oneDNN 2.6.3; µs per call, recording off; mnk = M·N·K of one product,
 * total = mnk · batch entries, after folding a shared B into M):
 *  - the reference loop beats an OpenBLAS call while mnk ≤ 64 (f32 4³ 0.34
 *    vs 0.38, 5³ ties; 64×4³ 4.4 vs 4.9; f64 alike) and a oneDNN call while
 *    total < 1024 (10³ 0.65 vs 0.76, 12³ ties; 64×2³ 1.7 vs 2.5; 16×4³
 *    1.41 vs 1.27);
 *  - OpenBLAS beats oneDNN on one product below 32³ (24³ 0.72 vs 0.89, 32³
 *    ties at 1.1, 40³ 1.7 vs 1.4) and on a batch below 4096 in total (4×8³
 *    0.81 vs 1.00; 4×16³ 1.23 vs 1.09; 16×8³ 1.9 vs 1.4);
 *  - above that oneDNN wins every shape measured, one product or batched,
 *    transposed or not, by 1.5–2.5× over OpenBLAS split across both cores
 *    (256³ 74 vs 163; 512³ 626 vs 1184; 64×32³ 11 vs 30; 16×64×32×64 10.6
 *    vs 24.7; 4096×384·384×128 915 vs 1813): this core's AVX-512 brgemm
 *    against OpenBLAS 0.3.21's older kernels.
 * The batched tiny products of chunked memory updates (titans at chunk 8:
 * 64 × 8×16·16×64 and its transposes; µs per call, 1 thread, AMD EPYC
 * family 25 with AVX-512, and the same host as an AVX2 machine:
 * ONEDNN_MAX_CPU_ISA=AVX2, OPENBLAS_CORETYPE=Haswell, the OWN kernels built
 * for x86-64-v3; shared and noisy, best of 14 runs):
 *  - not transposed with M ≤ 8, OWN (own_small_gemm.c, B streamed once,
 *    the 8 × OWN_W tile in registers) is the fastest or ties on both ISAs
 *    (64 × 8×64·64×16: AVX-512 own 10.9, oneDNN 12.7, OpenBLAS 13.4; AVX2
 *    13.2, 26.0, 21.2; 64 × 8×8·8×16: 4.5, 6.4, 4.6 and 4.9, 30.7, 8.7);
 *    transposed, OWN's per-output horizontal sums or strided reads of A
 *    lose to the libraries, so those stay with them;
 *  - with AVX2, oneDNN 2.6's f32 matmul is gemm:jit, not brgemm: on
 *    batches of products up to mnk = 8·64·64 a loop of OpenBLAS calls beat
 *    it by 1.2–3.7× (64 × 8×64·64×16ᵀ 27.3 vs 31.3; 64 × (16×8)ᵀ·8×64 32.8
 *    vs 46.7; 64 × 8×16·16×8ᵀ 8.4 vs 31.5; 64 × (8×8)ᵀ·8×64 18.4 vs 68.5)
 *    and lost above (64 × 8×128·128×128 737 vs 367).
 * Batched matrix-vector products (N = 1) and rank-one products (K = 1), the
 * per-token products of an MLP memory run one token at a time (mi_scan's
 * body) and their vjps, go to OWN whatever the flags: one pass over the
 * weight-sized operand or result (CPU µs per call, 1 thread, AVX-512, best
 * of 15 × 100, loaded host: 16 × 128×32·32×1 OWN 4.2, oneDNN 21.7; 16 ×
 * (128×32)ᵀ·128×1 3.7 vs 24.4; 16 × 128×1·(32×1)ᵀ 9.6 vs 11.8). */
static mi_backend matmul_select(mi_tensor *const *in, int n, const mi_attrs *a,
                                const mi_tensor *out, unsigned available)
{
    (void)n;
    gemm_geom g;
    gemm_geom_matmul(&g, out, in, a);
    double mnk = (double)g.M * (double)g.N * (double)g.K, total = mnk * (double)g.nbatch;
    bool blas = available >> MI_BACKEND_BLAS & 1u, dnnl = available >> MI_BACKEND_DNNL & 1u;
    if (available >> MI_BACKEND_OWN & 1u && ((!g.ta && !g.tb) || g.N == 1 || g.K == 1) &&
        own_matmul_fits(&g) && g.nbatch > 1 && total >= 1024)
        return MI_BACKEND_OWN;
    if (blas && dnnl) {
        if (!miras_dnnl_avx512() && g.nbatch > 1 && mnk <= 32768) dnnl = false;
        else if (g.nbatch == 1 ? mnk >= 32768 : total >= 4096) blas = false;
        else dnnl = false;
    }
    if (dnnl) return total < 1024 ? MI_BACKEND_REF : MI_BACKEND_DNNL;
    if (blas) return mnk <= 64 ? MI_BACKEND_REF : MI_BACKEND_BLAS;
    return MI_BACKEND_REF;
}

/* 2·M·N·K per product (a multiply and an add per term), times the batch. */
static uint64_t matmul_flops(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out)
{
    (void)n;
    gemm_geom g;
    gemm_geom_matmul(&g, out, in, a);
    return 2u * (uint64_t)g.M * (uint64_t)g.N * (uint64_t)g.K * (uint64_t)g.nbatch;
}

/* acc += matmul_vjp's product, in place, when the product is acc's shape
 * (no batch to sum over): one GEMM with β = 1, where the vjp would write the
 * product to a tensor of its own and the engine then add it (a weight's
 * gradient from each token's W u, a read of the carried state). The OWN
 * kernel for the small products it takes, else matmul_acc's (C = acc). */
static int matmul_vjp_into(const mi_node *n, int i, mi_tensor *g, mi_tensor *acc)
{
    mi_tensor *a = n->inputs[0], *b = n->inputs[1], *in[4];
    bool ta = n->attrs.trans_a, tb = n->attrs.trans_b;
    mi_attrs at = {.scalar = 1};
    if (i == 1) fold_into_inner(&a, &g, ta, b);
    if (i == 0 && ta) in[0] = b, in[1] = g, at.trans_a = tb, at.trans_b = true;
    else if (i == 0) in[0] = g, in[1] = b, at.trans_b = !tb;
    else if (tb) in[0] = g, in[1] = a, at.trans_a = true, at.trans_b = ta;
    else in[0] = a, in[1] = g, at.trans_a = !ta;
    in[2] = acc;
    in[3] = NULL; /* the kernels' γ = 1 */
    int rank;
    int64_t shape[MI_MAX_RANK];
    mi_dtype dt;
    if (matmul_shape(in, 2, &at, &dt, &rank, shape) != 0) return -1;
    if (rank != acc->rank || memcmp(shape, acc->shape, sizeof(int64_t) * (size_t)rank) != 0) {
        mi_tensor *v = mi_sum_to(matmul_vjp(n, i, g), acc->rank, acc->shape);
        if (!v) return -1;
        mi_op_add.kernel[MI_BACKEND_REF][acc->dtype == MI_F64](acc, (mi_tensor *[]){acc, v}, NULL);
        return 0;
    }
    op_flops_add(matmul_flops(in, 2, &at, acc));
    if (acc->dtype == MI_F32 && (mi_backends_allowed() >> MI_BACKEND_OWN & 1u) &&
        own_matmul_into_f32(acc, in, &at))
        return 0;
    mi_kernel_fn k = mi_kernel_choose(&mi_op_matmul_acc, in, 4, &at, acc);
    if (!k) return mi_error_set("matmul: no kernel adds a gradient into %s", mi_dtype_name(dt)), -1;
    k(acc, in, &at);
    return 0;
}

const mi_op mi_op_matmul = {.name = "matmul", .formula = "C = op(A) op(B), op = T if trans",
                            .arity = 2, .shape = matmul_shape,
                            .kernel = {[MI_BACKEND_REF] = {matmul_f32, matmul_f64},
                                       [MI_BACKEND_BLAS] = {matmul_blas_f32, matmul_blas_f64},
                                       [MI_BACKEND_DNNL] = {matmul_dnnl_f32, NULL},
                                       [MI_BACKEND_OWN] = {own_matmul_f32, NULL}},
                            .vjp = matmul_vjp, .vjp_into = matmul_vjp_into,
                            .examples = ex_matmul, .select = matmul_select,
                            .flops = matmul_flops};

mi_tensor *mi_matmul_t(mi_tensor *a, mi_tensor *b, bool trans_a, bool trans_b)
{
    mi_attrs at = {.trans_a = trans_a, .trans_b = trans_b};
    return RUN(&mi_op_matmul, &at, a, b);
}
mi_tensor *mi_matmul(mi_tensor *a, mi_tensor *b) { return mi_matmul_t(a, b, false, false); }

/* ---------------------------------------------------------------- outer
 * y[..., i, j] = a[..., i] · b[..., j];
 * da[..., i] = Σ_j g[..., i, j] b[..., j] = (g · b[..., :, None])[..., i, 0]
 * db[..., j] = Σ_i g[..., i, j] a[..., i] = (gᵀ · a[..., :, None])[..., j, 0] */
/* The kernel is outer in matmul_impl.h, per dtype. */

static int outer_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt, int *rank,
                       int64_t *shape)
{
    const mi_tensor *a = in[0], *b = in[1];
    if (require_float("outer", in, 0) != 0 || require_float("outer", in, 1) != 0) return -1;
    int r = 0;
    bool low = a->rank < 1 || b->rank < 1,
         apart = !low && !batch_broadcast(a->rank - 1, a->shape, b->rank - 1, b->shape, &r, shape);
    if (low || apart || r + 2 > MI_MAX_RANK) {
        /* the shapes formatted only for a message (a per-token op's shape
         * check is on the hot path) */
        char sa[96], sb[96];
        mi_shape_str(sa, sizeof sa, a->rank, a->shape);
        mi_shape_str(sb, sizeof sb, b->rank, b->shape);
        if (low) mi_error_set("outer: inputs must have rank >= 1, got %s x %s", sa, sb);
        else if (apart) mi_error_set("outer: batch dims do not broadcast: %s x %s", sa, sb);
        else mi_error_set("outer: result rank %d exceeds %d: %s x %s", r + 2, MI_MAX_RANK, sa, sb);
        return -1;
    }
    shape[r] = a->shape[a->rank - 1];
    shape[r + 1] = b->shape[b->rank - 1];
    *rank = r + 2;
    *dt = a->dtype;
    return 0;
}

/* t [..., n] as a column [..., n, 1]. */
static mi_tensor *as_column(mi_tensor *t)
{
    int64_t s[MI_MAX_RANK];
    if (!t) return NULL;
    if (t->rank >= MI_MAX_RANK) {
        mi_error_set("outer: vjp needs rank < %d, got %d", MI_MAX_RANK, t->rank);
        return NULL;
    }
    memcpy(s, t->shape, sizeof(int64_t) * (size_t)t->rank);
    s[t->rank] = 1;
    return mi_reshape(t, t->rank + 1, s);
}

static mi_tensor *outer_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *c = mi_matmul_t(g, as_column(n->inputs[1 - i]), i == 1, false);
    return c ? mi_reshape(c, c->rank - 1, c->shape) : NULL;
}

/* Vectors; a batch against a size-1 batch; batch dims [2,1] x [4]. */
static int ex_outer(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    (void)a;
    switch (v) {
    case 0:
        in[0] = ex_normal(r, MI_SHAPE(3));
        in[1] = ex_normal(r, MI_SHAPE(4));
        break;
    case 1:
        in[0] = ex_normal(r, MI_SHAPE(2, 3));
        in[1] = ex_normal(r, MI_SHAPE(1, 4));
        break;
    case 2:
        in[0] = ex_normal(r, MI_SHAPE(2, 1, 3));
        in[1] = ex_normal(r, MI_SHAPE(4, 2));
        break;
    default: return 0;
    }
    return 2;
}

/* outer is a rank-1 GEMM (K = 1) whose cost is writing M·N outputs, so
 * the choice goes by output size (µs per mi_outer call, f32, as for
 * matmul above): the reference loop wins below 8192 outputs or 512 per
 * batch entry (64² 0.52 vs 0.65 oneDNN; 64×16² 2.1 vs 2.3; 256×8² 2.9 vs
 * 6.5); oneDNN above (96² 0.84 vs 0.87; 256² 2.5 vs 4.3; 16×32² 1.3 vs
 * 1.8; 512×32² 20 vs 49; 724² 22 vs 51); OpenBLAS split over both cores
 * only for single products of 2^20 outputs and up (1024² 52 vs 97 oneDNN,
 * 91 reference), and in f64 from 2^19 (724² 56 vs 78; 512² 57 vs 42). In
 * f32 the project's own loop (matmul's K = 1 kernel) takes oneDNN's sizes:
 * 16 × 128 ⊗ 32 12.6 vs 16.4 (CPU µs, 1 thread, AVX-512, best of 15 × 100,
 * loaded host). */
static mi_backend outer_select(mi_tensor *const *in, int n, const mi_attrs *a,
                               const mi_tensor *out, unsigned available)
{
    (void)n;
    (void)a;
    gemm_geom g;
    gemm_geom_outer(&g, out, in);
    double per = (double)g.M * (double)g.N;
    bool blas = available >> MI_BACKEND_BLAS & 1u, dnnl = available >> MI_BACKEND_DNNL & 1u;
    if (out->numel < 8192 || per < 512) return MI_BACKEND_REF;
    if (blas && per >= (dnnl ? 1048576 : 524288)) return MI_BACKEND_BLAS;
    if (available >> MI_BACKEND_OWN & 1u) return MI_BACKEND_OWN;
    return dnnl ? MI_BACKEND_DNNL : MI_BACKEND_REF;
}

/* One multiply per output, M·N per product, times the batch: a product
 * with K = 1 has no sums. */
static uint64_t outer_flops(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out)
{
    (void)in;
    (void)n;
    (void)a;
    return (uint64_t)out->numel;
}

const mi_op mi_op_outer = {.name = "outer", .formula = "y[..., i, j] = a[..., i] b[..., j]",
                           .arity = 2, .shape = outer_shape,
                           .kernel = {[MI_BACKEND_REF] = {outer_f32, outer_f64},
                                      [MI_BACKEND_BLAS] = {outer_blas_f32, outer_blas_f64},
                                      [MI_BACKEND_DNNL] = {outer_dnnl_f32, NULL},
                                      [MI_BACKEND_OWN] = {own_outer_f32, NULL}},
                           .vjp = outer_vjp, .examples = ex_outer, .select = outer_select,
                           .flops = outer_flops};
mi_tensor *mi_outer(mi_tensor *a, mi_tensor *b) { return RUN(&mi_op_outer, NULL, a, b); }

/* ---------------------------------------------------------------- tri_solve
 * X = L⁻¹ B for the unit lower-triangular L = I + StrictLower(l): only l's
 * entries below the diagonal are read (its diagonal and upper part are
 * ignored and get zero gradient). With trans_a, X = L⁻ᵀ B (the unit upper
 * solve Lᵀ X = B). l [..., n, n], B [..., n, m]; batch dims broadcast.
 *   forward:  X_i = B_i − Σ_{j<i} l_ij X_j      (trans_a: X_i = B_i − Σ_{j>i} l_ji X_j)
 * vjp (g = ∂L/∂X; the UT transform's solve in "Parallelizing Linear
 * Transformers with the Delta Rule over Sequence Length", §3):
 *   L X = B   ⇒  ∂B = L⁻ᵀ g = tri_solve(l, g, !trans),   ∂l = −StrictLower(∂B Xᵀ)
 *   Lᵀ X = B  ⇒  ∂B = L⁻¹ g = tri_solve(l, g, trans),     ∂l = −StrictLower(X ∂Bᵀ)
 * REF below; OWN f32 in backend/cpu/own_tri_solve.c (the batch over the
 * threads, the columns in vectors). */
#define TS_T float
#define TS_NAME(x) x##_f32
#include "tri_solve_impl.h"
#undef TS_T
#undef TS_NAME
#define TS_T double
#define TS_NAME(x) x##_f64
#include "tri_solve_impl.h"
#undef TS_T
#undef TS_NAME

static int tri_solve_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                           int *rank, int64_t *shape)
{
    (void)n;
    const mi_tensor *l = in[0], *b = in[1];
    char sl[96], sb[96];
    if (require_float("tri_solve", in, 0) != 0 || require_float("tri_solve", in, 1) != 0)
        return -1;
    mi_shape_str(sl, sizeof sl, l->rank, l->shape);
    mi_shape_str(sb, sizeof sb, b->rank, b->shape);
    if (l->dtype != b->dtype) {
        mi_error_set("tri_solve: L %s and B %s differ in dtype", sl, sb);
        return -1;
    }
    if (l->rank < 2 || b->rank < 2 || l->shape[l->rank - 1] != l->shape[l->rank - 2] ||
        l->shape[l->rank - 1] != b->shape[b->rank - 2]) {
        mi_error_set("tri_solve: L must be [..., n, n] and B [..., n, m], got %s and %s", sl, sb);
        return -1;
    }
    int r;
    if (!batch_broadcast(l->rank - 2, l->shape, b->rank - 2, b->shape, &r, shape)) {
        mi_error_set("tri_solve: batch dims do not broadcast: %s and %s", sl, sb);
        return -1;
    }
    shape[r] = b->shape[b->rank - 2];
    shape[r + 1] = b->shape[b->rank - 1];
    *rank = r + 2;
    *dt = b->dtype;
    return 0;
}

/* The strictly lower part of x [..., n, n]: x ⊙ mask, mask_ij = [i > j]. */
static mi_tensor *strict_lower(mi_tensor *x)
{
    if (!x) return NULL;
    int64_t n = x->shape[x->rank - 1];
    mi_tensor *mask = mi_zeros(x->dtype, 2, (int64_t[]){n, n});
    if (!mask) return NULL;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) {
            if (x->dtype == MI_F64) ((double *)mask->data)[i * n + j] = 1;
            else ((float *)mask->data)[i * n + j] = 1;
        }
    return mi_mul(x, mask);
}

static mi_tensor *tri_solve_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *l = n->inputs[0], *x = n->output;
    bool tr = n->attrs.trans_a;
    mi_tensor *gb = mi_tri_solve(l, g, !tr);
    if (i == 1) return gb;
    return mi_neg(strict_lower(tr ? mi_matmul_t(x, gb, false, true)
                                  : mi_matmul_t(gb, x, false, true)));
}

/* l well away from singular (|l_ij| ≤ 0.6): plain; the transposed solve
 * with a broadcast L; batched; n = 1; and rows wide enough for the OWN
 * kernel's blocks of columns and their remainder (83 = 4·16 + 16 + 3 and
 * 2·32 + 2·8 + 3), either way. */
static int ex_tri_solve(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0:
        in[0] = ex_uniform(r, MI_SHAPE(4, 4), -0.6, 0.6);
        in[1] = ex_normal(r, MI_SHAPE(4, 3));
        break;
    case 1: /* [5,5] with [2,5,2], trans_a */
        in[0] = ex_uniform(r, MI_SHAPE(5, 5), -0.6, 0.6);
        in[1] = ex_normal(r, MI_SHAPE(2, 5, 2));
        a->trans_a = true;
        break;
    case 2:
        in[0] = ex_uniform(r, MI_SHAPE(2, 3, 3, 3), -0.6, 0.6);
        in[1] = ex_normal(r, MI_SHAPE(2, 1, 3, 4));
        break;
    case 3:
        in[0] = ex_uniform(r, MI_SHAPE(2, 1, 1), -0.6, 0.6);
        in[1] = ex_normal(r, MI_SHAPE(2, 1, 3));
        a->trans_a = true;
        break;
    case 4:
        in[0] = ex_uniform(r, MI_SHAPE(2, 6, 6), -0.6, 0.6);
        in[1] = ex_normal(r, MI_SHAPE(2, 6, 83));
        break;
    case 5:
        in[0] = ex_uniform(r, MI_SHAPE(6, 6), -0.6, 0.6);
        in[1] = ex_normal(r, MI_SHAPE(2, 6, 83));
        a->trans_a = true;
        break;
    default: return 0;
    }
    return 2;
}

const mi_op mi_op_tri_solve = {.name = "tri_solve",
                               .formula = "X = (I + StrictLower(L))^-1 B (trans_a: ^-T)",
                               .arity = 2, .shape = tri_solve_shape,
                               .kernel = {[MI_BACKEND_REF] = {tri_solve_f32, tri_solve_f64},
                                          [MI_BACKEND_OWN] = {own_tri_solve_f32, NULL}},
                               .vjp = tri_solve_vjp, .examples = ex_tri_solve};

mi_tensor *mi_tri_solve(mi_tensor *l, mi_tensor *b, bool trans)
{
    mi_attrs at = {.trans_a = trans};
    return RUN(&mi_op_tri_solve, &at, l, b);
}

/* ---------------------------------------------------------------- matmul_acc
 * Y = γ ⊙ C + s · op(A) op(B), C and γ broadcast to the product's shape (γ's
 * last axis 1: a gate per row): α W − η Gᵀ U, a memory's step with its
 * retention, as one GEMM into α W (β = 1) where α ⊙ W − matmul would write
 * the product and α W to tensors of their own first; the kernels form α W
 * block by block, each just before the block's product, so that the
 * product reads it back from the cache. in = (A, B, C, γ), s = attrs.scalar.
 * dC = γ ⊙ dY, dγ = dY ⊙ C (both un-broadcast by the engine); dA, dB are
 * matmul's times s. */
/* The kernel is matmul_acc in matmul_impl.h, per dtype. */

static int matmul_acc_shape(mi_tensor *const *in, int n, const mi_attrs *at, mi_dtype *dt,
                            int *rank, int64_t *shape)
{
    if (matmul_shape(in, 2, at, dt, rank, shape) != 0) {
        mi_error_prefix("matmul_acc");
        return -1;
    }
    char sy[96];
    mi_shape_str(sy, sizeof sy, *rank, shape);
    for (int i = 2; i < n; i++) {
        const mi_tensor *c = in[i];
        const char *what = i == 2 ? "C" : "the gate";
        char sc[96];
        mi_shape_str(sc, sizeof sc, c->rank, c->shape);
        if (c->dtype != *dt) {
            mi_error_set("matmul_acc: %s %s is %s, the product %s", what, sc,
                         mi_dtype_name(c->dtype), mi_dtype_name(*dt));
            return -1;
        }
        bool fits = c->rank <= *rank && (i == 2 || (c->rank > 0 && c->shape[c->rank - 1] == 1));
        for (int d = 0; fits && d < c->rank; d++) {
            int64_t cd = c->shape[c->rank - 1 - d], yd = shape[*rank - 1 - d];
            fits = cd == yd || cd == 1;
        }
        if (!fits) {
            mi_error_set("matmul_acc: %s %s does not broadcast to the product's shape %s%s",
                         what, sc, sy, i == 3 ? " with its last axis 1" : "");
            return -1;
        }
    }
    return 0;
}

/* The gate of mi_matmul_acc, a constant 1. */
static bool gate_is_one(const mi_tensor *gate)
{
    return gate->numel == 1 && !gate->requires_grad && mi_get(gate, 0) == 1;
}

static mi_tensor *matmul_acc_vjp(const mi_node *n, int i, mi_tensor *g)
{
    mi_tensor *c = n->inputs[2], *gate = n->inputs[3];
    if (i == 2) return gate_is_one(gate) ? g : mi_mul(g, gate);
    if (i == 3) return mi_mul(g, c);
    mi_tensor *v = matmul_vjp(n, i, g);
    return n->attrs.scalar == 1 ? v : mi_mul_scalar(v, n->attrs.scalar);
}

/* Without recording and with C the product's shape, dC and dγ in one loop
 * over dY and C (scale_grads, as scale_add's). */
static int matmul_acc_vjp_all(const mi_node *n, mi_tensor *g, const bool *need,
                              mi_tensor **grads)
{
    mi_tensor *c = n->inputs[2], *gate = n->inputs[3];
    for (int i = 0; i < 2; i++)
        if (need[i] && !(grads[i] = matmul_acc_vjp(n, i, g))) return -1;
    if (need[3] && !mi_grad_enabled() && mi_same_shape(c, g)) {
        bool own = c->dtype == MI_F32 && (mi_backends_allowed() >> MI_BACKEND_OWN & 1u);
        return scale_grads(c, gate, g, own, need[2] ? &grads[2] : NULL, &grads[3]);
    }
    for (int i = 2; i < 4; i++)
        if (need[i] && !(grads[i] = matmul_acc_vjp(n, i, g))) return -1;
    return 0;
}

/* W [3,4] − Aᵀ B with a batch of 2; a broadcast [1,4] C with both
 * transposed; a batched C and s = 0.5. */
static int ex_matmul_acc(mi_rng *r, int v, mi_tensor **in, mi_attrs *a)
{
    switch (v) {
    case 0: /* W [3, 4] − Aᵀ B with a batch of 2, a gate per batch entry */
        in[0] = ex_normal(r, MI_SHAPE(2, 2, 3));
        in[1] = ex_normal(r, MI_SHAPE(2, 2, 4));
        in[2] = ex_normal(r, MI_SHAPE(3, 4));
        in[3] = ex_normal(r, MI_SHAPE(2, 1, 1));
        a->trans_a = true;
        a->scalar = -1;
        break;
    case 1: /* a broadcast [1, 4] C, both transposed, a gate per row */
        in[0] = ex_normal(r, MI_SHAPE(5, 3));
        in[1] = ex_normal(r, MI_SHAPE(4, 5));
        in[2] = ex_normal(r, MI_SHAPE(1, 4));
        in[3] = ex_normal(r, MI_SHAPE(3, 1));
        a->trans_a = a->trans_b = true;
        a->scalar = 2;
        break;
    case 2: /* a batched C, one gate for all */
        in[0] = ex_normal(r, MI_SHAPE(2, 3, 2));
        in[1] = ex_normal(r, MI_SHAPE(2, 2));
        in[2] = ex_normal(r, MI_SHAPE(2, 3, 2));
        in[3] = ex_normal(r, MI_SHAPE(1));
        a->scalar = 0.5;
        break;
    case 3: /* a gate per row of every batch entry, A shared */
        in[0] = ex_normal(r, MI_SHAPE(4, 3));
        in[1] = ex_normal(r, MI_SHAPE(2, 4, 2));
        in[2] = ex_normal(r, MI_SHAPE(2, 3, 2));
        in[3] = ex_normal(r, MI_SHAPE(2, 3, 1));
        a->trans_a = true;
        a->scalar = -1;
        break;
    default: return 0;
    }
    return 4;
}

/* The product's 2·M·N·K per batch entry, as matmul (the scaled add into C
 * is the GEMM's β = 1 and not counted apart). */
static uint64_t matmul_acc_flops(mi_tensor *const *in, int n, const mi_attrs *a,
                                 const mi_tensor *out)
{
    return matmul_flops(in, n, a, out);
}

/* oneDNN's sgemm from M·N·K = 32³ a product up, OpenBLAS below (µs, one
 * thread, AMD EPYC family 26 with AVX-512; held to AVX2 in brackets):
 * 8³ 0.08 vs 0.24 (0.12, 0.32); 16×16·16×64 0.57, 0.62; 32³ 0.88, 0.57;
 * 64³ 5.7, 3.0 (5.9, 5.3); (4096×128)ᵀ·4096×128 1510, 775 (1479, 1480):
 * OpenBLAS 0.3.21 runs its Haswell kernels on every CPU. */
static mi_backend matmul_acc_select(mi_tensor *const *in, int n, const mi_attrs *a,
                                    const mi_tensor *out, unsigned available)
{
    (void)n;
    gemm_geom g;
    gemm_geom_matmul(&g, out, in, a);
    double mnk = (double)g.M * (double)g.N * (double)g.K;
    bool blas = available >> MI_BACKEND_BLAS & 1u, dnnl = available >> MI_BACKEND_DNNL & 1u;
    if (dnnl && (mnk >= 32768 || !blas)) return MI_BACKEND_DNNL;
    return blas ? MI_BACKEND_BLAS : MI_BACKEND_REF;
}

const mi_op mi_op_matmul_acc = {.name = "matmul_acc", .formula = "Y = g * C + s op(A) op(B)",
                                .arity = 4, .shape = matmul_acc_shape,
                                .kernel = {[MI_BACKEND_REF] = {matmul_acc_f32, matmul_acc_f64},
                                           [MI_BACKEND_BLAS] = {matmul_acc_blas_f32,
                                                                matmul_acc_blas_f64},
                                           [MI_BACKEND_DNNL] = {matmul_acc_dnnl_f32, NULL}},
                                .vjp = matmul_acc_vjp, .vjp_all = matmul_acc_vjp_all,
                                .examples = ex_matmul_acc,
                                .select = matmul_acc_select, .flops = matmul_acc_flops};

mi_tensor *mi_matmul_acc(mi_tensor *c, mi_tensor *a, mi_tensor *b, bool trans_a, bool trans_b,
                         double s)
{
    mi_tensor *one = c ? mi_ones(c->dtype, MI_SHAPE(1)) : NULL;
    return mi_matmul_acc_gated(c, one, a, b, trans_a, trans_b, s);
}

mi_tensor *mi_matmul_acc_gated(mi_tensor *c, mi_tensor *gate, mi_tensor *a, mi_tensor *b,
                               bool trans_a, bool trans_b, double s)
{
    mi_attrs at = {.trans_a = trans_a, .trans_b = trans_b, .scalar = s};
    return RUN(&mi_op_matmul_acc, &at, a, b, c, gate);
}
