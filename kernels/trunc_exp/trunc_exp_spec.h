// TruncExp's input checks, written once for every kernel of the op: the CPU
// kernels and CUDA registrations (through kernels/trunc_exp/trunc_exp_kernel.h) and the
// Metal kernels (through KernelCall::Check). No TensorFlow API: sizes in,
// kernels/spec/checks.h's Result out. The op has no attribute but its type T:
// {float, half} (TensorFlow rejects other dtypes before any kernel runs; the
// Python wrapper says so naming 'x'). Messages name the argument; tests match
// on them.
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_SPEC_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_SPEC_H_

#include "kernels/spec/checks.h"

namespace mo {
namespace trunc_exp {

// The upstream gradient of TruncExpGrad has the shape of x.
// TruncExp has no attribute beyond T.
struct Attrs {};

template <typename Get>
Result ReadAttrs(Get&&, Attrs*) {
  return Ok();
}

inline Result GradShape(const Dims& dy, const Dims& x) {
  if (dy != x) {
    return Invalid("TruncExpGrad: 'dy' has shape ", ShapeString(dy), " but 'x' has shape ", ShapeString(x));
  }
  return Ok();
}

// The kernels' checks (kernels/framework/pointwise_kernel.h): any x, y of its dims; dy
// of x's. The shape functions are TensorFlow's (ops/trunc_exp_op.cc).
inline Result Shapes(const Attrs&, const Dims& x, Dims* y) {
  *y = x;
  return Ok();
}

inline Result GradShapes(const Attrs&, const Dims& dy, const Dims& x) { return GradShape(dy, x); }

}  // namespace trunc_exp
}  // namespace mo

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_SPEC_H_
