#include "tensor.h"
