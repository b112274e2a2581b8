// HashEncode attributes and input checks, written once for every TF kernel of
// the op (CPU in kernels/cpu/, CUDA registration in kernels/cuda/): host-only
// C++. The InvalidArgument messages name the argument; tests match on them.
#ifndef METAL_OPS_OPS_HASH_ENCODE_VALIDATION_H_
#define METAL_OPS_OPS_HASH_ENCODE_VALIDATION_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/common/hash_grid.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace metal_ops {
namespace hash_encode {

namespace hg = ::mo::hash_grid;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::Tensor;
using ::tensorflow::errors::InvalidArgument;
using ::mo::uint32;

struct GridAttrs {
  int num_levels = 0;
  int log2_hashmap_size = 0;
  int base_resolution = 0;
  float per_level_scale = 0.f;
  float log2_per_level_scale = 0.f;
  int interpolation = hg::kLinear;
  int out_of_range = hg::kClamp;
};

inline absl::Status CheckGridAttrs(const GridAttrs& a) {
  if (a.num_levels < 1 || a.num_levels > hg::kMaxLevels) {
    return InvalidArgument("num_levels must be in [1, ", int(hg::kMaxLevels), "], got ", a.num_levels);
  }
  if (a.log2_hashmap_size < hg::kMinLog2HashmapSize || a.log2_hashmap_size > hg::kMaxLog2HashmapSize) {
    return InvalidArgument("log2_hashmap_size must be in [", int(hg::kMinLog2HashmapSize), ", ",
                           int(hg::kMaxLog2HashmapSize), "], got ", a.log2_hashmap_size);
  }
  if (a.base_resolution < 1) {
    return InvalidArgument("base_resolution must be >= 1, got ", a.base_resolution);
  }
  if (!(a.per_level_scale >= 1.0f) || std::isinf(a.per_level_scale)) {
    return InvalidArgument("per_level_scale must be finite and >= 1, got ", a.per_level_scale);
  }
  // The finest level's vertex coordinates must fit the uint32 cell arithmetic.
  const float finest = hg::level_scale(a.num_levels - 1, a.log2_per_level_scale, uint32(a.base_resolution));
  if (!(finest < 2147483520.0f)) {
    return InvalidArgument("resolution of the finest level (base_resolution * per_level_scale^(num_levels-1) = ",
                           finest + 1.0f, ") must stay below 2^31: reduce base_resolution, per_level_scale "
                           "or num_levels");
  }
  return absl::OkStatus();
}

inline absl::Status ReadGridAttrs(OpKernelConstruction* ctx, GridAttrs* a) {
  std::string interpolation, out_of_range;
  TF_RETURN_IF_ERROR(ctx->GetAttr("num_levels", &a->num_levels));
  TF_RETURN_IF_ERROR(ctx->GetAttr("log2_hashmap_size", &a->log2_hashmap_size));
  TF_RETURN_IF_ERROR(ctx->GetAttr("base_resolution", &a->base_resolution));
  TF_RETURN_IF_ERROR(ctx->GetAttr("per_level_scale", &a->per_level_scale));
  a->log2_per_level_scale = ::mo::log2_f(a->per_level_scale);
  if (ctx->HasAttr("interpolation")) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("interpolation", &interpolation));
    TF_RETURN_IF_ERROR(ctx->GetAttr("out_of_range", &out_of_range));
    if (interpolation == "linear") {
      a->interpolation = hg::kLinear;
    } else if (interpolation == "smoothstep") {
      a->interpolation = hg::kSmoothstep;
    } else {
      return InvalidArgument("interpolation must be 'linear' or 'smoothstep', got '", interpolation, "'");
    }
    if (out_of_range == "clamp") {
      a->out_of_range = hg::kClamp;
    } else if (out_of_range == "wrap") {
      a->out_of_range = hg::kWrap;
    } else if (out_of_range == "zero") {
      a->out_of_range = hg::kZero;
    } else {
      return InvalidArgument("out_of_range must be 'clamp', 'wrap' or 'zero', got '", out_of_range, "'");
    }
  }
  return CheckGridAttrs(*a);
}

// Table rows P of the grid (and the level offsets, offsets[0..num_levels]).
inline int64_t GridRows(int dims, const GridAttrs& a, int64_t* offsets) {
  return hg::level_offsets(dims, a.num_levels, a.log2_hashmap_size, a.log2_per_level_scale,
                           uint32(a.base_resolution), offsets);
}

// inputs [N, D] and table [P, F] against the grid; sets D, F and P.
inline absl::Status CheckInputsAndTable(const GridAttrs& a, const Tensor& inputs, const Tensor& table, int* dims,
                                        int* features, int64_t* rows) {
  if (inputs.dims() != 2) {
    return InvalidArgument("inputs must be a rank-2 tensor [N, D], got shape ", inputs.shape().DebugString());
  }
  const int64_t d = inputs.dim_size(1);
  if (d < 1 || d > hg::kMaxDims) {
    return InvalidArgument("inputs must be [N, D] with D in [1, 4], got D = ", d, " (shape ",
                           inputs.shape().DebugString(), ")");
  }
  if (table.dims() != 2) {
    return InvalidArgument("table must be a rank-2 tensor [P, F], got shape ", table.shape().DebugString());
  }
  const int64_t f = table.dim_size(1);
  if (f != 1 && f != 2 && f != 4 && f != 8) {
    return InvalidArgument("table must be [P, F] with F in {1, 2, 4, 8}, got F = ", f);
  }
  int64_t offsets[hg::kMaxLevels + 1];
  const int64_t p = GridRows(int(d), a, offsets);
  if (table.dim_size(0) != p) {
    return InvalidArgument("table has ", table.dim_size(0), " rows but the hash grid needs ", p,
                           " (hash_grid_size(input_dim=", d, ", num_levels=", a.num_levels,
                           ", log2_hashmap_size=", a.log2_hashmap_size, ", base_resolution=", a.base_resolution,
                           ", per_level_scale=", a.per_level_scale, "))");
  }
  *dims = int(d);
  *features = int(f);
  *rows = p;
  return absl::OkStatus();
}

// `name` ([rows, cols]: grad_encoded, grad_grad_inputs) has the expected shape.
inline absl::Status CheckMatrix(const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dims() != 2 || t.dim_size(0) != rows || t.dim_size(1) != cols) {
    return InvalidArgument(name, " must have shape [", rows, ", ", cols, "], got ", t.shape().DebugString());
  }
  return absl::OkStatus();
}

}  // namespace hash_encode
}  // namespace metal_ops

#endif  // METAL_OPS_OPS_HASH_ENCODE_VALIDATION_H_
