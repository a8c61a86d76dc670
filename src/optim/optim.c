/* Placeholder: outer optimizers. */
#include "optim.h"
