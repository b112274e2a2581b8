// Scene contraction of unbounded scenes (mip-NeRF 360): op definitions, their
// attributes from the op's declaration (kernels/scene_contract/scene_contract.h
// MO_SCENE_CONTRACT_ATTRS), their shape functions kernels/spec/pointwise_op.h's
// over its checks. Wrapper + gradient: python/metal_ops/scene_contract.py.
// Doc: docs/SCENE_CONTRACT.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/spec/pointwise_op.h"
#include "kernels/scene_contract/scene_contract.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

REGISTER_OP("MetalOpsSceneContract")
    .Input("x: T")
    .Output("y: T")
    MO_OP_ATTRS(MO_SCENE_CONTRACT_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn(mo::pointwise_op::ShapeFn<mo::scene_contract::Attrs>)
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
    MO_OP_ATTRS(MO_SCENE_CONTRACT_ATTRS)
    .Attr("T: {float, half}")
    .SetShapeFn(mo::pointwise_op::GradShapeFn<mo::scene_contract::Attrs>)
    .Doc(R"doc(
Backward of MetalOpsSceneContract: dx = grad^T d contract / dx.
)doc");
