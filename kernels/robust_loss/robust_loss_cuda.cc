// RobustLoss on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsRobustLoss / MetalOpsRobustLossGrad (the kernel classes of
// robust_loss.h over the CUDA functor below) and XLA's CUDA handlers, for the
// calls robust_loss_xla.cc emits; both run the launchers of robust_loss.cu.cc
// on the op's stream. Compiled only when the installed TensorFlow is a CUDA
// build (`make` then defines GOOGLE_CUDA; and into `make cuda-lib`); here
// `make cuda-check` syntax-checks it.
//
// alpha / scale stay on the device, so their values are not checked
// (ParamValues reads host memory; a host copy would synchronise the stream):
// elements whose alpha is NaN or scale <= 0 get NaN values and gradients
// (robust_loss.h). The Python wrapper rejects such values when they are given
// as numbers.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // robust_loss.h's kernel classes
#include "kernels/robust_loss/robust_loss.h"

namespace mo {

using cuda::AsCuda;
using cuda::LaunchStatus;

template <typename T>
struct RobustLossFunctor<GPUDevice, T> {
  static absl::Status CheckParamValues(const RobustLossArgs<T>&) { return absl::OkStatus(); }

  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, T* out) {
    const robust_loss::ParamLayout& l = args.layout;
    return LaunchStatus("RobustLoss", cuda::LaunchRobustLossForward(
                                          AsCuda(args.x), args.alpha, args.scale, AsCuda(out), args.n, l.channels,
                                          l.alpha_vec, l.scale_vec, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, const T* grad,
                               T* dx, float* dalpha, float* dscale) {
    const robust_loss::ParamLayout& l = args.layout;
    return LaunchStatus("RobustLossGrad",
                        cuda::LaunchRobustLossBackward(AsCuda(grad), AsCuda(args.x), args.alpha, args.scale,
                                                       AsCuda(dx), dalpha, dscale, args.n, l.channels, l.alpha_vec,
                                                       l.scale_vec, cuda::Stream(ctx)));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_GPU, GPUDevice, Eigen::half);
MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_GPU, GPUDevice, ::tensorflow::bfloat16);

}  // namespace mo

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

// XLA's CUDA handlers (no attribute): the launchers on XLA's stream (alpha's
// and scale's values are not checked on the GPU, as in the TF GPU kernels).
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
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
