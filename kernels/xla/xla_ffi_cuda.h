// What the CUDA handlers (kernels/<op>/<op>_xla_gpu.cc) share beyond
// kernels/xla/xla_ffi.h: their bindings, which take XLA's CUDA stream (and,
// for handlers that need device scratch, XLA's scratch allocator) before the
// buffers; and the launch of a kernel whose checks lower device words that
// the launcher reads back (the validation flags of kernels/<op>/<op>_gpu.h).
// Included by the CUDA builds only (GOOGLE_CUDA).
#ifndef MO_KERNELS_XLA_XLA_FFI_CUDA_H_
#define MO_KERNELS_XLA_XLA_FFI_CUDA_H_

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// ffi::Ffi::Bind() with XLA's stream.
inline auto BindStream() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>(); }

// ffi::Ffi::Bind() with XLA's stream and scratch allocator.
inline auto BindStreamScratch() { return BindStream().Ctx<ffi::ScratchAllocator>(); }

// BindStream() / BindStreamScratch() with kArgs buffers, then kRets results.
template <int kArgs, int kRets>
auto BindStreamBuffers() {
  return BindBuffersFrom<kArgs, kRets>(BindStream());
}
template <int kArgs, int kRets>
auto BindStreamScratchBuffers() {
  return BindBuffersFrom<kArgs, kRets>(BindStreamScratch());
}

// launch(words) with `count` 8-byte device words from XLA's scratch (the
// validation flags the launch's checks lower and read back), as an FFI error;
// an error naming `op` when the scratch is not there. count 0 (an op called
// with validate=False): launch(nullptr), nothing allocated.
template <typename Launch>
ffi::Error LaunchWithCheckWords(ffi::ScratchAllocator& scratch, size_t count, const char* op, Launch&& launch) {
  unsigned long long* words = nullptr;
  if (count == 0) return ToError(launch(words));
  ffi::Error error = ScratchOf(scratch, count, op, &words);
  if (error.failure()) return error;
  return ToError(launch(words));
}

}  // namespace xla_ffi
}  // namespace mo

#endif  // MO_KERNELS_XLA_XLA_FFI_CUDA_H_
