// FusedConv2D on CUDA through TensorFlow: the CUDA functors of
// MetalOpsFusedConv2D / MetalOpsFusedActivationGrad (the kernel classes are
// fused_conv2d.h's) and their GPU registrations, and XLA's CUDA handlers, for
// the calls fused_conv2d_xla.cc emits; both run the launchers of
// fused_conv2d.cu.cc on the op's stream, the patch buffer (plan.patch_floats
// floats) from the caller's allocator. The GEMM's cuBLAS handle is bound to
// that stream by the launcher (kernels/cuda/cublas_gemm.cu.cc), and uses TF32
// tensor cores exactly when TensorFlow does for its own float32 matrix
// products and convolutions (tf.config.experimental.enable_tensor_float_32_execution).
// Compiled only when the installed TensorFlow is a CUDA build (and into
// `make cuda-lib`); here `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tsl/platform/tensor_float_32_utils.h"
#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"
#endif
#define MO_TF_KERNEL  // after the headers it needs: the kernel classes, fused_conv2d.h
#include "kernels/fused_conv2d/fused_conv2d.h"

namespace mo {
namespace cuda {
namespace {

absl::Status FusedConv2DOnStream(const FusedConv2DArgs& args, const FusedConv2DPlan& plan, float* patches,
                                 float* output, cudaStream_t stream) {
  FusedConv2DParams p{};
  p.input = args.input;
  p.filter = args.filter;
  p.bias = args.bias;
  p.residual = args.residual;
  p.output = output;
  p.patches = plan.patch_floats > 0 ? patches : nullptr;
  p.patch_floats = plan.patch_floats;
  p.chunk_rows = plan.chunk_rows;
  p.act = args.act;
  p.alpha = args.alpha;
  p.allow_tf32 = tsl::tensor_float_32_execution_enabled();
  return GpuStatusOf("FusedConv2D", LaunchFusedConv2D(args.g, p, stream));
}

absl::Status FusedActivationGradOnStream(const float* gradients, const float* outputs, const float* features,
                                         int64_t n, int act, float alpha, float* backprops, cudaStream_t stream) {
  return LaunchStatus("FusedActivationGrad",
                      LaunchFusedActivationGrad(gradients, outputs, features, backprops, n, act, alpha, stream));
}

}  // namespace
}  // namespace cuda

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

#if MO_XLA
// XLA's CUDA handlers: the patch buffer from XLA's scratch allocator; TF32 as
// in the GPU kernel (TensorFlow's own setting).
namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Conv(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer input, ffi::AnyBuffer filter,
                ffi::RemainingArgs rest, RetBuffer output, fused_conv2d::Attrs attrs) {
  FusedConv2DArgs args;
  ffi::Error error = FusedConv2DArgsOf(input, filter, rest, attrs, &args);
  if (error.failure() || args.g.pixels() * args.g.out_depth == 0) return error;
  const cuda::FusedConv2DPlan plan = cuda::PlanFusedConv2D(args.g);
  float* patches = nullptr;
  if (plan.patch_floats > 0) {
    error = ScratchOf(scratch, static_cast<size_t>(plan.patch_floats), "FusedConv2D", &patches);
    if (error.failure()) return error;
  }
  return ToError(cuda::FusedConv2DOnStream(args, plan, patches, Data<float>(output), stream));
}

ffi::Error ActivationGrad(cudaStream_t stream, ffi::AnyBuffer grads, ffi::AnyBuffer outputs, ffi::RemainingArgs rest,
                          RetBuffer backprops, fused_activation_grad::Attrs attrs) {
  const float* features = nullptr;
  ffi::Error error = ActivationFeaturesOf(rest, &features);
  const int64_t n = static_cast<int64_t>(grads.element_count());
  if (error.failure() || n == 0) return error;
  return ToError(cuda::FusedActivationGradOnStream(Data<float>(grads), Data<float>(outputs), features, n,
                                                   attrs.activation, attrs.leaky_relu_alpha, Data<float>(backprops),
                                                   stream));
}

MO_XLA_FFI_HANDLER("MetalOpsFusedConv2D", "CUDA", Conv, BindConvBuffers<fused_conv2d::Attrs>(BindStreamScratch()));
MO_XLA_FFI_HANDLER("MetalOpsFusedActivationGrad", "CUDA", ActivationGrad,
                   BindConvBuffers<fused_activation_grad::Attrs>(BindStream()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
