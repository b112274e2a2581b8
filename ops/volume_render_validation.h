// VolumeRender attributes and input checks, written once for every TF kernel
// of the op (CPU in kernels/cpu/, CUDA registration in kernels/cuda/):
// host-only C++. The InvalidArgument messages start with the op's name (`op`)
// and name the argument; tests match on them.
#ifndef METAL_OPS_OPS_VOLUME_RENDER_VALIDATION_H_
#define METAL_OPS_OPS_VOLUME_RENDER_VALIDATION_H_

#include <cstdint>

#include "kernels/common/volume_render.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace metal_ops {
namespace volume_render {

using ::tensorflow::OpKernelConstruction;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

struct Attrs {
  float early_termination = 1e-4f;
  bool return_weights = false;  // an attr of the forward op only
};

inline absl::Status ReadAttrs(OpKernelConstruction* ctx, const char* op, Attrs* a) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("early_termination", &a->early_termination));
  if (ctx->HasAttr("return_weights")) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("return_weights", &a->return_weights));
  }
  if (!(a->early_termination >= 0.0f && a->early_termination <= 1.0f)) {
    return InvalidArgument(op, ": 'early_termination' must be in [0, 1], got ", a->early_termination);
  }
  return absl::OkStatus();
}

// The sizes the inputs shared by forward and backward give.
struct RayShapes {
  int64_t rays = 0;
  int64_t samples = 0;
  bool background_per_ray = false;
};

// sigma [R, S], rgb [R, S, 3], t [R, S + 1], background [3] or [R, 3].
inline absl::Status CheckInputShapes(const char* op, const Tensor& sigma, const Tensor& rgb, const Tensor& t,
                                     const Tensor& background, RayShapes* shapes) {
  if (sigma.dims() != 2) {
    return InvalidArgument(op, ": 'sigma' must be [R, S] (rank 2), got shape ", sigma.shape().DebugString());
  }
  const int64_t R = sigma.dim_size(0), S = sigma.dim_size(1);
  if (!(rgb.dims() == 3 && rgb.dim_size(0) == R && rgb.dim_size(1) == S && rgb.dim_size(2) == 3)) {
    return InvalidArgument(op, ": 'rgb' must be [R, S, 3] = [", R, ", ", S, ", 3] to match 'sigma' ",
                           sigma.shape().DebugString(), ", got shape ", rgb.shape().DebugString());
  }
  if (!(t.dims() == 2 && t.dim_size(0) == R && t.dim_size(1) == S + 1)) {
    return InvalidArgument(op, ": 't' must be [R, S + 1] = [", R, ", ", S + 1,
                           "] (interval boundaries) to match 'sigma' ", sigma.shape().DebugString(),
                           ", got shape ", t.shape().DebugString());
  }
  const bool shared = background.dims() == 1 && background.dim_size(0) == 3;
  const bool per_ray = background.dims() == 2 && background.dim_size(0) == R && background.dim_size(1) == 3;
  if (!(shared || per_ray)) {
    return InvalidArgument(op, ": 'background' must be [3] or [R, 3] = [", R, ", 3], got shape ",
                           background.shape().DebugString());
  }
  shapes->rays = R;
  shapes->samples = S;
  shapes->background_per_ray = per_ray;
  return absl::OkStatus();
}

// The forward outputs and upstream gradients VolumeRenderGrad receives, for
// `shapes` from CheckInputShapes. *has_weight_grad: the weights output was
// returned (weights [R, S], not [R, 0]) and there are samples.
inline absl::Status CheckGradInputShapes(const char* op, const RayShapes& shapes, const Tensor& out_rgb,
                                         const Tensor& depth, const Tensor& opacity, const Tensor& weights,
                                         const Tensor& grad_rgb, const Tensor& grad_depth,
                                         const Tensor& grad_opacity, const Tensor& grad_weights,
                                         bool* has_weight_grad) {
  const int64_t R = shapes.rays, S = shapes.samples;
  const TensorShape ray3({R, 3}), ray({R});
  if (!(out_rgb.shape() == ray3 && grad_rgb.shape() == ray3)) {
    return InvalidArgument(op, ": 'out_rgb' and 'grad_rgb' must be [R, 3] = ", ray3.DebugString(), ", got ",
                           out_rgb.shape().DebugString(), " and ", grad_rgb.shape().DebugString());
  }
  if (!(depth.shape() == ray && opacity.shape() == ray && grad_depth.shape() == ray &&
        grad_opacity.shape() == ray)) {
    return InvalidArgument(op, ": 'depth', 'opacity', 'grad_depth' and 'grad_opacity' must be [R] = ",
                           ray.DebugString());
  }
  const bool weights_full = weights.dims() == 2 && weights.dim_size(0) == R && weights.dim_size(1) == S;
  const bool weights_none = weights.dims() == 2 && weights.dim_size(0) == R && weights.dim_size(1) == 0;
  if (!((weights_full || weights_none) && grad_weights.shape() == weights.shape())) {
    return InvalidArgument(op, ": 'weights' and 'grad_weights' must both be [R, S] = [", R, ", ", S,
                           "] or [R, 0], got ", weights.shape().DebugString(), " and ",
                           grad_weights.shape().DebugString());
  }
  *has_weight_grad = weights_full && S > 0;
  return absl::OkStatus();
}

// The forward op's InvalidArgument for ray r, which failed vr_check_ray with
// `check`; sigma_row (S values) and t_row (S + 1) are that ray in host memory.
template <typename T>
absl::Status BadRayError(const mo::VrCheck& check, int64_t r, const T* sigma_row, const T* t_row) {
  const int64_t i = check.sample;
  if (check.code == mo::kVrBadSigma) {
    return InvalidArgument("MetalOpsVolumeRender: 'sigma' must be non-negative (and not NaN): ray ", r, ", sample ",
                           i, " has sigma = ", static_cast<double>(sigma_row[i]));
  }
  return InvalidArgument("MetalOpsVolumeRender: 't' must be non-decreasing along each ray: ray ", r, " has t[",
                         i + 1, "] = ", static_cast<double>(t_row[i + 1]), " < t[", i, "] = ",
                         static_cast<double>(t_row[i]));
}

}  // namespace volume_render
}  // namespace metal_ops

#endif  // METAL_OPS_OPS_VOLUME_RENDER_VALIDATION_H_
