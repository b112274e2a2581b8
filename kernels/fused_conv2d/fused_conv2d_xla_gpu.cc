// The CUDA handlers of the XLA kernels of MetalOpsFusedConv2D /
// MetalOpsFusedActivationGrad (kernels/fused_conv2d/fused_conv2d_xla.cc): the GPU
// kernel's launches (kernels/fused_conv2d/fused_conv2d_gpu.h) on XLA's stream, to
// which the GEMM's cuBLAS handle is bound at every launch; the patch buffer
// from XLA's scratch allocator; TF32 as in the GPU kernel (TensorFlow's own
// setting). Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check`
// syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <vector>

#include "kernels/fused_conv2d/fused_conv2d_cuda.h"
#include "kernels/fused_conv2d/fused_conv2d_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/fused_conv2d/fused_conv2d_kernel.h"
#include "kernels/fused_conv2d/fused_conv2d_xla.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Conv(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer input, ffi::AnyBuffer filter,
                ffi::RemainingArgs rest, RetBuffer output, ConvCallAttrs attrs) {
  FusedConv2DArgs args;
  ffi::Error error = FusedConv2DArgsOf(input, filter, rest, output, attrs, &args);
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
                          RetBuffer backprops, int64_t activation, float alpha) {
  const float* features = nullptr;
  ffi::Error error = ActivationFeaturesOf(rest, &features);
  const int64_t n = static_cast<int64_t>(grads.element_count());
  if (error.failure() || n == 0) return error;
  return ToError(cuda::FusedActivationGradOnStream(Data<float>(grads), Data<float>(outputs), features, n,
                                                   static_cast<int>(activation), alpha, Data<float>(backprops),
                                                   stream));
}

MO_XLA_FFI_HANDLER("MetalOpsFusedConv2D", "CUDA", Conv, BindConv(BindStreamScratch()));
MO_XLA_FFI_HANDLER("MetalOpsFusedActivationGrad", "CUDA", ActivationGrad, BindActivationGrad(BindStream()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
