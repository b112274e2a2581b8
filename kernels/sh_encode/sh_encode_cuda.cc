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
#include "kernels/xla/pointwise_xla.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace sh_encode {
namespace {

// The functor, for n > 0 directions, on the stream of its context (TensorFlow's
// op context or XLA's stream: cuda::Stream).
template <typename T>
struct Cuda {
  template <typename Context>
  static absl::Status Forward(Context ctx, const T* dirs, int64_t n, const Attrs& a, T* values) {
    return cuda::LaunchStatus("SHEncode", cuda::LaunchSHEncodeForward(cuda::AsCuda(dirs), cuda::AsCuda(values), n, a,
                                                                      cuda::Stream(ctx)));
  }

  template <typename Context>
  static absl::Status Backward(Context ctx, const T* grad, const T* dirs, int64_t n, const Attrs& a, T* grad_dirs) {
    return cuda::LaunchStatus("SHEncodeGrad",
                              cuda::LaunchSHEncodeBackward(cuda::AsCuda(grad), cuda::AsCuda(dirs),
                                                           cuda::AsCuda(grad_dirs), n, a, cuda::Stream(ctx)));
  }
};

}  // namespace
}  // namespace sh_encode
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsSHEncode", DEVICE_GPU, ::mo::sh_encode::Cuda, ::mo::sh_encode);

// XLA's CUDA handlers: the CUDA functor above on the call's stream, the attributes bound whole.
MO_XLA_POINTWISE_HANDLERS("MetalOpsSHEncode", "SHEncode", CUDA, Cuda, mo::sh_encode, float, Eigen::half);
#endif  // GOOGLE_CUDA
