// FusedMLP (tiny-cuda-nn's fully fused MLP for TensorFlow): op definitions,
// their attributes from the op's declaration (kernels/fused_mlp/fused_mlp.h
// MO_FUSED_MLP_ATTRS), their shape functions over its checks. Wrapper +
// gradient: python/metal_ops/fused_mlp.py. Design: docs/FUSED_MLP.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <vector>

#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Output shapes from the last kernel's columns and the first's (the width);
// the full checks run in the kernels, where every shape is known.
Status FusedMlpShape(InferenceContext* c) {
  mo::fused_mlp::Attrs attrs;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
  const int num = static_cast<int>(attrs.N);
  ShapeHandle x, first, last;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &first));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(num), 2, &last));
  // With the weights' shapes known (Keras variables), the network is checked
  // when the graph is built, with the kernels' messages.
  std::vector<mo::checks::Dims> kernels, biases;
  bool known = c->ValueKnown(c->Dim(x, 1));
  for (int i = 1; i <= 2 * num && known; ++i) {
    known = c->FullyDefined(c->input(i));
    if (!known) break;
    mo::checks::Dims dims;
    for (int d = 0; d < c->Rank(c->input(i)); ++d) dims.push_back(c->Value(c->Dim(c->input(i), d)));
    (i <= num ? kernels : biases).push_back(dims);
  }
  if (known) {
    const int64_t rows = c->ValueKnown(c->Dim(x, 0)) ? c->Value(c->Dim(x, 0)) : 0;
    mo::fused_mlp::Net net;
    TF_RETURN_IF_ERROR(
        mo::checks::ToStatus(mo::fused_mlp::Shapes({rows, c->Value(c->Dim(x, 1))}, kernels, biases, &net)));
  }
  c->set_output(0, c->Matrix(c->Dim(x, 0), c->Dim(last, 1)));
  c->set_output(1, c->MakeShape({c->MakeDim(num - 1), c->Dim(x, 0), c->Dim(first, 1)}));
  return Status();
}

}  // namespace

REGISTER_OP("MetalOpsFusedMLP")
    .Input("x: T")
    .Input("kernels: N * T")
    .Input("biases: N * T")
    .Output("y: T")
    .Output("hidden: T")
    MO_OP_ATTRS(MO_FUSED_MLP_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn(FusedMlpShape)
    .Doc(R"doc(
A multilayer perceptron in one op: y = f_out(h_L W_L + b_L), h_l = f(h_{l-1} W_l + b_l),
h_0 = x, with the hidden width in {16, 32, 64, 128} and 1 to 8 hidden layers.

kernels, biases: Keras Dense layout ([in, out] and [out]), N = hidden layers + 1.
hidden: the hidden layers' outputs [N - 1, batch, width], which the backward reads.
)doc");

REGISTER_OP("MetalOpsFusedMLPGrad")
    .Input("grad_y: T")
    .Input("x: T")
    .Input("kernels: N * T")
    .Input("y: T")
    .Input("hidden: T")
    .Output("grad_x: T")
    .Output("grad_kernels: N * T")
    .Output("grad_biases: N * T")
    MO_OP_ATTRS(MO_FUSED_MLP_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn([](InferenceContext* c) {
      mo::fused_mlp::Attrs attrs;
      TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
      const int num = static_cast<int>(attrs.N);
      c->set_output(0, c->input(1));
      for (int l = 0; l < num; ++l) {
        c->set_output(1 + l, c->input(2 + l));
        ShapeHandle k;
        TF_RETURN_IF_ERROR(c->WithRank(c->input(2 + l), 2, &k));
        c->set_output(1 + num + l, c->Vector(c->Dim(k, 1)));
      }
      return Status();
    })
    .Doc(R"doc(
Backward of MetalOpsFusedMLP: the gradients of sum(grad_y * y) for x, every
kernel and every bias, reduced in a fixed order (bitwise deterministic).
)doc");
