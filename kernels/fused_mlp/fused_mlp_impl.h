// What the FusedMLP CUDA launchers (fused_mlp.cu.cc) and their two
// implementations share: the padded dimensions, the backward workspace layout,
// and the implementations' entry points:
//   float16: fused_mlp_mma.cu.cc, tensor cores (mma.sync), rows in registers
//   float32 with FusedMlpShape::tf32: the same kernels on TF32 tensor cores
//   float32 layer by layer (FusedMlpUsesLayers): fused_mlp_layers.cu.cc,
//     cuBLAS GEMMs and elementwise passes; on TF32 its backward kernels are
//     fused_mlp_layers_tf32.cu.cc
// (the tensor-core building blocks both use: fused_mlp_mma.h)
// Device code (nvcc only); no TensorFlow.
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_IMPL_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_IMPL_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/fused_mlp/fused_mlp_cuda.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {

// Weight-gradient partials: row splits of the weight-gradient kernel, a
// function of N only, at least kSplitRows rows each; the backward that forms
// the weight gradients itself uses one per block of its grid, at most as many.
constexpr int kMaxSplits = 256;
constexpr int kSplitRows = 4096;

// Blocks, at most, of the TF32 layer path's first ReLU backward kernel and of
// its staged kernels (the ReLU backward with dW, the input layer's dx and
// dW), whose per-block dW partials are in the workspace.
constexpr int kMaxDreluBlocks = 1024;
constexpr int kMaxStagedBackwardBlocks = 256;

inline int Pad16(int v) { return (v + 15) / 16 * 16; }

__host__ __device__ constexpr size_t Align128(size_t b) { return (b + 127) / 128 * 128; }

struct Dims {
  int in_p, out_p, d;  // padded input/output widths, max(width, in_p, out_p)
};

inline Dims DimsOf(const FusedMlpShape& s) {
  Dims d;
  d.in_p = Pad16(s.in_dim);
  d.out_p = Pad16(s.out_dim);
  d.d = std::max(s.width, std::max(d.in_p, d.out_p));
  return d;
}

// Matrix l: rows (true, padded), cols (true, padded).
__host__ __device__ inline void MatrixDims(int l, int matrices, int in_dim, int in_p, int width,
                                           int out_dim, int out_p, int* k, int* kp, int* nn,
                                           int* np) {
  *k = l == 0 ? in_dim : width;
  *kp = l == 0 ? in_p : width;
  *nn = l == matrices - 1 ? out_dim : width;
  *np = l == matrices - 1 ? out_p : width;
}

// dL/dz of every layer, [n, np_l] each, in the backward workspace.
template <typename T>
struct DzBuffers {
  T* dz[kFusedMlpMaxMatrices];  // null when not needed
};

inline int Splits(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (n + kSplitRows - 1) / kSplitRows)));
}

// Which backward runs, and so what its workspace holds:
//   kLayers: float32 layer by layer (dz of every layer, ones, ReLU sums);
//   kFusedWgrad: every weight resident, the backward forms the weight
//     gradients itself (per-block partials only);
//   kWgradKernel: weights streamed, dz of every layer goes to memory for
//     MmaWgradKernel (dz and partials).
enum class BackwardPath { kLayers, kFusedWgrad, kWgradKernel };

// The path on the current device (its shared memory decides residency);
// kWgradKernel when the device cannot be queried (its workspace also holds
// the fused path's).
BackwardPath BackwardPathOf(const FusedMlpShape& s, size_t elem);

struct WsLayout {
  BackwardPath path;
  size_t dz_off[kFusedMlpMaxMatrices];  // valid unless path == kFusedWgrad
  size_t ones_off;  // kLayers: n ones (the bias gradients, 1^T dz)
  size_t drelu_off;  // kLayers: DreluProductTf32's per-block column sums
  size_t drelu_dw_off;  // kLayers: the staged backward kernels' per-block weight gradients
  size_t part_off;
  int splits;
  int64_t part_stride;
  size_t total;
};

inline WsLayout Layout(const FusedMlpShape& s, size_t elem, BackwardPath path) {
  const Dims dm = DimsOf(s);
  WsLayout w;
  w.path = path;
  size_t off = 0;
  const int matrices = s.hidden_layers + 1;
  for (int l = 0; l < matrices; ++l) {
    const int np = l == matrices - 1 ? dm.out_p : s.width;
    w.dz_off[l] = off;
    if (path != BackwardPath::kFusedWgrad) off += Align128(elem * static_cast<size_t>(s.n) * np);
  }
  const bool layers = path == BackwardPath::kLayers;
  w.ones_off = off;
  if (layers) off += Align128(sizeof(float) * static_cast<size_t>(s.n));
  w.drelu_off = off;
  if (layers) off += Align128(sizeof(float) * kMaxDreluBlocks * s.width);
  w.drelu_dw_off = off;
  if (layers) {
    // dW of a hidden, the output or the input layer; a block takes 32 rows at least.
    const int64_t blocks = std::min<int64_t>(kMaxStagedBackwardBlocks, (s.n + 31) / 32);
    const size_t per_block = static_cast<size_t>(s.width) * std::max({s.width, dm.out_p, dm.in_p});
    off += Align128(sizeof(float) * static_cast<size_t>(blocks) * per_block);
  }
  w.splits = Splits(s.n);
  w.part_stride = static_cast<int64_t>(dm.d) * dm.d + dm.d;
  w.part_off = off;
  if (!layers) off += Align128(sizeof(float) * static_cast<size_t>(matrices) * w.splits * w.part_stride);
  w.total = off;
  return w;
}

// The implementations, for n > 0 and a shape ShapeOk admits. The fused
// backward writes dx and, when any_wgrad, the weight-gradient partials, *parts
// of them (at most ws.splits, summed in order by the caller; dz is written to
// `bufs` only when the weight gradients run as their own kernel); the layer
// path writes dx, dW and db.
cudaError_t Forward(const __half* x, const FusedMlpParams<__half>& p, __half* y, __half* saved,
                    const FusedMlpShape& s, cudaStream_t stream);
cudaError_t Backward(const __half* dy, const __half* x, const __half* y, const __half* saved,
                     const FusedMlpParams<__half>& p, __half* dx, const DzBuffers<__half>& bufs, bool any_wgrad,
                     float* partials, const WsLayout& ws, int* parts, const FusedMlpShape& s,
                     cudaStream_t stream);
// float32 on TF32 tensor cores, fully fused (fused_mlp_mma.cu.cc).
cudaError_t ForwardTf32(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream);
cudaError_t BackwardTf32(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const DzBuffers<float>& bufs, bool any_wgrad,
                         float* partials, const WsLayout& ws, int* parts, const FusedMlpShape& s,
                         cudaStream_t stream);
// The TF32 layer path's ReLU backward through one layer (fused_mlp_layers_tf32.cu.cc):
// out[n, width] = (dz[n, k] W^T) * (h > 0) with W [width, k] row-major and h
// the ReLU's saved output [n, width], products on TF32 tensor cores; with db,
// db[width] = the column sums of out; with dw, dw[width, k] = h^T dz, W's
// gradient, from the same reads of dz and h where the device holds the
// staging (*dw_done says whether it did; if not, the caller forms it). out
// null: dw alone (the lowest layer visited; the same bits). db and
// dw are summed in a fixed order from per-block sums in db_parts
// (kMaxDreluBlocks * width floats) and dw_parts (WsLayout::drelu_dw_off).
// k % 8 == 0, k <= kFusedMlpMaxIoWidth; dz, h and out 8-byte aligned.
// staged_rows: FusedMlpShape::tf32_staged_rows.
cudaError_t DreluProductTf32(const float* dz, int k, const float* w, const float* h, float* out, float* db,
                             float* dw, float* db_parts, float* dw_parts, int64_t n, int width, int staged_rows,
                             bool* dw_done, cudaStream_t stream);
// The TF32 layer path's input layer (fused_mlp_layers_tf32.cu.cc): dx[n, in_dim] =
// dz[n, k] W^T and dw[in_dim, k] = x^T dz (each may be null) in one read of
// dz and x, on TF32 tensor cores, dw summed in a fixed order from dw_parts.
// *done false (nothing queued) where the kernel does not serve the shape or
// the device (in_dim not 16, 32, 64 or 128, x or dz not 16-byte aligned, too
// little shared memory, staged_rows -1): the caller forms dx and dw.
cudaError_t InputBackwardTf32(const float* dz, int k, const float* w, const float* x, float* dx, float* dw,
                              float* dw_parts, int64_t n, int in_dim, int staged_rows, bool* done,
                              cudaStream_t stream);
// float32 layer by layer (fused_mlp_layers.cu.cc): products exact, or on TF32
// tensor cores with s.tf32; `workspace` is the backward's (Layout).
GpuStatus ForwardLayers(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream);
GpuStatus BackwardLayers(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const FusedMlpGrads<float>& g, char* workspace,
                         const WsLayout& ws, const FusedMlpShape& s, cudaStream_t stream);

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_IMPL_H_
