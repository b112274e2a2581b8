// ZeroOut on CUDA through TensorFlow: the TF GPU kernel of ZeroOut
// (kernels/framework/pointwise_kernel.h over the CUDA functor below) and XLA's
// CUDA handler, for the call zero_out_xla.cc emits; both run the launcher of
// zero_out.cu.cc on the op's stream. Compiled only when the installed
// TensorFlow is a CUDA build (and into `make cuda-lib`); here `make
// cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/xla/pointwise_xla.h"
#include "kernels/zero_out/zero_out.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace zero_out {
namespace {

// The functor, for n > 0 elements, on the stream of its context (TensorFlow's
// op context or XLA's stream: cuda::Stream).
template <typename T>
struct Cuda {
  template <typename Context>
  static absl::Status Forward(Context ctx, const T* in, int64_t n, const Attrs& a, T* out) {
    return cuda::LaunchStatus("ZeroOut", cuda::LaunchZeroOut(in, out, n, a, cuda::Stream(ctx)));
  }
};

}  // namespace
}  // namespace zero_out
}  // namespace mo

// int32 stays on the host by TensorFlow's convention for GPU devices.
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_GPU, ::mo::zero_out::Cuda, ::mo::zero_out, int64_t);
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_GPU, ::mo::zero_out::Cuda, ::mo::zero_out, float);
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_GPU, ::mo::zero_out::Cuda, ::mo::zero_out, double);

// XLA's CUDA handler: the CUDA functor above on the call's stream, the attribute bound whole.
MO_XLA_POINTWISE_HANDLER("ZeroOut", "ZeroOut", CUDA, Cuda, mo::zero_out, int32_t, int64_t, float, double);
#endif  // GOOGLE_CUDA
