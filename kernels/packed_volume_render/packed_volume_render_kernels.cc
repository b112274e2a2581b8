// The CPU registrations of MetalOpsPackedVolumeRender / ...Grad: the kernel
// classes of kernels/packed_volume_render/packed_volume_render_kernel.h with the CPU functor of
// kernels/packed_volume_render/packed_volume_render_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/packed_volume_render/packed_volume_render_functor.h"
#include "kernels/packed_volume_render/packed_volume_render_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#if MO_XLA
#include "kernels/common/render_args.h"
#include "kernels/volume_render/render_xla.h"
#endif

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;
using ::tensorflow::DEVICE_CPU;

MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_CPU, CPUDevice, double);


}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/packed_volume_render/packed_volume_render_xla.cc emits.
namespace mo::xla_kernels {
namespace {

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
}  // namespace mo::xla_kernels
#endif  // MO_XLA
