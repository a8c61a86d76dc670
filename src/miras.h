/* miras: the umbrella header. Layers, bottom up:
 * tensor ← autograd ← ops ← {models, optim}. */
#ifndef MIRAS_H
#define MIRAS_H

#include "tensor/tensor.h"
#include "autograd/autograd.h"
#include "ops/ops.h"
#include "models/models.h"
#include "optim/optim.h"

#endif
