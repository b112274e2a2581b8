// The CUDA handlers of the XLA kernels of MetalOpsPackedVolumeRender /
// MetalOpsPackedVolumeRenderGrad (kernels/packed_volume_render/packed_volume_render_xla.cc):
// the GPU kernel's launches with their checks
// (kernels/packed_volume_render/packed_volume_render_gpu.h) on XLA's stream, the check's
// device word from XLA's scratch allocator. The kernels check the ray layout
// (offsets, counts) and the samples on the device and lower the word to the
// first invalid ray; the handler reads it back with a synchronous copy on
// XLA's stream (as the GPU kernel does on TensorFlow's), so an invalid ray is
// an XLA error with the CPU kernel's message, never NaN outputs in silence.
// With validate=False the handler takes no word and reads nothing back: it
// only queues the kernel, and XLA's launches run ahead of the GPU.
// Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/packed_volume_render/packed_volume_render_gpu.h"
#include "kernels/volume_render/render_xla.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb,
                   ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends, ffi::AnyBuffer offsets, ffi::AnyBuffer counts,
                   ffi::AnyBuffer background, RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity,
                   RetBuffer weights, float early_termination, int64_t validate) {
  const int64_t rays = counts.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "PackedVolumeRender", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderForwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, early_termination, validate),
        SamplesOf<T>(t_starts, t_ends, offsets, counts), RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    return LaunchWithCheckWords(scratch, validate ? 1 : 0, "PackedVolumeRender", [&](unsigned long long* word) {
      return cuda::PackedVolumeRenderForward<T>(a, word, stream);
    });
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb,
                    ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends, ffi::AnyBuffer offsets, ffi::AnyBuffer counts,
                    ffi::AnyBuffer background, ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity,
                    ffi::AnyBuffer weights, ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth,
                    ffi::AnyBuffer grad_opacity, ffi::AnyBuffer grad_weights, RetBuffer grad_sigma,
                    RetBuffer grad_samples_rgb, RetBuffer grad_background, float early_termination,
                    int64_t validate) {
  const int64_t rays = counts.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "PackedVolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderBackwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, early_termination, validate),
        SamplesOf<T>(t_starts, t_ends, offsets, counts),
        RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                         grad_sigma, grad_samples_rgb, grad_background)};
    return LaunchWithCheckWords(scratch, validate ? 1 : 0, "PackedVolumeRenderGrad", [&](unsigned long long* word) {
      return cuda::PackedVolumeRenderBackward<T>(a, word, stream);
    });
  });
}

MO_XLA_FFI_HANDLER("MetalOpsPackedVolumeRender", "CUDA", Forward, BindRenderAttrs(BindStreamScratchBuffers<7, 4>()));
MO_XLA_FFI_HANDLER("MetalOpsPackedVolumeRenderGrad", "CUDA", Backward,
                   BindRenderAttrs(BindStreamScratchBuffers<15, 3>()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
