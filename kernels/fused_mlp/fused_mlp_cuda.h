// FusedMLP CUDA launchers: plain C++ declarations (no TensorFlow), shared by the
// TF GPU kernels (fused_mlp_gpu.cc) and the C-ABI harness.
//
// Layout (Keras Dense): x [n, in_dim], kernel l [in_l, out_l], bias l [out_l],
// y [n, out_dim], all row-major. Matrices: hidden_layers + 1 (in -> width,
// width -> width x (hidden_layers - 1), width -> out). T is float or __half
// (float accumulation). __half runs fully fused on tensor cores; float32 on
// TF32 tensor cores fully fused, or layer by layer through cuBLAS (exact
// float32 products, and TF32 at width 128: FusedMlpUsesLayers).
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_CUDA_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_CUDA_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cublas_gemm.h"  // GpuStatus
#include "kernels/fused_mlp/fused_mlp_spec.h"

namespace mo {
namespace cuda {

// The limits are kernels/fused_mlp/fused_mlp_spec.h's.
constexpr int kFusedMlpMaxMatrices = fused_mlp::kMaxHiddenLayers + 1;          // hidden layers + output
constexpr int kFusedMlpMaxIoWidth = static_cast<int>(fused_mlp::kMaxIoWidth);  // padded to 16 inside

struct FusedMlpShape {
  int64_t n;
  int in_dim, width, hidden_layers, out_dim;
  int activation, output_activation;  // mo::Activation codes
  float alpha;                        // leaky_relu slope
  // float32 only: products on TF32 tensor cores (operands rounded to 10-bit
  // mantissas, float accumulation; docs/FUSED_MLP_GPU.md) instead of exact
  // float32 products. float16 ignores it.
  bool tf32 = false;
  // float32 with tf32 only, for tuning and tests: kFusedMlpTf32Auto (the
  // library's choice, FusedMlpUsesLayers), kFusedMlpTf32Fused or
  // kFusedMlpTf32Layers.
  int tf32_impl = 0;
  // The TF32 layer path's staged backward kernels (docs/FUSED_MLP_GPU.md),
  // for tests: rows per staged chunk, 0 for the device's choice (64, or 32
  // where 64 do not fit its shared memory), 32, or -1 for none (the first
  // ReLU backward kernel and cuBLAS, as on devices where neither fits).
  int tf32_staged_rows = 0;
};

constexpr int kFusedMlpTf32Auto = 0;
constexpr int kFusedMlpTf32Fused = 1;
constexpr int kFusedMlpTf32Layers = 2;

// Whether a float32 network runs layer by layer (cuBLAS GEMMs and elementwise
// bias / activation passes) rather than fully fused: always for exact float32
// (cuBLAS's SGEMM is faster than a fused CUDA-core kernel at every benchmark
// shape), and for TF32 at width 128, where one warp's rows of activations and
// their accumulators no longer fit the registers with room for more than one
// 16-row tile (docs/FUSED_MLP_GPU.md has the measurements).
inline bool FusedMlpUsesLayers(const FusedMlpShape& s) {
  if (!s.tf32) return true;
  if (s.tf32_impl != kFusedMlpTf32Auto) return s.tf32_impl == kFusedMlpTf32Layers;
  return s.width >= 128;
}

template <typename T>
struct FusedMlpParams {
  const T* w[kFusedMlpMaxMatrices];
  const T* b[kFusedMlpMaxMatrices];
};

template <typename T>
struct FusedMlpGrads {
  T* dw[kFusedMlpMaxMatrices];  // each may be null (not wanted)
  T* db[kFusedMlpMaxMatrices];
};

// y = MLP(x). `saved` (null for inference) receives every hidden layer's
// activation output, [hidden_layers, n, width], which the backward reads.
// Float32 layer by layer without `saved` takes two hidden layers' scratch
// from CUDA's stream-ordered allocator (cudaMallocAsync) for the call.
// Errors name the failed call (a bad shape or activation: "FusedMLP shape").
template <typename T>
GpuStatus LaunchFusedMlpForward(const T* x, const FusedMlpParams<T>& p, T* y, T* saved,
                                  const FusedMlpShape& s, cudaStream_t stream);

// Device scratch LaunchFusedMlpBackward needs on the current device: the
// weight-gradient partials, and per-layer dL/dz of the batch only where the
// backward cannot form the weight gradients itself (its weights do not fit
// the device's shared memory) or runs layer by layer.
size_t FusedMlpBackwardWorkspaceBytes(const FusedMlpShape& s, size_t elem_size);

// Gradients of sum(dy * y) for x (dx, may be null) and every weight and bias
// (null entries skipped). y and saved are the forward's outputs. dW/db are
// reduced from per-block partials in a fixed order, or computed by cuBLAS
// GEMMs (layer by layer): bitwise deterministic on one GPU either way.
// workspace_bytes (at least FusedMlpBackwardWorkspaceBytes) is checked.
template <typename T>
GpuStatus LaunchFusedMlpBackward(const T* dy, const T* x, const T* y, const T* saved,
                                   const FusedMlpParams<T>& p, T* dx, const FusedMlpGrads<T>& g,
                                   void* workspace, size_t workspace_bytes, const FusedMlpShape& s,
                                   cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_CUDA_H_
