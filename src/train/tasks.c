/* The tasks' batch streams (train.h): a run's task opened from its settings,
 * and its batches, drawn by example index from counter-based streams. */
#include "train_internal.h"

#include <string.h>

static bool needs_text(const mi_run_config *rc)
{
    return rc->task == MI_TASK_LM || (rc->task == MI_TASK_NIAH && !strcmp(rc->niah, "text"));
}

/* The NIAH length must hold needle and question: one example tells. */
static int niah_fits(const mi_run_task *t)
{
    mi_scope *tmp = mi_scope_new("niah-check");
    if (!tmp) return mi_error_set("niah: out of memory"), -1;
    mi_scope_enter(tmp);
    mi_niah_sample s;
    int rc = mi_niah_example(&t->niah, t->rc->seed, MI_SPLIT_TRAIN, 0, &s);
    mi_scope_leave();
    mi_scope_free(tmp);
    return rc;
}

mi_niah_config train_niah_config(const mi_run_config *rc)
{
    mi_niah_config c = mi_niah_config_default();
    c.length = rc->seq_len;
    c.kind = !strcmp(rc->niah, "text") ? MI_NIAH_TEXT
           : !strcmp(rc->niah, "passkey") ? MI_NIAH_PASSKEY : MI_NIAH_WORD;
    c.uuid = !strcmp(rc->niah, "uuid");
    return c;
}

int mi_run_task_open(mi_run_task *t, const mi_run_config *rc)
{
    *t = (mi_run_task){.rc = rc};
    if (needs_text(rc)) {
        if (!(t->text = mi_text_load(rc->data))) return -1;
        if (t->text->valid_begin < rc->seq_len + 1 ||
            t->text->size - t->text->valid_begin < rc->seq_len + 1)
            return train_fail("'%s' (%lld bytes) is too short for windows of %lld bytes: both "
                              "splits (90%% / 10%%) must hold seq-len + 1 bytes", rc->data,
                              (long long)t->text->size, (long long)rc->seq_len), -2;
    }
    int check = 0;
    switch (rc->task) {
    case MI_TASK_LM: break;
    case MI_TASK_MQAR:
        t->mqar = mi_mqar_config_default();
        t->mqar.vocab = rc->lm.vocab, t->mqar.seq_len = rc->seq_len, t->mqar.pairs = rc->pairs;
        check = mi_mqar_check(&t->mqar);
        break;
    case MI_TASK_CAPACITY:
        t->capacity = (mi_capacity_config){.vocab = rc->lm.vocab, .pairs = rc->pairs};
        check = mi_capacity_check(&t->capacity);
        break;
    case MI_TASK_NIAH:
        t->niah = train_niah_config(rc);
        if (t->text) t->niah.text = t->text->data, t->niah.text_size = t->text->size;
        check = mi_niah_check(&t->niah);
        if (check == 0) check = niah_fits(t);
        break;
    default: return train_fail("task %d: no such task", (int)rc->task), -2;
    }
    return check == 0 ? 0 : -2;
}

/* NIAH: inputs = prompt ++ answer ++ terminator, padded with '\n' to the
 * prompt + mi_niah_answer_bytes; the targets are the answer's bytes and the
 * terminator, each on the position before it, so that the model learns
 * where the answer ends. */
static int niah_batch(const mi_run_task *t, mi_split split, int64_t first, int64_t B,
                      mi_tensor **in, mi_tensor **tg)
{
    int64_t L = t->niah.length, A = mi_niah_answer_bytes(&t->niah), T = L + A;
    if (A < 0) return -1;
    *in = mi_full(MI_I64, MI_SHAPE(B, T), '\n');
    *tg = mi_full(MI_I64, MI_SHAPE(B, T), MI_IGNORE_INDEX);
    if (!*in || !*tg) return -1;
    for (int64_t b = 0; b < B; b++) {
        mi_niah_sample s;
        if (mi_niah_example(&t->niah, t->rc->seed, split, first + b, &s) != 0) return -1;
        int64_t *x = (int64_t *)(*in)->data + b * T, *y = (int64_t *)(*tg)->data + b * T;
        memcpy(x, s.tokens->data, sizeof(int64_t) * (size_t)L);
        int64_t m = (int64_t)strlen(s.answer);
        for (int64_t j = 0; j <= m; j++) {
            int64_t byte = j < m ? (uint8_t)s.answer[j] : MI_NIAH_TERMINATOR;
            x[L + j] = byte;
            y[L - 1 + j] = byte;
        }
    }
    return 0;
}

int mi_run_task_batch(const mi_run_task *t, mi_split split, int64_t first, int64_t batch,
                      mi_tensor **inputs, mi_tensor **targets)
{
    const mi_run_config *rc = t->rc;
    *inputs = *targets = NULL;
    switch (rc->task) {
    case MI_TASK_LM:
        return mi_text_batch(t->text, rc->seq_len, rc->seed, split, first, batch, inputs, targets);
    case MI_TASK_MQAR:
        return mi_mqar_batch(&t->mqar, rc->seed, split, first, batch, inputs, targets);
    case MI_TASK_CAPACITY:
        return mi_capacity_batch(&t->capacity, rc->seed, split, first, batch, inputs, targets);
    case MI_TASK_NIAH: return niah_batch(t, split, first, batch, inputs, targets);
    }
    return train_fail("task %d: no such task", (int)rc->task);
}
