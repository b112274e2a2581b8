// The shape functions of the point-by-point ops whose checks are the spec's
// Shapes and GradShapes (the kernels/<op>/<op>_op.cc that include this header), the same
// checks as their kernel classes (kernels/framework/pointwise_kernel.h), found by the
// type of the attributes: Shapes(attrs, x dims, &y dims) for the forward,
// GradShapes(attrs, grad dims, x dims) for the gradient op (inputs grad, x;
// output dx shaped like x). Where x's rank is unknown there is nothing to
// check; where only the gradient's is, x alone is checked.
#ifndef MO_KERNELS_SPEC_POINTWISE_OP_H_
#define MO_KERNELS_SPEC_POINTWISE_OP_H_

#include <vector>

#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace mo {
namespace pointwise_op {

using ::tensorflow::shape_inference::InferenceContext;

template <typename Attrs>
absl::Status ShapeFn(InferenceContext* c) {
  Attrs attrs;
  TF_RETURN_IF_ERROR(checks::ReadAttrsOf(c, &attrs));
  checks::Dims x, y;
  if (!checks::KnownDims(c, 0, &x)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(checks::ToStatus(Shapes(attrs, x, &y)));
  // y's dims, x's own handles where they are x's.
  std::vector<::tensorflow::shape_inference::DimensionHandle> dims;
  for (size_t d = 0; d < y.size(); ++d) {
    if (d < x.size() && y[d] == x[d]) {
      dims.push_back(c->Dim(c->input(0), d));
    } else {
      dims.push_back(y[d] < 0 ? c->UnknownDim() : c->MakeDim(y[d]));
    }
  }
  c->set_output(0, c->MakeShape(dims));
  return absl::OkStatus();
}

template <typename Attrs>
absl::Status GradShapeFn(InferenceContext* c) {
  Attrs attrs;
  TF_RETURN_IF_ERROR(checks::ReadAttrsOf(c, &attrs));
  checks::Dims grad, x, y;
  if (checks::KnownDims(c, 1, &x)) {
    TF_RETURN_IF_ERROR(
        checks::ToStatus(checks::KnownDims(c, 0, &grad) ? GradShapes(attrs, grad, x) : Shapes(attrs, x, &y)));
  }
  c->set_output(0, c->input(1));
  return absl::OkStatus();
}

}  // namespace pointwise_op
}  // namespace mo

#endif  // MO_KERNELS_SPEC_POINTWISE_OP_H_
