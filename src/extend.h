/* Installed as miras/extend.h, for op and component authors: everything in
 * miras.h, and the op descriptor (autograd/op.h) a new op fills in, the fused
 * ops' packed entry points, vjps and backward ops (ops/fused.h), and the
 * component kinds (models/components.h) a new memory, attentional bias,
 * retention gate or learning algorithm defines. */
#ifndef MIRAS_EXTEND_H
#define MIRAS_EXTEND_H

#include "miras.h"
#include "autograd/op.h"
#include "ops/fused.h"
#include "models/components.h"

#endif
