// FusedMLP CUDA launchers: the checks of the shape, the backward workspace,
// the implementation for the element type (float16: fused_mlp_mma.cu.cc on
// tensor cores; float32: the same kernels on TF32 tensor cores, or
// fused_mlp_layers.cu.cc layer by layer, FusedMlpUsesLayers), and the
// fixed-order sum of the fused kernels' weight-gradient partials (one per
// block of the backward, or per row split of its weight-gradient kernel), so
// dW and db are bitwise deterministic (no atomics).
#include <algorithm>
#include <type_traits>

#include "kernels/common/activations.h"
#include "kernels/fused_mlp/fused_mlp.h"

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

// The shapes and activations kernels/fused_mlp/fused_mlp.h admits (the launchers are
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
  return Layout(s, elem_size, BackwardPathOf(s, elem_size)).total;
}

constexpr const char* kBadShape = "FusedMLP shape";

template <typename T>
GpuStatus LaunchFusedMlpForward(const T* x, const FusedMlpParams<T>& p, T* y, T* saved, const FusedMlpShape& s,
                                cudaStream_t stream) {
  if (!ShapeOk(s)) return GpuStatus{kBadShape, "unsupported width, depth, input/output width or activation"};
  if (s.n == 0) return GpuStatus{};
  if constexpr (std::is_same<T, float>::value) {
    if (FusedMlpUsesLayers(s)) return ForwardLayers(x, p, y, saved, s, stream);
    return CudaCall("FusedMLP forward launch (TF32)", ForwardTf32(x, p, y, saved, s, stream));
  } else {
    return CudaCall("FusedMLP forward launch", Forward(x, p, y, saved, s, stream));
  }
}

template <typename T>
GpuStatus LaunchFusedMlpBackward(const T* dy, const T* x, const T* y, const T* saved, const FusedMlpParams<T>& p,
                                 T* dx, const FusedMlpGrads<T>& g, void* workspace, size_t workspace_bytes,
                                 const FusedMlpShape& s, cudaStream_t stream) {
  if (!ShapeOk(s)) return GpuStatus{kBadShape, "unsupported width, depth, input/output width or activation"};
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
      if (err != cudaSuccess) return CudaCall("cudaMemsetAsync", err);
    }
    return GpuStatus{};
  }
  if (!any_wgrad && dx == nullptr) return GpuStatus{};
  const WsLayout ws = Layout(s, sizeof(T), BackwardPathOf(s, sizeof(T)));
  if (ws.total > workspace_bytes) {
    return GpuStatus{"FusedMLP backward workspace",
                     "smaller than FusedMlpBackwardWorkspaceBytes of this shape on this device"};
  }
  char* base = static_cast<char*>(workspace);
  if constexpr (std::is_same<T, float>::value) {
    if (FusedMlpUsesLayers(s)) return BackwardLayers(dy, x, y, saved, p, dx, g, base, ws, s, stream);
  }
  DzBuffers<T> bufs;
  for (int l = 0; l < kFusedMlpMaxMatrices; ++l) {
    const bool dz = any_wgrad && l < matrices && ws.path == BackwardPath::kWgradKernel;
    bufs.dz[l] = dz ? reinterpret_cast<T*>(base + ws.dz_off[l]) : nullptr;
  }
  float* partials = reinterpret_cast<float*>(base + ws.part_off);
  cudaError_t err;
  int parts = 0;
  if constexpr (std::is_same<T, float>::value) {
    err = BackwardTf32(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, &parts, s, stream);
  } else {
    err = Backward(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, &parts, s, stream);
  }
  if (err != cudaSuccess || !any_wgrad) return CudaCall("FusedMLP backward launch", err);
  const int red_blocks = static_cast<int>((ws.part_stride + 255) / 256);
  FusedMlpWgradReduceKernel<T><<<dim3(red_blocks, matrices), 256, 0, stream>>>(
      partials, parts, ws.part_stride, g, s, dm);
  return CudaCall("FusedMLP weight-gradient sum launch", cudaGetLastError());
}

#define MO_INSTANTIATE(T)                                                                          \
  template GpuStatus LaunchFusedMlpForward<T>(const T*, const FusedMlpParams<T>&, T*, T*,         \
                                              const FusedMlpShape&, cudaStream_t);                \
  template GpuStatus LaunchFusedMlpBackward<T>(const T*, const T*, const T*, const T*,            \
                                               const FusedMlpParams<T>&, T*,                      \
                                               const FusedMlpGrads<T>&, void*, size_t,            \
                                               const FusedMlpShape&, cudaStream_t);
MO_INSTANTIATE(float)
MO_INSTANTIATE(__half)
#undef MO_INSTANTIATE

}  // namespace cuda
}  // namespace mo
