// FusedMLP CUDA launchers: plain C++ declarations (no TensorFlow), shared by the
// TF GPU kernels (fused_mlp_gpu.cc) and the C-ABI harness.
//
// Layout (Keras Dense): x [n, in_dim], kernel l [in_l, out_l], bias l [out_l],
// y [n, out_dim], all row-major. Matrices: hidden_layers + 1 (in -> width,
// width -> width x (hidden_layers - 1), width -> out). T is float or __half
// (float accumulation; __half matrices run on tensor cores).
#ifndef MO_KERNELS_CUDA_FUSED_MLP_H_
#define MO_KERNELS_CUDA_FUSED_MLP_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/spec/fused_mlp_spec.h"

namespace mo {
namespace cuda {

// The limits are kernels/spec/fused_mlp_spec.h's.
constexpr int kFusedMlpMaxMatrices = fused_mlp::kMaxHiddenLayers + 1;          // hidden layers + output
constexpr int kFusedMlpMaxIoWidth = static_cast<int>(fused_mlp::kMaxIoWidth);  // padded to 16 inside

struct FusedMlpShape {
  int64_t n;
  int in_dim, width, hidden_layers, out_dim;
  int activation, output_activation;  // mo::Activation codes
  float alpha;                        // leaky_relu slope
  // float32 only: products on TF32 tensor cores (operands rounded to 10-bit
  // mantissas, float accumulation; docs/FUSED_MLP_GPU.md) instead of exact
  // float32 on CUDA cores. float16 ignores it.
  bool tf32 = false;
};

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
template <typename T>
cudaError_t LaunchFusedMlpForward(const T* x, const FusedMlpParams<T>& p, T* y, T* saved,
                                  const FusedMlpShape& s, cudaStream_t stream);

// Device scratch LaunchFusedMlpBackward needs (per-layer dL/dz of the batch
// and per-block weight-gradient partials).
size_t FusedMlpBackwardWorkspaceBytes(const FusedMlpShape& s, size_t elem_size);

// Gradients of sum(dy * y) for x (dx, may be null) and every weight and bias
// (null entries skipped). y and saved are the forward's outputs. dW/db are
// reduced from per-block partials in a fixed order: bitwise deterministic.
template <typename T>
cudaError_t LaunchFusedMlpBackward(const T* dy, const T* x, const T* y, const T* saved,
                                   const FusedMlpParams<T>& p, T* dx, const FusedMlpGrads<T>& g,
                                   void* workspace, const FusedMlpShape& s, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_FUSED_MLP_H_
