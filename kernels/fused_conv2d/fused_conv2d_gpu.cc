// The CUDA functors of MetalOpsFusedConv2D / MetalOpsFusedActivationGrad (the
// kernel classes are kernels/fused_conv2d/fused_conv2d_kernel.h) and their GPU registrations.
// Compiled only when the installed TensorFlow is a CUDA build (`make` then
// defines GOOGLE_CUDA); here it is syntax-checked by `make cuda-check`.
// Launchers: kernels/fused_conv2d/fused_conv2d.cu.cc; their launch on a stream
// (TF32 as TensorFlow's own float32 products): kernels/fused_conv2d/fused_conv2d_gpu.h,
// shared with the XLA CUDA handler.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/fused_conv2d/fused_conv2d_cuda.h"
#include "kernels/fused_conv2d/fused_conv2d_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/fused_conv2d/fused_conv2d_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

using ::tensorflow::OpKernelContext;

template <>
struct FusedConv2DFunctor<GPUDevice> {
  static absl::Status Compute(OpKernelContext* ctx, const FusedConv2DArgs& args, float* output) {
    const cuda::FusedConv2DPlan plan = cuda::PlanFusedConv2D(args.g);
    ::tensorflow::Tensor patches;
    if (plan.patch_floats > 0) {
      TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_FLOAT, ::tensorflow::TensorShape({plan.patch_floats}),
                                            &patches));
    }
    return cuda::FusedConv2DOnStream(args, plan, plan.patch_floats > 0 ? patches.flat<float>().data() : nullptr,
                                     output, cuda::Stream(ctx));
  }
};

template <>
struct FusedActivationGradFunctor<GPUDevice> {
  static absl::Status Compute(OpKernelContext* ctx, const float* gradients, const float* outputs,
                              const float* features, int64_t n, int act, float alpha, float* backprops) {
    return cuda::FusedActivationGradOnStream(gradients, outputs, features, n, act, alpha, backprops,
                                             cuda::Stream(ctx));
  }
};

MO_REGISTER("MetalOpsFusedConv2D", DEVICE_GPU, float, FusedConv2DOp<GPUDevice>);
MO_REGISTER("MetalOpsFusedActivationGrad", DEVICE_GPU, float, FusedActivationGradOp<GPUDevice>);

}  // namespace mo

#endif  // GOOGLE_CUDA
