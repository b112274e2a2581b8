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

// Reads the attributes and checks the inputs means, quats, scales, (opacities
// where `with_opacities`,) viewmat, intrinsics (from input `first` on);
// *means = means' dims.
absl::Status ProjectInputs(InferenceContext* c, int first, bool with_opacities, mo::Dims* means) {
  mo::gaussian_project::Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  const int count = with_opacities ? 6 : 5;
  mo::Dims in[6];
  for (int k = 0; k < count; ++k) in[k] = mo::checks::KnownDimsOr(c, first + k, k == 3 && with_opacities ? 1 : 2);
  *means = in[0];
  const int camera = count - 2;
  return mo::checks::ToStatus(mo::gaussian_project::Shapes(in[0], in[1], in[2], with_opacities ? &in[3] : nullptr,
                                                           in[camera], in[camera + 1]));
}

absl::Status ProjectShape(InferenceContext* c) {
  mo::Dims means;
  TF_RETURN_IF_ERROR(ProjectInputs(c, 0, true, &means));
  const auto n = means[0] >= 0 ? c->MakeDim(means[0]) : c->UnknownDim();
  c->set_output(0, c->MakeShape({n, 2}));
  c->set_output(1, c->MakeShape({n, 3}));
  c->set_output(2, c->MakeShape({n}));
  c->set_output(3, c->MakeShape({n, 2}));
  return absl::OkStatus();
}

absl::Status ProjectGradShape(InferenceContext* c) {
  mo::Dims means;
  TF_RETURN_IF_ERROR(ProjectInputs(c, 3, false, &means));
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::gaussian_project::GradShapes(
      means, mo::checks::KnownDimsOr(c, 0, 2), mo::checks::KnownDimsOr(c, 1, 2), mo::checks::KnownDimsOr(c, 2, 1),
      mo::checks::KnownDimsOr(c, 8, 2))));
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
    .Input("opacities: float")
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
camera-space depths and per-axis radii of the opacity-aware box outside which
alpha < 1/255 (at most 3.33 sigma); a Gaussian of opacity < 1/255 (or NaN) is
culled, and a culled Gaussian has radii 0 and zeros elsewhere.

means: [N, 3] world-space means.
quats: [N, 4] rotations (w, x, y, z), normalised inside the op.
scales: [N, 3] linear scales, positive.
opacities: [N] opacities (after the sigmoid), which size the radii.
viewmat: [4, 4] world-to-camera matrix (OpenCV axes: +z forward).
intrinsics: [3, 3] K (fx, fy, cx, cy).
means2d: [N, 2].
conics: [N, 3] (inv[0,0], inv[0,1], inv[1,1]).
depths: [N].
radii: [N, 2] int32 (x, y).
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
from those of means2d, conics and depths; zero for Gaussians with radii 0
(radii [N, 2]); opacities get none.
)doc");
