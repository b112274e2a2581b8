// Real spherical-harmonics encoding of directions (the NeRF colour network's
// input): op definitions, their attributes from the op's declaration
// (kernels/sh_encode/sh_encode.h MO_SH_ENCODE_ATTRS), their shape functions
// kernels/spec/pointwise_op.h's over its checks. Wrapper + gradient:
// python/metal_ops/sh_encode.py. Doc: docs/SH_ENCODE.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/spec/pointwise_op.h"
#include "kernels/sh_encode/sh_encode.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

REGISTER_OP("MetalOpsSHEncode")
    .Input("dirs: T")
    .Output("values: T")
    MO_OP_ATTRS(MO_SH_ENCODE_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn(mo::pointwise_op::ShapeFn<mo::sh_encode::Attrs>)
    .Doc(R"doc(
Real spherical harmonics of directions, bands 0..degree-1, in the order and
normalisation of instant-NGP (and the NeRF sample's TF sh_encode). The
directions are used as given (not normalised).

dirs: [..., 3] directions (x, y, z).
values: [..., degree**2].
degree: 1 to 4.
)doc");

REGISTER_OP("MetalOpsSHEncodeGrad")
    .Input("grad: T")
    .Input("dirs: T")
    .Output("grad_dirs: T")
    MO_OP_ATTRS(MO_SH_ENCODE_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn(mo::pointwise_op::GradShapeFn<mo::sh_encode::Attrs>)
    .Doc(R"doc(
Backward of MetalOpsSHEncode: grad_dirs[..., i] = sum_k grad[..., k] * dY_k/d dirs[..., i].
)doc");
