// Real spherical-harmonics encoding of directions (the NeRF colour network's
// input): op definitions and shape functions.
// Formulas: kernels/common/sh_encode.h. Checks: kernels/spec/sh_encode_spec.h.
// Wrapper + gradient: python/metal_ops/sh_encode.py. Doc: docs/SH_ENCODE.md.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <vector>

#include "kernels/spec/checks_tf.h"
#include "kernels/spec/sh_encode_spec.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

Status ReadDegree(InferenceContext* c, int64_t* degree) {
  mo::sh_encode::Attrs attrs;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
  *degree = attrs.degree;
  return Status();
}

ShapeHandle ShapeOf(InferenceContext* c, const mo::checks::Dims& dims) {
  std::vector<::tensorflow::shape_inference::DimensionHandle> handles;
  for (int64_t d : dims) handles.push_back(d < 0 ? c->UnknownDim() : c->MakeDim(d));
  return c->MakeShape(handles);
}

}  // namespace

REGISTER_OP("MetalOpsSHEncode")
    .Input("dirs: T")
    .Output("values: T")
    .Attr("degree: int = 4")
    .Attr("T: {float, half}")
    .SetShapeFn([](InferenceContext* c) {
      int64_t degree = 0;
      TF_RETURN_IF_ERROR(ReadDegree(c, &degree));
      mo::checks::Dims dirs;
      if (!mo::checks::KnownDims(c, 0, &dirs)) {
        c->set_output(0, c->UnknownShape());
        return Status();
      }
      TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::sh_encode::DirsShape(dirs)));
      c->set_output(0, ShapeOf(c, mo::sh_encode::OutputDims(dirs, degree)));
      return Status();
    })
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
    .Attr("degree: int = 4")
    .Attr("T: {float, half}")
    .SetShapeFn([](InferenceContext* c) {
      int64_t degree = 0;
      TF_RETURN_IF_ERROR(ReadDegree(c, &degree));
      mo::checks::Dims dirs, grad;
      if (mo::checks::KnownDims(c, 1, &dirs)) {
        TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::sh_encode::DirsShape(dirs)));
        if (mo::checks::KnownDims(c, 0, &grad))
          TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::sh_encode::GradShape(grad, dirs, degree)));
      }
      c->set_output(0, c->input(1));
      return Status();
    })
    .Doc(R"doc(
Backward of MetalOpsSHEncode: grad_dirs[..., i] = sum_k grad[..., k] * dY_k/d dirs[..., i].
)doc");
