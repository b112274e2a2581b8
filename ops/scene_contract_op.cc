// Scene contraction of unbounded scenes (mip-NeRF 360): op definitions and
// shape functions. Formula: kernels/common/scene_contract.h. Checks:
// kernels/spec/scene_contract_spec.h. Wrapper + gradient:
// python/metal_ops/scene_contract.py. Doc: docs/SCENE_CONTRACT.md.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/spec/checks_tf.h"
#include "kernels/spec/scene_contract_spec.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;

// The attributes, read and checked; the spec's checks of x (input x_index)
// and, for the gradient op, of grad (input 0), where their ranks are known.
Status Check(InferenceContext* c, int x_index) {
  mo::scene_contract::Attrs attrs;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &attrs));
  mo::checks::Dims x, grad;
  if (!mo::checks::KnownDims(c, x_index, &x)) return Status();
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::scene_contract::XShape(x)));
  if (x_index == 0 || !mo::checks::KnownDims(c, 0, &grad)) return Status();
  return mo::checks::ToStatus(mo::scene_contract::GradShape(grad, x));
}

}  // namespace

REGISTER_OP("MetalOpsSceneContract")
    .Input("x: T")
    .Output("y: T")
    .Attr("norm: {'l2', 'linf'} = 'l2'")
    .Attr("T: {float, half}")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Check(c, 0));
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc(R"doc(
mip-NeRF 360's contraction of unbounded scenes into a ball of radius 2:
y = x where ||x|| <= 1, else (2 - 1/||x||) x / ||x||, computed in float32 and
returned in x's dtype.

x: [..., 3] points.
y: x's shape, every coordinate in [-2, 2].
norm: 'l2' (mip-NeRF 360's ball) or 'linf' (instant-NGP's and nerfacc's cube).
)doc");

REGISTER_OP("MetalOpsSceneContractGrad")
    .Input("grad: T")
    .Input("x: T")
    .Output("dx: T")
    .Attr("norm: {'l2', 'linf'} = 'l2'")
    .Attr("T: {float, half}")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Check(c, 1));
      c->set_output(0, c->input(1));
      return Status();
    })
    .Doc(R"doc(
Backward of MetalOpsSceneContract: dx = grad^T d contract / dx.
)doc");
