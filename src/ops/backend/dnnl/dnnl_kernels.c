/* oneDNN 2.6 kernels, f32 (2.6 has no f64 on the CPU): eltwise forward and
 * backward, softmax / log-softmax (any axis) and its backward, layer norm
 * (last axis, no scale/shift) and its backward, and the causal depthwise
 * conv1d as a grouped 2-D convolution. Every primitive goes through the
 * shared cache of dnnl_common.c, keyed by shape, attributes and thread
 * count (a primitive may fix its thread split when created). Small calls
 * run on one thread: a 2-thread oneDNN call costs ≈ 2 µs even on 64
 * elements, a 1-thread one ≈ 0.2 µs.
 *
 * Which ops are here, and which are not (measured, see unary.c): oneDNN's
 * exp maps NaN to +inf and clip maps NaN to the lower bound, and its
 * soft_relu / logsigmoid return values of the wrong sign (|err| ≈ 2e-6) in
 * the tails, and its log is 4% off on denormal inputs (it flushes them), so
 * exp, log, clamp, softplus and log_sigmoid keep REF and OWN only;
 * 2.6 has no erf, sign or rms-norm primitive. The 1-D depthwise convolution
 * falls to oneDNN's reference implementation (30× slower than our loop) in
 * every 1-D layout; as [B, C, 1, T] (nhwc) with Goihw16g weights it runs
 * the jit depthwise kernel. */
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "dnnl_common.h"
#include "dnnl_kernels.h"
#include "own_kernels.h" /* OWN_PAR_MIN: one threading rule for both */

/* Cache key kinds: distinct from other files' kinds (the cache is shared). */
enum {
    KIND_ELTWISE = 0x444b0001,
    KIND_ELTWISE_BWD,
    KIND_SOFTMAX,
    KIND_LOGSOFTMAX,
    KIND_SOFTMAX_BWD,
    KIND_LNORM,
    KIND_LNORM_TRAIN,
    KIND_LNORM_BWD,
    KIND_CONV,
};

/* Work units (elements × a per-op cost) below which one thread is faster:
 * the same rule as the OWN kernels (own_kernels.h). */
enum { COST_CHEAP = 1, COST_NORM = 2, COST_TRANS = 4 };

static void key_init(dnnl_key *k, int kind)
{
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->dtype = MI_F32;
}

/* Runs the primitive for k (building it on a miss) with `ptr`, on one
 * thread when work < OWN_PAR_MIN (times mi_parallel_cost), else on all; -1
 * when oneDNN refuses. */
static int run(dnnl_key *k, dnnl_build_fn build, void *const *ptr, int64_t work)
{
    dnnl_engine_t eng = miras_dnnl_engine();
    if (!eng) return -1;
    int nt = 1;
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    if (!omp_in_parallel() && work >= OWN_PAR_MIN * mi_parallel_cost(NULL)) nt = saved;
    if (nt != saved) omp_set_num_threads(nt);
#endif
    k->dims[DNNL_KEY_DIMS - 1] = nt;
    int rc = miras_dnnl_run(k, build, eng, ptr);
#ifdef _OPENMP
    if (nt != saved) omp_set_num_threads(saved);
#endif
    return rc;
}

/* A dense row-major f32 descriptor of rank nd. */
static int md_plain(dnnl_memory_desc_t *md, int nd, const int64_t *dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_abc};
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, nd, d, dnnl_f32, tags[nd]) == dnnl_success ? 0 : -1;
}

/* e->prim from an op descriptor (hint: the forward pd of a backward one). */
static int prim_create(dnnl_entry *e, const_dnnl_op_desc_t desc, dnnl_engine_t eng,
                       const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, desc, NULL, eng, hint) != dnnl_success) return -1;
    dnnl_status_t st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) e->prim = NULL;
    return st == dnnl_success ? 0 : -1;
}

/* Adds memories for args[0..n) over one descriptor. */
static int memories(dnnl_entry *e, const int *args, int n, const dnnl_memory_desc_t *md)
{
    for (int i = 0; i < n; i++)
        if (miras_dnnl_memory(e, args[i], md) != 0) return -1;
    return 0;
}

/* ================================================================ eltwise
 * key dims: {alg, numel}, f: {alpha, beta}; data as one 1-D array. */
static int build_eltwise(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    dnnl_memory_desc_t md;
    dnnl_eltwise_desc_t d;
    if (md_plain(&md, 1, &k->dims[1]) != 0 ||
        dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, (dnnl_alg_kind_t)k->dims[0],
                                       &md, (float)k->f[0], (float)k->f[1]) != dnnl_success ||
        prim_create(e, &d, eng, NULL) != 0)
        return -1;
    return memories(e, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DST}, 2, &md);
}

/* Backward: dx from (x, dy); the forward pd is the hint. */
static int build_eltwise_bwd(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    dnnl_alg_kind_t alg = (dnnl_alg_kind_t)k->dims[0];
    float alpha = (float)k->f[0], beta = (float)k->f[1];
    dnnl_memory_desc_t md;
    dnnl_eltwise_desc_t fd, bd;
    dnnl_primitive_desc_t hint;
    if (md_plain(&md, 1, &k->dims[1]) != 0 ||
        dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training, alg, &md, alpha, beta) !=
            dnnl_success ||
        dnnl_eltwise_backward_desc_init(&bd, alg, &md, &md, alpha, beta) != dnnl_success ||
        dnnl_primitive_desc_create(&hint, &fd, NULL, eng, NULL) != dnnl_success)
        return -1;
    int rc = prim_create(e, &bd, eng, hint);
    dnnl_primitive_desc_destroy(hint);
    const int args[3] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
    return rc != 0 ? -1 : memories(e, args, 3, &md);
}

/* y = alg(x) over o's elements (n_in = 1), or the backward from (in[0],
 * in[1]) (n_in = 2); REF on refusal. */
static void eltwise_run(const mi_op *op, dnnl_alg_kind_t alg, float alpha, float beta, int cost,
                        mi_tensor *o, mi_tensor *const *in, const mi_attrs *a, int n_in)
{
    dnnl_key k;
    key_init(&k, n_in == 1 ? KIND_ELTWISE : KIND_ELTWISE_BWD);
    k.dims[0] = alg;
    k.dims[1] = o->numel;
    k.f[0] = alpha;
    k.f[1] = beta;
    void *ptr[3] = {in[0]->data, n_in == 1 ? o->data : in[1]->data, o->data};
    if (run(&k, n_in == 1 ? build_eltwise : build_eltwise_bwd, ptr, o->numel * cost) != 0)
        op->kernel[MI_BACKEND_REF][MI_F32](o, in, a);
}

/* ELTWISE(op, alg, alpha, beta, cost, n_in): op_dnnl_f32 as oneDNN's `alg`,
 * the op's formula (alpha, beta may read the attrs `a`). */
#define ELTWISE(name, alg, alpha, beta, cost, n_in)                                \
    void name##_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)    \
    {                                                                              \
        eltwise_run(&mi_op_##name, alg, alpha, beta, cost, o, in, a, n_in);        \
    }

ELTWISE(neg, dnnl_eltwise_linear, -1.0f, 0.0f, COST_CHEAP, 1)  /* −1·x + 0 */
ELTWISE(abs, dnnl_eltwise_abs, 0.0f, 0.0f, COST_CHEAP, 1)
ELTWISE(sqrt, dnnl_eltwise_sqrt, 0.0f, 0.0f, COST_CHEAP, 1)
ELTWISE(square, dnnl_eltwise_square, 0.0f, 0.0f, COST_CHEAP, 1)
ELTWISE(tanh, dnnl_eltwise_tanh, 0.0f, 0.0f, COST_TRANS, 1)
ELTWISE(sigmoid, dnnl_eltwise_logistic, 0.0f, 0.0f, COST_TRANS, 1)
ELTWISE(silu, dnnl_eltwise_swish, 1.0f, 0.0f, COST_TRANS, 1)   /* x·σ(1·x) */
ELTWISE(gelu, dnnl_eltwise_gelu_erf, 0.0f, 0.0f, COST_TRANS, 1)
ELTWISE(relu, dnnl_eltwise_relu, 0.0f, 0.0f, COST_CHEAP, 1)    /* slope 0 */
ELTWISE(add_scalar, dnnl_eltwise_linear, 1.0f, (float)a->scalar, COST_CHEAP, 1)
ELTWISE(mul_scalar, dnnl_eltwise_linear, (float)a->scalar, 0.0f, COST_CHEAP, 1)
ELTWISE(gelu_backward, dnnl_eltwise_gelu_erf, 0.0f, 0.0f, COST_TRANS, 2) /* (x, g) */
ELTWISE(silu_backward, dnnl_eltwise_swish, 1.0f, 0.0f, COST_TRANS, 2)    /* (x, g) */

/* ================================================================ softmax
 * key dims: {outer, n, inner}; data [outer, n, inner], axis 1. */
static void split_axis(const mi_tensor *x, int axis, int64_t *dims)
{
    int ax = axis < 0 ? axis + x->rank : axis;
    dims[0] = mi_shape_numel(ax, x->shape);
    dims[1] = x->shape[ax];
    dims[2] = mi_shape_numel(x->rank - ax - 1, x->shape + ax + 1);
}

static int build_softmax(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    dnnl_memory_desc_t md;
    if (md_plain(&md, 3, k->dims) != 0) return -1;
    if (k->kind == KIND_SOFTMAX) {
        dnnl_softmax_desc_t d;
        if (dnnl_softmax_forward_desc_init(&d, dnnl_forward_inference, &md, 1) != dnnl_success ||
            prim_create(e, &d, eng, NULL) != 0)
            return -1;
    } else {
        dnnl_logsoftmax_desc_t d;
        if (dnnl_logsoftmax_forward_desc_init(&d, dnnl_forward_inference, &md, 1) !=
                dnnl_success ||
            prim_create(e, &d, eng, NULL) != 0)
            return -1;
    }
    return memories(e, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DST}, 2, &md);
}

static int build_softmax_bwd(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    dnnl_memory_desc_t md;
    dnnl_softmax_desc_t fd, bd;
    dnnl_primitive_desc_t hint;
    if (md_plain(&md, 3, k->dims) != 0 ||
        dnnl_softmax_forward_desc_init(&fd, dnnl_forward_training, &md, 1) != dnnl_success ||
        dnnl_softmax_backward_desc_init(&bd, &md, &md, 1) != dnnl_success ||
        dnnl_primitive_desc_create(&hint, &fd, NULL, eng, NULL) != dnnl_success)
        return -1;
    int rc = prim_create(e, &bd, eng, hint);
    dnnl_primitive_desc_destroy(hint);
    const int args[3] = {DNNL_ARG_DST, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
    return rc != 0 ? -1 : memories(e, args, 3, &md);
}

static void softmax_run(const mi_op *op, int kind, mi_tensor *o, mi_tensor *const *in,
                        const mi_attrs *a)
{
    dnnl_key k;
    key_init(&k, kind);
    split_axis(in[0], a->axis, k.dims);
    bool bwd = kind == KIND_SOFTMAX_BWD;
    void *ptr[3] = {in[0]->data, bwd ? in[1]->data : o->data, o->data};
    int64_t work = o->numel * (bwd ? COST_NORM : COST_TRANS);
    if (run(&k, bwd ? build_softmax_bwd : build_softmax, ptr, work) != 0)
        op->kernel[MI_BACKEND_REF][MI_F32](o, in, a);
}

/* y = softmax(x) along attrs.axis: oneDNN's jit softmax; −inf entries give
 * exact zeros, as REF. */
void softmax_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    softmax_run(&mi_op_softmax, KIND_SOFTMAX, o, in, a);
}

/* y = x − logsumexp(x) along attrs.axis. */
void log_softmax_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    softmax_run(&mi_op_log_softmax, KIND_LOGSOFTMAX, o, in, a);
}

/* dx = y ⊙ (g − Σ g ⊙ y) from (y, g). */
void softmax_backward_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    softmax_run(&mi_op_softmax_backward, KIND_SOFTMAX_BWD, o, in, a);
}

/* ================================================================ layer norm
 * key dims: {rows, d}, f: {eps}; data [rows, d], statistics [rows]; no
 * scale or shift (flags 0). */
static int lnorm_descs(const dnnl_key *k, dnnl_memory_desc_t *md, dnnl_memory_desc_t *stat)
{
    return md_plain(md, 2, k->dims) != 0 || md_plain(stat, 1, k->dims) != 0 ? -1 : 0;
}

static int build_lnorm(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    dnnl_memory_desc_t md, stat;
    dnnl_layer_normalization_desc_t d;
    bool train = k->kind == KIND_LNORM_TRAIN;
    if (lnorm_descs(k, &md, &stat) != 0 ||
        dnnl_layer_normalization_forward_desc_init(
            &d, train ? dnnl_forward_training : dnnl_forward_inference, &md, &stat,
            (float)k->f[0], 0) != dnnl_success ||
        prim_create(e, &d, eng, NULL) != 0)
        return -1;
    if (memories(e, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DST}, 2, &md) != 0) return -1;
    return train ? memories(e, (const int[]){DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}, 2, &stat) : 0;
}

static int build_lnorm_bwd(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    dnnl_memory_desc_t md, stat;
    dnnl_layer_normalization_desc_t fd, bd;
    dnnl_primitive_desc_t hint;
    float eps = (float)k->f[0];
    if (lnorm_descs(k, &md, &stat) != 0 ||
        dnnl_layer_normalization_forward_desc_init(&fd, dnnl_forward_training, &md, &stat, eps,
                                                   0) != dnnl_success ||
        dnnl_layer_normalization_backward_desc_init(&bd, dnnl_backward_data, &md, &md, &stat, eps,
                                                    0) != dnnl_success ||
        dnnl_primitive_desc_create(&hint, &fd, NULL, eng, NULL) != dnnl_success)
        return -1;
    int rc = prim_create(e, &bd, eng, hint);
    dnnl_primitive_desc_destroy(hint);
    if (rc != 0 || miras_dnnl_memory(e, DNNL_ARG_SRC, &md) != 0) return -1;
    if (memories(e, (const int[]){DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}, 2, &stat) != 0) return -1;
    return memories(e, (const int[]){DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC}, 2, &md);
}

static void lnorm_key(dnnl_key *k, int kind, const mi_tensor *x, double eps)
{
    key_init(k, kind);
    k->dims[1] = x->shape[x->rank - 1];
    k->dims[0] = x->numel / k->dims[1];
    k->f[0] = eps;
}

/* y = (x − μ)/√(σ² + eps) over the last axis: oneDNN's layer norm. */
void layer_norm_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    dnnl_key k;
    lnorm_key(&k, KIND_LNORM, in[0], a->eps);
    void *ptr[2] = {in[0]->data, o->data};
    if (run(&k, build_lnorm, ptr, o->numel * COST_NORM) != 0)
        mi_op_layer_norm.kernel[MI_BACKEND_REF][MI_F32](o, in, a);
}

/* dx from (x, g): the forward in training mode for the row statistics
 * (its y goes to o, which the backward then overwrites with dx), then the
 * backward-data primitive. */
void layer_norm_backward_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    dnnl_key kf, kb;
    lnorm_key(&kf, KIND_LNORM_TRAIN, in[0], a->eps);
    lnorm_key(&kb, KIND_LNORM_BWD, in[0], a->eps);
    float *stat = malloc(sizeof(float) * 2 * (size_t)kf.dims[0]);
    void *pf[4] = {in[0]->data, o->data, stat, stat ? stat + kf.dims[0] : NULL};
    void *pb[5] = {in[0]->data, pf[2], pf[3], in[1]->data, o->data};
    int64_t work = o->numel * COST_NORM;
    if (!stat || run(&kf, build_lnorm, pf, work) != 0 || run(&kb, build_lnorm_bwd, pb, work) != 0)
        mi_op_layer_norm_backward.kernel[MI_BACKEND_REF][MI_F32](o, in, a);
    free(stat);
}

/* ================================================================ conv1d_causal
 * x [B, T, C], w [C, K] as a grouped (depthwise) 2-D convolution: src
 * [B, C, 1, T] in nhwc (= x's layout), weights [G = C, 1, 1, 1, K] in
 * Goihw16g with AVX-512, Goihw8g with AVX2 (the blocking each ISA's jit
 * kernel reads; packed here, zero past C), padding K − 1 on the left of T.
 * key dims: {B, T, C, K, block}. Only oneDNN's jit kernels are accepted;
 * its reference implementation is slower than REF (and with 16g on AVX2
 * oneDNN offered only that one, so every call fell back to REF after a
 * failed primitive creation). */
static int64_t conv_block(void) { return miras_dnnl_avx512() ? 16 : 8; }

static int build_conv(const dnnl_key *k, dnnl_entry *e, void *eng)
{
    int64_t B = k->dims[0], T = k->dims[1], C = k->dims[2], K = k->dims[3];
    dnnl_format_tag_t wtag = k->dims[4] == 16 ? dnnl_Goihw16g : dnnl_Goihw8g;
    dnnl_memory_desc_t src, wei;
    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t pd;
    const char *impl = NULL;
    if (dnnl_memory_desc_init_by_tag(&src, 4, (dnnl_dims_t){B, C, 1, T}, dnnl_f32, dnnl_nhwc) !=
            dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wei, 5, (dnnl_dims_t){C, 1, 1, 1, K}, dnnl_f32, wtag) !=
            dnnl_success ||
        dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct,
                                           &src, &wei, NULL, &src, (dnnl_dims_t){1, 1},
                                           (dnnl_dims_t){0, K - 1},
                                           (dnnl_dims_t){0, 0}) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL) != dnnl_success)
        return -1;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_status_t st = impl && strncmp(impl, "ref", 3) != 0 ? dnnl_primitive_create(&e->prim, pd)
                                                             : dnnl_unimplemented;
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        e->prim = NULL;
        return -1;
    }
    if (miras_dnnl_memory(e, DNNL_ARG_SRC, &src) != 0) return -1;
    if (miras_dnnl_memory(e, DNNL_ARG_WEIGHTS, &wei) != 0) return -1;
    return miras_dnnl_memory(e, DNNL_ARG_DST, &src);
}

/* w [C, K] → Goihw<G>g: blocks of G channels, within a block tap-major. */
static float *pack_weights(const float *w, int64_t C, int64_t K, int64_t G)
{
    int64_t nblk = (C + G - 1) / G;
    float *p = calloc((size_t)(nblk * K * G), sizeof(float));
    if (!p) return NULL;
    for (int64_t c = 0; c < C; c++)
        for (int64_t j = 0; j < K; j++) p[((c / G) * K + j) * G + c % G] = w[c * K + j];
    return p;
}

/* y[b,t,c] = Σ_j w[c,j]·x[b, t−K+1+j, c]: oneDNN's jit depthwise kernel
 * (30–40× REF's loop on [16, 256, 128], K = 4). */
void conv1d_causal_dnnl_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    const mi_tensor *x = in[0], *w = in[1];
    dnnl_key k;
    key_init(&k, KIND_CONV);
    memcpy(k.dims, x->shape, 3 * sizeof(int64_t));
    k.dims[3] = w->shape[1];
    k.dims[4] = conv_block();
    float *wp = pack_weights(w->data, x->shape[2], w->shape[1], k.dims[4]);
    void *ptr[3] = {x->data, wp, o->data};
    if (!wp || run(&k, build_conv, ptr, o->numel * k.dims[3]) != 0)
        mi_op_conv1d_causal.kernel[MI_BACKEND_REF][MI_F32](o, in, a);
    free(wp);
}
