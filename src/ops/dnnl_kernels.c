/* Placeholder: oneDNN backend kernels. */
#include "internal.h"
