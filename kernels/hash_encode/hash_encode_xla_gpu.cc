// The CUDA handlers of the XLA kernels of MetalOpsHashEncode /
// MetalOpsHashEncodeGrad / MetalOpsHashEncodeGradGrad
// (kernels/hash_encode/hash_encode_xla.cc): the launchers of
// kernels/hash_encode/hash_encode_cuda.h on XLA's stream, the gradients' workspaces from
// XLA's scratch allocator; the table gradients deterministic when the op's
// attribute (the backward's) or TensorFlow's op determinism asks, as in the
// GPU kernels. Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check`
// syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/hash_encode/hash_encode_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/hash_encode/hash_encode_xla.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"
#include "tensorflow/core/util/determinism.h"

namespace mo {
namespace xla_ffi {
namespace {

// launch(workspace) with `bytes` of XLA's scratch (null when 0), as an FFI
// error; an error naming `op` when the scratch is not there.
template <typename Launch>
ffi::Error LaunchWithWorkspace(ffi::ScratchAllocator& scratch, size_t bytes, const char* op, Launch&& launch) {
  unsigned char* workspace = nullptr;
  if (bytes > 0) {
    ffi::Error error = ScratchOf(scratch, bytes, op, &workspace);
    if (error.failure()) return error;
  }
  return ToError(launch(static_cast<void*>(workspace)));
}

ffi::Error Forward(cudaStream_t stream, ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer encoded,
                   int64_t num_levels, int64_t log2_hashmap_size, int64_t base_resolution, float per_level_scale,
                   int64_t interpolation, int64_t out_of_range) {
  HashEncodeCall c;
  ffi::Error error = HashEncodeCallOf(num_levels, log2_hashmap_size, base_resolution, per_level_scale, interpolation,
                                      out_of_range, inputs, table, &c);
  if (error.failure() || c.num_points == 0) return error;
  return ForType<float, Eigen::half>(table.element_type(), "HashEncode", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "MetalOpsHashEncode", cuda::LaunchHashEncodeForward(Data<float>(inputs), cuda::AsCuda(Data<T>(table)),
                                                            cuda::AsCuda(Data<T>(encoded)), c.dims, c.features,
                                                            c.params, stream)));
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad_encoded,
                    ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer grad_table, RetBuffer grad_inputs,
                    int64_t num_levels, int64_t log2_hashmap_size,
                    int64_t base_resolution, float per_level_scale, int64_t interpolation, int64_t out_of_range,
                    int64_t table_grad, int64_t input_grad, int64_t deterministic) {
  HashEncodeCall c;
  ffi::Error error = HashEncodeCallOf(num_levels, log2_hashmap_size, base_resolution, per_level_scale, interpolation,
                                      out_of_range, inputs, table, &c);
  if (error.failure() || (!table_grad && !input_grad)) return error;
  return ForType<float, Eigen::half>(table.element_type(), "HashEncodeGrad", [&](auto type) {
    using T = decltype(type);
    cuda::HashEncodeBackwardOptions options;
    options.table_grad = table_grad != 0;
    options.input_grad = input_grad != 0;
    options.deterministic = deterministic != 0 || ::tensorflow::OpDeterminismRequired();
    const size_t workspace_bytes = cuda::HashEncodeBackwardWorkspaceBytes(
        c.dims, c.features, c.rows, std::is_same<T, Eigen::half>::value, c.params, options);
    return LaunchWithWorkspace(scratch, workspace_bytes, "HashEncodeGrad", [&](void* workspace) {
      return cuda::LaunchStatus(
          "MetalOpsHashEncodeGrad",
          cuda::LaunchHashEncodeBackward(cuda::AsCuda(Data<T>(grad_encoded)), Data<float>(inputs),
                                         cuda::AsCuda(Data<T>(table)),
                                         options.table_grad ? cuda::AsCuda(Data<T>(grad_table)) : nullptr,
                                         options.input_grad ? Data<float>(grad_inputs) : nullptr, workspace,
                                         workspace_bytes, c.dims, c.features, c.rows, c.params, options, stream));
    });
  });
}

ffi::Error GradGrad(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad_grad_inputs,
                    ffi::AnyBuffer grad_encoded, ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer grad_table,
                    RetBuffer grad_grad_encoded, int64_t num_levels, int64_t log2_hashmap_size,
                    int64_t base_resolution, float per_level_scale, int64_t interpolation, int64_t out_of_range) {
  HashEncodeCall c;
  ffi::Error error = HashEncodeCallOf(num_levels, log2_hashmap_size, base_resolution, per_level_scale, interpolation,
                                      out_of_range, inputs, table, &c);
  if (error.failure()) return error;
  return ForType<float, Eigen::half>(table.element_type(), "HashEncodeGradGrad", [&](auto type) {
    using T = decltype(type);
    const bool deterministic = ::tensorflow::OpDeterminismRequired();
    const size_t workspace_bytes = cuda::HashEncodeGradGradWorkspaceBytes(
        c.dims, c.features, c.rows, std::is_same<T, Eigen::half>::value, c.params, deterministic);
    return LaunchWithWorkspace(scratch, workspace_bytes, "HashEncodeGradGrad", [&](void* workspace) {
      return cuda::LaunchStatus(
          "MetalOpsHashEncodeGradGrad",
          cuda::LaunchHashEncodeGradGrad(Data<float>(grad_grad_inputs), cuda::AsCuda(Data<T>(grad_encoded)),
                                         Data<float>(inputs), cuda::AsCuda(Data<T>(table)),
                                         cuda::AsCuda(Data<T>(grad_table)), cuda::AsCuda(Data<T>(grad_grad_encoded)),
                                         workspace, workspace_bytes, c.dims, c.features, c.rows, c.params,
                                         deterministic, stream));
    });
  });
}

MO_XLA_FFI_HANDLER("MetalOpsHashEncode", "CUDA", Forward, BindGridAttrs(BindStreamBuffers<2, 1>()));
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGrad", "CUDA", Backward,
                   BindGridAttrs(BindStreamScratchBuffers<3, 2>())
                       .Attr<int64_t>("table_grad")
                       .Attr<int64_t>("input_grad")
                       .Attr<int64_t>("deterministic"));
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGradGrad", "CUDA", GradGrad,
                   BindGridAttrs(BindStreamScratchBuffers<4, 2>()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
