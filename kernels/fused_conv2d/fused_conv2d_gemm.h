// How MetalOpsFusedConv2D's CPU kernel cuts a convolution into GEMM tiles, and
// which convolutions fit in an L2-sized tile: shared by the kernel
// (kernels/fused_conv2d/fused_conv2d_kernels.cc) and the Grappler plugin
// (grappler/fusion_plugin.cc), which fuses only convolutions whose tile fits
// (the ones measured faster than TensorFlow's, docs/FUSED_CONV2D.md). Arithmetic
// only: no BLAS, no TensorFlow.
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_GEMM_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_GEMM_H_

#include <algorithm>
#include <cstdint>

namespace mo {

// The most output rows a tile of A[rows, k] x B[k, n] -> C[rows, n] can have
// with A, B and C together in half the L2 (the other half for the output
// stage's bias / residual reads and the next tile's patches); negative when
// even B alone does not fit.
inline int64_t l2_tile_max_rows(int64_t k, int64_t n, int64_t l2_bytes) {
  const int64_t budget_floats = l2_bytes / 2 / static_cast<int64_t>(sizeof(float));
  return (budget_floats - k * n) / (k + n);
}

// Tiles smaller than this are not worth a GEMM call each.
constexpr int64_t kMinTileRows = 64;
// Tile height for filters whose [k, n] matrix leaves no room for kMinTileRows
// rows in the L2 budget: large enough that re-packing B once per tile costs
// little next to the tile's 2 * rows * k * n flops.
constexpr int64_t kLargeFilterTileRows = 256;

// Whether a convolution with a [k = KH*KW*Cin, n = Cout] filter matrix and
// `pixels` output pixels (negative: unknown) computes in L2-sized tiles.
inline bool fused_conv_tile_fits_l2(int64_t k, int64_t n, int64_t pixels, int64_t l2_bytes) {
  const int64_t min_rows = pixels >= 0 ? std::min(kMinTileRows, pixels) : kMinTileRows;
  return l2_tile_max_rows(k, n, l2_bytes) >= std::max<int64_t>(min_rows, 1);
}

// Whether the Grappler plugin fuses such a convolution by default: its tile
// fits in L2 and the filter matrix is no taller than wide (k <= n), where the
// GEMM's cost is dominated by the output the fused stage saves passes over
// (the shapes measured on each side of this rule: docs/FUSED_CONV2D.md).
inline bool fused_conv_profitable(int64_t k, int64_t n, int64_t pixels, int64_t l2_bytes) {
  return k <= n && fused_conv_tile_fits_l2(k, n, pixels, l2_bytes);
}

// Output rows per tile: as many as the L2 budget allows (kLargeFilterTileRows
// when it allows too few), but at least one tile per thread.
inline int64_t fused_conv_tile_rows(int64_t k, int64_t n, int64_t pixels, int64_t threads, int64_t l2_bytes) {
  const int64_t budget = fused_conv_tile_fits_l2(k, n, pixels, l2_bytes) ? l2_tile_max_rows(k, n, l2_bytes)
                                                                         : kLargeFilterTileRows;
  const int64_t per_thread = (pixels + std::max<int64_t>(threads, 1) - 1) / std::max<int64_t>(threads, 1);
  return std::max<int64_t>(1, std::min(budget, per_thread));
}

}  // namespace mo

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_GEMM_H_
