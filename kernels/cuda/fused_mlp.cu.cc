// FusedMLP CUDA launchers: the checks of the shape, the backward workspace,
// the implementation for the element type (float32: fused_mlp_simt.cu.cc on
// CUDA cores, or fused_mlp_mma.cu.cc on TF32 tensor cores when the shape asks;
// float16: fused_mlp_mma.cu.cc on tensor cores), and the fixed-order
// sum of the weight-gradient partials over row splits, so dW and db are
// bitwise deterministic (no atomics).
#include <algorithm>
#include <type_traits>

#include "kernels/common/activations.h"
#include "kernels/cuda/fused_mlp.h"
#include "kernels/cuda/fused_mlp_impl.h"

namespace mo {
namespace cuda {
namespace {

using namespace fused_mlp_impl;  // NOLINT: the implementations' shared vocabulary

template <typename T>
__global__ void FusedMlpWgradReduceKernel(const float* __restrict__ partials, int splits,
                                          int64_t part_stride, FusedMlpGrads<T> g, FusedMlpShape s,
                                          Dims dm) {
  const int l = blockIdx.y, matrices = s.hidden_layers + 1;
  int k, kp, nn, np;
  MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
  const float* base = partials + static_cast<int64_t>(l) * splits * part_stride;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < kp * np + np;
       e += gridDim.x * blockDim.x) {
    const bool is_b = e >= kp * np;
    const int r = is_b ? 0 : e / np, c = is_b ? e - kp * np : e % np;
    if (c >= nn || r >= k) continue;
    if (is_b ? g.db[l] == nullptr : g.dw[l] == nullptr) continue;
    float sum = 0.0f;
#pragma unroll 16
    for (int sp = 0; sp < splits; ++sp) sum += base[sp * part_stride + e];
    if (is_b) {
      g.db[l][c] = T(sum);
    } else {
      g.dw[l][r * nn + c] = T(sum);
    }
  }
}

// The shapes and activations kernels/spec/fused_mlp_spec.h admits (the launchers are
// also called without TensorFlow, from the harness).
bool ShapeOk(const FusedMlpShape& s) {
  return fused_mlp::HiddenActivationOk(s.activation) &&
         (fused_mlp::HiddenActivationOk(s.output_activation) || s.output_activation == kActTruncExp) && s.n >= 0 &&
         s.in_dim >= 1 && s.in_dim <= kFusedMlpMaxIoWidth && s.out_dim >= 1 && s.out_dim <= kFusedMlpMaxIoWidth &&
         s.hidden_layers >= 1 && s.hidden_layers + 1 <= kFusedMlpMaxMatrices && fused_mlp::WidthSupported(s.width);
}

}  // namespace

size_t FusedMlpBackwardWorkspaceBytes(const FusedMlpShape& s, size_t elem_size) {
  if (!ShapeOk(s)) return 0;
  return Layout(s, elem_size).total;
}

template <typename T>
cudaError_t LaunchFusedMlpForward(const T* x, const FusedMlpParams<T>& p, T* y, T* saved,
                                  const FusedMlpShape& s, cudaStream_t stream) {
  if (!ShapeOk(s)) return cudaErrorInvalidValue;
  if (s.n == 0) return cudaSuccess;
  if constexpr (std::is_same<T, float>::value) {
    if (s.tf32) return ForwardTf32(x, p, y, saved, s, stream);
  }
  return Forward(x, p, y, saved, s, stream);
}

template <typename T>
cudaError_t LaunchFusedMlpBackward(const T* dy, const T* x, const T* y, const T* saved,
                                   const FusedMlpParams<T>& p, T* dx, const FusedMlpGrads<T>& g,
                                   void* workspace, const FusedMlpShape& s, cudaStream_t stream) {
  if (!ShapeOk(s)) return cudaErrorInvalidValue;
  const int matrices = s.hidden_layers + 1;
  const Dims dm = DimsOf(s);
  bool any_wgrad = false;
  for (int l = 0; l < matrices; ++l) any_wgrad = any_wgrad || g.dw[l] != nullptr || g.db[l] != nullptr;
  if (s.n == 0) {
    // Empty batch: gradients of the parameters are zeros.
    for (int l = 0; l < matrices; ++l) {
      const int k = l == 0 ? s.in_dim : s.width, nn = l == matrices - 1 ? s.out_dim : s.width;
      cudaError_t err = cudaSuccess;
      if (g.dw[l] != nullptr) err = cudaMemsetAsync(g.dw[l], 0, sizeof(T) * k * nn, stream);
      if (err == cudaSuccess && g.db[l] != nullptr) err = cudaMemsetAsync(g.db[l], 0, sizeof(T) * nn, stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }
  if (!any_wgrad && dx == nullptr) return cudaSuccess;
  const WsLayout ws = Layout(s, sizeof(T));
  char* base = static_cast<char*>(workspace);
  DzBuffers<T> bufs;
  for (int l = 0; l < kFusedMlpMaxMatrices; ++l) {
    bufs.dz[l] = (any_wgrad && l < matrices) ? reinterpret_cast<T*>(base + ws.dz_off[l]) : nullptr;
  }
  float* partials = reinterpret_cast<float*>(base + ws.part_off);
  cudaError_t err;
  if constexpr (std::is_same<T, float>::value) {
    err = s.tf32 ? BackwardTf32(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, s, stream)
                 : Backward(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, s, stream);
  } else {
    err = Backward(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, s, stream);
  }
  if (err != cudaSuccess || !any_wgrad) return err;
  const int red_blocks = static_cast<int>((ws.part_stride + 255) / 256);
  FusedMlpWgradReduceKernel<T><<<dim3(red_blocks, matrices), 256, 0, stream>>>(
      partials, ws.splits, ws.part_stride, g, s, dm);
  return cudaGetLastError();
}

#define MO_INSTANTIATE(T)                                                                          \
  template cudaError_t LaunchFusedMlpForward<T>(const T*, const FusedMlpParams<T>&, T*, T*,       \
                                                const FusedMlpShape&, cudaStream_t);              \
  template cudaError_t LaunchFusedMlpBackward<T>(const T*, const T*, const T*, const T*,          \
                                                 const FusedMlpParams<T>&, T*,                    \
                                                 const FusedMlpGrads<T>&, void*,                  \
                                                 const FusedMlpShape&, cudaStream_t);
MO_INSTANTIATE(float)
MO_INSTANTIATE(__half)
#undef MO_INSTANTIATE

}  // namespace cuda
}  // namespace mo
