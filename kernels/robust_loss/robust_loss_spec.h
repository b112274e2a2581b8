// RobustLoss's input checks, written once for every kernel of the op: the CPU
// kernels and CUDA registrations (through kernels/robust_loss/robust_loss_kernel.h) and the
// Metal kernels (through KernelCall::Check). No TensorFlow API: sizes and
// values in, kernels/spec/checks.h's Result out. Messages name the argument; tests
// match on them.
#ifndef MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_SPEC_H_
#define MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_SPEC_H_

#include <cmath>
#include <cstdint>

#include "kernels/spec/checks.h"

namespace mo {
namespace robust_loss {

// How alpha and scale broadcast over x: one value, or one per channel (the
// last dimension of x).
struct ParamLayout {
  int64_t channels = 1;
  bool alpha_vec = false;
  bool scale_vec = false;
};

inline int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// One parameter: one element (scalar or [1]) or [C] with C = last dim of x.
inline Result ParamShape(const Dims& x, const Dims& p, const char* name, bool* is_vec) {
  if (p.size() > 1) {
    return Invalid("RobustLoss: '", name, "' must be a scalar or a vector, got shape ", ShapeString(p));
  }
  *is_vec = NumElements(p) != 1;
  if (*is_vec && (x.empty() || p.empty() || p[0] != x.back())) {
    return Invalid("RobustLoss: '", name, "' has shape ", ShapeString(p),
                   " but must be a scalar, [1] or [C] with C the last dimension of 'x' (shape ", ShapeString(x), ")");
  }
  return Ok();
}

// alpha and scale against x, and the layout they give.
inline Result ParamShapes(const Dims& x, const Dims& alpha, const Dims& scale, ParamLayout* layout) {
  MO_RETURN_IF_INVALID(ParamShape(x, alpha, "alpha", &layout->alpha_vec));
  MO_RETURN_IF_INVALID(ParamShape(x, scale, "scale", &layout->scale_vec));
  layout->channels = (layout->alpha_vec || layout->scale_vec) ? x.back() : 1;
  return Ok();
}

// The values of alpha and scale, where they are in host memory (CPU).
inline Result ParamValues(const float* alpha, int64_t num_alpha, const float* scale, int64_t num_scale) {
  for (int64_t i = 0; i < num_alpha; ++i) {
    if (std::isnan(alpha[i])) return Invalid("RobustLoss: 'alpha' must not be NaN (alpha[", i, "] is NaN)");
  }
  for (int64_t i = 0; i < num_scale; ++i) {
    if (!(scale[i] > 0.0f) || std::isinf(scale[i])) {
      return Invalid("RobustLoss: 'scale' must be positive and finite, got scale[", i, "] = ", scale[i]);
    }
  }
  return Ok();
}

// The upstream gradient of RobustLossGrad has the shape of x.
inline Result GradShape(const Dims& grad, const Dims& x) {
  if (grad != x) {
    return Invalid("RobustLossGrad: 'grad' has shape ", ShapeString(grad), " but 'x' has shape ", ShapeString(x));
  }
  return Ok();
}

}  // namespace robust_loss
}  // namespace mo

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_SPEC_H_
