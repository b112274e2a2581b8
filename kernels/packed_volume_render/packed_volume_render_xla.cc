// The XLA kernels of MetalOpsPackedVolumeRender / MetalOpsPackedVolumeRenderGrad
// (kernels/xla/render_xla_kernel.h), which emit the calls that their handlers take, with the
// op's attributes (FfiAttrsOf): the host handlers of packed_volume_render_cpu.cc, the CUDA
// handlers of packed_volume_render_cuda.cc. The outputs' sizes follow from the
// inputs' shapes (R rays, N samples), so XLA compiles them as they are; the shape and attribute
// checks run while XLA compiles, the checks of the ray layout (offsets, counts) and of the samples'
// values in the handler, as in the CPU kernel, and come back as XLA errors naming the ray.
#include "kernels/xla/render_xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/packed_volume_render/packed_volume_render.h"

namespace mo {
namespace xla_kernels {
namespace {

// Inputs sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background (0 to 6).
absl::Status PackedRayShapesOf(XlaOpKernelContext* ctx, const char* op, render::RayShapes* shapes) {
  return checks::ToStatus(packed_volume_render::InputShapes(op, InputDims(ctx, 0), InputDims(ctx, 1),
                                                            InputDims(ctx, 2), InputDims(ctx, 3), InputDims(ctx, 4),
                                                            InputDims(ctx, 5), InputDims(ctx, 6), shapes));
}

// Per-sample values: [N].
checks::Dims PackedSamplesDims(int64_t /*rays*/, int64_t samples) { return {samples}; }

using PackedVolumeRenderXlaOp =
    RenderXlaOp<packed_volume_render::Attrs, packed_volume_render::kForward, 7, PackedRayShapesOf, PackedSamplesDims>;
using PackedVolumeRenderGradXlaOp = RenderGradXlaOp<packed_volume_render::GradAttrs, packed_volume_render::kBackward, 7,
                                                    PackedRayShapesOf, packed_volume_render::GradInputShapes>;
MO_REGISTER_XLA_OP(Name(packed_volume_render::kForward).TypeConstraint("T", kRenderTypes), PackedVolumeRenderXlaOp);
MO_REGISTER_XLA_OP(Name(packed_volume_render::kBackward).TypeConstraint("T", kRenderTypes),
                   PackedVolumeRenderGradXlaOp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
