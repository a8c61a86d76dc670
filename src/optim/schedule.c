/* Learning-rate schedules: constant, and linear warmup followed by a cosine
 * decay to a floor (as nanoGPT and most LLM recipes):
 *
 *   t < W:        lr · (t + 1) / W
 *   W ≤ t ≤ T:    min_lr + ½ (lr − min_lr) (1 + cos(π (t − W) / (T − W)))
 *   t > T:        min_lr
 *
 * The optimizer keeps its groups' base lr and takes the schedule as a scale
 * (mi_optim_apply_schedule), so groups with different lrs follow one shape,
 * as torch's LambdaLR does. */
#include "internal.h"

int mi_schedule_check(const mi_schedule *s)
{
    if (!s) {
        mi_error_set("schedule: NULL schedule");
        return -1;
    }
    if (!isfinite(s->lr) || s->lr < 0) {
        mi_error_set("schedule: lr must be ≥ 0, got %g", s->lr);
        return -1;
    }
    if (s->kind == MI_SCHED_CONSTANT) return 0;
    if (s->kind != MI_SCHED_WARMUP_COSINE) {
        mi_error_set("schedule: unknown kind %d", (int)s->kind);
        return -1;
    }
    if (!isfinite(s->min_lr) || s->min_lr < 0 || s->min_lr > s->lr) {
        mi_error_set("schedule: min_lr must be in [0, lr = %g], got %g", s->lr, s->min_lr);
        return -1;
    }
    if (s->warmup < 0 || s->total <= s->warmup) {
        mi_error_set("schedule: need 0 ≤ warmup < total, got warmup %lld, total %lld",
                     (long long)s->warmup, (long long)s->total);
        return -1;
    }
    return 0;
}

double mi_schedule_lr(const mi_schedule *s, int64_t t)
{
    if (mi_schedule_check(s) != 0) return NAN;
    if (t < 0) {
        mi_error_set("schedule: step must be ≥ 0, got %lld", (long long)t);
        return NAN;
    }
    if (s->kind == MI_SCHED_CONSTANT) return s->lr;
    if (t < s->warmup) return s->lr * (double)(t + 1) / (double)s->warmup;
    if (t > s->total) return s->min_lr;
    double ratio = (double)(t - s->warmup) / (double)(s->total - s->warmup);
    return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(M_PI * ratio));
}

int mi_optim_apply_schedule(mi_optim *o, const mi_schedule *s)
{
    if (!o) {
        mi_error_set("schedule: NULL optimizer");
        return -1;
    }
    double lr = mi_schedule_lr(s, mi_optim_steps(o));
    if (isnan(lr)) return -1;
    if (s->lr == 0) return mi_optim_set_lr_scale(o, 0);
    return mi_optim_set_lr_scale(o, lr / s->lr);
}
