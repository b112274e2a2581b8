// MetalOpsPackedVolumeRender and its backward MetalOpsPackedVolumeRenderGrad:
// VolumeRender over packed samples (RayMarch's output). Formulas:
// kernels/packed_volume_render/packed_volume_render.h (on kernels/common/volume_render_math.h);
// checks and attributes: the same header; shape functions shared with
// VolumeRender: kernels/framework/render_op.h. Python:
// python/metal_ops/packed_volume_render.py.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <array>

#include "kernels/framework/render_op.h"
#include "kernels/packed_volume_render/packed_volume_render.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

// The forward's inputs, the backward's first ones.
#define MO_PACKED_VOLUME_RENDER_INPUTS \
  .Input("sigma: T")                   \
      .Input("rgb: T")                 \
      .Input("t_starts: T")            \
      .Input("t_ends: T")              \
      .Input("ray_offsets: int32")     \
      .Input("ray_counts: int32")      \
      .Input("background: T")

namespace mo {
namespace render_op {
namespace {

// Checks sigma [N], rgb [N, 3], t_starts [N], t_ends [N], ray_offsets [R],
// ray_counts [R], background [3] or [R, 3].
absl::Status PackedInputShapes(InferenceContext* c, Shapes* shapes) {
  std::array<ShapeHandle, 6> in;
  TF_RETURN_IF_ERROR(checks::InputRanks(c, 0, {1, 2, 1, 1, 1, 1}, &in));
  const auto& [sigma, rgb, t_starts, t_ends, offsets, counts] = in;
  DimensionHandle n = c->Dim(sigma, 0);
  TF_RETURN_IF_ERROR(c->Merge(n, c->Dim(rgb, 0), &n));
  TF_RETURN_IF_ERROR(c->Merge(n, c->Dim(t_starts, 0), &n));
  TF_RETURN_IF_ERROR(c->Merge(n, c->Dim(t_ends, 0), &n));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(rgb, 1), 3, &unused));
  DimensionHandle r = c->Dim(offsets, 0);
  TF_RETURN_IF_ERROR(c->Merge(r, c->Dim(counts, 0), &r));
  TF_RETURN_IF_ERROR(BackgroundShape(c, 6, &r));
  *shapes = {r, c->Vector(n), c->Vector(0)};
  return absl::OkStatus();
}

}  // namespace
}  // namespace render_op
}  // namespace mo

REGISTER_OP("MetalOpsPackedVolumeRender")
    MO_PACKED_VOLUME_RENDER_INPUTS
    MO_RENDER_OUTPUTS
    MO_OP_ATTRS(MO_PACKED_VOLUME_RENDER_ATTRS)
    .SetShapeFn(mo::render_op::ForwardShapeFn<mo::packed_volume_render::Attrs, mo::render_op::PackedInputShapes>)
    .Doc(R"doc(
Emission-absorption volume rendering of R rays over N packed samples
(kernels/packed_volume_render/packed_volume_render.h): VolumeRender's formulas, with ray r
owning samples [ray_offsets[r], ray_offsets[r] + ray_counts[r]).

sigma: [N] densities, >= 0.
rgb: [N, 3] sample colours.
t_starts, t_ends: [N] each sample's interval along its ray, t_end >= t_start.
ray_offsets, ray_counts: [R] int32; ray_offsets is the exclusive prefix sum of
  ray_counts and the counts sum to N (as MetalOpsRayMarch returns them).
background: [3] or [R, 3] colour composited behind the ray (weight 1 - opacity).
out_rgb: [R, 3] sum_i w_i c_i + background (1 - opacity).
depth: [R] sum_i w_i (t_start_i + t_end_i) / 2.
opacity: [R] sum_i w_i.
weights: [N] w_i = T_i (1 - exp(-sigma_i (t_end_i - t_start_i))) when
  return_weights, else [0].
early_termination: samples from the first one whose transmittance is below this
  threshold on are skipped (in [0, 1]; 0 disables).
validate: raise InvalidArgument for the first invalid ray. False: invalid rays
  render NaN and the op raises nothing; on a CUDA GPU it then reads nothing
  back, so the host does not wait for the kernel.
)doc");

REGISTER_OP("MetalOpsPackedVolumeRenderGrad")
    MO_PACKED_VOLUME_RENDER_INPUTS
    MO_RENDER_GRAD_INPUTS_AND_OUTPUTS
    MO_OP_ATTRS(MO_PACKED_VOLUME_RENDER_GRAD_ATTRS)
    .SetShapeFn(
        mo::render_op::BackwardShapeFn<mo::packed_volume_render::GradAttrs, mo::render_op::PackedInputShapes, 7>)
    .Doc(R"doc(
Backward of MetalOpsPackedVolumeRender (VolumeRender's suffix trick per ray).
Takes the forward's inputs and per-ray outputs plus the incoming gradients;
weights and grad_weights are [N] when the forward returned weights, else [0].
grad_background is per ray ([R, 3]); the Python gradient sums it over rays
when the background was one colour [3]. t_starts, t_ends, ray_offsets and
ray_counts get no gradient. validate is the forward's.
)doc");
