// What the CUDA paths of FusedConv2D that TensorFlow runs share (the GPU
// kernel, kernels/fused_conv2d/fused_conv2d_gpu.cc, and the XLA CUDA handler,
// kernels/fused_conv2d/fused_conv2d_xla_gpu.cc): the launch of a checked call on a
// stream, its patch buffer (plan.patch_floats floats) from the caller's
// allocator. The GEMM's cuBLAS handle is bound to that stream by the
// launcher (kernels/cuda/cublas_gemm.cu.cc), and uses TF32 tensor cores
// exactly when TensorFlow does for its own float32 matrix products and
// convolutions (tf.config.experimental.enable_tensor_float_32_execution).
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_GPU_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_GPU_H_

#include "kernels/fused_conv2d/fused_conv2d_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/fused_conv2d/fused_conv2d_kernel.h"
#include "tsl/platform/tensor_float_32_utils.h"

namespace mo {
namespace cuda {

inline absl::Status FusedConv2DOnStream(const FusedConv2DArgs& args, const FusedConv2DPlan& plan, float* patches,
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

inline absl::Status FusedActivationGradOnStream(const float* gradients, const float* outputs, const float* features,
                                                int64_t n, int act, float alpha, float* backprops,
                                                cudaStream_t stream) {
  return LaunchStatus("FusedActivationGrad",
                      LaunchFusedActivationGrad(gradients, outputs, features, backprops, n, act, alpha, stream));
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_GPU_H_
