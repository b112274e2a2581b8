// The CPU registrations of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad:
// the kernel class kernels/volume_render/volume_render_kernel.h with the CPU functor of
// kernels/volume_render/volume_render_functor.h (with XLA's host handlers:
// kernels/volume_render/render_xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/volume_render/volume_render_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/volume_render/volume_render_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/volume_render/render_xla_host.h"  // MO_XLA

MO_REGISTER_CPU_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, double);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/volume_render/volume_render_xla.cc emits.
namespace mo::xla_kernels {

using VolumeRenderOnHost = RenderOnHost<VolumeRenderFunctor, VolumeRenderForwardArgs, VolumeRenderBackwardArgs,
                                        volume_render::kForward, volume_render::kBackward, ffi::AnyBuffer>;
MO_XLA_FFI_HANDLER(volume_render::kForward, "Host", VolumeRenderOnHost::Forward, VolumeRenderOnHost::ForwardBinding());
MO_XLA_FFI_HANDLER(volume_render::kBackward, "Host", VolumeRenderOnHost::Backward,
                   VolumeRenderOnHost::BackwardBinding());

}  // namespace mo::xla_kernels
#endif  // MO_XLA
