// HashEncode CUDA launchers: plain C++ declarations (no TensorFlow), called by
// the TF GPU kernels (hash_encode_gpu.cc) and the C-ABI harness
// (hash_encode_harness.cu.cc). Formulas: kernels/common/hash_grid.h.
//
// Kernel layout (tiny-cuda-nn style): blocks of (points, level group). The
// G levels of a group are adjacent lanes of a warp, so a point's G * F
// outputs (32 bytes for float32, F = 2) are written by one store instruction
// as whole sectors (coalesced), and G levels at a time keep their slice of
// the table hot in L2 (G = 4 for float32, 8 for float16 forward, F = 2; the
// forward doubles G for groups of small coarse levels, see
// MakeForwardGroups in hash_encode.cu.cc).
// Forward: two lanes per (point, level), one for the x-lower and one for the
// x-upper corner of every x-pair, so the two rows of a pair are gathered by
// one instruction and cost one L2 request (the kernel is bound by L2
// requests); outputs use streaming stores. Backward: one thread per (point,
// level).
//
// Backward: table gradient with float32 red/atomic adds (float2/float4 vector
// atomics on sm_90; one atomic for both rows of an x-pair of corners when
// they share an aligned block), accumulated into a float32 buffer for half tables (never
// half atomics); coarse dense levels are pre-aggregated in shared memory by
// blocks that each sweep many points, then flushed with one atomic per
// touched entry. Deterministic mode accumulates in 64-bit fixed point (integer
// atomics, order-independent) with a power-of-two scale chosen from
// max|grad_encoded| * N so that no sum can overflow, and reduces the input
// gradient over level groups in a fixed order. The input gradient is computed
// in the same kernel from the table rows the thread touches (no dy/dx stored
// by the forward pass).
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_CUDA_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_CUDA_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/hash_grid.h"

namespace mo {
namespace cuda {

struct HashEncodeBackwardOptions {
  bool table_grad = true;      // write grad_table [P, F]
  bool input_grad = false;     // write grad_inputs [N, D]
  bool deterministic = false;  // bitwise-reproducible results (fixed-point table accumulation)
  // Shared-memory budget per block for pre-aggregating coarse dense levels:
  // -1 = library default, 0 = off.
  int64_t aggregate_shared_bytes = -1;
  // Levels handled by one block (adjacent lanes); 0 = library default. Tuning knob.
  int levels_per_block = 0;
};

// encoded[N, L*F] = hash encoding of inputs[N, D] with table[P, F].
// T is float or __half. dims in 1..4, features in {1, 2, 4, 8}; table must be
// aligned to min(2 * features * sizeof(T), 16) bytes (the backward's contract:
// x-pairs of rows take one vector atomic), encoded to
// min(features * sizeof(T), 16); otherwise cudaErrorMisalignedAddress. TF and
// CuPy allocations always are.
// levels_per_block: 0 = library default (see hash_encode.cu.cc); a tuning knob.
template <typename T>
cudaError_t LaunchHashEncodeForward(const float* inputs, const T* table, T* encoded, int dims, int features,
                                    const hash_grid::Params& params, cudaStream_t stream,
                                    int levels_per_block = 0);

// Bytes of device scratch LaunchHashEncodeBackward needs (may be 0).
size_t HashEncodeBackwardWorkspaceBytes(int dims, int features, int64_t table_rows, bool half_table,
                                        const hash_grid::Params& params, const HashEncodeBackwardOptions& options);

// grad_table[P, F] (if options.table_grad) and grad_inputs[N, D] (if
// options.input_grad) from grad_encoded[N, L*F]. Both outputs are fully
// written (no need to zero them). workspace: HashEncodeBackwardWorkspaceBytes
// bytes, 256-byte aligned.
template <typename T>
cudaError_t LaunchHashEncodeBackward(const T* grad_encoded, const float* inputs, const T* table, T* grad_table,
                                     float* grad_inputs, void* workspace, size_t workspace_bytes, int dims,
                                     int features, int64_t table_rows, const hash_grid::Params& params,
                                     const HashEncodeBackwardOptions& options, cudaStream_t stream);

// Bytes of device scratch LaunchHashEncodeGradGrad needs (may be 0).
size_t HashEncodeGradGradWorkspaceBytes(int dims, int features, int64_t table_rows, bool half_table,
                                        const hash_grid::Params& params, bool deterministic);

// MetalOpsHashEncodeGradGrad (second derivatives, eikonal losses): given
// grad_grad_inputs[N, D] = dLoss/dgrad_inputs, writes grad_table[P, F] =
// dLoss/dtable and grad_grad_encoded[N, L*F] = dLoss/dgrad_encoded, the
// adjoints of the backward's input gradient (hash_grid.h's
// input_gradient_coefficient). One thread per (point, level); the table sums
// use the backward's accumulators: float32 atomics, or with deterministic the
// 64-bit fixed point, its scale chosen from the largest contribution of one
// (point, level). Both outputs are fully written. workspace:
// HashEncodeGradGradWorkspaceBytes bytes, 256-byte aligned; alignment of
// table, grad_table and grad_encoded as for the backward, grad_grad_encoded
// as for the forward's encoded.
template <typename T>
cudaError_t LaunchHashEncodeGradGrad(const float* grad_grad_inputs, const T* grad_encoded, const float* inputs,
                                     const T* table, T* grad_table, T* grad_grad_encoded, void* workspace,
                                     size_t workspace_bytes, int dims, int features, int64_t table_rows,
                                     const hash_grid::Params& params, bool deterministic, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_CUDA_H_
