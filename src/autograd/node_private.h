/* The graph node as apply.c allocates it: the public mi_node first, then the
 * engine's scratch (a pass id marking the nodes a backward pass visits),
 * which is not part of the API. */
#ifndef MIRAS_NODE_PRIVATE_H
#define MIRAS_NODE_PRIVATE_H

#include <stdint.h>

#include "op.h"

typedef struct mi_node_full {
    mi_node pub;     /* first: a mi_node * is its mi_node_full * */
    uint64_t visit;  /* the last backward pass that reached it */
} mi_node_full;

static inline mi_node_full *mi_node_private(const mi_node *n)
{
    return (mi_node_full *)(uintptr_t)n;
}

#endif
