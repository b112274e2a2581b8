// C-ABI entry points for testing the GaussianTileBin (and GaussianTileBinStatic) CUDA kernels without
// TensorFlow (tests/cuda/test_gaussian_tile_bin_cuda.py drives them with CuPy
// device pointers); the launchers are declared in
// kernels/gaussian_tile_bin/gaussian_tile_bin.h.
#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"

using Attrs = mo::gaussian_tile_bin::Attrs;

extern "C" {

int64_t metal_ops_gaussian_tile_bin_count_scratch_bytes(int64_t n) {
  return static_cast<int64_t>(mo::cuda::GaussianTileBinCountScratchBytes(n));
}

int metal_ops_gaussian_tile_bin_count(const float* means2d, const int32_t* radii, int64_t n, int width, int height,
                                      int tile_size, int64_t* offsets, long long* total, void* scratch,
                                      int64_t scratch_bytes, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchGaussianTileBinCount(means2d, radii, n, Attrs{width, height, tile_size},
                                                               offsets, total, scratch,
                                                               static_cast<size_t>(scratch_bytes), stream));
}

int64_t metal_ops_gaussian_tile_bin_sort_scratch_bytes(int64_t m, int width, int height, int tile_size) {
  return static_cast<int64_t>(mo::cuda::GaussianTileBinSortScratchBytes(m, Attrs{width, height, tile_size}));
}

int metal_ops_gaussian_tile_bin_sort(const float* means2d, const int32_t* radii, const float* depths, int64_t n,
                                     int width, int height, int tile_size, const int64_t* offsets, int64_t m,
                                     int32_t* gaussian_ids, int32_t* tile_ranges, void* scratch,
                                     int64_t scratch_bytes, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchGaussianTileBinSort(
      means2d, radii, depths, n, Attrs{width, height, tile_size}, offsets, m, gaussian_ids, tile_ranges,
      scratch, static_cast<size_t>(scratch_bytes), stream));
}

int64_t metal_ops_gaussian_tile_bin_static_scratch_bytes(int64_t n, int width, int height, int tile_size,
                                                          int max_intersections) {
  return static_cast<int64_t>(mo::cuda::GaussianTileBinStaticScratchBytes(
      n, mo::gaussian_tile_bin::StaticAttrs{{width, height, tile_size}, {max_intersections}}));
}

// GaussianTileBinStatic: ids [max_intersections], ranges [tiles, 2], counts [2]
// (num_intersections, num_gaussians).
int metal_ops_gaussian_tile_bin_static(const float* means2d, const int32_t* radii, const float* depths, int64_t n,
                                       int width, int height, int tile_size, int max_intersections,
                                       int32_t* gaussian_ids, int32_t* tile_ranges, int32_t* counts, void* scratch,
                                       int64_t scratch_bytes, cudaStream_t stream) {
  const mo::GaussianTileBinStaticOutputs out = {gaussian_ids, tile_ranges, counts, counts + 1};
  return static_cast<int>(mo::cuda::LaunchGaussianTileBinStatic(
      means2d, radii, depths, n, mo::gaussian_tile_bin::StaticAttrs{{width, height, tile_size}, {max_intersections}},
      out, scratch, static_cast<size_t>(scratch_bytes), stream));
}

}  // extern "C"
