// The CUDA handlers of the XLA kernels of MetalOpsRobustLoss /
// MetalOpsRobustLossGrad (kernels/robust_loss/robust_loss_xla.cc): the launchers of
// kernels/robust_loss/robust_loss_cuda.h on XLA's stream (alpha's and scale's values are
// not checked on the GPU, as in the TensorFlow GPU kernel). Compiled in the
// CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/robust_loss/robust_loss_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/robust_loss/robust_loss_spec.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer alpha, ffi::AnyBuffer scale, RetBuffer y) {
  robust_loss::ParamLayout l;
  ffi::Error error = ToError(robust_loss::ParamShapes(DimsOf(x), DimsOf(alpha), DimsOf(scale), &l));
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (error.failure() || n == 0) return error;
  return ForType<float, Eigen::half, ::tensorflow::bfloat16>(x.element_type(), "RobustLoss", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "RobustLoss", cuda::LaunchRobustLossForward(cuda::AsCuda(Data<T>(x)), Data<float>(alpha), Data<float>(scale),
                                                    cuda::AsCuda(Data<T>(y)), n, l.channels, l.alpha_vec,
                                                    l.scale_vec, stream)));
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer grad, ffi::AnyBuffer x, ffi::AnyBuffer alpha,
                    ffi::AnyBuffer scale, RetBuffer dx, RetBuffer dalpha, RetBuffer dscale) {
  robust_loss::ParamLayout l;
  ffi::Error error = ToError(robust_loss::ParamShapes(DimsOf(x), DimsOf(alpha), DimsOf(scale), &l));
  if (error.failure()) return error;
  const int64_t n = static_cast<int64_t>(x.element_count());
  return ForType<float, Eigen::half, ::tensorflow::bfloat16>(x.element_type(), "RobustLossGrad", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "RobustLossGrad",
        cuda::LaunchRobustLossBackward(cuda::AsCuda(Data<T>(grad)), cuda::AsCuda(Data<T>(x)), Data<float>(alpha),
                                       Data<float>(scale), cuda::AsCuda(Data<T>(dx)), Data<float>(dalpha),
                                       Data<float>(dscale), n, l.channels, l.alpha_vec, l.scale_vec, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsRobustLoss", "CUDA", Forward, BindStreamBuffers<3, 1>());
MO_XLA_FFI_HANDLER("MetalOpsRobustLossGrad", "CUDA", Backward, BindStreamBuffers<4, 3>());

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
