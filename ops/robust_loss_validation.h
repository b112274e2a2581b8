// RobustLoss input checks, written once for every TF kernel of the op (CPU in
// kernels/cpu/, CUDA registration in kernels/cuda/): host-only C++. The
// InvalidArgument messages name the argument; tests match on them.
#ifndef METAL_OPS_OPS_ROBUST_LOSS_VALIDATION_H_
#define METAL_OPS_OPS_ROBUST_LOSS_VALIDATION_H_

#include <cmath>
#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace metal_ops {
namespace robust_loss {

using ::tensorflow::Tensor;
using ::tensorflow::errors::InvalidArgument;

// How alpha and scale broadcast over x: one value, or one per channel (the
// last dimension of x).
struct ParamLayout {
  int64_t channels = 1;
  bool alpha_vec = false;
  bool scale_vec = false;
};

// Shape of one parameter: one element (scalar or [1]) or [C] with C = last dim of x.
inline absl::Status CheckParamShape(const Tensor& x, const Tensor& p, const char* name, bool* is_vec) {
  if (p.dims() > 1) {
    return InvalidArgument("RobustLoss: '", name, "' must be a scalar or a vector, got shape ",
                           p.shape().DebugString());
  }
  *is_vec = p.NumElements() != 1;
  if (*is_vec && (x.dims() == 0 || p.dims() == 0 || p.dim_size(0) != x.dim_size(x.dims() - 1))) {
    return InvalidArgument("RobustLoss: '", name, "' has shape ", p.shape().DebugString(),
                           " but must be a scalar, [1] or [C] with C the last dimension of 'x' (shape ",
                           x.shape().DebugString(), ")");
  }
  return absl::OkStatus();
}

// Shapes of alpha and scale against x, and the layout they give.
inline absl::Status CheckParamShapes(const Tensor& x, const Tensor& alpha, const Tensor& scale,
                                     ParamLayout* layout) {
  TF_RETURN_IF_ERROR(CheckParamShape(x, alpha, "alpha", &layout->alpha_vec));
  TF_RETURN_IF_ERROR(CheckParamShape(x, scale, "scale", &layout->scale_vec));
  layout->channels = (layout->alpha_vec || layout->scale_vec) ? x.dim_size(x.dims() - 1) : 1;
  return absl::OkStatus();
}

// Values of alpha and scale; reads them, so only for host-memory tensors.
inline absl::Status CheckParamValues(const Tensor& alpha, const Tensor& scale) {
  const auto a = alpha.flat<float>();
  for (int64_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a(i))) {
      return InvalidArgument("RobustLoss: 'alpha' must not be NaN (alpha[", i, "] is NaN)");
    }
  }
  const auto c = scale.flat<float>();
  for (int64_t i = 0; i < c.size(); ++i) {
    if (!(c(i) > 0.0f) || std::isinf(c(i))) {
      return InvalidArgument("RobustLoss: 'scale' must be positive and finite, got scale[", i, "] = ", c(i));
    }
  }
  return absl::OkStatus();
}

// The upstream gradient of RobustLossGrad has the shape of x.
inline absl::Status CheckGradShape(const Tensor& grad, const Tensor& x) {
  if (grad.shape() != x.shape()) {
    return InvalidArgument("RobustLossGrad: 'grad' has shape ", grad.shape().DebugString(), " but 'x' has shape ",
                           x.shape().DebugString());
  }
  return absl::OkStatus();
}

}  // namespace robust_loss
}  // namespace metal_ops

#endif  // METAL_OPS_OPS_ROBUST_LOSS_VALIDATION_H_
