/* miras: the umbrella header. Layers, bottom up:
 * tensor ← autograd ← ops ← {models, optim}; the synthetic tasks (data) on tensor. */
#ifndef MIRAS_H
#define MIRAS_H

#include "tensor/tensor.h"
#include "data/tasks.h"
#include "autograd/autograd.h"
#include "ops/ops.h"
#include "models/models.h"
#include "optim/optim.h"

#endif
