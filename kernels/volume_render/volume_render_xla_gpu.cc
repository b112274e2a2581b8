// The CUDA handlers of the XLA kernels of MetalOpsVolumeRender /
// MetalOpsVolumeRenderGrad (kernels/volume_render/volume_render_xla.cc): the GPU
// kernel's launches with its checks (kernels/volume_render/volume_render_gpu.h) on
// XLA's stream, the check's two device words from XLA's scratch allocator.
// The forward reads the first invalid ray back with a synchronous copy on
// XLA's stream (as the GPU kernel does on TensorFlow's), so a negative or NaN
// sigma or a decreasing t is an XLA error with the CPU kernel's message.
// With validate=False it takes no words and reads nothing back.
// Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/volume_render/volume_render_gpu.h"
#include "kernels/volume_render/render_xla.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb,
                   ffi::AnyBuffer t, ffi::AnyBuffer background, RetBuffer out_rgb, RetBuffer depth,
                   RetBuffer opacity, RetBuffer weights, float early_termination, int64_t validate) {
  const int64_t rays = sigma.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "VolumeRender", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderForwardArgs<T> a = {RenderArgsOf<T>(rays, sigma, rgb, background, early_termination, validate),
                                          SamplesOf<T>(t), RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    return LaunchWithCheckWords(scratch, validate ? 2 : 0, "VolumeRender", [&](unsigned long long* words) {
      return cuda::VolumeRenderForwardChecked<T>(a, words, stream);
    });
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t,
                    ffi::AnyBuffer background, ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity,
                    ffi::AnyBuffer weights, ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth,
                    ffi::AnyBuffer grad_opacity, ffi::AnyBuffer grad_weights, RetBuffer grad_sigma,
                    RetBuffer grad_samples_rgb, RetBuffer grad_background, float early_termination,
                    int64_t validate) {
  const int64_t rays = sigma.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "VolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderBackwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, early_termination, validate),
        SamplesOf<T>(t),
        RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                         grad_sigma, grad_samples_rgb, grad_background)};
    return ToError(cuda::VolumeRenderBackward<T>(a, stream));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsVolumeRender", "CUDA", Forward, BindRenderAttrs(BindStreamScratchBuffers<4, 4>()));
MO_XLA_FFI_HANDLER("MetalOpsVolumeRenderGrad", "CUDA", Backward, BindRenderAttrs(BindStreamBuffers<12, 3>()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
