// Barron's general robust loss (CVPR 2019) and its fused backward: op
// definitions and shape functions. The op's declaration, formulas and checks:
// kernels/robust_loss/robust_loss.h. Wrapper + gradient:
// python/metal_ops/robust_loss.py. Doc: docs/ROBUST_LOSS.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/robust_loss/robust_loss.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// alpha / scale: a scalar, a [1] vector, or a [C] vector with C = x's last dim.
Status CheckParamShape(InferenceContext* c, int x_index, int param_index, const char* name) {
  ShapeHandle param;
  TF_RETURN_IF_ERROR(c->WithRankAtMost(c->input(param_index), 1, &param));
  if (!c->RankKnown(param) || c->Rank(param) == 0) return Status();
  const DimensionHandle n = c->Dim(param, 0);
  if (!c->ValueKnown(n) || c->Value(n) == 1) return Status();
  ShapeHandle x = c->input(x_index);
  if (!c->RankKnown(x)) return Status();
  if (c->Rank(x) == 0) {
    return ::tensorflow::errors::InvalidArgument(
        "RobustLoss: '", name, "' has ", c->Value(n),
        " elements but 'x' is a scalar (a per-channel parameter needs x of rank >= 1)");
  }
  const DimensionHandle last = c->Dim(x, -1);
  if (c->ValueKnown(last) && c->Value(last) != c->Value(n)) {
    return ::tensorflow::errors::InvalidArgument(
        "RobustLoss: '", name, "' has ", c->Value(n), " elements but the last dimension of 'x' is ",
        c->Value(last), " (expected a scalar, [1] or [", c->Value(last), "])");
  }
  return Status();
}

}  // namespace

REGISTER_OP("MetalOpsRobustLoss")
    .Input("x: T")
    .Input("alpha: float")
    .Input("scale: float")
    .Output("loss: T")
    .Attr("T: {float, half, bfloat16}")
    MO_OP_ATTRS(MO_ROBUST_LOSS_ATTRS)
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(CheckParamShape(c, 0, 1, "alpha"));
      TF_RETURN_IF_ERROR(CheckParamShape(c, 0, 2, "scale"));
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc(R"doc(
Elementwise general robust loss rho(x, alpha, scale) of Barron (CVPR 2019),
computed in float32 and returned in x's dtype.

x: residuals, any shape.
alpha: shape parameter, a scalar ([] or [1]) or one per channel ([C], C = last
  dimension of x). Any float including +-inf; NaN is invalid.
scale: scale parameter c > 0, scalar or per channel like alpha.
)doc");

REGISTER_OP("MetalOpsRobustLossGrad")
    .Input("grad: T")
    .Input("x: T")
    .Input("alpha: float")
    .Input("scale: float")
    .Output("grad_x: T")
    .Output("grad_alpha: float")
    .Output("grad_scale: float")
    .Attr("T: {float, half, bfloat16}")
    MO_OP_ATTRS(MO_ROBUST_LOSS_ATTRS)
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &x));
      TF_RETURN_IF_ERROR(CheckParamShape(c, 1, 2, "alpha"));
      TF_RETURN_IF_ERROR(CheckParamShape(c, 1, 3, "scale"));
      c->set_output(0, x);
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(3));
      return Status();
    })
    .Doc(R"doc(
Backward of MetalOpsRobustLoss in one pass: grad * drho/dx, and grad * drho/dalpha,
grad * drho/dscale summed over the axes along which alpha / scale broadcast.
)doc");
