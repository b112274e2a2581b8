// FusedConv2D / FusedActivationGrad CUDA launchers: plain C++ declarations (no
// TensorFlow), shared by the TF GPU kernels (fused_conv2d_gpu.cc) and the
// C-ABI harness. The geometry is kernels/fused_conv2d/fused_conv2d_spec.h's, the formulas
// kernels/common/activations.h's.
//
// The convolution is a GEMM of the [pixels, KH*KW*Cin] patch matrix and the
// HWIO filter, the [KH*KW*Cin, Cout] matrix as it is (cuBLAS,
// kernels/cuda/cublas_gemm.h), in chunks of output rows: per chunk, the patch
// rows are gathered into a bounded buffer (none for 1x1 stride-1 unpadded
// convolutions, whose input is the patch matrix), multiplied, and the output
// stage act(acc + bias + residual) runs over the chunk's rows right after
// their GEMM, while they are in the GPU's L2 cache.
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_CUDA_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_CUDA_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/output_stage.h"  // LaunchFusedActivationGrad, FusedActivationGrad's launcher
#include "kernels/fused_conv2d/fused_conv2d_spec.h"

namespace mo {
namespace cuda {

// The patch buffer's bound, and the output rows of one chunk (sized for the
// L2 cache of the GPUs TensorFlow's CUDA build targets).
constexpr int64_t kFusedConv2DMaxPatchBytes = int64_t{32} << 20;
constexpr int64_t kFusedConv2DChunkOutputBytes = int64_t{16} << 20;

// How a convolution is cut: chunk_rows output pixels per chunk; patch_floats
// is the patch buffer the chunks need (0 when the input is the patch matrix,
// or nothing is contracted).
struct FusedConv2DPlan {
  int64_t chunk_rows = 0;
  int64_t patch_floats = 0;
};

// As many rows as max_chunk_output_bytes of output (and, gathering patches,
// max_patch_bytes of patch rows) hold, at least one, at most every pixel and
// 2^31 - 1 (cuBLAS's int dimensions). For a non-empty output.
inline FusedConv2DPlan PlanFusedConv2D(const fused_conv2d::ConvGeometry& g,
                                       int64_t max_patch_bytes = kFusedConv2DMaxPatchBytes,
                                       int64_t max_chunk_output_bytes = kFusedConv2DChunkOutputBytes) {
  const int64_t row_bytes = static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(g.out_depth, 1);
  const int64_t patch_row_bytes = static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(g.patch_size(), 1);
  int64_t rows = std::min<int64_t>(g.pixels(), std::numeric_limits<int>::max());
  rows = std::min(rows, max_chunk_output_bytes / row_bytes);
  const bool gather = !g.input_is_patch_matrix() && !g.contraction_empty();
  if (gather) rows = std::min(rows, max_patch_bytes / patch_row_bytes);
  FusedConv2DPlan plan;
  plan.chunk_rows = std::max<int64_t>(rows, 1);
  plan.patch_floats = gather ? plan.chunk_rows * g.patch_size() : 0;
  return plan;
}

struct FusedConv2DParams {
  const float* input;     // [N, H, W, Cin]
  const float* filter;    // [KH, KW, Cin, Cout]
  const float* bias;      // [Cout] or nullptr
  const float* residual;  // the output's shape, or nullptr
  float* output;          // [N, OH, OW, Cout]
  float* patches;         // patch_floats floats (unused when the input is the patch matrix)
  int64_t patch_floats;   // >= chunk_rows * KH*KW*Cin when gathering
  int64_t chunk_rows;     // > 0
  int act;                // mo::Activation
  float alpha;            // leaky_relu's slope
  bool allow_tf32;        // GEMM products on TF32 tensor cores
};

// output = act(conv2d(input, filter) + bias + residual), queued on `stream`
// (the current device's). Sizes as fused_conv2d::Geometry gives them;
// KH*KW*Cin and Cout at most 2^31 - 1. The residual may not alias the output.
GpuStatus LaunchFusedConv2D(const fused_conv2d::ConvGeometry& g, const FusedConv2DParams& params, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_CUDA_H_
