// ZeroOut: the tutorial op from the custom-op guide and WWDC21's Metal talk,
// generalised to several dtypes and a chosen surviving element.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/spec/checks_tf.h"
#include "kernels/zero_out/zero_out_spec.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

REGISTER_OP("ZeroOut")
    .Input("to_zero: T")
    .Output("zeroed: T")
    .Attr("T: {int32, int64, float, double}")
    .Attr("preserve_index: int >= 0 = 0")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      mo::zero_out::Attrs attrs;
      TF_RETURN_IF_ERROR(
          mo::checks::ReadAttrsOf(c, &attrs));
      return ::tensorflow::shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Returns a tensor of the input's shape that is zero everywhere except at flat
index `preserve_index`, which keeps the input's value.

preserve_index: flat (row-major) index of the element to keep; must be smaller
  than the number of elements unless the input is empty.
)doc");
