// The CUDA functor of MetalOpsRobustLoss / MetalOpsRobustLossGrad (the kernel
// class is kernels/robust_loss_op.h) and its GPU registration. Compiled only
// when the installed TensorFlow is a CUDA build (`make` then defines
// GOOGLE_CUDA); here it is syntax-checked by `make cuda-check`. Launchers:
// kernels/cuda/robust_loss.cu.cc.
//
// alpha / scale stay on the device, so their values are not checked
// (ParamValues reads host memory; a host copy would synchronise the stream):
// elements whose alpha is NaN or scale <= 0 get NaN values and gradients
// (kernels/common/robust_loss.h). The Python wrapper rejects such values when
// they are given as numbers.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/cuda/robust_loss.h"
#include "kernels/robust_loss_op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

namespace mo {
namespace {

// TF dtype -> CUDA element type of the same layout.
template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<Eigen::half> { using type = __half; };
template <> struct CudaType<::tensorflow::bfloat16> { using type = __nv_bfloat16; };

template <typename T>
const typename CudaType<T>::type* AsCuda(const T* p) {
  return reinterpret_cast<const typename CudaType<T>::type*>(p);
}
template <typename T>
typename CudaType<T>::type* AsCuda(T* p) {
  return reinterpret_cast<typename CudaType<T>::type*>(p);
}

absl::Status LaunchStatus(const char* what, cudaError_t err) {
  return err == cudaSuccess ? absl::OkStatus()
                            : ::tensorflow::errors::Internal(what, " CUDA launch failed: ", cudaGetErrorString(err));
}

}  // namespace

using GPUDevice = Eigen::GpuDevice;

template <typename T>
struct RobustLossFunctor<GPUDevice, T> {
  static absl::Status CheckParamValues(const RobustLossArgs<T>&) { return absl::OkStatus(); }

  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, T* out) {
    const robust_loss_checks::ParamLayout& l = args.layout;
    return LaunchStatus("RobustLoss", cuda::LaunchRobustLossForward(
                                          AsCuda(args.x), args.alpha, args.scale, AsCuda(out), args.n, l.channels,
                                          l.alpha_vec, l.scale_vec, ctx->eigen_device<GPUDevice>().stream()));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, const T* grad,
                               T* dx, float* dalpha, float* dscale) {
    const robust_loss_checks::ParamLayout& l = args.layout;
    return LaunchStatus("RobustLossGrad",
                        cuda::LaunchRobustLossBackward(AsCuda(grad), AsCuda(args.x), args.alpha, args.scale,
                                                       AsCuda(dx), dalpha, dscale, args.n, l.channels, l.alpha_vec,
                                                       l.scale_vec, ctx->eigen_device<GPUDevice>().stream()));
  }
};

METAL_OPS_REGISTER_ROBUST_LOSS(DEVICE_GPU, GPUDevice, float);
METAL_OPS_REGISTER_ROBUST_LOSS(DEVICE_GPU, GPUDevice, Eigen::half);
METAL_OPS_REGISTER_ROBUST_LOSS(DEVICE_GPU, GPUDevice, ::tensorflow::bfloat16);

}  // namespace mo

#endif  // GOOGLE_CUDA
