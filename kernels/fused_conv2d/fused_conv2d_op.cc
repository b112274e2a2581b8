// MetalOpsFusedConv2D: y = act(conv2d(input, filter) + bias + residual), with the
// bias, the residual and the activation applied in the convolution's output
// stage. Written by hand (metal_ops.fused_conv2d) or by the Grappler plugin
// (grappler/), which rewrites Conv2D -> BiasAdd -> AddV2 -> Relu and friends.
//
// MetalOpsFusedActivationGrad: the activation's derivative for the gradient.
// The formulas of both live in kernels/common/activations.h; their attributes
// come from the ops' declarations (kernels/fused_conv2d/fused_conv2d.h
// MO_FUSED_CONV2D_ATTRS, MO_FUSED_ACTIVATION_GRAD_ATTRS). Wrapper + gradient:
// python/metal_ops/fused_conv2d.py. Doc: docs/FUSED_CONV2D.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/fused_conv2d/fused_conv2d.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status FusedConv2DShape(InferenceContext* c) {
  mo::fused_conv2d::Attrs attrs;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
  ShapeHandle input, filter;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &input));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &filter));
  TF_RETURN_IF_ERROR(::tensorflow::shape_inference::Conv2DShapeWithExplicitPadding(c));
  ShapeHandle out = c->output(0);
  if (attrs.num_bias == 1) {
    ShapeHandle bias;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &bias));
    DimensionHandle unused;
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(bias, 0), c->Dim(out, 3), &unused));  // NHWC
  }
  if (attrs.num_residual == 1) {
    ShapeHandle residual;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(2 + attrs.num_bias), 4, &residual));
    ShapeHandle merged;
    TF_RETURN_IF_ERROR(c->Merge(residual, out, &merged));
    c->set_output(0, merged);
  }
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("MetalOpsFusedConv2D")
    .Input("input: T")
    .Input("filter: T")
    .Input("bias: num_bias * T")
    .Input("residual: num_residual * T")
    .Output("output: T")
    .Attr("T: {float}")
    MO_OP_ATTRS(MO_FUSED_CONV2D_ATTRS)
    .SetShapeFn(FusedConv2DShape)
    .Doc(R"doc(
output = activation(conv2d(input, filter) + bias + residual).

The bias (shape [out_channels]), the residual (shape of the output) and the
activation are applied to each output tile of the convolution while it is still
in cache, not in separate passes over memory.

input: [batch, height, width, in_channels] (NHWC).
filter: [filter_height, filter_width, in_channels, out_channels].
bias: zero or one tensor of shape [out_channels].
residual: zero or one tensor with the output's shape.
num_bias: 0 or 1.
num_residual: 0 or 1.
explicit_paddings: 8 ints (NHWC order) when padding is EXPLICIT.
activation: applied last; leaky_relu uses leaky_relu_alpha.
)doc");

REGISTER_OP("MetalOpsFusedActivationGrad")
    .Input("gradients: T")
    .Input("outputs: T")
    .Input("features: num_features * T")
    .Output("backprops: T")
    .Attr("T: {float}")
    MO_OP_ATTRS(MO_FUSED_ACTIVATION_GRAD_ATTRS)
    .SetShapeFn([](InferenceContext* c) {
      mo::fused_activation_grad::Attrs attrs;
      TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
      ShapeHandle merged;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &merged));
      if (attrs.num_features == 1) TF_RETURN_IF_ERROR(c->Merge(merged, c->input(2), &merged));
      c->set_output(0, merged);
      return absl::OkStatus();
    })
    .Doc(R"doc(
backprops = gradients * activation'(z), the gradient with respect to the
pre-activation z of MetalOpsFusedConv2D.

outputs: the activation's outputs y = activation(z).
features: the pre-activation z: required (one tensor) for swish and for
  leaky_relu with a negative alpha, whose derivative cannot be read from y.
)doc");
