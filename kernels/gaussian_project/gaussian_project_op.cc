// The projection of 3D Gaussians through a pinhole camera (Gaussian
// splatting): op definitions, their attributes from the op's declaration
// (kernels/gaussian_project/gaussian_project.h MO_GAUSSIAN_PROJECT_ATTRS) and
// their shape functions over its checks. Wrapper + gradient:
// python/metal_ops/gaussian_project.py. Doc: docs/GAUSSIAN_PROJECT.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/gaussian_project/gaussian_project.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::InferenceContext;

// Reads the attributes and checks the inputs means, quats, scales, viewmat,
// intrinsics (from input `first` on); *means = means' dims.
absl::Status ProjectInputs(InferenceContext* c, int first, mo::Dims* means) {
  mo::gaussian_project::Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  mo::Dims in[5];
  for (int k = 0; k < 5; ++k) in[k] = mo::checks::KnownDimsOr(c, first + k, 2);
  *means = in[0];
  return mo::checks::ToStatus(mo::gaussian_project::Shapes(in[0], in[1], in[2], in[3], in[4]));
}

absl::Status ProjectShape(InferenceContext* c) {
  mo::Dims means;
  TF_RETURN_IF_ERROR(ProjectInputs(c, 0, &means));
  const auto n = means[0] >= 0 ? c->MakeDim(means[0]) : c->UnknownDim();
  c->set_output(0, c->MakeShape({n, 2}));
  c->set_output(1, c->MakeShape({n, 3}));
  c->set_output(2, c->MakeShape({n}));
  c->set_output(3, c->MakeShape({n}));
  return absl::OkStatus();
}

absl::Status ProjectGradShape(InferenceContext* c) {
  mo::Dims means;
  TF_RETURN_IF_ERROR(ProjectInputs(c, 3, &means));
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::gaussian_project::GradShapes(
      means, mo::checks::KnownDimsOr(c, 0, 2), mo::checks::KnownDimsOr(c, 1, 2), mo::checks::KnownDimsOr(c, 2, 1),
      mo::checks::KnownDimsOr(c, 8, 1))));
  c->set_output(0, c->input(3));
  c->set_output(1, c->input(4));
  c->set_output(2, c->input(5));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("MetalOpsGaussianProject")
    .Input("means: float")
    .Input("quats: float")
    .Input("scales: float")
    .Input("viewmat: float")
    .Input("intrinsics: float")
    .Output("means2d: float")
    .Output("conics: float")
    .Output("depths: float")
    .Output("radii: int32")
    MO_OP_ATTRS(MO_GAUSSIAN_PROJECT_ATTRS)
    .SetShapeFn(ProjectShape)
    .Doc(R"doc(
Projects 3D Gaussians through a pinhole camera (gsplat's formulas, classic
3DGS): 2D means in pixels, conics (inverse 2D covariances, dilated by eps2d),
camera-space depths and 3-sigma radii; a culled Gaussian has radius 0 and
zeros elsewhere.

means: [N, 3] world-space means.
quats: [N, 4] rotations (w, x, y, z), normalised inside the op.
scales: [N, 3] linear scales, positive.
viewmat: [4, 4] world-to-camera matrix (OpenCV axes: +z forward).
intrinsics: [3, 3] K (fx, fy, cx, cy).
means2d: [N, 2].
conics: [N, 3] (inv[0,0], inv[0,1], inv[1,1]).
depths: [N].
radii: [N] int32.
)doc");

REGISTER_OP("MetalOpsGaussianProjectGrad")
    .Input("grad_means2d: float")
    .Input("grad_conics: float")
    .Input("grad_depths: float")
    .Input("means: float")
    .Input("quats: float")
    .Input("scales: float")
    .Input("viewmat: float")
    .Input("intrinsics: float")
    .Input("radii: int32")
    .Output("grad_means: float")
    .Output("grad_quats: float")
    .Output("grad_scales: float")
    MO_OP_ATTRS(MO_GAUSSIAN_PROJECT_ATTRS)
    .SetShapeFn(ProjectGradShape)
    .Doc(R"doc(
Backward of MetalOpsGaussianProject: the gradients of means, quats and scales
from those of means2d, conics and depths; zero for Gaussians with radius 0.
)doc");
