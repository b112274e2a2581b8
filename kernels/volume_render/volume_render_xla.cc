// The XLA kernels of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad
// (kernels/xla/render_xla_kernel.h), which emit the calls that their handlers
// take, with the op's attributes (FfiAttrsOf): the host handlers of
// volume_render_cpu.cc, the CUDA handlers of volume_render_cuda.cc. The shape
// and attribute checks run while XLA compiles; the checks of sigma's and t's
// values run in the handler (as in the CPU kernel) and come back as XLA errors
// naming the ray.
#include "kernels/xla/render_xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/volume_render/volume_render.h"

namespace mo {
namespace xla_kernels {
namespace {

// Inputs sigma, rgb, t, background (0 to 3) against each other.
absl::Status RayShapesOf(XlaOpKernelContext* ctx, const char* op, render::RayShapes* shapes) {
  return checks::ToStatus(volume_render::InputShapes(op, InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2),
                                                     InputDims(ctx, 3), shapes));
}

// Per-sample values: [R, S].
checks::Dims SamplesDims(int64_t rays, int64_t samples) { return {rays, samples}; }

using VolumeRenderXlaOp = RenderXlaOp<volume_render::Attrs, volume_render::kForward, 4, RayShapesOf, SamplesDims>;
using VolumeRenderGradXlaOp = RenderGradXlaOp<volume_render::GradAttrs, volume_render::kBackward, 4, RayShapesOf,
                                              volume_render::GradInputShapes>;
MO_REGISTER_XLA_OP(Name(volume_render::kForward).TypeConstraint("T", kRenderTypes), VolumeRenderXlaOp);
MO_REGISTER_XLA_OP(Name(volume_render::kBackward).TypeConstraint("T", kRenderTypes), VolumeRenderGradXlaOp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
