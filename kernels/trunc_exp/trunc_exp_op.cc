// TruncExp, instant-NGP's density activation: op definitions and shape
// functions. The op's declaration, formula and checks: kernels/trunc_exp/trunc_exp.h
// (FusedMLP's trunc_exp). Wrapper + gradient: python/metal_ops/trunc_exp.py.
// Doc: docs/TRUNC_EXP.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/spec/checks_tf.h"
#include "kernels/trunc_exp/trunc_exp.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

}  // namespace

REGISTER_OP("MetalOpsTruncExp")
    .Input("x: T")
    .Output("y: T")
    MO_OP_ATTRS(MO_TRUNC_EXP_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
y = exp(x), elementwise, computed in float32 and returned in x's dtype. Its
gradient (MetalOpsTruncExpGrad) is dy * exp(clamp(x, -15, 15)): instant-NGP's
density activation, FusedMLP's "trunc_exp".

x: any shape.
y: x's shape.
)doc");

REGISTER_OP("MetalOpsTruncExpGrad")
    .Input("dy: T")
    .Input("x: T")
    .Output("dx: T")
    MO_OP_ATTRS(MO_TRUNC_EXP_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn([](InferenceContext* c) {
      // Merge fails on shapes known to differ; the kernels then say it with
      // the op's message (kernels/trunc_exp/trunc_exp.h GradShape).
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &x));
      c->set_output(0, x);
      return Status();
    })
    .Doc(R"doc(
Backward of MetalOpsTruncExp: dx = dy * exp(clamp(x, -15, 15)).
)doc");
