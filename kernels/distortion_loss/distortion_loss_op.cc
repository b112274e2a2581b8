// mip-NeRF 360 distortion loss, O(S) prefix-sum form, and its backward: op
// definitions and shape functions. The op's declaration, formulas and checks:
// kernels/distortion_loss/distortion_loss.h. Wrapper + gradient:
// python/metal_ops/distortion_loss.py. Doc: docs/DISTORTION_LOSS.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/distortion_loss/distortion_loss.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// weights [R, S], t [R, S + 1]; returns the merged R in *rays.
Status CheckShapes(InferenceContext* c, int w_index, int t_index, DimensionHandle* rays) {
  ShapeHandle w, t;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(w_index), 2, &w));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(t_index), 2, &t));
  if (!c->Merge(c->Dim(w, 0), c->Dim(t, 0), rays).ok()) {
    return ::tensorflow::errors::InvalidArgument(
        "DistortionLoss: 'weights' has ", c->Value(c->Dim(w, 0)), " rays but 't' has ",
        c->Value(c->Dim(t, 0)));
  }
  const DimensionHandle s = c->Dim(w, 1);
  const DimensionHandle e = c->Dim(t, 1);
  if (c->ValueKnown(s) && c->ValueKnown(e) && c->Value(e) != c->Value(s) + 1) {
    return ::tensorflow::errors::InvalidArgument(
        "DistortionLoss: 't' must have S + 1 = ", c->Value(s) + 1,
        " interval edges per ray for 'weights' with S = ", c->Value(s), " samples, got ",
        c->Value(e));
  }
  return Status();
}

// loss [R].
Status DistortionLossShape(InferenceContext* c) {
  DimensionHandle rays;
  TF_RETURN_IF_ERROR(CheckShapes(c, 0, 1, &rays));
  c->set_output(0, c->Vector(rays));
  return Status();
}

// grad [R]; grad_weights and grad_t shaped like weights and t.
Status DistortionLossGradShape(InferenceContext* c) {
  DimensionHandle rays;
  TF_RETURN_IF_ERROR(CheckShapes(c, 1, 2, &rays));
  ShapeHandle g;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &g));
  DimensionHandle merged;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(g, 0), rays, &merged));
  c->set_output(0, c->input(1));
  c->set_output(1, c->input(2));
  return Status();
}

}  // namespace

REGISTER_OP("MetalOpsDistortionLoss")
    .Input("weights: float")
    .Input("t: float")
    .Output("loss: float")
    MO_OP_ATTRS(MO_DISTORTION_LOSS_ATTRS)
    .SetShapeFn(DistortionLossShape)
    .Doc(R"doc(
Per-ray distortion loss of mip-NeRF 360,
sum_{i,j} w_i w_j |m_i - m_j| + 1/3 sum_i w_i^2 (t_{i+1} - t_i), in O(S).

weights: [R, S] rendering weights.
t: [R, S + 1] interval edges, non-decreasing along each ray.
loss: [R].
)doc");

REGISTER_OP("MetalOpsDistortionLossGrad")
    .Input("grad: float")
    .Input("weights: float")
    .Input("t: float")
    .Output("grad_weights: float")
    .Output("grad_t: float")
    MO_OP_ATTRS(MO_DISTORTION_LOSS_ATTRS)
    .SetShapeFn(DistortionLossGradShape)
    .Doc(R"doc(
Backward of MetalOpsDistortionLoss: grad[r] * dL_r/dweights and grad[r] * dL_r/dt.
)doc");
