/* What the train layer's files share; not installed. */
#ifndef MIRAS_TRAIN_INTERNAL_H
#define MIRAS_TRAIN_INTERNAL_H

#include "train.h"

/* Replaces any pending error with the formatted message (which may quote
 * mi_error() itself); returns -1. */
int train_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The run settings, step and accumulators back from a checkpoint's "train.*"
 * metadata into c->rc, c->step, c->stats (run_config.c). -1 with the reason. */
int train_run_from_metadata(mi_checkpoint_file *c, const mi_safetensors *st);

/* The NIAH generator's settings of a run: its flavour (rc->niah) and prompt
 * length (tasks.c); the text, if any, is the caller's. */
mi_niah_config train_niah_config(const mi_run_config *rc);

#endif
