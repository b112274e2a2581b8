// The CUDA handlers of the XLA kernels of MetalOpsTruncExp /
// MetalOpsTruncExpGrad (kernels/trunc_exp/trunc_exp_xla.cc): the launchers of
// kernels/trunc_exp/trunc_exp_cuda.h on XLA's stream. Compiled in the CUDA builds
// (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/trunc_exp/trunc_exp_cuda.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::AnyBuffer x, RetBuffer y) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExp", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "TruncExp", cuda::LaunchTruncExpForward(cuda::AsCuda(Data<T>(x)), cuda::AsCuda(Data<T>(y)), n, stream)));
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer dy, ffi::AnyBuffer x, RetBuffer dx) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExpGrad", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "TruncExpGrad", cuda::LaunchTruncExpBackward(cuda::AsCuda(Data<T>(dy)), cuda::AsCuda(Data<T>(x)),
                                                     cuda::AsCuda(Data<T>(dx)), n, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsTruncExp", "CUDA", Forward, BindStreamBuffers<1, 1>());
MO_XLA_FFI_HANDLER("MetalOpsTruncExpGrad", "CUDA", Backward, BindStreamBuffers<2, 1>());

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
