// SceneContract's attribute and shape checks, written once for every kernel of
// the op: the shape functions (ops/scene_contract_op.cc), the CPU kernels and
// CUDA registrations (through kernels/spec/checks_tf.h) and the Metal kernels
// (through KernelCall::Check). No TensorFlow API: sizes in,
// kernels/spec/checks.h's Result out. A dimension of -1 is unknown (shape
// functions) and matches any size. Messages name the argument; tests match on
// them. The dtype is the op's attribute T: {float, half} (TensorFlow rejects
// others before any kernel runs); the Python wrapper says so naming 'x'.
#ifndef MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_SPEC_H_
#define MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_SPEC_H_

#include <string>

#include "kernels/scene_contract/scene_contract.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace scene_contract {

// The attributes of SceneContract and SceneContractGrad.
struct Attrs {
  int norm = kSceneContractL2;  // SceneContractNorm
};

inline Result Norm(const std::string& norm, Attrs* a) {
  if (norm == "l2") {
    a->norm = kSceneContractL2;
  } else if (norm == "linf") {
    a->norm = kSceneContractLinf;
  } else {
    return Invalid("SceneContract: 'norm' must be 'l2' or 'linf', got '", norm, "'");
  }
  return Ok();
}

// Reads (kernels/spec/checks.h ReadEach) and checks the attributes: the one attribute
// read of the shape functions, the kernel classes and the Metal kernels.
template <typename Get>
Result ReadAttrs(Get&& get, Attrs* a) {
  std::string norm;
  MO_RETURN_IF_INVALID(checks::ReadEach(get, "SceneContract", "norm", &norm));
  return Norm(norm, a);
}

// x [..., 3]: at least one dimension, the last one 3 (x, y, z).
inline Result XShape(const Dims& x) {
  if (x.empty()) return Invalid("SceneContract: 'x' must be [..., 3] (points along the last axis), got a scalar");
  if (x.back() != 3 && x.back() != -1) {
    return Invalid("SceneContract: 'x' must be [..., 3] (points along the last axis), got shape ", ShapeString(x));
  }
  return Ok();
}

// The upstream gradient of SceneContractGrad: x's shape.
inline Result GradShape(const Dims& grad, const Dims& x) {
  bool same = grad.size() == x.size();
  for (size_t d = 0; same && d < x.size(); ++d) same = grad[d] == x[d] || grad[d] == -1 || x[d] == -1;
  if (!same) {
    return Invalid("SceneContractGrad: 'grad' must have the shape of 'x' ", ShapeString(x), ", got ",
                   ShapeString(grad));
  }
  return Ok();
}

// The checks of SceneContract's shape function and kernels, x, and y's dims
// (x's); of SceneContractGrad's, x then the upstream gradient
// (kernels/spec/pointwise_op.h, kernels/framework/pointwise_kernel.h).
inline Result Shapes(const Attrs&, const Dims& x, Dims* y) {
  *y = x;
  return XShape(x);
}

inline Result GradShapes(const Attrs&, const Dims& grad, const Dims& x) {
  MO_RETURN_IF_INVALID(XShape(x));
  return GradShape(grad, x);
}

}  // namespace scene_contract
}  // namespace mo

#endif  // MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_SPEC_H_
