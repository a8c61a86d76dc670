/* The fused Adam step's coefficients, shared by adam_step.c (REF) and
 * own_update.c (OWN). Private to ops/. */
#ifndef MIRAS_ADAM_STEP_H
#define MIRAS_ADAM_STEP_H

#include "internal.h"

enum { ADAM_NO_DECAY, ADAM_DECOUPLED, ADAM_L2 };

/* One call's scalars, in double (each loop casts them to its dtype). */
typedef struct adam_coeffs {
    double keep, l2, beta1, beta2, one_b1, one_b2, inv_sqrt_bc2, eps, step_size;
    bool warm;
    int decay;
} adam_coeffs;

/* The OWN loop, split over the threads by element. */
void own_adam_f32(const adam_coeffs *c, float *p, float *m, float *v, const float *g, int64_t n);

#endif
