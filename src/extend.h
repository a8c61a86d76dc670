/* miras for authors of ops and of model components: everything in miras.h,
 * and the component kinds (models/components.h) a new memory, attentional
 * bias, retention gate or learning algorithm defines. */
#ifndef MIRAS_EXTEND_H
#define MIRAS_EXTEND_H

#include "miras.h"
#include "autograd/op.h"
#include "ops/fused.h"
#include "models/components.h"

#endif
