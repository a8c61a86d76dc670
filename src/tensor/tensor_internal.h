/* Internal, not installed: the tensor layer's allocation tracking, which the
 * autograd engine (autograd/engine.c) and activation checkpointing
 * (ops/checkpoint.c) use to give a backward pass's temporaries back to their
 * scope early. Not part of miras.h or miras/extend.h; the functions keep
 * their mi_ names (the shared library still exports them). */
#ifndef MIRAS_TENSOR_INTERNAL_H
#define MIRAS_TENSOR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

/* Allocation tracking, for the autograd engine's backward pass: while a
 * nonzero pass id is set on this thread, every new tensor records it in its
 * private pass field (tensor_private.h) and is listed until the list is
 * cleared. Setting a pass (0 stops) empties the list. Returns the pass that
 * was set before. */
uint64_t mi_tensor_track(uint64_t pass);
/* The pass set now (0: none). */
uint64_t mi_tensor_tracking(void);
/* A pass nested in the current one (a backward pass inside a vjp, a
 * checkpointed forward): tensors created from now on are listed after the
 * outer pass's, under `pass`, and mi_tensor_tracked lists only those; pop
 * drops them from the list and restores the outer pass and its list. */
typedef struct mi_track_mark {
    uint64_t pass;
    size_t base;
} mi_track_mark;
mi_track_mark mi_tensor_track_push(uint64_t pass);
void mi_tensor_track_pop(mi_track_mark outer);
/* Lists t under the current pass, as if it had been created now (a nested
 * pass hands what it returns to the outer one). */
void mi_tensor_track_adopt(mi_tensor *t);
mi_tensor *const *mi_tensor_tracked(size_t *n);
void mi_tensor_tracked_clear(void);
/* Gives the storage of t (which must own it: t->base == NULL) back to its
 * scope for reuse and sets t->data to NULL; nothing may read t or a view of
 * it afterwards. */
void mi_tensor_release(mi_tensor *t);

#endif
