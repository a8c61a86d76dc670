/* Scalar maths for the OWN kernels (files built with -O3 -ffast-math
 * -march=native), written to vectorise: no branches, only selects; integer
 * views of floats for the exponent and for NaN tests. Written for fast
 * math, too: no compensated sums (it may reassociate them) and no division
 * by a value that can be infinite (vectorised division is rcp + Newton
 * there, NaN for an infinite divisor). Private to ops/. */
#ifndef MIRAS_OWN_MATH_H
#define MIRAS_OWN_MATH_H

#include <math.h>
#include <stdint.h>

typedef union fbits {
    float f;
    int32_t i;
    uint32_t u;
} fbits;

static inline int f_isnan(float x)
{
    fbits b = {.f = x};
    return (b.u & 0x7fffffffu) > 0x7f800000u;
}

#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693145751953125f      /* ln 2 to 16 bits: n·LN2_HI is exact */
#define LN2_LO 1.42860682030941723e-6f

/* Below this, f_exp_lo (and own_vexp_lo without AVX-512) gives 0 */
#define F_EXP_MIN (-87.33654f)

/* P(r) of e^r = 1 + r + r²·P(r) (Cephes' expf coefficients), for a float
 * and for a vector of them (own_vexp_lo) alike */
#define F_EXP_P(r)                                                                         \
    (((((1.9875691500e-4f * (r) + 1.3981999507e-3f) * (r) + 8.3334519073e-3f) * (r) +    \
       4.1665795894e-2f) * (r) + 1.6666665459e-1f) * (r) + 5.0000001201e-1f)

/* e^x = 2^n · e^r, x = n ln2 + r, |r| ≤ ln2/2, e^r = 1 + r + r²·P(r) with
 * Cephes' expf coefficients (≤ 2 ulp); 2^n is added to e^r's exponent
 * field. For x < ln FLT_MAX (n = 128 only with e^r < 1 there); below
 * ln FLT_MIN the result is 0 (REF gives denormals there, < 1.2e-38 away),
 * so e^−inf = 0 exactly. NaN is the caller's business (f_exp below). */
static inline float f_exp_lo(float x)
{
    float xc = x < F_EXP_MIN ? F_EXP_MIN : x;
    float n = rintf(xc * LOG2E);
    float r = (xc - n * LN2_HI) - n * LN2_LO;
    fbits b = {.f = F_EXP_P(r) * (r * r) + r + 1.0f};
    b.u += (uint32_t)(int32_t)n << 23; /* two's complement add to the exponent */
    return x < F_EXP_MIN ? 0.0f : b.f;
}

/* e^x for every x: inf above ln FLT_MAX (there n = 128 and e^r ≥ 1 would
 * give the exponent field 255, hence the cap), NaN stays NaN. */
static inline float f_exp(float x)
{
    float y = f_exp_lo(x < 88.72283f ? x : 88.0f);
    y = x < 88.72283f ? y : INFINITY;
    return f_isnan(x) ? x : y;
}

#endif
