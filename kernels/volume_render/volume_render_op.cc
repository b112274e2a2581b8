// MetalOpsVolumeRender and its backward MetalOpsVolumeRenderGrad, their
// attributes from the op's declaration (volume_render.h). Formulas:
// kernels/common/volume_render_math.h. Python: python/metal_ops/volume_render.py.
// Shape functions shared with PackedVolumeRender: kernels/framework/render_op.h.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <array>

#include "kernels/framework/render_op.h"
#include "kernels/volume_render/volume_render.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

// The forward's inputs, the backward's first ones.
#define MO_VOLUME_RENDER_INPUTS \
  .Input("sigma: T")            \
      .Input("rgb: T")          \
      .Input("t: T")            \
      .Input("background: T")

namespace mo {
namespace render_op {
namespace {

// Checks sigma [R, S], rgb [R, S, 3], t [R, S + 1], background [3] or [R, 3].
absl::Status VolumeRenderInputShapes(InferenceContext* c, Shapes* shapes) {
  std::array<ShapeHandle, 3> in;
  TF_RETURN_IF_ERROR(checks::InputRanks(c, 0, {2, 3, 2}, &in));
  const auto& [sigma, rgb, t] = in;
  DimensionHandle r = c->Dim(sigma, 0);
  DimensionHandle s = c->Dim(sigma, 1);
  TF_RETURN_IF_ERROR(c->Merge(r, c->Dim(rgb, 0), &r));
  TF_RETURN_IF_ERROR(c->Merge(s, c->Dim(rgb, 1), &s));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(rgb, 2), 3, &unused));
  TF_RETURN_IF_ERROR(c->Merge(r, c->Dim(t, 0), &r));
  DimensionHandle s_plus_one;
  TF_RETURN_IF_ERROR(c->Add(s, 1, &s_plus_one));
  TF_RETURN_IF_ERROR(c->Merge(s_plus_one, c->Dim(t, 1), &s_plus_one));
  TF_RETURN_IF_ERROR(c->Subtract(s_plus_one, 1, &s));
  TF_RETURN_IF_ERROR(BackgroundShape(c, 3, &r));
  *shapes = {r, c->Matrix(r, s), c->Matrix(r, 0)};
  return absl::OkStatus();
}

}  // namespace
}  // namespace render_op
}  // namespace mo

REGISTER_OP("MetalOpsVolumeRender")
    MO_VOLUME_RENDER_INPUTS
    MO_RENDER_OUTPUTS
    MO_OP_ATTRS(MO_VOLUME_RENDER_ATTRS)
    .SetShapeFn(mo::render_op::ForwardShapeFn<mo::volume_render::Attrs, mo::render_op::VolumeRenderInputShapes>)
    .Doc(R"doc(
Emission-absorption volume rendering of R rays with S samples each
(formulas in kernels/common/volume_render_math.h).

sigma: [R, S] densities, >= 0.
rgb: [R, S, 3] sample colours.
t: [R, S + 1] sample interval boundaries along each ray, non-decreasing.
background: [3] or [R, 3] colour composited behind the ray (weight 1 - opacity).
out_rgb: [R, 3] sum_i w_i c_i + background (1 - opacity).
depth: [R] sum_i w_i (t_i + t_{i+1}) / 2.
opacity: [R] sum_i w_i.
weights: [R, S] w_i = T_i (1 - exp(-sigma_i delta_i)) when return_weights, else [R, 0].
early_termination: samples from the first one whose transmittance is below this
  threshold on are skipped (in [0, 1]; 0 disables).
validate: raise InvalidArgument for the first invalid ray. False: invalid rays
  render NaN and the op raises nothing; on a CUDA GPU it then reads nothing
  back, so the host does not wait for the kernel.
)doc");

REGISTER_OP("MetalOpsVolumeRenderGrad")
    MO_VOLUME_RENDER_INPUTS
    MO_RENDER_GRAD_INPUTS_AND_OUTPUTS
    MO_OP_ATTRS(MO_VOLUME_RENDER_GRAD_ATTRS)
    .SetShapeFn(
        mo::render_op::BackwardShapeFn<mo::volume_render::GradAttrs, mo::render_op::VolumeRenderInputShapes, 4>)
    .Doc(R"doc(
Backward of MetalOpsVolumeRender (suffix trick; see kernels/common/volume_render_math.h).
Takes the forward's inputs and per-ray outputs plus the incoming gradients;
weights and grad_weights are [R, S] when the forward returned weights, else
[R, 0]. grad_background is per ray ([R, 3]); the Python gradient sums it over
rays when the background was one colour [3]. t gets no gradient. validate is
the forward's.
)doc");
