// The XLA kernels of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad
// (kernels/volume_render/render_xla_kernel.h) and their host handlers: the CPU functor of
// kernels/volume_render/volume_render_functor.h. The shape and attribute checks run
// while XLA compiles; the checks of sigma's and t's values run in the handler
// (as in the CPU kernel) and come back as XLA errors naming the ray.
#include "kernels/volume_render/render_xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/common/render_args.h"
#include "kernels/volume_render/volume_render_functor.h"
#include "kernels/volume_render/volume_render_spec.h"
#include "kernels/volume_render/render_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

// Inputs sigma, rgb, t, background (0 to 3) against each other.
absl::Status RayShapesOf(XlaOpKernelContext* ctx, const char* op, volume_render::RayShapes* shapes) {
  return checks::ToStatus(volume_render::InputShapes(op, InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2),
                                                     InputDims(ctx, 3), shapes));
}

// Per-sample values: [R, S].
checks::Dims SamplesDims(int64_t rays, int64_t samples) { return {rays, samples}; }

using VolumeRenderXlaOp = RenderXlaOp<volume_render::kForward, 4, RayShapesOf, SamplesDims>;
using VolumeRenderGradXlaOp =
    RenderGradXlaOp<volume_render::kBackward, 4, RayShapesOf, volume_render::GradInputShapes>;
MO_REGISTER_XLA_OP(Name(volume_render::kForward).TypeConstraint("T", kRenderTypes), VolumeRenderXlaOp);
MO_REGISTER_XLA_OP(Name(volume_render::kBackward).TypeConstraint("T", kRenderTypes), VolumeRenderGradXlaOp);

ffi::Error Forward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t, ffi::AnyBuffer background,
                   RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity,
                   RetBuffer weights, float early_termination) {
  const int64_t rays = sigma.dimensions()[0];
  return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "VolumeRender", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderForwardArgs<T> a = {xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, early_termination),
                                          {Data<T>(t)},
                                          xla_ffi::RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    return xla_ffi::ToError(VolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), a));
  });
}

ffi::Error Backward(ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t, ffi::AnyBuffer background,
                    ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity, ffi::AnyBuffer weights,
                    ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth, ffi::AnyBuffer grad_opacity,
                    ffi::AnyBuffer grad_weights, RetBuffer grad_sigma, RetBuffer grad_samples_rgb,
                    RetBuffer grad_background, float early_termination) {
  const int64_t rays = sigma.dimensions()[0];
  return xla_ffi::ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "VolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderBackwardArgs<T> a = {
        xla_ffi::RenderArgsOf<T>(rays, sigma, rgb, background, early_termination),
        {Data<T>(t)},
        xla_ffi::RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                                  grad_sigma, grad_samples_rgb, grad_background)};
    return xla_ffi::ToError(VolumeRenderFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), a));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsVolumeRender", "Host", Forward,
                   xla_ffi::BindBuffers<4, 4>().Attr<float>("early_termination"));
MO_XLA_FFI_HANDLER("MetalOpsVolumeRenderGrad", "Host", Backward,
                   xla_ffi::BindBuffers<12, 3>().Attr<float>("early_termination"));

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
