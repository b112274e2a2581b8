// Included once by each tiny-cuda-nn shim (benchmarks/cuda/tcnn_*_shim.cu, each
// its own library): tiny-cuda-nn defines CudaRtcKernel::set only with TCNN_RTC,
// yet its headers reference it; JIT fusion stays off in the shims.
#pragma once
#if !defined(TCNN_RTC)
#include <tiny-cuda-nn/rtc_kernel.h>

#include <stdexcept>

void tcnn::CudaRtcKernel::set(CUfunction_attribute, int) {
  throw std::runtime_error("tiny-cuda-nn built without TCNN_RTC");
}
#endif
