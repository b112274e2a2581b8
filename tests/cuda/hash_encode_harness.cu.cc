// C-ABI entry points for testing and benchmarking the HashEncode CUDA kernels
// without TensorFlow (tests/cuda/test_hash_encode_cuda.py and
// benchmarks/cuda/bench_hash_encode_cuda.py call them through ctypes with
// CuPy device pointers). dtype: 0 = float32 table, 1 = float16 table.
// Return values are cudaError_t codes (0 = success).
#include "kernels/hash_encode/hash_encode.h"

namespace {

// The grid's Params, if the op's checks (kernels/hash_encode/hash_encode.h: Grid,
// InputDim) accept it; sets *rows to the table's row count P.
bool ParamsFor(int dims, int64_t n, int num_levels, int log2_hashmap_size, uint32_t base_resolution,
               float per_level_scale, int interpolation, int out_of_range, mo::hash_grid::Params* p, int64_t* rows) {
  mo::hash_encode::Attrs a;
  a.num_levels = num_levels;
  a.log2_hashmap_size = log2_hashmap_size;
  a.base_resolution = base_resolution > 0x7fffffffu ? -1 : static_cast<int>(base_resolution);
  a.per_level_scale = per_level_scale;
  a.interpolation = interpolation;
  a.out_of_range = out_of_range;
  if (!mo::hash_encode::Grid(a).ok || !mo::hash_encode::InputDim(dims, {n, dims}).ok) return false;
  *p = mo::hash_encode::MakeParams(a, dims, n);
  *rows = p->level_offsets[num_levels];
  return true;
}

mo::cuda::HashEncodeBackwardOptions OptionsFor(int table_grad, int input_grad, int deterministic,
                                               int64_t aggregate_shared_bytes) {
  mo::cuda::HashEncodeBackwardOptions o;
  o.table_grad = table_grad != 0;
  o.input_grad = input_grad != 0;
  o.deterministic = deterministic != 0;
  o.aggregate_shared_bytes = aggregate_shared_bytes;
  return o;
}

}  // namespace

extern "C" {

// Row count P of the grid's table (tiny-cuda-nn's formula, hash_grid.h); -1 if invalid.
int64_t metal_ops_hash_encode_table_rows(int dims, int num_levels, int log2_hashmap_size, uint32_t base_resolution,
                                         float per_level_scale) {
  mo::hash_grid::Params p;
  int64_t rows = 0;
  if (!ParamsFor(dims, 0, num_levels, log2_hashmap_size, base_resolution, per_level_scale, 0, 0, &p, &rows)) return -1;
  return rows;
}

// levels_per_block: 0 = library default, else levels per block (tuning).
int metal_ops_hash_encode_forward_tuned(const float* inputs, const void* table, void* encoded, int dtype, int64_t n,
                                        int dims, int features, int num_levels, int log2_hashmap_size,
                                        uint32_t base_resolution, float per_level_scale, int interpolation,
                                        int out_of_range, int levels_per_block, cudaStream_t stream) {
  mo::hash_grid::Params p;
  int64_t rows = 0;
  if (!ParamsFor(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale, interpolation,
                 out_of_range, &p, &rows)) {
    return cudaErrorInvalidValue;
  }
  if (dtype == 0) {
    return mo::cuda::LaunchHashEncodeForward(inputs, static_cast<const float*>(table), static_cast<float*>(encoded),
                                             dims, features, p, stream, levels_per_block);
  }
  if (dtype == 1) {
    return mo::cuda::LaunchHashEncodeForward(inputs, static_cast<const __half*>(table),
                                             static_cast<__half*>(encoded), dims, features, p, stream,
                                             levels_per_block);
  }
  return cudaErrorInvalidValue;
}

int metal_ops_hash_encode_forward(const float* inputs, const void* table, void* encoded, int dtype, int64_t n,
                                  int dims, int features, int num_levels, int log2_hashmap_size,
                                  uint32_t base_resolution, float per_level_scale, int interpolation,
                                  int out_of_range, cudaStream_t stream) {
  return metal_ops_hash_encode_forward_tuned(inputs, table, encoded, dtype, n, dims, features, num_levels,
                                             log2_hashmap_size, base_resolution, per_level_scale, interpolation,
                                             out_of_range, 0, stream);
}

int64_t metal_ops_hash_encode_backward_workspace_bytes(int dtype, int64_t n, int dims, int features, int num_levels,
                                                       int log2_hashmap_size, uint32_t base_resolution,
                                                       float per_level_scale, int table_grad, int input_grad,
                                                       int deterministic) {
  mo::hash_grid::Params p;
  int64_t rows = 0;
  if (!ParamsFor(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale, 0, 0, &p, &rows)) {
    return -1;
  }
  return static_cast<int64_t>(mo::cuda::HashEncodeBackwardWorkspaceBytes(
      dims, features, rows, dtype == 1, p, OptionsFor(table_grad, input_grad, deterministic, -1)));
}

// grad_inputs may be null when input_grad == 0; aggregate_shared_bytes: -1
// default, 0 off, else the shared-memory budget for coarse-level aggregation.
int metal_ops_hash_encode_backward_tuned(const void* grad_encoded, const float* inputs, const void* table,
                                         void* grad_table, float* grad_inputs, void* workspace,
                                         int64_t workspace_bytes, int dtype, int64_t n, int dims, int features,
                                         int num_levels, int log2_hashmap_size, uint32_t base_resolution,
                                         float per_level_scale, int interpolation, int out_of_range, int table_grad,
                                         int input_grad, int deterministic, int64_t aggregate_shared_bytes,
                                         int levels_per_block, cudaStream_t stream) {
  mo::hash_grid::Params p;
  int64_t rows = 0;
  if (workspace_bytes < 0 || !ParamsFor(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                        interpolation, out_of_range, &p, &rows)) {
    return cudaErrorInvalidValue;
  }
  mo::cuda::HashEncodeBackwardOptions o = OptionsFor(table_grad, input_grad, deterministic, aggregate_shared_bytes);
  o.levels_per_block = levels_per_block;
  // The workspace depends on the level grouping: recheck it here.
  if (static_cast<size_t>(workspace_bytes) < mo::cuda::HashEncodeBackwardWorkspaceBytes(dims, features, rows,
                                                                                       dtype == 1, p, o)) {
    return cudaErrorInvalidValue;
  }
  if (dtype == 0) {
    return mo::cuda::LaunchHashEncodeBackward(
        static_cast<const float*>(grad_encoded), inputs, static_cast<const float*>(table),
        static_cast<float*>(grad_table), grad_inputs, workspace, static_cast<size_t>(workspace_bytes), dims, features,
        rows, p, o, stream);
  }
  if (dtype == 1) {
    return mo::cuda::LaunchHashEncodeBackward(
        static_cast<const __half*>(grad_encoded), inputs, static_cast<const __half*>(table),
        static_cast<__half*>(grad_table), grad_inputs, workspace, static_cast<size_t>(workspace_bytes), dims,
        features, rows, p, o, stream);
  }
  return cudaErrorInvalidValue;
}

// The library's default tuning (levels_per_block = 0).
int metal_ops_hash_encode_backward(const void* grad_encoded, const float* inputs, const void* table,
                                   void* grad_table, float* grad_inputs, void* workspace, int64_t workspace_bytes,
                                   int dtype, int64_t n, int dims, int features, int num_levels,
                                   int log2_hashmap_size, uint32_t base_resolution, float per_level_scale,
                                   int interpolation, int out_of_range, int table_grad, int input_grad,
                                   int deterministic, int64_t aggregate_shared_bytes, cudaStream_t stream) {
  return metal_ops_hash_encode_backward_tuned(grad_encoded, inputs, table, grad_table, grad_inputs, workspace,
                                              workspace_bytes, dtype, n, dims, features, num_levels,
                                              log2_hashmap_size, base_resolution, per_level_scale, interpolation,
                                              out_of_range, table_grad, input_grad, deterministic,
                                              aggregate_shared_bytes, 0, stream);
}

int64_t metal_ops_hash_encode_grad_grad_workspace_bytes(int dtype, int64_t n, int dims, int features,
                                                        int num_levels, int log2_hashmap_size,
                                                        uint32_t base_resolution, float per_level_scale,
                                                        int deterministic) {
  mo::hash_grid::Params p;
  int64_t rows = 0;
  if (!ParamsFor(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale, 0, 0, &p, &rows)) {
    return -1;
  }
  return static_cast<int64_t>(
      mo::cuda::HashEncodeGradGradWorkspaceBytes(dims, features, rows, dtype == 1, p, deterministic != 0));
}

// MetalOpsHashEncodeGradGrad: grad_table [P, F] and grad_grad_encoded [N, L*F]
// from grad_grad_inputs [N, D] (float32) and grad_encoded [N, L*F].
int metal_ops_hash_encode_grad_grad(const float* grad_grad_inputs, const void* grad_encoded, const float* inputs,
                                    const void* table, void* grad_table, void* grad_grad_encoded, void* workspace,
                                    int64_t workspace_bytes, int dtype, int64_t n, int dims, int features,
                                    int num_levels, int log2_hashmap_size, uint32_t base_resolution,
                                    float per_level_scale, int interpolation, int out_of_range, int deterministic,
                                    cudaStream_t stream) {
  mo::hash_grid::Params p;
  int64_t rows = 0;
  if (workspace_bytes < 0 || !ParamsFor(dims, n, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                                        interpolation, out_of_range, &p, &rows)) {
    return cudaErrorInvalidValue;
  }
  const size_t ws = static_cast<size_t>(workspace_bytes);
  if (dtype == 0) {
    return mo::cuda::LaunchHashEncodeGradGrad(
        grad_grad_inputs, static_cast<const float*>(grad_encoded), inputs, static_cast<const float*>(table),
        static_cast<float*>(grad_table), static_cast<float*>(grad_grad_encoded), workspace, ws, dims, features, rows,
        p, deterministic != 0, stream);
  }
  if (dtype == 1) {
    return mo::cuda::LaunchHashEncodeGradGrad(
        grad_grad_inputs, static_cast<const __half*>(grad_encoded), inputs, static_cast<const __half*>(table),
        static_cast<__half*>(grad_table), static_cast<__half*>(grad_grad_encoded), workspace, ws, dims, features,
        rows, p, deterministic != 0, stream);
  }
  return cudaErrorInvalidValue;
}

}  // extern "C"
