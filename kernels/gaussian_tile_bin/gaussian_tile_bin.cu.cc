// GaussianTileBin's CUDA kernels and their launchers (declared in
// gaussian_tile_bin.h), gsplat's isect_tiles scheme: each Gaussian's tile
// count (one thread per Gaussian), their inclusive prefix sum
// (cub::DeviceScan), the 64-bit keys of every intersection (tile id << 32 |
// depth key) with the Gaussian's index as value, CUB's stable radix sort of
// the pairs over the key's used bits (cub::DeviceRadixSort::SortPairs, so
// equal keys keep index order), and each tile's range by binary search in
// the sorted keys. The tile rectangle, the keys, the key bits and the search
// are gaussian_tile_bin.h's. GaussianTileBinStatic runs the same count, keys
// and sort on the device without reading anything back: the cut
// (gtb_static_kept) in one thread, padding keys that sort last, and a sort of
// max_intersections pairs.
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

// The sort runs on cub::DoubleBuffer pairs: its scratch is a few KiB, where
// CUB's call with separate outputs takes a copy of both arrays (12 bytes an
// intersection, a large part of a render's peak memory at 1M Gaussians).
size_t SortBytes(int64_t m) {
  size_t bytes = 0;
  cub::DoubleBuffer<unsigned long long> keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> ids(nullptr, nullptr);
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, ids, static_cast<int>(m));
  return bytes;
}

// CUB's stable radix sort of m (key, id) pairs over the keys' low `bits`:
// keys and alt_keys, ids and sorted_ids are the two halves of its buffers
// (their contents are overwritten). The sorted ids end in sorted_ids;
// *sorted_keys is whichever key buffer holds the sorted keys.
cudaError_t SortPairs(void* scratch, size_t bytes, unsigned long long* keys, unsigned long long* alt_keys,
                      int32_t* ids, int32_t* sorted_ids, int64_t m, int bits, cudaStream_t stream,
                      const unsigned long long** sorted_keys) {
  cub::DoubleBuffer<unsigned long long> key_buffers(keys, alt_keys);
  cub::DoubleBuffer<int32_t> id_buffers(ids, sorted_ids);
  cudaError_t err = cub::DeviceRadixSort::SortPairs(scratch, bytes, key_buffers, id_buffers, static_cast<int>(m), 0,
                                                    bits, stream);
  if (err != cudaSuccess) return err;
  *sorted_keys = key_buffers.Current();
  if (id_buffers.Current() == sorted_ids) return cudaSuccess;
  return cudaMemcpyAsync(sorted_ids, id_buffers.Current(), sizeof(int32_t) * static_cast<size_t>(m),
                         cudaMemcpyDeviceToDevice, stream);
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

// The keys of the Gaussians whose intersections end at or before `limit`
// (every Gaussian for GaussianTileBin; GaussianTileBinStatic's kept ones).
__global__ void TileKeysKernel(const float* __restrict__ means2d, const int32_t* __restrict__ radii,
                               const float* __restrict__ depths, int64_t n, Grid g,
                               const int64_t* __restrict__ offsets, int64_t limit,
                               unsigned long long* __restrict__ keys, int32_t* __restrict__ ids) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    if (offsets[i] > limit) continue;
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

// GaussianTileBinStatic's cut (gtb_static_kept) into its two counts.
__global__ void StaticCutKernel(const int64_t* __restrict__ ends, int64_t n, int64_t budget,
                                GaussianTileBinStaticOutputs out) {
  const int64_t kept = gtb_static_kept(ends, n, budget);
  *out.num_gaussians = static_cast<int32_t>(kept);
  *out.num_intersections = static_cast<int32_t>(kept > 0 ? ends[kept - 1] : 0);
}

// Keys [num_intersections, budget): padding that sorts after every kept key.
__global__ void StaticPadKernel(const int32_t* __restrict__ num_intersections, int64_t budget,
                                unsigned long long* __restrict__ keys, int32_t* __restrict__ ids) {
  for (int64_t k = *num_intersections + GlobalThreadIndex(); k < budget; k += GlobalThreadCount()) {
    keys[k] = ~0ull;
    ids[k] = kGtbStaticPadId;
  }
}

// Each tile's range among the first *m sorted keys.
__global__ void StaticRangesKernel(const unsigned long long* __restrict__ keys, const int32_t* __restrict__ m,
                                   int64_t tiles, int32_t* __restrict__ ranges) {
  for (int64_t t = GlobalThreadIndex(); t < tiles; t += GlobalThreadCount()) {
    ranges[2 * t] = static_cast<int32_t>(gtb_first_of_tile(keys, *m, t));
    ranges[2 * t + 1] = static_cast<int32_t>(gtb_first_of_tile(keys, *m, t + 1));
  }
}

// GaussianTileBinStatic's scratch: the ends [n] and the count's scratch (n >
// 0), the total, then the keys twice, the ids and the sort's scratch, for
// `budget` entries.
struct StaticScratch {
  size_t ends, count, total, keys, ids, sort;
  size_t Bytes() const { return ends + count + total + 2 * keys + ids + sort; }
};

StaticScratch StaticScratchOf(int64_t n, int64_t budget) {
  StaticScratch b;
  b.ends = n > 0 ? AlignUp(sizeof(int64_t) * static_cast<size_t>(n)) : 0;
  b.count = n > 0 ? GaussianTileBinCountScratchBytes(n) : 0;
  b.total = AlignUp(sizeof(long long));
  b.keys = AlignUp(sizeof(unsigned long long) * static_cast<size_t>(budget));
  b.ids = AlignUp(sizeof(int32_t) * static_cast<size_t>(budget));
  b.sort = AlignUp(SortBytes(budget));
  return b;
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
  auto* alt_keys = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch) + key_bytes);
  auto* ids = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + 2 * key_bytes);
  char* cub_scratch = static_cast<char*>(scratch) + 2 * key_bytes + AlignUp(sizeof(int32_t) * static_cast<size_t>(m));
  TileKeysKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(means2d, radii, depths, n, GridOf(a), offsets,
                                                                       m, keys, ids);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const unsigned long long* sorted_keys = nullptr;
  err = SortPairs(cub_scratch, SortBytes(m), keys, alt_keys, ids, gaussian_ids, m, gtb_key_bits(tiles), stream,
                  &sorted_keys);
  if (err != cudaSuccess) return err;
  TileRangesKernel<<<GridStrideBlocks(tiles), kThreadsPerBlock, 0, stream>>>(sorted_keys, m, tiles, tile_ranges);
  return cudaGetLastError();
}

size_t GaussianTileBinStaticScratchBytes(int64_t n, const gaussian_tile_bin::StaticAttrs& a) {
  return StaticScratchOf(n, a.max_intersections).Bytes();
}

cudaError_t LaunchGaussianTileBinStatic(const float* means2d, const int32_t* radii, const float* depths, int64_t n,
                                        const gaussian_tile_bin::StaticAttrs& a,
                                        const GaussianTileBinStaticOutputs& out, void* scratch,
                                        size_t scratch_bytes, cudaStream_t stream) {
  const int64_t budget = a.max_intersections, tiles = gaussian_tile_bin::Tiles(a);
  const StaticScratch b = StaticScratchOf(n, budget);
  if (n < 0 || n > INT32_MAX || budget < 1 || scratch_bytes < b.Bytes()) return cudaErrorInvalidValue;
  char* at = static_cast<char*>(scratch);
  auto* ends = reinterpret_cast<int64_t*>(at);
  char* count_scratch = at + b.ends;
  auto* total = reinterpret_cast<long long*>(count_scratch + b.count);
  auto* keys = reinterpret_cast<unsigned long long*>(count_scratch + b.count + b.total);
  auto* alt_keys = reinterpret_cast<unsigned long long*>(reinterpret_cast<char*>(keys) + b.keys);
  auto* ids = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(alt_keys) + b.keys);
  char* sort_scratch = reinterpret_cast<char*>(ids) + b.ids;
  cudaError_t err = cudaSuccess;
  if (n > 0) {
    err = LaunchGaussianTileBinCount(means2d, radii, n, a, ends, total, count_scratch, b.count, stream);
    if (err != cudaSuccess) return err;
  }
  StaticCutKernel<<<1, 1, 0, stream>>>(ends, n, budget, out);
  if (n > 0) {
    TileKeysKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(means2d, radii, depths, n, GridOf(a), ends,
                                                                         budget, keys, ids);
  }
  StaticPadKernel<<<GridStrideBlocks(budget), kThreadsPerBlock, 0, stream>>>(out.num_intersections, budget, keys, ids);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  // The padding's keys are all ones: above every kept key in the bits sorted, and stably after it.
  const unsigned long long* sorted_keys = nullptr;
  err = SortPairs(sort_scratch, SortBytes(budget), keys, alt_keys, ids, out.gaussian_ids, budget, gtb_key_bits(tiles),
                  stream, &sorted_keys);
  if (err != cudaSuccess) return err;
  StaticRangesKernel<<<GridStrideBlocks(tiles), kThreadsPerBlock, 0, stream>>>(sorted_keys, out.num_intersections,
                                                                             tiles, out.tile_ranges);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo
