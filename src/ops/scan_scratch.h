/* mi_scan's scratch scopes (scan_scratch.c), for scan_body.c. Private to ops/. */
#ifndef MIRAS_SCAN_SCRATCH_H
#define MIRAS_SCAN_SCRATCH_H

#include "internal.h"

/* A scope from this thread's pool (or a new one); NULL when out of memory. */
mi_scope *scratch_get(void);
/* Back to the pool, reset (freed when the pool is full). */
void scratch_put(mi_scope *s);
/* The tensors ts[0..n) as tensors whose storage is in scope s: those whose
 * storage is elsewhere (the body passed on a carry it was given, or a view
 * of one) are copied into s. A token's results then live as long as its
 * scope, which the token after the next resets (the scopes alternate). */
int scratch_hold(mi_scope *s, mi_tensor **ts, int n);

#endif
