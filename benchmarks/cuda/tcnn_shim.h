// What the tiny-cuda-nn shims (benchmarks/cuda/tcnn_*_shim.cu, each its own
// library) share, included once by each: the stub of CudaRtcKernel::set and
// the guard of their C entry points.
#pragma once
#include <cstdio>
#include <stdexcept>

#if !defined(TCNN_RTC)
#include <tiny-cuda-nn/rtc_kernel.h>

// tiny-cuda-nn defines CudaRtcKernel::set only with TCNN_RTC, yet its headers
// reference it; JIT fusion stays off in the shims.
void tcnn::CudaRtcKernel::set(CUfunction_attribute, int) {
  throw std::runtime_error("tiny-cuda-nn built without TCNN_RTC");
}
#endif

// fn()'s result, or `failed` with "<entry>: <the exception's message>" on
// stderr: a C entry point lets no exception out.
template <typename R, typename Fn>
R Guarded(const char* entry, R failed, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: %s\n", entry, e.what());
    return failed;
  }
}
