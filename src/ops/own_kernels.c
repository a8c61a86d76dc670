/* Placeholder: the project's own vectorised / OpenMP kernels. */
#include "internal.h"
