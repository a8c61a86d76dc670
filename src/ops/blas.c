/* Placeholder: the OpenBLAS backend kernels. */
#include "internal.h"
