// XLA's host handlers of the renderers (VolumeRender, PackedVolumeRender), one
// template for both, registered in kernels/<op>/<op>_kernels.cc: the op's CPU
// functor (Functor<Eigen::ThreadPoolDevice, T>) on its argument structs
// (ForwardArgs<T> / BackwardArgs<T>, kernels/common/render_args.h) from the
// call's buffers (kernels/volume_render/render_xla.h). The op's sample
// buffers (SampleBuffers: VolumeRender's t; PackedVolumeRender's t_starts,
// t_ends, ray_offsets, ray_counts) stand between rgb and background; `forward`
// and `backward` name the ops in the handlers' errors.
#ifndef MO_KERNELS_VOLUME_RENDER_RENDER_XLA_HOST_H_
#define MO_KERNELS_VOLUME_RENDER_RENDER_XLA_HOST_H_

#include "kernels/xla/xla_host.h"  // MO_XLA

#if MO_XLA
#include <cstdint>

#include "kernels/volume_render/render_xla.h"

namespace mo {
namespace xla_kernels {

template <template <typename, typename> class Functor, template <typename> class ForwardArgs,
          template <typename> class BackwardArgs, const char* forward, const char* backward,
          typename... SampleBuffers>
struct RenderOnHost {
  static constexpr int kSampleBuffers = sizeof...(SampleBuffers);

  static ffi::Error Forward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, SampleBuffers... samples,
                            ffi::AnyBuffer background, RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity,
                            RetBuffer weights, float early_termination, int64_t validate) {
    const int64_t rays = out_rgb->dimensions()[0];
    return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, forward, [&](auto type) {
      using T = decltype(type);
      const ForwardArgs<T> a = {xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, early_termination, validate),
                                xla_ffi::SamplesOf<T>(samples...),
                                xla_ffi::RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
      return xla_ffi::ToError(Functor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), a));
    });
  }

  static ffi::Error Backward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, SampleBuffers... samples,
                             ffi::AnyBuffer background, ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth,
                             ffi::AnyBuffer opacity, ffi::AnyBuffer weights, ffi::AnyBuffer grad_rgb,
                             ffi::AnyBuffer grad_depth, ffi::AnyBuffer grad_opacity, ffi::AnyBuffer grad_weights,
                             RetBuffer grad_sigma, RetBuffer grad_samples_rgb, RetBuffer grad_background,
                             float early_termination, int64_t validate) {
    const int64_t rays = out_rgb.dimensions()[0];
    return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, backward, [&](auto type) {
      using T = decltype(type);
      const BackwardArgs<T> a = {
          xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, early_termination, validate),
          xla_ffi::SamplesOf<T>(samples...),
          xla_ffi::RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                                    grad_sigma, grad_samples_rgb, grad_background)};
      return xla_ffi::ToError(Functor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), a));
    });
  }

  // The calls' bindings: the buffers in the ops' order, then the attributes.
  static auto ForwardBinding() { return xla_ffi::BindRenderAttrs(xla_ffi::BindBuffers<3 + kSampleBuffers, 4>()); }
  static auto BackwardBinding() { return xla_ffi::BindRenderAttrs(xla_ffi::BindBuffers<11 + kSampleBuffers, 3>()); }
};

}  // namespace xla_kernels
}  // namespace mo
#endif  // MO_XLA

#endif  // MO_KERNELS_VOLUME_RENDER_RENDER_XLA_HOST_H_
