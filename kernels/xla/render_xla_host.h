// XLA's host handlers of the two volume renderers, one
// template for both, registered in kernels/<op>/<op>_cpu.cc: the op's CPU
// functor (Functor<Eigen::ThreadPoolDevice, T>) on its argument structs
// (ForwardArgs<T> / BackwardArgs<T>, kernels/common/render_args.h) from the
// call's buffers (kernels/xla/render_xla.h) and attributes (the op's Attrs
// and GradAttrs, bound whole: MO_XLA_FFI_ATTRS). The op's sample buffers
// (SampleBuffers: t for samples [R, S]; t_starts, t_ends,
// ray_offsets, ray_counts) stand between rgb and background; `forward` and
// `backward` name the ops in the handlers' errors.
#ifndef MO_KERNELS_XLA_RENDER_XLA_HOST_H_
#define MO_KERNELS_XLA_RENDER_XLA_HOST_H_

#include "kernels/xla/xla_host.h"  // MO_XLA

#if MO_XLA
#include <cstdint>

#include "kernels/xla/render_xla.h"

namespace mo {
namespace xla_kernels {

template <template <typename, typename> class Functor, template <typename> class ForwardArgs,
          template <typename> class BackwardArgs, typename Attrs, typename GradAttrs, const char* forward,
          const char* backward, typename... SampleBuffers>
struct RenderOnHost {
  static constexpr int kSampleBuffers = sizeof...(SampleBuffers);

  static ffi::Error Forward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, SampleBuffers... samples,
                            ffi::AnyBuffer background, RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity,
                            RetBuffer weights, Attrs attrs) {
    const int64_t rays = out_rgb->dimensions()[0];
    return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, forward, [&](auto type) {
      using T = decltype(type);
      const ForwardArgs<T> a = {
          xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, attrs.early_termination, attrs.validate),
          xla_ffi::SamplesOf<T>(samples...), xla_ffi::RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
      return xla_ffi::ToError(Functor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), a));
    });
  }

  static ffi::Error Backward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, SampleBuffers... samples,
                             ffi::AnyBuffer background, ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth,
                             ffi::AnyBuffer opacity, ffi::AnyBuffer weights, ffi::AnyBuffer grad_rgb,
                             ffi::AnyBuffer grad_depth, ffi::AnyBuffer grad_opacity, ffi::AnyBuffer grad_weights,
                             RetBuffer grad_sigma, RetBuffer grad_samples_rgb, RetBuffer grad_background,
                             GradAttrs attrs) {
    const int64_t rays = out_rgb.dimensions()[0];
    return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, backward, [&](auto type) {
      using T = decltype(type);
      const BackwardArgs<T> a = {
          xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, attrs.early_termination, attrs.validate),
          xla_ffi::SamplesOf<T>(samples...),
          xla_ffi::RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                                    grad_sigma, grad_samples_rgb, grad_background)};
      return xla_ffi::ToError(Functor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), a));
    });
  }

  // The calls' bindings: the buffers in the ops' order, then the attributes.
  static auto ForwardBinding() { return xla_ffi::BindBuffers<3 + kSampleBuffers, 4>().template Attrs<Attrs>(); }
  static auto BackwardBinding() {
    return xla_ffi::BindBuffers<11 + kSampleBuffers, 3>().template Attrs<GradAttrs>();
  }
};

}  // namespace xla_kernels
}  // namespace mo

// The host handlers of the renderer OP (its namespace: kForward, kBackward,
// Attrs, GradAttrs), at namespace scope: RenderOnHost<FUNCTOR, FORWARD_ARGS,
// BACKWARD_ARGS, ..., SampleBuffers...> registered under the op's names.
#define MO_RENDER_HOST_HANDLERS(OP, FUNCTOR, FORWARD_ARGS, BACKWARD_ARGS, ...)                                     \
  MO_RENDER_XLA_FFI_ATTRS(OP);                                                                                    \
  namespace mo::xla_kernels {                                                                                     \
  using OP##_on_host = RenderOnHost<FUNCTOR, FORWARD_ARGS, BACKWARD_ARGS, OP::Attrs, OP::GradAttrs, OP::kForward,  \
                                    OP::kBackward, __VA_ARGS__>;                                                  \
  MO_XLA_FFI_HANDLER(OP::kForward, "Host", OP##_on_host::Forward, OP##_on_host::ForwardBinding());                \
  MO_XLA_FFI_HANDLER(OP::kBackward, "Host", OP##_on_host::Backward, OP##_on_host::BackwardBinding());             \
  }                                                                                                               \
  static_assert(true, "a declaration ends with a semicolon")
#endif  // MO_XLA

#endif  // MO_KERNELS_XLA_RENDER_XLA_HOST_H_
