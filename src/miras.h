/* Installed as miras/miras.h, for users: the umbrella header, the API of a
 * program that builds, trains and checks models (authors of ops and
 * components include miras/extend.h). Layers, bottom up:
 * tensor ← autograd ← ops ← {models, optim} ← train; the synthetic tasks
 * (data) on tensor. train.h is for training programs: run configuration,
 * task batches, evaluation, checkpoints, generation. Internals of the
 * library are in headers that are not installed. */
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
