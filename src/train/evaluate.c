/* Evaluation (train.h): mean loss and recall accuracy over held-out batches,
 * whole or in equal shares (a data-parallel rank's). */
#include "train_internal.h"

#include <math.h>

int mi_evaluate_share(const mi_lm *lm, const mi_run_task *t, int64_t batches, mi_scope *scratch,
                      int part, int parts, double sums[2])
{
    const mi_run_config *rc = t->rc;
    if (parts < 1 || part < 0 || part >= parts || batches < 0 || rc->accum < 1 ||
        rc->batch / (rc->accum * parts) < 1)
        return train_fail("evaluate: no share %d of %d in batches of %lld (accum %lld)", part,
                          parts, (long long)rc->batch, (long long)rc->accum);
    mi_scope *s = scratch ? scratch : mi_scope_new("eval");
    if (!s) return mi_error_set("evaluate: out of memory"), -1;
    bool was = mi_set_grad_enabled(false);
    double sum_loss = 0, sum_acc = 0;
    int status = 0;
    int64_t micro = rc->batch / (rc->accum * parts), share = batches * rc->accum;
    for (int64_t b = part * share; b < (part + 1) * share && status == 0; b++) {
        mi_scope_enter(s);
        mi_tensor *in, *tg;
        if (mi_run_task_batch(t, MI_SPLIT_VALID, b * micro, micro, &in, &tg) != 0) status = -1;
        mi_tensor *logits = status ? NULL : mi_lm_forward(lm, in);
        if (logits) {
            int64_t N = tg->numel, V = lm->config.vocab;
            mi_tensor *l = mi_cross_entropy(mi_reshape(logits, MI_SHAPE(N, V)),
                                            mi_reshape(tg, MI_SHAPE(N)), MI_LM_IGNORE);
            if (l) sum_loss += mi_item(l);
            else status = -1;
            if (status == 0 && mi_task_has_accuracy(rc->task)) {
                double a = mi_task_accuracy(logits, tg);
                if (a < 0) status = -1;
                sum_acc += a;
            }
        } else status = -1;
        mi_scope_leave();
        mi_scope_reset(s);
    }
    mi_set_grad_enabled(was);
    if (!scratch) mi_scope_free(s);
    sums[0] = sum_loss, sums[1] = sum_acc;
    return status;
}

int mi_evaluate(const mi_lm *lm, const mi_run_task *t, int64_t batches, mi_scope *scratch,
                double *loss, double *acc)
{
    double sums[2] = {0, 0};
    int status = mi_evaluate_share(lm, t, batches, scratch, 0, 1, sums);
    double n = (double)(batches * t->rc->accum);
    *loss = sums[0] / n;
    *acc = mi_task_has_accuracy(t->rc->task) ? sums[1] / n : NAN;
    return status;
}
