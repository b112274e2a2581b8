// FusedConv2D / FusedActivationGrad CUDA kernels (kernels/cuda/fused_conv2d.h).
// The output stage and the derivatives are kernels/common/activations.h's.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/common/activations.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/fused_conv2d.h"

namespace mo {
namespace cuda {
namespace {

using fused_conv2d::ConvGeometry;

constexpr int kWarpSize = 32;

// V consecutive floats, loaded and stored as one access (aligned to its size).
template <int V>
struct alignas(sizeof(float) * V) Floats {
  float v[V];
};

// The widest access of V = 4, 2 or 1 floats that every pointer's alignment and
// the element count `multiple_of` allow.
int VectorWidth(int64_t multiple_of, std::initializer_list<const void*> pointers) {
  for (int v : {4, 2}) {
    bool ok = multiple_of % v == 0;
    for (const void* p : pointers) ok = ok && reinterpret_cast<uintptr_t>(p) % (sizeof(float) * v) == 0;
    if (ok) return v;
  }
  return 1;
}

// Patch rows [first, first + rows) of the patch matrix, one warp per row: the
// row's KH*KW taps of Cin channels each (zeros where the tap falls in the
// padding), V channels per access, lanes over the row's contiguous floats.
template <int V>
__global__ void GatherPatchRowsKernel(const Floats<V>* __restrict__ input, Floats<V>* __restrict__ patches,
                                      ConvGeometry g, int64_t first, int64_t rows) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = GlobalThreadIndex() / kWarpSize;
  const int64_t warps = GlobalThreadCount() / kWarpSize;
  const int cv = static_cast<int>(g.in_depth / V);  // accesses per tap
  const int row_len = static_cast<int>(g.filter_rows * g.filter_cols) * cv;
  const int64_t ohw = g.out_rows * g.out_cols;
  Floats<V> zero;
  for (int i = 0; i < V; ++i) zero.v[i] = 0.0f;
  for (int64_t row = warp; row < rows; row += warps) {
    const int64_t pix = first + row;
    const int64_t n = pix / ohw, rem = pix % ohw;
    const int64_t y0 = (rem / g.out_cols) * g.stride_rows - g.pad_top;
    const int64_t x0 = (rem % g.out_cols) * g.stride_cols - g.pad_left;
    const Floats<V>* image = input + n * g.in_rows * g.in_cols * cv;
    Floats<V>* dst = patches + row * row_len;
    for (int e = lane; e < row_len; e += kWarpSize) {
      const int tap = e / cv, c = e - tap * cv;
      const int ky = tap / static_cast<int>(g.filter_cols), kx = tap - ky * static_cast<int>(g.filter_cols);
      const int64_t iy = y0 + ky * g.dilation_rows, ix = x0 + kx * g.dilation_cols;
      const bool inside = iy >= 0 && iy < g.in_rows && ix >= 0 && ix < g.in_cols;
      dst[e] = inside ? image[(iy * g.in_cols + ix) * cv + c] : zero;
    }
  }
}

// out = act(out + bias + residual) over a [rows, channels] block, V floats per
// access (channels % V == 0).
template <int V>
__global__ void OutputStageKernel(Floats<V>* out, const Floats<V>* __restrict__ bias,
                                  const Floats<V>* __restrict__ residual, int64_t n, int64_t channels_v, int act,
                                  float alpha) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    Floats<V> o = out[i];
    Floats<V> b{}, r{};  // zeros unless given
    if (bias != nullptr) b = bias[i % channels_v];
    if (residual != nullptr) r = residual[i];
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = fused_output_element(o.v[k], b.v[k], r.v[k], act, alpha);
    out[i] = o;
  }
}

// gradients and backprops may be one buffer: element i is read before it is written.
template <int V>
__global__ void ActivationGradKernel(const Floats<V>* gradients, const Floats<V>* __restrict__ outputs,
                                     const Floats<V>* __restrict__ features, Floats<V>* backprops, int64_t n,
                                     int act, float alpha) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    Floats<V> d = gradients[i];
    if (features != nullptr) {
      const Floats<V> z = features[i];
#pragma unroll
      for (int k = 0; k < V; ++k) d.v[k] *= activation_derivative_from_input(z.v[k], act, alpha);
    } else {
      const Floats<V> y = outputs[i];
#pragma unroll
      for (int k = 0; k < V; ++k) d.v[k] *= activation_derivative_from_output(y.v[k], act, alpha);
    }
    backprops[i] = d;
  }
}

template <int V>
cudaError_t GatherPatchRowsV(const ConvGeometry& g, const float* input, float* patches, int64_t first, int64_t rows,
                             cudaStream_t stream) {
  const int warps_per_block = kThreadsPerBlock / kWarpSize;
  const unsigned int blocks = GridStrideBlocks((rows + warps_per_block - 1) / warps_per_block, 1);
  GatherPatchRowsKernel<V><<<blocks, kThreadsPerBlock, 0, stream>>>(
      reinterpret_cast<const Floats<V>*>(input), reinterpret_cast<Floats<V>*>(patches), g, first, rows);
  return cudaGetLastError();
}

cudaError_t GatherPatchRows(const ConvGeometry& g, const float* input, float* patches, int64_t first, int64_t rows,
                            cudaStream_t stream) {
  switch (VectorWidth(g.in_depth, {input, patches})) {
    case 4:
      return GatherPatchRowsV<4>(g, input, patches, first, rows, stream);
    case 2:
      return GatherPatchRowsV<2>(g, input, patches, first, rows, stream);
    default:
      return GatherPatchRowsV<1>(g, input, patches, first, rows, stream);
  }
}

template <int V>
cudaError_t OutputStageV(float* out, const float* bias, const float* residual, int64_t rows, int64_t channels,
                         int act, float alpha, cudaStream_t stream) {
  const int64_t n = rows * channels / V;
  OutputStageKernel<V><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(
      reinterpret_cast<Floats<V>*>(out), reinterpret_cast<const Floats<V>*>(bias),
      reinterpret_cast<const Floats<V>*>(residual), n, channels / V, act, alpha);
  return cudaGetLastError();
}

// The output stage of rows x channels outputs; nothing to do without bias,
// residual and activation.
cudaError_t OutputStage(float* out, const float* bias, const float* residual, int64_t rows, int64_t channels,
                        int act, float alpha, cudaStream_t stream) {
  if (bias == nullptr && residual == nullptr && act == kActNone) return cudaSuccess;
  switch (VectorWidth(channels, {out, bias, residual})) {
    case 4:
      return OutputStageV<4>(out, bias, residual, rows, channels, act, alpha, stream);
    case 2:
      return OutputStageV<2>(out, bias, residual, rows, channels, act, alpha, stream);
    default:
      return OutputStageV<1>(out, bias, residual, rows, channels, act, alpha, stream);
  }
}

template <int V>
cudaError_t ActivationGradV(const float* gradients, const float* outputs, const float* features, float* backprops,
                            int64_t n, int act, float alpha, cudaStream_t stream) {
  ActivationGradKernel<V><<<GridStrideBlocks(n / V), kThreadsPerBlock, 0, stream>>>(
      reinterpret_cast<const Floats<V>*>(gradients), reinterpret_cast<const Floats<V>*>(outputs),
      reinterpret_cast<const Floats<V>*>(features), reinterpret_cast<Floats<V>*>(backprops), n / V, act, alpha);
  return cudaGetLastError();
}

}  // namespace

GpuStatus LaunchFusedConv2D(const ConvGeometry& g, const FusedConv2DParams& a, cudaStream_t stream) {
  const int64_t m = g.pixels(), n = g.out_depth, k = g.patch_size();
  if (m == 0 || n == 0) return GpuStatus{};
  if (g.contraction_empty()) {
    GpuStatus s = CudaCall("cudaMemsetAsync", cudaMemsetAsync(a.output, 0, sizeof(float) * m * n, stream));
    if (!s.ok()) return s;
    return CudaCall("FusedConv2D output stage launch",
                    OutputStage(a.output, a.bias, a.residual, m, n, a.act, a.alpha, stream));
  }
  const bool gather = !g.input_is_patch_matrix();
  if (a.chunk_rows <= 0) return GpuStatus{"FusedConv2D", "chunk_rows must be positive"};
  if (gather && (a.patches == nullptr || a.patch_floats < std::min(a.chunk_rows, m) * k)) {
    return GpuStatus{"FusedConv2D", "the patch buffer is smaller than one chunk of patch rows"};
  }
  for (int64_t first = 0; first < m; first += a.chunk_rows) {
    const int64_t rows = std::min(a.chunk_rows, m - first);
    const float* lhs = a.input + first * k;
    if (gather) {
      GpuStatus s = CudaCall("FusedConv2D patch gather launch", GatherPatchRows(g, a.input, a.patches, first, rows,
                                                                                  stream));
      if (!s.ok()) return s;
      lhs = a.patches;
    }
    float* out = a.output + first * n;
    GpuStatus s = RowMajorSgemm(rows, n, k, lhs, k, a.filter, n, out, n, a.allow_tf32, stream);
    if (!s.ok()) return s;
    s = CudaCall("FusedConv2D output stage launch",
                 OutputStage(out, a.bias, a.residual != nullptr ? a.residual + first * n : nullptr, rows, n, a.act,
                             a.alpha, stream));
    if (!s.ok()) return s;
  }
  return GpuStatus{};
}

cudaError_t LaunchFusedActivationGrad(const float* gradients, const float* outputs, const float* features,
                                      float* backprops, int64_t n, int act, float alpha, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (VectorWidth(n, {gradients, outputs, features, backprops}) == 4) {
    return ActivationGradV<4>(gradients, outputs, features, backprops, n, act, alpha, stream);
  }
  return ActivationGradV<1>(gradients, outputs, features, backprops, n, act, alpha, stream);
}

}  // namespace cuda
}  // namespace mo
