/* train_lm: a whole training program on the library's training API
 * (miras.h; train/train.h): a text file → a small gated-DeltaNet language
 * model → AdamW with gradient clipping and a warmup + cosine schedule →
 * validation → a checkpoint (miras-eval and miras-sample read it, and
 * miras-train --resume continues it) → a few sampled bytes from the model
 * read back from that checkpoint.
 *
 *   train_lm [TEXT [STEPS [CHECKPOINT]]]
 *            (tests/data/shakespeare_64k.txt, 200, train_lm.safetensors)
 *
 * Your own copy builds with  cc train_lm.c $(pkg-config --cflags --libs miras) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "miras.h"

static int fail(const char *what)
{
    fprintf(stderr, "train_lm: %s: %s\n", what, mi_error());
    return 1;
}

static void put_byte(int64_t row, int64_t token, void *ctx)
{
    (void)row, (void)ctx;
    putchar((int)token);
}

int main(int argc, char **argv)
{
    const char *text = argc > 1 ? argv[1] : "tests/data/shakespeare_64k.txt";
    int64_t steps = argc > 2 ? atoll(argv[2]) : 200;
    const char *path = argc > 3 ? argv[3] : "train_lm.safetensors";
    if (steps < 2) return fprintf(stderr, "usage: train_lm [TEXT [STEPS ≥ 2 [CHECKPOINT]]]\n"), 2;

    /* The run: bytes in windows of 64, 8 windows a step; AdamW (no weight
     * decay on gains), global-norm clip 1, 10% warmup then cosine to 0.1·lr.
     * A checkpoint stores these settings with the model. */
    mi_run_config rc = mi_run_config_default(MI_TASK_LM);
    snprintf(rc.data, sizeof rc.data, "%s", text);
    snprintf(rc.lm.mixer, sizeof rc.lm.mixer, "gated-deltanet");
    rc.lm.d_model = 32, rc.lm.layers = 2, rc.lm.heads = 2;
    rc.seq_len = 64, rc.batch = 8, rc.steps = steps, rc.warmup = steps / 10;
    rc.hp.lr = 3e-3, rc.clip = 1.0, rc.eval_batches = 4;

    mi_scope *run = mi_scope_new("run"), *work = mi_scope_new("step");
    if (!run || !work) return fail("scopes");
    mi_scope_enter(run); /* the text, the model and the optimizer's state */
    mi_run_task task;
    if (mi_run_task_open(&task, &rc) != 0) return fail(text);
    rc.data_size = task.text->size; /* the text's fingerprint: a resumed run checks it */
    rc.data_hash = mi_fnv1a(task.text->data, task.text->size);
    mi_lm lm;
    if (mi_lm_init(&lm, &rc.lm, MI_F32, rc.seed, run) != 0) return fail("model");
    mi_optim *opt = mi_run_optimizer(&lm, &rc, NULL);
    mi_schedule schedule = mi_run_config_schedule(&rc);
    if (!opt || mi_schedule_check(&schedule) != 0) return fail("optimizer");
    printf("train_lm: %s, %lld parameters, %lld steps on %s\n", rc.lm.mixer,
           (long long)mi_lm_param_numel(&lm), (long long)steps, text);

    /* for each step: batch → loss → backward → clip → schedule → update */
    for (int64_t step = 1; step <= rc.steps; step++) {
        mi_optim_zero_grad(opt);
        mi_scope_enter(work); /* the step's activations and tape */
        mi_tensor *inputs, *targets, *loss = NULL;
        int64_t first = (step - 1) * rc.batch; /* the examples' indices in the stream */
        if (mi_run_task_batch(&task, MI_SPLIT_TRAIN, first, rc.batch, &inputs, &targets) == 0)
            loss = mi_lm_loss(&lm, inputs, targets);
        if (!loss || mi_backward(loss) != 0) return fail("step");
        double norm = mi_optim_clip_grad_norm(opt, rc.clip); /* the norm before clipping */
        if (norm < 0 || mi_optim_apply_schedule(opt, &schedule) != 0 || mi_optim_step(opt) != 0)
            return fail("step");
        if (step % 20 == 0 || step == rc.steps)
            printf("step %4lld  loss %.4f  grad norm %.3f  lr %.2e\n", (long long)step,
                   mi_item(loss), norm, rc.hp.lr * mi_optim_lr_scale(opt));
        mi_scope_leave();
        mi_scope_reset(work);
    }

    /* validation: held-out windows (the last 10% of the text), no recording */
    double val_loss, acc;
    if (mi_evaluate(&lm, &task, rc.eval_batches, work, &val_loss, &acc) != 0)
        return fail("validation");
    printf("validation loss %.4f nats/byte (%.3f bits/byte)\n", val_loss, val_loss / 0.693147);

    /* the checkpoint: parameters, AdamW's moments, the run's settings */
    if (mi_checkpoint_save(path, &lm, opt, &rc, rc.steps, NULL) != 0) return fail(path);
    printf("checkpoint: %s\n", path);

    /* read it back as an evaluator would, and continue a newline by 64 bytes */
    mi_checkpoint_file ck;
    mi_lm back;
    if (mi_checkpoint_load_model(&ck, &back, path, run) != 0) return fail(path);
    mi_sampler sampler = {.temperature = 0.8, .top_k = 40};
    mi_rng_seed(&sampler.rng, 1);
    int64_t seq[1 + 64] = {'\n'};
    printf("sample:");
    if (mi_generate(&back, seq, 1, 1, 64, &sampler, put_byte, NULL) != 0) return fail("sample");
    printf("\n");

    mi_optim_free(opt);
    mi_scope_leave();
    mi_scope_free(work);
    mi_scope_free(run);
    return 0;
}
