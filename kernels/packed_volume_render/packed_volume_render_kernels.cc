// The CPU registrations of MetalOpsPackedVolumeRender / ...Grad: the kernel
// classes of kernels/packed_volume_render/packed_volume_render_kernel.h with the CPU functor of
// kernels/packed_volume_render/packed_volume_render_functor.h (with XLA's host handlers:
// kernels/volume_render/render_xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/packed_volume_render/packed_volume_render_functor.h"
#include "kernels/packed_volume_render/packed_volume_render_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/volume_render/render_xla_host.h"  // MO_XLA

MO_REGISTER_CPU_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, double);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls
// kernels/packed_volume_render/packed_volume_render_xla.cc emits.
namespace mo::xla_kernels {

using PackedVolumeRenderOnHost =
    RenderOnHost<PackedVolumeRenderFunctor, PackedVolumeRenderForwardArgs, PackedVolumeRenderBackwardArgs,
                 packed_volume_render::kForward, packed_volume_render::kBackward, ffi::AnyBuffer, ffi::AnyBuffer,
                 ffi::AnyBuffer, ffi::AnyBuffer>;
MO_XLA_FFI_HANDLER(packed_volume_render::kForward, "Host", PackedVolumeRenderOnHost::Forward,
                   PackedVolumeRenderOnHost::ForwardBinding());
MO_XLA_FFI_HANDLER(packed_volume_render::kBackward, "Host", PackedVolumeRenderOnHost::Backward,
                   PackedVolumeRenderOnHost::BackwardBinding());

}  // namespace mo::xla_kernels
#endif  // MO_XLA
