// MetalOpsVolumeRender and its backward MetalOpsVolumeRenderGrad.
// Formulas: kernels/common/volume_render.h. Python: python/metal_ops/volume_render.py.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "ops/checks_tf.h"
#include "ops/volume_render_checks.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Checks sigma [R, S], rgb [R, S, 3], t [R, S + 1], background [3] or [R, 3];
// returns R and S.
absl::Status VolumeRenderInputShapes(InferenceContext* c, DimensionHandle* rays, DimensionHandle* samples) {
  ShapeHandle sigma, rgb, t, background;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &sigma));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &rgb));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &t));
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(3), 1, &background));
  TF_RETURN_IF_ERROR(c->WithRankAtMost(background, 2, &background));
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
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(background, -1), 3, &unused));
  if (c->Rank(background) == 2) {
    TF_RETURN_IF_ERROR(c->Merge(r, c->Dim(background, 0), &r));
  }
  *rays = r;
  *samples = s;
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("MetalOpsVolumeRender")
    .Input("sigma: T")
    .Input("rgb: T")
    .Input("t: T")
    .Input("background: T")
    .Output("out_rgb: T")
    .Output("depth: T")
    .Output("opacity: T")
    .Output("weights: T")
    .Attr("T: {float, double}")
    .Attr("early_termination: float = 0.0001")
    .Attr("return_weights: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      mo::volume_render_checks::Attrs attrs;
      TF_RETURN_IF_ERROR(
          mo::checks::ReadAttrsOf(c, true, &attrs));
      DimensionHandle r, s;
      TF_RETURN_IF_ERROR(VolumeRenderInputShapes(c, &r, &s));
      c->set_output(0, c->MakeShape({r, 3}));
      c->set_output(1, c->Vector(r));
      c->set_output(2, c->Vector(r));
      c->set_output(3, attrs.return_weights ? c->Matrix(r, s) : c->Matrix(r, 0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Emission-absorption volume rendering of R rays with S samples each
(formulas in kernels/common/volume_render.h).

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
)doc");

REGISTER_OP("MetalOpsVolumeRenderGrad")
    .Input("sigma: T")
    .Input("rgb: T")
    .Input("t: T")
    .Input("background: T")
    .Input("out_rgb: T")
    .Input("depth: T")
    .Input("opacity: T")
    .Input("weights: T")
    .Input("grad_rgb: T")
    .Input("grad_depth: T")
    .Input("grad_opacity: T")
    .Input("grad_weights: T")
    .Output("grad_sigma: T")
    .Output("grad_samples_rgb: T")
    .Output("grad_background: T")
    .Attr("T: {float, double}")
    .Attr("early_termination: float = 0.0001")
    .SetShapeFn([](InferenceContext* c) {
      mo::volume_render_checks::Attrs attrs;
      TF_RETURN_IF_ERROR(
          mo::checks::ReadAttrsOf(c, false, &attrs));
      DimensionHandle r, s;
      TF_RETURN_IF_ERROR(VolumeRenderInputShapes(c, &r, &s));
      ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 2, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 1, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(6), 1, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(7), 2, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(8), 2, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(9), 1, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(10), 1, &shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(11), 2, &shape));
      c->set_output(0, c->Matrix(r, s));
      c->set_output(1, c->MakeShape({r, s, 3}));
      c->set_output(2, c->MakeShape({r, 3}));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Backward of MetalOpsVolumeRender (suffix trick; see kernels/common/volume_render.h).
Takes the forward's inputs and per-ray outputs plus the incoming gradients;
weights and grad_weights are [R, S] when the forward returned weights, else
[R, 0]. grad_background is per ray ([R, 3]); the Python gradient sums it over
rays when the background was one colour [3]. t gets no gradient.
)doc");
