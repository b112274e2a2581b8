// The XLA kernels of MetalOpsPackedVolumeRender / MetalOpsPackedVolumeRenderGrad
// (kernels/volume_render/render_xla_kernel.h) and their host handlers: the CPU functor of
// kernels/packed_volume_render/packed_volume_render_functor.h. The outputs' sizes follow from the
// inputs' shapes (R rays, N samples), so XLA compiles them as they are; the
// shape and attribute checks run while XLA compiles, the checks of the ray
// layout (offsets, counts) and of the samples' values in the handler, as in
// the CPU kernel, and come back as XLA errors naming the ray.
#include "kernels/volume_render/render_xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/common/render_args.h"
#include "kernels/packed_volume_render/packed_volume_render_functor.h"
#include "kernels/packed_volume_render/packed_volume_render_spec.h"
#include "kernels/volume_render/render_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

// Inputs sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background (0 to 6).
absl::Status RayShapesOf(XlaOpKernelContext* ctx, const char* op, packed_volume_render::RayShapes* shapes) {
  return checks::ToStatus(packed_volume_render::InputShapes(op, InputDims(ctx, 0), InputDims(ctx, 1),
                                                            InputDims(ctx, 2), InputDims(ctx, 3), InputDims(ctx, 4),
                                                            InputDims(ctx, 5), InputDims(ctx, 6), shapes));
}

// Per-sample values: [N].
checks::Dims SamplesDims(int64_t /*rays*/, int64_t samples) { return {samples}; }

using PackedVolumeRenderXlaOp = RenderXlaOp<packed_volume_render::kForward, 7, RayShapesOf, SamplesDims>;
using PackedVolumeRenderGradXlaOp =
    RenderGradXlaOp<packed_volume_render::kBackward, 7, RayShapesOf, packed_volume_render::GradInputShapes>;
MO_REGISTER_XLA_OP(Name(packed_volume_render::kForward).TypeConstraint("T", kRenderTypes), PackedVolumeRenderXlaOp);
MO_REGISTER_XLA_OP(Name(packed_volume_render::kBackward).TypeConstraint("T", kRenderTypes),
                   PackedVolumeRenderGradXlaOp);

ffi::Error Forward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends,
                   ffi::AnyBuffer offsets, ffi::AnyBuffer counts, ffi::AnyBuffer background,
                   RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity,
                   RetBuffer weights, float early_termination) {
  const int64_t rays = counts.dimensions()[0];
  return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "PackedVolumeRender", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderForwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, early_termination),
        xla_ffi::PackedSamplesOf<T>(t_starts, t_ends, offsets, counts),
        xla_ffi::RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    return xla_ffi::ToError(PackedVolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), a));
  });
}

ffi::Error Backward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends,
                    ffi::AnyBuffer offsets, ffi::AnyBuffer counts, ffi::AnyBuffer background,
                    ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity, ffi::AnyBuffer weights,
                    ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth, ffi::AnyBuffer grad_opacity,
                    ffi::AnyBuffer grad_weights, RetBuffer grad_sigma, RetBuffer grad_samples_rgb,
                    RetBuffer grad_background, float early_termination) {
  const int64_t rays = counts.dimensions()[0];
  const char* op = "PackedVolumeRenderGrad";
  return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, op, [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderBackwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, early_termination),
        xla_ffi::PackedSamplesOf<T>(t_starts, t_ends, offsets, counts),
        xla_ffi::RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                                  grad_sigma, grad_samples_rgb, grad_background)};
    return xla_ffi::ToError(PackedVolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), a));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsPackedVolumeRender", "Host", Forward,
                   xla_ffi::BindBuffers<7, 4>().Attr<float>("early_termination"));
MO_XLA_FFI_HANDLER("MetalOpsPackedVolumeRenderGrad", "Host", Backward,
                   xla_ffi::BindBuffers<15, 3>().Attr<float>("early_termination"));

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
