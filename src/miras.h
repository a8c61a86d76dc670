/* miras: the umbrella header. Layers, bottom up:
 * tensor ← autograd ← ops ← {models, optim} ← train; the synthetic tasks
 * (data) on tensor. train.h is for training programs: run configuration,
 * task batches, evaluation, checkpoints, generation. */
#ifndef MIRAS_H
#define MIRAS_H

#include "tensor/tensor.h"
#include "data/tasks.h"
#include "autograd/autograd.h"
#include "ops/ops.h"
#include "models/models.h"
#include "optim/optim.h"
#include "train/train.h"

#endif
