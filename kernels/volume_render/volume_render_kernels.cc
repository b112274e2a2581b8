// The CPU registrations of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad:
// the kernel class kernels/volume_render/volume_render_kernel.h with the CPU functor of
// kernels/volume_render/volume_render_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/volume_render/volume_render_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/volume_render/volume_render_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#if MO_XLA
#include "kernels/common/render_args.h"
#include "kernels/volume_render/render_xla.h"
#endif

namespace mo {

using ::tensorflow::DEVICE_CPU;
using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_CPU, CPUDevice, double);


}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/volume_render/volume_render_xla.cc emits.
namespace mo::xla_kernels {
namespace {

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
}  // namespace mo::xla_kernels
#endif  // MO_XLA
