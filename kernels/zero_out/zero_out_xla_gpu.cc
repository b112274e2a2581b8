// The CUDA handler of the XLA kernel of ZeroOut (kernels/zero_out/zero_out_xla.cc):
// the launcher of kernels/zero_out/zero_out_cuda.h on XLA's stream. Compiled in the
// CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/zero_out/zero_out_cuda.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Compute(cudaStream_t stream, ffi::AnyBuffer in, RetBuffer out, int64_t preserve_index) {
  const int64_t n = static_cast<int64_t>(in.element_count());
  return ForTypeUnlessEmpty<int32_t, int64_t, float, double>(in.element_type(), n, "ZeroOut", [&](auto type) {
    using T = decltype(type);
    return ToError(
        cuda::LaunchStatus("ZeroOut", cuda::LaunchZeroOut(Data<T>(in), Data<T>(out), n, preserve_index, stream)));
  });
}

MO_XLA_FFI_HANDLER("ZeroOut", "CUDA", Compute, BindStreamBuffers<1, 1>().Attr<int64_t>("preserve_index"));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
