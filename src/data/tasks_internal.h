/* Shared by the task generators; not installed. */
#ifndef MIRAS_TASKS_INTERNAL_H
#define MIRAS_TASKS_INTERNAL_H

#include "tasks.h"

/* Checks the batch arguments and makes i64 inputs and targets [batch, len]
 * in the current scope; -1 with a message starting "<who>: ". */
int tasks_batch_new(const char *who, int64_t first, int64_t batch, int64_t len,
                    mi_tensor **inputs, mi_tensor **targets);

/* n distinct values of [lo, lo + count) into out[0..n), in the order drawn:
 * a partial Fisher–Yates shuffle of the ascending pool (n draws of
 * mi_rng_below). pool is scratch of count entries. Needs n ≤ count. */
void tasks_choose_distinct(mi_rng *r, int64_t lo, int64_t count, int64_t n, int64_t *pool,
                           int64_t *out);

#endif
