/* mlp_scan's OWN f32 kernels: mlp_scan_impl.h's loops (the math is in
 * mlp_scan.c's top comment), compiled like the other OWN files with -O3
 * -ffast-math -march=native, so the loops over the hidden units run in
 * AVX-512 and erf in glibc's vector math, and Memora's softmax rows (an exp
 * per weight and token) in own_math.h's polynomial, in place; REF builds the same loops for the baseline
 * ISA with libm's scalar functions. Yaad's bias runs the REF kernels: its
 * exact sign (sharpness ∞) is outside fast math's finite-only rules, and
 * with tanh its f32 result came out 5× further from f64 than REF's (1.6e-4
 * against 3.3e-5 relative on the op's examples). */
#include "own_math.h"
#define MS_EXPV(x) f_exp_lo(x)
#include "mlp_scan_defs.h"
#include "own_mlp_scan.h"

#define MS_KERNEL static
#define MS_T float
#define MS(x) fast_##x##_f32
#include "mlp_scan_rules_impl.h"
#include "mlp_scan_impl.h"

void own_mlp_scan_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (a->index & MI_MLP_SCAN_YAAD) mlp_scan_f32(o, in, a);
    else fast_mlp_scan_f32(o, in, a);
}

void own_mlp_scan_backward_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    if (a->index & MI_MLP_SCAN_YAAD) mlp_scan_backward_f32(o, in, a);
    else fast_mlp_scan_backward_f32(o, in, a);
}
