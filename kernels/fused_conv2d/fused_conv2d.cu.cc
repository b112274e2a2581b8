// FusedConv2D / FusedActivationGrad CUDA kernels and launchers (declared in
// kernels/fused_conv2d/fused_conv2d.h). The output stage and the derivatives:
// kernels/cuda/output_stage.h.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/output_stage.h"
#include "kernels/fused_conv2d/fused_conv2d.h"

namespace mo {
namespace cuda {
namespace {

using fused_conv2d::ConvGeometry;

constexpr int kWarpSize = 32;

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

}  // namespace

GpuStatus LaunchFusedConv2D(const ConvGeometry& g, const FusedConv2DParams& a, cudaStream_t stream) {
  const int64_t m = g.pixels(), n = g.out_depth, k = g.patch_size();
  if (m == 0 || n == 0) return GpuStatus{};
  if (g.contraction_empty()) {
    GpuStatus s = CudaCall("cudaMemsetAsync", cudaMemsetAsync(a.output, 0, sizeof(float) * m * n, stream));
    if (!s.ok()) return s;
    return CudaCall("FusedConv2D output stage launch",
                    LaunchOutputStage(a.output, a.bias, a.residual, m, n, a.act, a.alpha, stream));
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
    const float* residual = a.residual != nullptr ? a.residual + first * n : nullptr;
    s = CudaCall("FusedConv2D output stage launch",
                 LaunchOutputStage(out, a.bias, residual, rows, n, a.act, a.alpha, stream));
    if (!s.ok()) return s;
  }
  return GpuStatus{};
}

}  // namespace cuda
}  // namespace mo
