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
#include "kernels/framework/register_kernels.h"
#include "kernels/zero_out/zero_out.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace zero_out {
namespace {

// The functor, for n > 0 elements.
template <typename T>
struct Cuda {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* in, int64_t n, const Attrs& a, T* out) {
    return cuda::LaunchStatus("ZeroOut", cuda::LaunchZeroOut(in, out, n, a, cuda::Stream(ctx)));
  }
};

template <typename T>
using CudaKernel = PointwiseOp<Cuda<T>, T, Attrs, kPointSize>;

}  // namespace
}  // namespace zero_out
}  // namespace mo

// int32 stays on the host by TensorFlow's convention for GPU devices.
MO_REGISTER("ZeroOut", DEVICE_GPU, int64_t, ::mo::zero_out::CudaKernel<int64_t>);
MO_REGISTER("ZeroOut", DEVICE_GPU, float, ::mo::zero_out::CudaKernel<float>);
MO_REGISTER("ZeroOut", DEVICE_GPU, double, ::mo::zero_out::CudaKernel<double>);

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"

MO_XLA_FFI_ATTRS(::mo::zero_out::Attrs);

// XLA's CUDA handler: the attribute bound whole (kernels/xla/xla_ffi.h).
namespace mo::zero_out {
namespace {

using xla_ffi::Data;
using xla_ffi::RetBuffer;
namespace ffi = ::xla::ffi;

ffi::Error XlaForward(cudaStream_t stream, ffi::AnyBuffer in, RetBuffer out, Attrs a) {
  const int64_t n = static_cast<int64_t>(in.element_count());
  return xla_ffi::ForTypeUnlessEmpty<int32_t, int64_t, float, double>(in.element_type(), n, "ZeroOut", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(
        cuda::LaunchStatus("ZeroOut", cuda::LaunchZeroOut(Data<T>(in), Data<T>(out), n, a, stream)));
  });
}

MO_XLA_FFI_HANDLER("ZeroOut", "CUDA", XlaForward, xla_ffi::BindStreamBuffers<1, 1>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::zero_out
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
