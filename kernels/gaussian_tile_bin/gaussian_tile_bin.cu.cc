// GaussianTileBin's CUDA kernels and their launchers (declared in
// gaussian_tile_bin.h), gsplat's isect_tiles scheme: each Gaussian's tile
// count (one thread per Gaussian), their inclusive prefix sum
// (cub::DeviceScan), the 64-bit keys of every intersection (tile id << 32 |
// depth key) with the Gaussian's index as value, CUB's stable radix sort of
// the pairs over the key's used bits (cub::DeviceRadixSort::SortPairs, so
// equal keys keep index order), and each tile's range by binary search in
// the sorted keys. The tile rectangle, the keys, the key bits and the search
// are gaussian_tile_bin.h's.
#include <cub/cub.cuh>

#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

size_t AlignUp(size_t n) { return (n + 255) & ~size_t(255); }

size_t ScanBytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                static_cast<int>(n));
  return bytes;
}

size_t SortBytes(int64_t m) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const unsigned long long*>(nullptr),
                                  static_cast<unsigned long long*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<int>(m));
  return bytes;
}

struct Grid {
  int tile_size, tiles_x, tiles_y;
};

Grid GridOf(const gaussian_tile_bin::Attrs& a) {
  return Grid{a.tile_size, gaussian_tile_bin::TilesX(a), gaussian_tile_bin::TilesY(a)};
}

__global__ void TileCountKernel(const float* __restrict__ means2d, const int32_t* __restrict__ radii, int64_t n,
                                Grid g, int64_t* __restrict__ counts) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    counts[i] = gtb_tile_count(means2d[2 * i], means2d[2 * i + 1], radii[2 * i], radii[2 * i + 1], g.tile_size,
                               g.tiles_x, g.tiles_y);
  }
}

__global__ void TileTotalKernel(const int64_t* __restrict__ offsets, int64_t n, long long* total) {
  *total = static_cast<long long>(offsets[n - 1]);
}

__global__ void TileKeysKernel(const float* __restrict__ means2d, const int32_t* __restrict__ radii,
                               const float* __restrict__ depths, int64_t n, Grid g,
                               const int64_t* __restrict__ offsets, unsigned long long* __restrict__ keys,
                               int32_t* __restrict__ ids) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    int x0, x1, y0, y1;
    gtb_tile_rect(means2d[2 * i], means2d[2 * i + 1], radii[2 * i], radii[2 * i + 1], g.tile_size, g.tiles_x,
                  g.tiles_y, &x0, &x1, &y0, &y1);
    int64_t at = i > 0 ? offsets[i - 1] : 0;
    const float depth = depths[i];
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        keys[at] = gtb_key(int64_t{y} * g.tiles_x + x, depth);
        ids[at] = static_cast<int32_t>(i);
        ++at;
      }
    }
  }
}

__global__ void TileRangesKernel(const unsigned long long* __restrict__ keys, int64_t m, int64_t tiles,
                                 int32_t* __restrict__ ranges) {
  for (int64_t t = GlobalThreadIndex(); t < tiles; t += GlobalThreadCount()) {
    ranges[2 * t] = static_cast<int32_t>(gtb_first_of_tile(keys, m, t));
    ranges[2 * t + 1] = static_cast<int32_t>(gtb_first_of_tile(keys, m, t + 1));
  }
}

}  // namespace

size_t GaussianTileBinCountScratchBytes(int64_t n) {
  return AlignUp(sizeof(int64_t) * static_cast<size_t>(n)) + AlignUp(ScanBytes(n));
}

cudaError_t LaunchGaussianTileBinCount(const float* means2d, const int32_t* radii, int64_t n,
                                       const gaussian_tile_bin::Attrs& a, int64_t* offsets, long long* total,
                                       void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (n <= 0 || n > INT32_MAX) return cudaErrorInvalidValue;
  if (scratch_bytes < GaussianTileBinCountScratchBytes(n)) return cudaErrorInvalidValue;
  auto* counts = static_cast<int64_t*>(scratch);
  char* cub_scratch = static_cast<char*>(scratch) + AlignUp(sizeof(int64_t) * static_cast<size_t>(n));
  size_t cub_bytes = ScanBytes(n);
  TileCountKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(means2d, radii, n, GridOf(a), counts);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = cub::DeviceScan::InclusiveSum(cub_scratch, cub_bytes, counts, offsets, static_cast<int>(n), stream);
  if (err != cudaSuccess) return err;
  TileTotalKernel<<<1, 1, 0, stream>>>(offsets, n, total);
  return cudaGetLastError();
}

size_t GaussianTileBinSortScratchBytes(int64_t m, const gaussian_tile_bin::Attrs& /*a*/) {
  return 2 * AlignUp(sizeof(unsigned long long) * static_cast<size_t>(m)) +
         AlignUp(sizeof(int32_t) * static_cast<size_t>(m)) + AlignUp(SortBytes(m));
}

cudaError_t LaunchGaussianTileBinSort(const float* means2d, const int32_t* radii, const float* depths, int64_t n,
                                      const gaussian_tile_bin::Attrs& a, const int64_t* offsets, int64_t m,
                                      int32_t* gaussian_ids, int32_t* tile_ranges, void* scratch,
                                      size_t scratch_bytes, cudaStream_t stream) {
  const int64_t tiles = gaussian_tile_bin::Tiles(a);
  if (m <= 0) {
    return cudaMemsetAsync(tile_ranges, 0, sizeof(int32_t) * 2 * static_cast<size_t>(tiles), stream);
  }
  if (m > INT32_MAX || scratch_bytes < GaussianTileBinSortScratchBytes(m, a)) return cudaErrorInvalidValue;
  const size_t key_bytes = AlignUp(sizeof(unsigned long long) * static_cast<size_t>(m));
  auto* keys = static_cast<unsigned long long*>(scratch);
  auto* sorted_keys = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch) + key_bytes);
  auto* ids = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + 2 * key_bytes);
  char* cub_scratch = static_cast<char*>(scratch) + 2 * key_bytes + AlignUp(sizeof(int32_t) * static_cast<size_t>(m));
  size_t cub_bytes = SortBytes(m);
  TileKeysKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(means2d, radii, depths, n, GridOf(a), offsets,
                                                                       keys, ids);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = cub::DeviceRadixSort::SortPairs(cub_scratch, cub_bytes, keys, sorted_keys, ids, gaussian_ids,
                                        static_cast<int>(m), 0, gtb_key_bits(tiles), stream);
  if (err != cudaSuccess) return err;
  TileRangesKernel<<<GridStrideBlocks(tiles), kThreadsPerBlock, 0, stream>>>(sorted_keys, m, tiles, tile_ranges);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo
