/* Adam's and AdamW's step as one pass over a parameter and its two moments,
 * in place and unrecorded: what optim/adam.c records as eleven ops (each a
 * pass, each a temporary), for mi_optim_step, which records nothing. The
 * loop (adam_step_impl.h) keeps the ops' order and the parameter's dtype,
 * the scalars cast to it as mul_scalar and add_scalar cast theirs; REF here
 * (f32 and f64), OWN in own_update.c (f32, vectorised, the elements split
 * over the threads: each element its own, so any thread count gives the
 * same bits). */
#include "adam_step.h"

#define AS_T float
#define AS_SQRT sqrtf
#define AS_NAME(x) x##_f32
#include "adam_step_impl.h"
#undef AS_T
#undef AS_SQRT
#undef AS_NAME
#define AS_T double
#define AS_SQRT sqrt
#define AS_NAME(x) x##_f64
#include "adam_step_impl.h"
#undef AS_T
#undef AS_SQRT
#undef AS_NAME

int mi_adam_update(mi_tensor *p, mi_tensor *m, mi_tensor *v, const mi_tensor *g,
                   const mi_adam_step *s)
{
    if (!p || !m || !v || !g || !s)
        return mi_error_set("adam_update: NULL parameter, moment, gradient or step"), -1;
    const mi_tensor *t[4] = {p, m, v, g};
    for (int i = 0; i < 4; i++)
        if (!mi_dtype_is_float(t[i]->dtype) || t[i]->dtype != p->dtype ||
            !mi_same_shape(t[i], p)) {
            char a[96], b[96];
            return mi_error_set("adam_update: p %s %s, m, v and g must all be its dtype and "
                                "shape, got %s %s",
                                mi_dtype_name(p->dtype), mi_shape_str(a, sizeof a, p->rank, p->shape),
                                mi_dtype_name(t[i]->dtype),
                                mi_shape_str(b, sizeof b, t[i]->rank, t[i]->shape)),
                   -1;
        }
    double bc1 = 1.0 - pow(s->beta1, (double)s->step), bc2 = 1.0 - pow(s->beta2, (double)s->step);
    adam_coeffs c = {.keep = 1.0 - s->lr * s->weight_decay, .l2 = s->weight_decay,
                     .beta1 = s->beta1, .beta2 = s->beta2, .one_b1 = 1.0 - s->beta1,
                     .one_b2 = 1.0 - s->beta2, .inv_sqrt_bc2 = 1.0 / sqrt(bc2), .eps = s->eps,
                     .step_size = s->lr / bc1, .warm = s->warm,
                     .decay = s->weight_decay == 0 ? ADAM_NO_DECAY
                              : s->decoupled       ? ADAM_DECOUPLED
                                                   : ADAM_L2};
    if (p->dtype == MI_F64) {
        adam_range_f64(&c, p->data, m->data, v->data, g->data, 0, p->numel);
        return 0;
    }
    if (mi_backends_allowed() >> MI_BACKEND_OWN & 1u)
        own_adam_f32(&c, p->data, m->data, v->data, g->data, p->numel);
    else
        adam_range_f32(&c, p->data, m->data, v->data, g->data, 0, p->numel);
    return 0;
}
