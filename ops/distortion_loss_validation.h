// DistortionLoss input checks, written once for every TF kernel of the op (CPU
// in kernels/cpu/, CUDA registration in kernels/cuda/): host-only C++. The
// InvalidArgument messages name the argument; tests match on them.
#ifndef METAL_OPS_OPS_DISTORTION_LOSS_VALIDATION_H_
#define METAL_OPS_OPS_DISTORTION_LOSS_VALIDATION_H_

#include <cstdint>

#include "kernels/common/distortion_loss.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace metal_ops {
namespace distortion_loss {

using ::tensorflow::Tensor;
using ::tensorflow::errors::InvalidArgument;

// weights [R, S] and t [R, S + 1].
inline absl::Status CheckShapes(const Tensor& w, const Tensor& t) {
  if (w.dims() != 2) {
    return InvalidArgument("DistortionLoss: 'weights' must be [R, S], got shape ", w.shape().DebugString());
  }
  if (t.dims() != 2) {
    return InvalidArgument("DistortionLoss: 't' must be [R, S + 1], got shape ", t.shape().DebugString());
  }
  if (t.dim_size(0) != w.dim_size(0) || t.dim_size(1) != w.dim_size(1) + 1) {
    return InvalidArgument("DistortionLoss: 't' must be [R, S + 1] = [", w.dim_size(0), ", ", w.dim_size(1) + 1,
                           "] for 'weights' of shape ", w.shape().DebugString(), ", got ",
                           t.shape().DebugString());
  }
  return absl::OkStatus();
}

// The upstream gradient of DistortionLossGrad: one value per ray.
inline absl::Status CheckGradShape(const Tensor& g, int64_t rays) {
  if (g.dims() != 1 || g.dim_size(0) != rays) {
    return InvalidArgument("DistortionLossGrad: 'grad' must be [R] = [", rays, "], got ", g.shape().DebugString());
  }
  return absl::OkStatus();
}

// InvalidArgument naming the first decrease (NaN counts) of ray r, whose
// samples + 1 boundaries `row` points to in host memory; OK if there is none.
inline absl::Status CheckRaySorted(const float* row, int64_t r, int64_t samples) {
  const int64_t k = mo::dl_first_decrease(row, samples);
  if (k >= 0) {
    return InvalidArgument("DistortionLoss: 't' must be non-decreasing along each ray, but ray ", r, " has t[", r,
                           ", ", k, "] = ", row[k], " > t[", r, ", ", k + 1, "] = ", row[k + 1]);
  }
  return absl::OkStatus();
}

}  // namespace distortion_loss
}  // namespace metal_ops

#endif  // METAL_OPS_OPS_DISTORTION_LOSS_VALIDATION_H_
