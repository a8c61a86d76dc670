/* What each backend runs on this machine (mi_backend_isa, ops.h): the
 * speed of a benchmark means little without it, since oneDNN and OpenBLAS
 * pick their kernels by the CPU at run time and the own kernels by the
 * instruction set they were compiled for (meson's cpu option). */
#include "backend/blas/blas.h"
#include "backend/cpu/own_kernels.h"
#include "backend/dnnl/dnnl_common.h"
#include "ops.h"

double mi_fma_peak(int threads) { return own_fma_peak_gflops(threads); }

const char *mi_backend_isa(mi_backend b)
{
    switch (b) {
    case MI_BACKEND_BLAS: return blas_core_name();
    case MI_BACKEND_DNNL: return miras_dnnl_isa_name();
    case MI_BACKEND_OWN: return own_isa_name();
    case MI_BACKEND_REF: return "c";
    default: return "unknown";
    }
}
