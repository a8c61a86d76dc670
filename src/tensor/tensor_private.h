/* The tensor as the library allocates it: the public mi_tensor first, then
 * the autograd engine's scratch for one backward pass, which is not part of
 * the API (tensor.c allocates every tensor this size; the engine reads it
 * through mi_tensor_private). */
#ifndef MIRAS_TENSOR_PRIVATE_H
#define MIRAS_TENSOR_PRIVATE_H

#include <stdint.h>

#include "tensor.h"

typedef struct mi_tensor_full {
    mi_tensor pub;           /* first: a mi_tensor * is its mi_tensor_full * */
    struct mi_tensor *gacc;  /* the gradient accumulated during a backward pass */
    uint64_t pass;           /* the tracking pass that created it (0: none) */
    uint64_t keep;           /* a pass that returns this tensor's gradient */
    int64_t uses;            /* live references to this storage during the pass */
} mi_tensor_full;

static inline mi_tensor_full *mi_tensor_private(const mi_tensor *t)
{
    return (mi_tensor_full *)(uintptr_t)t;
}

#endif
