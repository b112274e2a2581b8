// SHEncode on CUDA through TensorFlow: the TF GPU kernels of MetalOpsSHEncode /
// MetalOpsSHEncodeGrad (kernels/framework/pointwise_kernel.h over the CUDA
// functor below) and XLA's CUDA handlers, for the calls sh_encode_xla.cc
// emits; both run the launchers of sh_encode.cu.cc on the op's stream.
// Compiled only when the installed TensorFlow is a CUDA build (and into
// `make cuda-lib`); here `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/sh_encode/sh_encode.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace sh_encode {
namespace {

// The functor, for n > 0 directions.
template <typename T>
struct Cuda {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* dirs, int64_t n, const Attrs& a,
                              T* values) {
    return cuda::LaunchStatus("SHEncode", cuda::LaunchSHEncodeForward(cuda::AsCuda(dirs), cuda::AsCuda(values), n, a,
                                                                      cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* dirs, int64_t n,
                               const Attrs& a, T* grad_dirs) {
    return cuda::LaunchStatus("SHEncodeGrad",
                              cuda::LaunchSHEncodeBackward(cuda::AsCuda(grad), cuda::AsCuda(dirs),
                                                           cuda::AsCuda(grad_dirs), n, a, cuda::Stream(ctx)));
  }
};

}  // namespace
}  // namespace sh_encode
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsSHEncode", DEVICE_GPU, ::mo::sh_encode::Cuda, ::mo::sh_encode);

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"

MO_XLA_FFI_ATTRS(::mo::sh_encode::Attrs);

// XLA's CUDA handlers: the attributes bound whole (kernels/xla/xla_ffi.h).
namespace mo::sh_encode {
namespace {

using xla_ffi::Data;
using xla_ffi::RetBuffer;
namespace ffi = ::xla::ffi;

ffi::Error XlaForward(cudaStream_t stream, ffi::AnyBuffer dirs, RetBuffer values, Attrs a) {
  const int64_t n = static_cast<int64_t>(dirs.element_count()) / kPointSize;
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncode", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(cuda::LaunchStatus(
        "SHEncode", cuda::LaunchSHEncodeForward(cuda::AsCuda(Data<T>(dirs)), cuda::AsCuda(Data<T>(values)), n, a,
                                                stream)));
  });
}

ffi::Error XlaBackward(cudaStream_t stream, ffi::AnyBuffer grad, ffi::AnyBuffer dirs, RetBuffer grad_dirs, Attrs a) {
  const int64_t n = static_cast<int64_t>(dirs.element_count()) / kPointSize;
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncodeGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(cuda::LaunchStatus(
        "SHEncodeGrad", cuda::LaunchSHEncodeBackward(cuda::AsCuda(Data<T>(grad)), cuda::AsCuda(Data<T>(dirs)),
                                                     cuda::AsCuda(Data<T>(grad_dirs)), n, a, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsSHEncode", "CUDA", XlaForward, xla_ffi::BindStreamBuffers<1, 1>().Attrs<Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsSHEncodeGrad", "CUDA", XlaBackward, xla_ffi::BindStreamBuffers<2, 1>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::sh_encode
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
