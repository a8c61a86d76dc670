/* The project's own vectorised / OpenMP kernels (MI_BACKEND_OWN), f32 only:
 * broadcasting binary ops, reductions, scans and the MIRAS helpers. Private
 * to ops/; the family files put these in their descriptors with OWN_F32.
 *
 * own_kernels.c holds the elementwise and scan kernels, own_reduce.c the
 * reductions and the row-wise MIRAS helpers; both are built with -O3
 * -ffast-math -march=native (see src/meson.build). Determinism is stated at
 * the top of own_kernels.c. */
#ifndef MIRAS_OWN_KERNELS_H
#define MIRAS_OWN_KERNELS_H

#include "internal.h"
#include "own_math.h"
#ifdef __AVX__
#include <immintrin.h>
#endif

/* The descriptors, for falling back to an op's REF kernel. */
#define MI_OP(name) extern const mi_op mi_op_##name;
#include "op_list.h"
#undef MI_OP

/* OWN_F32(name, sel) in a descriptor: the OWN f32 kernel own_<name>_f32 and
 * the op's size rule. */
#define OWN_F32(name, sel) .kernel[MI_BACKEND_OWN][MI_F32] = own_##name##_f32, .select = sel

/* Runs op's REF f32 kernel: every OWN kernel's answer to a case it does not
 * take (an unusual broadcast or reduction layout). */
static inline void own_ref(const mi_op *op, mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    op->kernel[MI_BACKEND_REF][MI_F32](o, in, a);
}

/* ---------------------------------------------------------------- vectors
 * One register of floats with GCC's vector extensions, for loops that must
 * keep state in registers; unaligned loads and stores. OWN_W lanes follow
 * the target these files are built for: 16 (one zmm) with AVX-512, else 8
 * (one ymm). A 16-float vector on an AVX2 target is two ymm halves: twice
 * the registers per accumulator (an 8 × 8 tile of them spills out of the 16
 * ymm) and horizontal sums that go through memory. Only for the OWN files
 * (built with -march=<cpu>), which define OWN_VECTORS. */
#ifdef OWN_VECTORS
#ifdef __AVX512F__
#define OWN_W 16
#else
#define OWN_W 8
#endif
typedef float vecf __attribute__((vector_size(4 * OWN_W)));
typedef uint32_t vecu __attribute__((vector_size(4 * OWN_W)));
typedef int32_t veci __attribute__((vector_size(4 * OWN_W)));

/* always_inline: also into own_kernels.c's EXACT section, whose other
 * optimisation options would otherwise keep GCC from inlining them */
static inline __attribute__((always_inline)) vecf vld(const float *p)
{
    vecf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline __attribute__((always_inline)) void vst(float *p, vecf v)
{
    memcpy(p, &v, sizeof v);
}

/* The lane-wise maximum, a > b ? a : b (b where either is NaN): the
 * instruction's own rule, one instruction where the mask and the blend of
 * GCC's vectors took two (C has no ?: on vectors). */
static inline __attribute__((always_inline)) vecf own_vmax(vecf a, vecf b)
{
#if defined(__AVX512F__)
    return (vecf)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
    return (vecf)_mm256_max_ps((__m256)a, (__m256)b);
#else
    veci m = a > b;
    return (vecf)(((veci)a & m) | ((veci)b & ~m));
#endif
}

/* f_exp_lo (own_math.h) on a vector, with the same polynomial and the same
 * contract (x below ln FLT_MAX; NaN the caller's business). With AVX-512, n = rint(x log₂e)
 * in one rounding instruction and 2^n applied by vscalefps, which also
 * takes e^x below ln FLT_MIN to REF's denormals and to 0 (x is raised to
 * −110 first, where e^x is 0 in floats, so that −∞ and huge negatives do
 * not reach the reduction; a quarter fewer instructions than the
 * exponent-field addition: Memora's kl rows, an exponential per weight and
 * token, went 12 % faster). Else n by adding 1.5·2²³, whose float keeps n
 * in its lowest mantissa bits (read through an integer view, so fast math
 * cannot fold the addition away), and 2^n added to the exponent field, 0
 * below ln FLT_MIN. */
static inline __attribute__((always_inline)) vecf own_vexp_lo(vecf x)
{
#ifdef __AVX512F__
    x = own_vmax((vecf){0} - 110.0f, x);
    vecf n = (vecf)_mm512_roundscale_ps((__m512)(x * LOG2E), _MM_FROUND_TO_NEAREST_INT |
                                                                 _MM_FROUND_NO_EXC);
    vecf r = (x - n * LN2_HI) - n * LN2_LO;
    vecf e = F_EXP_P(r) * (r * r) + r + 1.0f;
    return (vecf)_mm512_scalef_ps((__m512)e, (__m512)n);
#else
    const float round = 12582912.0f;
    veci low = x < F_EXP_MIN;
    vecf xc = (vecf)(((veci)x & ~low) | ((veci)((vecf){0} + F_EXP_MIN) & low));
    veci n = (veci)(xc * LOG2E + round) - (veci)((vecf){0} + round);
    vecf nf = __builtin_convertvector(n, vecf);
    vecf r = (xc - nf * LN2_HI) - nf * LN2_LO;
    vecf e = F_EXP_P(r) * (r * r) + r + 1.0f;
    return (vecf)(((veci)e + (n << 23)) & ~low);
#endif
}

/* OWN_W horizontal sums (or maxima) at once: out[l] = Σ_i v[l][i] for l <
 * OWN_W, as log₂ OWN_W rounds of folds of the vectors in pairs (OWN_W − 1
 * folds in all), not a reduction of OWN_W lanes per vector. A fold with
 * block s: lanes in even blocks of s take a's lane and its neighbour s
 * above, lanes in odd blocks b's and its neighbour s below (the shuffle
 * lanes are constants: s is a literal at every use). v is overwritten. */
#define OWN_FOLD_X(l, s) (((l) / (s)) % 2 == 0 ? (l) : OWN_W + (l))
#define OWN_FOLD_Y(l, s) (((l) / (s)) % 2 == 0 ? (l) + (s) : OWN_W + (l) - (s))
#define OWN_IDX8(F, s) F(0, s), F(1, s), F(2, s), F(3, s), F(4, s), F(5, s), F(6, s), F(7, s)
#if OWN_W == 16
#define OWN_IDX(F, s) OWN_IDX8(F, s), F(8, s), F(9, s), F(10, s), F(11, s), F(12, s), F(13, s), \
                      F(14, s), F(15, s)
#else
#define OWN_IDX(F, s) OWN_IDX8(F, s)
#endif
/* __builtin_shufflevector (GCC ≥ 12 and clang) takes the lanes as constants */
#define OWN_FOLD(v, s, op)                                                                  \
    for (int i_ = 0; i_ < (s); i_++)                                                        \
        v[i_] = op(__builtin_shufflevector(v[i_], v[i_ + (s)], OWN_IDX(OWN_FOLD_X, s)),     \
                   __builtin_shufflevector(v[i_], v[i_ + (s)], OWN_IDX(OWN_FOLD_Y, s)))
#define OWN_ADD(a, b) ((a) + (b))
#define OWN_MAX(a, b) own_vmax(a, b)
#if OWN_W == 16
#define OWN_FOLDS(v, op) OWN_FOLD(v, 8, op); OWN_FOLD(v, 4, op); OWN_FOLD(v, 2, op); OWN_FOLD(v, 1, op)
#else
#define OWN_FOLDS(v, op) OWN_FOLD(v, 4, op); OWN_FOLD(v, 2, op); OWN_FOLD(v, 1, op)
#endif
static inline __attribute__((always_inline)) vecf own_lane_sums(vecf v[OWN_W])
{
    OWN_FOLDS(v, OWN_ADD);
    return v[0];
}
static inline __attribute__((always_inline)) vecf own_lane_maxes(vecf v[OWN_W])
{
    OWN_FOLDS(v, OWN_MAX);
    return v[0];
}
#endif

/* ---------------------------------------------------------------- threads
 * own_parallel(n, min_work, align, fn, ctx) calls fn(ctx, i0, i1) on disjoint
 * ranges covering [0, n): on one thread when work < min_work (or inside a
 * parallel region), else one static range per OpenMP thread, boundaries
 * rounded to multiples of align. Kernels only ever split independent
 * outputs (or fixed, shape-derived blocks) this way, so results never
 * depend on the thread count. */
typedef void (*own_range_fn)(const void *ctx, int64_t i0, int64_t i1);
void own_parallel(int64_t n, int64_t work, int64_t min_work, int64_t align, own_range_fn fn,
                  const void *ctx);
/* Elements of work below which one thread is faster: a fork/join of two
 * threads costs ≈ 1.1 µs back to back (more when the other core is busy),
 * and an f32 add streams ≈ 15–20 elements/ns from L2, so a 64K-element add
 * (3.4 µs on 1 thread, 2.1 µs on 2) is about where the second thread pays.
 * own_parallel multiplies it by what a region costs here against that
 * (mi_parallel_cost: a sleeping thread's wake-up with passive waiting). */
#define OWN_PAR_MIN ((int64_t)1 << 16)
/* The work of a pass over n floats a stream: n, or 4n where one operand of
 * n floats is larger than this machine's L2 (sysconf). An f32 add on one
 * thread (AMD EPYC family 26, L2 1 MiB) streams 15–17 elements/ns with
 * 64–256 KiB operands, 9.4 with 2 MiB ones kept warm, and about 3 in a
 * training step, where they arrive from the op before (perf: the residual
 * add of [16, 256, 128] at ~0.3 ns an element). */
int64_t own_stream_work(int64_t n);

/* ---------------------------------------------------------------- size rules
 * OWN above a measured size, REF below; when OWN is not allowed the first
 * available of DNNL, BLAS, REF. Numbers next to the thresholds in
 * own_kernels.c. */
mi_backend own_select_binary(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                             unsigned available);
mi_backend own_select_reduce(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                             unsigned available);
mi_backend own_select_scan(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                           unsigned available);
mi_backend own_select_eltwise(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                              unsigned available);
mi_backend own_select_where(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                            unsigned available);
mi_backend own_select_rows(mi_tensor *const *in, int n, const mi_attrs *a, const mi_tensor *out,
                           unsigned available);

/* ---------------------------------------------------------------- kernels */
#define OWN_DECL(name) void own_##name##_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a);
/* own_kernels.c: binary, where, comparisons (exact: same bits as REF) */
OWN_DECL(add) OWN_DECL(sub) OWN_DECL(mul) OWN_DECL(div) OWN_DECL(maximum) OWN_DECL(minimum)
OWN_DECL(where) OWN_DECL(gt) OWN_DECL(ge) OWN_DECL(lt) OWN_DECL(le) OWN_DECL(eq)
/* own_kernels.c: scans (exact) and elementwise MIRAS helpers */
OWN_DECL(cumsum) OWN_DECL(cumprod) OWN_DECL(linear_scan) OWN_DECL(linear_scan_from)
OWN_DECL(soft_threshold) OWN_DECL(smooth_abs) OWN_DECL(smooth_sign)
/* own_reduce.c: reductions and the row-wise MIRAS helpers */
OWN_DECL(sum) OWN_DECL(mean) OWN_DECL(max) OWN_DECL(logsumexp) OWN_DECL(norm) OWN_DECL(sum_to)
OWN_DECL(lq_normalize) OWN_DECL(sphere_retract)
#undef OWN_DECL

/* The instruction set the OWN kernels were compiled for ("avx512f", "avx2+fma", ...). */
const char *own_isa_name(void);
/* mi_fma_peak's measurement (own_kernels.c). */
double own_fma_peak_gflops(int threads);

#endif
