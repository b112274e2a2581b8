// RobustLoss as TensorFlow GPU kernels (C++ API). Compiled only when the
// installed TensorFlow is a CUDA build (`make` then defines GOOGLE_CUDA); here
// it is syntax-checked by `make cuda-check`. Launchers: kernels/cuda/robust_loss.cu.cc.
//
// Shapes are checked by ops/robust_loss_checks.h, as on the CPU. alpha /
// scale stay on the device, so their values are not (ParamValues reads
// host memory; a host copy would synchronise the stream): elements whose alpha
// is NaN or scale <= 0 get NaN values and gradients (kernels/common/robust_loss.h).
// The Python wrapper rejects such values when they are given as numbers.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/cuda/robust_loss.h"
#include "ops/checks_tf.h"
#include "ops/robust_loss_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

namespace mo {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

// TF dtype -> CUDA element type of the same layout.
template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<Eigen::half> { using type = __half; };
template <> struct CudaType<::tensorflow::bfloat16> { using type = __nv_bfloat16; };

template <typename T>
class RobustLossGpuOp : public OpKernel {
 public:
  explicit RobustLossGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    using CT = typename CudaType<T>::type;
    const Tensor& x = ctx->input(0);
    const Tensor& alpha = ctx->input(1);
    const Tensor& scale = ctx->input(2);
    robust_loss_checks::ParamLayout layout;
    OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss_checks::ParamShapes(checks::DimsOf(x), checks::DimsOf(alpha),
                                                                         checks::DimsOf(scale), &layout)));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    const cudaError_t err = cuda::LaunchRobustLossForward(
        reinterpret_cast<const CT*>(x.flat<T>().data()), alpha.flat<float>().data(),
        scale.flat<float>().data(), reinterpret_cast<CT*>(out->flat<T>().data()), x.NumElements(),
        layout.channels, layout.alpha_vec, layout.scale_vec, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("RobustLoss CUDA launch failed: ", cudaGetErrorString(err)));
  }
};

template <typename T>
class RobustLossGradGpuOp : public OpKernel {
 public:
  explicit RobustLossGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    using CT = typename CudaType<T>::type;
    const Tensor& grad = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& alpha = ctx->input(2);
    const Tensor& scale = ctx->input(3);
    OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss_checks::GradShape(checks::DimsOf(grad), checks::DimsOf(x))));
    robust_loss_checks::ParamLayout layout;
    OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss_checks::ParamShapes(checks::DimsOf(x), checks::DimsOf(alpha),
                                                                         checks::DimsOf(scale), &layout)));
    Tensor *dx = nullptr, *dalpha = nullptr, *dscale = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, alpha.shape(), &dalpha));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, scale.shape(), &dscale));
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    const cudaError_t err = cuda::LaunchRobustLossBackward(
        reinterpret_cast<const CT*>(grad.flat<T>().data()), reinterpret_cast<const CT*>(x.flat<T>().data()),
        alpha.flat<float>().data(), scale.flat<float>().data(), reinterpret_cast<CT*>(dx->flat<T>().data()),
        dalpha->flat<float>().data(), dscale->flat<float>().data(), x.NumElements(), layout.channels,
        layout.alpha_vec, layout.scale_vec, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("RobustLossGrad CUDA launch failed: ", cudaGetErrorString(err)));
  }
};

#define METAL_OPS_REGISTER_ROBUST_LOSS_GPU(T)                                                 \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name("MetalOpsRobustLoss").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"),     \
      RobustLossGpuOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name("MetalOpsRobustLossGrad").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"), \
      RobustLossGradGpuOp<T>)
METAL_OPS_REGISTER_ROBUST_LOSS_GPU(float);
METAL_OPS_REGISTER_ROBUST_LOSS_GPU(Eigen::half);
METAL_OPS_REGISTER_ROBUST_LOSS_GPU(::tensorflow::bfloat16);
#undef METAL_OPS_REGISTER_ROBUST_LOSS_GPU

}  // namespace
}  // namespace mo

#endif  // GOOGLE_CUDA
