// What the two volume renderers' XLA handlers (the
// host's in kernels/xla/render_xla_host.h, the CUDA ones in their CUDA files) share:
// the kernels' argument structs (kernels/common/render_args.h) from the
// call's buffers, whose shapes the XLA kernel checked while XLA compiled.
// Buffers in the ops' order: the inputs, then the results.
#ifndef MO_KERNELS_XLA_RENDER_XLA_H_
#define MO_KERNELS_XLA_RENDER_XLA_H_

#include <cstdint>

#include "kernels/common/render_args.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"

// The attributes of the renderer OP (its namespace: ::mo::OP::Attrs of the
// forward, ::mo::OP::GradAttrs of the backward), each one handler parameter
// (MO_XLA_FFI_ATTRS), at namespace scope.
#define MO_RENDER_XLA_FFI_ATTRS(OP)     \
  MO_XLA_FFI_ATTRS(::mo::OP::Attrs);    \
  MO_XLA_FFI_ATTRS(::mo::OP::GradAttrs)

namespace mo {
namespace xla_ffi {

// The rays of a call: `rays` rays over sigma's samples (sigma [R, S], or [N]
// packed), background [3] or [R, 3].
template <typename T>
RenderArgs<T> RenderArgsOf(int64_t rays, const ffi::AnyBuffer& sigma, const ffi::AnyBuffer& rgb,
                           const ffi::AnyBuffer& background, float early_termination, bool validate) {
  const int64_t samples = sigma.dimensions().size() == 2 ? sigma.dimensions()[1] : sigma.dimensions()[0];
  return {rays, samples, background.dimensions().size() == 2,
          early_termination, Data<T>(sigma), Data<T>(rgb), Data<T>(background), validate};
}

// The forward's outputs; no weights where the op returns an empty tensor for them.
template <typename T>
RenderOutputs<T> RenderOutputsOf(RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity, RetBuffer weights) {
  return {Data<T>(out_rgb), Data<T>(depth), Data<T>(opacity), weights->element_count() > 0 ? Data<T>(weights) : nullptr};
}

// The backward's other inputs and outputs; the weights' gradient where the
// forward returned weights and there are samples (GradInputShapes).
template <typename T>
RenderGrads<T> RenderGradsOf(const ffi::AnyBuffer& out_rgb, const ffi::AnyBuffer& depth, const ffi::AnyBuffer& opacity,
                             const ffi::AnyBuffer& weights, const ffi::AnyBuffer& grad_rgb,
                             const ffi::AnyBuffer& grad_depth, const ffi::AnyBuffer& grad_opacity,
                             const ffi::AnyBuffer& grad_weights, RetBuffer grad_sigma, RetBuffer grad_samples_rgb,
                             RetBuffer grad_background) {
  const bool has_weight_grad = weights.element_count() > 0;
  return {Data<T>(out_rgb),     Data<T>(depth),
          Data<T>(opacity),     has_weight_grad ? Data<T>(weights) : nullptr,
          Data<T>(grad_rgb),    Data<T>(grad_depth),
          Data<T>(grad_opacity), has_weight_grad ? Data<T>(grad_weights) : nullptr,
          Data<T>(grad_sigma),  Data<T>(grad_samples_rgb),
          Data<T>(grad_background)};
}

// Samples [R, S]: t [R, S + 1].
template <typename T>
VolumeRenderIntervals<T> SamplesOf(const ffi::AnyBuffer& t) {
  return {Data<T>(t)};
}

// Packed samples: t_starts / t_ends [N], ray_offsets / ray_counts [R].
template <typename T>
PackedSamples<T> SamplesOf(const ffi::AnyBuffer& t_starts, const ffi::AnyBuffer& t_ends, const ffi::AnyBuffer& offsets,
                           const ffi::AnyBuffer& counts) {
  return {Data<T>(t_starts), Data<T>(t_ends), Data<int32_t>(offsets), Data<int32_t>(counts)};
}

}  // namespace xla_ffi
}  // namespace mo

#endif  // MO_KERNELS_XLA_RENDER_XLA_H_
