// The CUDA functor of MetalOpsRobustLoss / MetalOpsRobustLossGrad (the kernel
// class is kernels/robust_loss/robust_loss_kernel.h) and its GPU registration. Compiled only
// when the installed TensorFlow is a CUDA build (`make` then defines
// GOOGLE_CUDA); here it is syntax-checked by `make cuda-check`. Launchers:
// kernels/robust_loss/robust_loss.cu.cc.
//
// alpha / scale stay on the device, so their values are not checked
// (ParamValues reads host memory; a host copy would synchronise the stream):
// elements whose alpha is NaN or scale <= 0 get NaN values and gradients
// (kernels/robust_loss/robust_loss.h). The Python wrapper rejects such values when
// they are given as numbers.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/robust_loss/robust_loss_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/robust_loss/robust_loss_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

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

#endif  // GOOGLE_CUDA
