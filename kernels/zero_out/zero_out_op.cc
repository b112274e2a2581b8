// ZeroOut: the tutorial op from the custom-op guide and WWDC21's Metal talk,
// generalised to several dtypes and a chosen surviving element: its op
// definition, its attribute from the op's declaration
// (kernels/zero_out/zero_out.h MO_ZERO_OUT_ATTRS) and its shape function.
// Wrapper + gradient: python/metal_ops/zero_out.py. Doc: docs/ZERO_OUT.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/spec/checks_tf.h"
#include "kernels/zero_out/zero_out.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

REGISTER_OP("ZeroOut")
    .Input("to_zero: T")
    .Output("zeroed: T")
    .Attr("T: {int32, int64, float, double}")
    MO_OP_ATTRS(MO_ZERO_OUT_ATTRS)
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      // The attribute is read and checked here; whether it names an element
      // is the kernels' check, on the input's size (zero_out.h PreserveIndex).
      mo::zero_out::Attrs attrs;
      TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
      return ::tensorflow::shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Returns a tensor of the input's shape that is zero everywhere except at flat
index `preserve_index`, which keeps the input's value.

preserve_index: flat (row-major) index of the element to keep; must be smaller
  than the number of elements unless the input is empty.
)doc");
