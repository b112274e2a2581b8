// The C++-API adapter of HashEncode's checks (ops/hash_encode_checks.h) for the
// CPU kernels (kernels/cpu/hash_encode_kernels.cc) and the CUDA registrations
// (kernels/cuda/hash_encode_gpu.cc): attributes read from the kernel
// construction, tensors in, absl::Status out. The checks and their messages
// live in the checks header only.
#ifndef METAL_OPS_KERNELS_HASH_ENCODE_OP_H_
#define METAL_OPS_KERNELS_HASH_ENCODE_OP_H_

#include <cstdint>
#include <string>

#include "ops/checks_tf.h"
#include "ops/hash_encode_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {
namespace hash_encode_tf {

using hash_encode_checks::GridAttrs;
using hash_encode_checks::GridRows;

// The grid attributes (and, on ops that have them, the mode strings).
inline absl::Status ReadGridAttrs(::tensorflow::OpKernelConstruction* ctx, GridAttrs* a) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("num_levels", &a->num_levels));
  TF_RETURN_IF_ERROR(ctx->GetAttr("log2_hashmap_size", &a->log2_hashmap_size));
  TF_RETURN_IF_ERROR(ctx->GetAttr("base_resolution", &a->base_resolution));
  TF_RETURN_IF_ERROR(ctx->GetAttr("per_level_scale", &a->per_level_scale));
  if (ctx->HasAttr("interpolation")) {
    std::string interpolation, out_of_range;
    TF_RETURN_IF_ERROR(ctx->GetAttr("interpolation", &interpolation));
    TF_RETURN_IF_ERROR(ctx->GetAttr("out_of_range", &out_of_range));
    TF_RETURN_IF_ERROR(checks::ToStatus(hash_encode_checks::Modes(interpolation, out_of_range, a)));
  }
  return checks::ToStatus(hash_encode_checks::Grid(a));
}

inline absl::Status CheckInputsAndTable(const GridAttrs& a, const ::tensorflow::Tensor& inputs,
                                        const ::tensorflow::Tensor& table, int* dims, int* features, int64_t* rows) {
  return checks::ToStatus(hash_encode_checks::InputsAndTable(a, checks::DimsOf(inputs), checks::DimsOf(table), dims,
                                                             features, rows));
}

inline absl::Status CheckMatrix(const char* name, const ::tensorflow::Tensor& t, int64_t rows, int64_t cols) {
  return checks::ToStatus(hash_encode_checks::Matrix(name, checks::DimsOf(t), rows, cols));
}

}  // namespace hash_encode_tf
}  // namespace mo

#endif  // METAL_OPS_KERNELS_HASH_ENCODE_OP_H_
