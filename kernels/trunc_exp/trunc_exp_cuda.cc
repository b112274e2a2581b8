// TruncExp on CUDA through TensorFlow: the TF GPU kernels of MetalOpsTruncExp /
// MetalOpsTruncExpGrad (kernels/framework/pointwise_kernel.h over the CUDA
// functor below) and XLA's CUDA handlers, for the calls trunc_exp_xla.cc
// emits; both run the launchers of trunc_exp.cu.cc on the op's stream.
// Compiled only when the installed TensorFlow is a CUDA build (and into
// `make cuda-lib`); here `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/trunc_exp/trunc_exp.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace trunc_exp {
namespace {

// The functor, for n > 0 elements.
template <typename T>
struct Cuda {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, const Attrs&, T* y) {
    return cuda::LaunchStatus("TruncExp",
                              cuda::LaunchTruncExpForward(cuda::AsCuda(x), cuda::AsCuda(y), n, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* dy, const T* x, int64_t n, const Attrs&,
                               T* dx) {
    return cuda::LaunchStatus("TruncExpGrad", cuda::LaunchTruncExpBackward(cuda::AsCuda(dy), cuda::AsCuda(x),
                                                                           cuda::AsCuda(dx), n, cuda::Stream(ctx)));
  }
};

}  // namespace
}  // namespace trunc_exp
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsTruncExp", DEVICE_GPU, ::mo::trunc_exp::Cuda, ::mo::trunc_exp);

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

// XLA's CUDA handlers (no attribute).
namespace mo::trunc_exp {
namespace {

using xla_ffi::Data;
using xla_ffi::RetBuffer;
namespace ffi = ::xla::ffi;

ffi::Error XlaForward(cudaStream_t stream, ffi::AnyBuffer x, RetBuffer y) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExp", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(cuda::LaunchStatus(
        "TruncExp", cuda::LaunchTruncExpForward(cuda::AsCuda(Data<T>(x)), cuda::AsCuda(Data<T>(y)), n, stream)));
  });
}

ffi::Error XlaBackward(cudaStream_t stream, ffi::AnyBuffer dy, ffi::AnyBuffer x, RetBuffer dx) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExpGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(cuda::LaunchStatus(
        "TruncExpGrad", cuda::LaunchTruncExpBackward(cuda::AsCuda(Data<T>(dy)), cuda::AsCuda(Data<T>(x)),
                                                     cuda::AsCuda(Data<T>(dx)), n, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsTruncExp", "CUDA", XlaForward, xla_ffi::BindStreamBuffers<1, 1>());
MO_XLA_FFI_HANDLER("MetalOpsTruncExpGrad", "CUDA", XlaBackward, xla_ffi::BindStreamBuffers<2, 1>());

}  // namespace
}  // namespace mo::trunc_exp
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
