// The CUDA handlers of the XLA kernels of MetalOpsSHEncode /
// MetalOpsSHEncodeGrad (kernels/sh_encode/sh_encode_xla.cc): the launchers of
// kernels/sh_encode/sh_encode_cuda.h on XLA's stream. Compiled in the CUDA builds
// (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/sh_encode/sh_encode_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

// The directions [N, 3]: N.
int64_t Count(const ffi::AnyBuffer& dirs) { return static_cast<int64_t>(dirs.element_count()) / 3; }

ffi::Error Forward(cudaStream_t stream, ffi::AnyBuffer dirs, RetBuffer values, int64_t degree) {
  const int64_t n = Count(dirs);
  return ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncode", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus("SHEncode", cuda::LaunchSHEncodeForward(cuda::AsCuda(Data<T>(dirs)),
                                                                              cuda::AsCuda(Data<T>(values)), n,
                                                                              static_cast<int>(degree), stream)));
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer grad, ffi::AnyBuffer dirs, RetBuffer grad_dirs,
                    int64_t degree) {
  const int64_t n = Count(dirs);
  return ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncodeGrad", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "SHEncodeGrad", cuda::LaunchSHEncodeBackward(cuda::AsCuda(Data<T>(grad)), cuda::AsCuda(Data<T>(dirs)),
                                                     cuda::AsCuda(Data<T>(grad_dirs)), n, static_cast<int>(degree),
                                                     stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsSHEncode", "CUDA", Forward, BindStreamBuffers<1, 1>().Attr<int64_t>("degree"));
MO_XLA_FFI_HANDLER("MetalOpsSHEncodeGrad", "CUDA", Backward, BindStreamBuffers<2, 1>().Attr<int64_t>("degree"));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
