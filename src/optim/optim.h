/* miras optim layer: outer optimizers written with the framework's ops. */
#ifndef MIRAS_OPTIM_H
#define MIRAS_OPTIM_H

#include "ops/ops.h"

#endif
