// GaussianTileBin Metal shaders: the tile counts and their scan (the count
// plan), then the keys, their stable radix sort and the tile ranges (the fill
// plan), and GaussianTileBinStatic's cut and padding; the scheme and the
// formulas are kernels/gaussian_tile_bin/gaussian_tile_bin.h.
// Entry points:
//   gaussian_tile_bin_count      means2d, radii -> counts (one thread per Gaussian)
//   gaussian_tile_bin_scan       data -> its exclusive scan in place, total (one threadgroup)
//   gaussian_tile_bin_keys       means2d, radii, depths, offsets -> keys, ids (one thread per Gaussian)
//   gaussian_tile_bin_digits     keys -> per-threadgroup digit counts (a radix pass's histogram)
//   gaussian_tile_bin_scatter    keys, ids, scanned counts -> keys, ids by digit, stably
//   gaussian_tile_bin_ranges     sorted keys, their count -> tile_ranges (one thread per tile)
//   gaussian_tile_bin_cut        offsets, total -> limits {m, kept}, the two counts (one thread)
//   gaussian_tile_bin_keys_kept  gaussian_tile_bin_keys for the kept Gaussians alone
//   gaussian_tile_bin_pad        limits -> the keys and ids past m: all ones, kGtbStaticPadId
#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"

using namespace metal;

kernel void gaussian_tile_bin_count(device const float* means2d [[buffer(mo::kGtbMeans2d)]],
                                    device const int* radii [[buffer(mo::kGtbRadii)]],
                                    device ulong* counts [[buffer(mo::kGtbOffsets)]],
                                    constant mo::GaussianTileBinParams& p [[buffer(mo::kGtbParams)]],
                                    uint gid [[thread_position_in_grid]],
                                    uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < p.num_gaussians; i += grid_size) {
    counts[i] = ulong(mo::gtb_tile_count(means2d[2 * i], means2d[2 * i + 1], radii[2 * i], radii[2 * i + 1],
                                         p.tile_size, p.tiles_x, p.tiles_y));
  }
}

// One threadgroup: each thread sums its chunk, then writes the chunk's
// exclusive offsets from the sum of the earlier chunks; the last thread the total.
kernel void gaussian_tile_bin_scan(device ulong* data [[buffer(mo::kGtbScanData)]],
                                   device ulong* total [[buffer(mo::kGtbScanTotal)]],
                                   constant mo::GtbScanParams& s [[buffer(mo::kGtbScanParams)]],
                                   threadgroup ulong* sums MO_THREADGROUP_ARG(0),
                                   uint tid [[thread_index_in_threadgroup]],
                                   uint threads [[threads_per_threadgroup]]) {
  const ulong begin = ulong(tid) * s.chunk;
  const ulong end = begin + s.chunk < s.length ? begin + s.chunk : s.length;
  ulong sum = 0;
  for (ulong i = begin; i < end; ++i) sum += data[i];
  sums[tid] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  ulong running = 0;
  for (uint k = 0; k < tid; ++k) running += sums[k];
  if (tid == threads - 1) total[0] = running + sum;
  for (ulong i = begin; i < end; ++i) {
    const ulong v = data[i];
    data[i] = running;
    running += v;
  }
}

// Gaussian i's keys and ids from its offset on.
inline void gtb_write_keys(mo::int64 i, device const float* means2d, device const int* radii,
                           device const float* depths, device const ulong* offsets, device ulong* keys,
                           device int* ids, constant mo::GaussianTileBinParams& p) {
  int x0, x1, y0, y1;
  mo::gtb_tile_rect(means2d[2 * i], means2d[2 * i + 1], radii[2 * i], radii[2 * i + 1], p.tile_size, p.tiles_x,
                    p.tiles_y, &x0, &x1, &y0, &y1);
  ulong at = offsets[i];
  const float depth = depths[i];
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      keys[at] = mo::gtb_key(mo::int64(y) * p.tiles_x + x, depth);
      ids[at] = int(i);
      ++at;
    }
  }
}

kernel void gaussian_tile_bin_keys(device const float* means2d [[buffer(mo::kGtbMeans2d)]],
                                   device const int* radii [[buffer(mo::kGtbRadii)]],
                                   device const float* depths [[buffer(mo::kGtbDepths)]],
                                   device const ulong* offsets [[buffer(mo::kGtbOffsets)]],
                                   device ulong* keys [[buffer(mo::kGtbKeys)]],
                                   device int* ids [[buffer(mo::kGtbIds)]],
                                   constant mo::GaussianTileBinParams& p [[buffer(mo::kGtbParams)]],
                                   uint gid [[thread_position_in_grid]],
                                   uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < p.num_gaussians; i += grid_size) {
    gtb_write_keys(i, means2d, radii, depths, offsets, keys, ids, p);
  }
}

kernel void gaussian_tile_bin_keys_kept(device const float* means2d [[buffer(mo::kGtbMeans2d)]],
                                        device const int* radii [[buffer(mo::kGtbRadii)]],
                                        device const float* depths [[buffer(mo::kGtbDepths)]],
                                        device const ulong* offsets [[buffer(mo::kGtbOffsets)]],
                                        device ulong* keys [[buffer(mo::kGtbKeys)]],
                                        device int* ids [[buffer(mo::kGtbIds)]],
                                        constant mo::GaussianTileBinParams& p [[buffer(mo::kGtbParams)]],
                                        device const ulong* limits [[buffer(mo::kGtbKeysLimits)]],
                                        uint gid [[thread_position_in_grid]],
                                        uint grid_size [[threads_per_grid]]) {
  const mo::int64 kept = mo::int64(limits[1]);
  for (mo::int64 i = gid; i < kept; i += grid_size) gtb_write_keys(i, means2d, radii, depths, offsets, keys, ids, p);
}

// The budget's cut over the exclusive offsets: Gaussian i < n - 1 ends where
// i + 1 starts, the last at the total.
kernel void gaussian_tile_bin_cut(device const ulong* offsets [[buffer(mo::kGtbCutOffsets)]],
                                  device const ulong* total [[buffer(mo::kGtbCutTotal)]],
                                  device ulong* limits [[buffer(mo::kGtbCutLimits)]],
                                  device int* num_intersections [[buffer(mo::kGtbCutNumIntersections)]],
                                  device int* num_gaussians [[buffer(mo::kGtbCutNumGaussians)]],
                                  constant mo::GaussianTileBinParams& p [[buffer(mo::kGtbCutParams)]],
                                  uint gid [[thread_position_in_grid]]) {
  if (gid != 0) return;
  const mo::int64 n = p.num_gaussians, budget = p.num_intersections;
  mo::int64 kept = mo::gtb_static_kept(offsets + 1, n - 1, budget);
  if (kept == n - 1 && mo::int64(total[0]) <= budget) kept = n;
  const ulong m = kept == n ? total[0] : offsets[kept];
  limits[0] = m;
  limits[1] = ulong(kept);
  num_intersections[0] = int(m);
  num_gaussians[0] = int(kept);
}

kernel void gaussian_tile_bin_pad(device ulong* keys [[buffer(mo::kGtbPadKeys)]],
                                  device int* ids [[buffer(mo::kGtbPadIds)]],
                                  device const ulong* limits [[buffer(mo::kGtbPadLimits)]],
                                  constant mo::GaussianTileBinParams& p [[buffer(mo::kGtbPadParams)]],
                                  uint gid [[thread_position_in_grid]],
                                  uint grid_size [[threads_per_grid]]) {
  for (ulong j = limits[0] + gid; j < ulong(p.num_intersections); j += grid_size) {
    keys[j] = ~ulong(0);
    ids[j] = int(mo::kGtbStaticPadId);
  }
}

// This thread's keys of its threadgroup's block, [*begin, *end), counted by
// digit into its column of `counts` (digit-major: counts[digit * threads + tid]).
inline void gtb_count_digits(device const ulong* keys, constant mo::GtbSortParams& s, threadgroup ushort* counts,
                             uint group, uint tid, uint threads, thread uint* begin, thread uint* end) {
  for (uint d = 0; d < uint(mo::kGtbRadix); ++d) counts[d * threads + tid] = 0;
  *begin = (group * threads + tid) * uint(mo::kGtbSortItems);
  *end = *begin < s.m ? (s.m - *begin < uint(mo::kGtbSortItems) ? s.m : *begin + uint(mo::kGtbSortItems)) : *begin;
  for (uint i = *begin; i < *end; ++i) counts[mo::gtb_digit(keys[i], s.shift) * threads + tid] += 1;
}

// hist[digit * groups + group]: the threadgroup's keys with each digit.
kernel void gaussian_tile_bin_digits(device const ulong* keys [[buffer(mo::kGtbSortKeys)]],
                                     device ulong* hist [[buffer(mo::kGtbSortHist)]],
                                     constant mo::GtbSortParams& s [[buffer(mo::kGtbSortParams)]],
                                     threadgroup ushort* counts MO_THREADGROUP_ARG(0),
                                     uint group [[threadgroup_position_in_grid]],
                                     uint tid [[thread_index_in_threadgroup]],
                                     uint threads [[threads_per_threadgroup]]) {
  uint begin, end;
  gtb_count_digits(keys, s, counts, group, tid, threads, &begin, &end);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint d = tid; d < uint(mo::kGtbRadix); d += threads) {
    ulong sum = 0;
    for (uint k = 0; k < threads; ++k) sum += counts[d * threads + k];
    hist[ulong(d) * s.groups + group] = sum;
  }
}

// Each key to hist[digit * groups + group] (scanned: where the threadgroup's
// keys with that digit start) plus the earlier threads' and its own earlier
// keys with that digit.
kernel void gaussian_tile_bin_scatter(device const ulong* keys [[buffer(mo::kGtbSortKeys)]],
                                      device const int* ids [[buffer(mo::kGtbSortIds)]],
                                      device const ulong* hist [[buffer(mo::kGtbSortHist)]],
                                      device ulong* keys_out [[buffer(mo::kGtbSortKeysOut)]],
                                      device int* ids_out [[buffer(mo::kGtbSortIdsOut)]],
                                      constant mo::GtbSortParams& s [[buffer(mo::kGtbSortParams)]],
                                      threadgroup ushort* counts MO_THREADGROUP_ARG(0),
                                      uint group [[threadgroup_position_in_grid]],
                                      uint tid [[thread_index_in_threadgroup]],
                                      uint threads [[threads_per_threadgroup]]) {
  uint begin, end;
  gtb_count_digits(keys, s, counts, group, tid, threads, &begin, &end);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint d = tid; d < uint(mo::kGtbRadix); d += threads) {
    ushort running = 0;
    for (uint k = 0; k < threads; ++k) {
      const ushort c = counts[d * threads + k];
      counts[d * threads + k] = running;
      running += c;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = begin; i < end; ++i) {
    const ulong key = keys[i];
    const uint d = mo::gtb_digit(key, s.shift);
    const ulong at = hist[ulong(d) * s.groups + group] + counts[d * threads + tid];
    counts[d * threads + tid] += 1;
    keys_out[at] = key;
    ids_out[at] = ids[i];
  }
}

// Each tile's range among the first count[0] sorted keys.
kernel void gaussian_tile_bin_ranges(device const ulong* keys [[buffer(mo::kGtbRangesKeys)]],
                                     device int* ranges [[buffer(mo::kGtbRangesOut)]],
                                     constant mo::GaussianTileBinParams& p [[buffer(mo::kGtbRangesParams)]],
                                     device const ulong* count [[buffer(mo::kGtbRangesCount)]],
                                     uint gid [[thread_position_in_grid]],
                                     uint grid_size [[threads_per_grid]]) {
  const mo::int64 m = mo::int64(count[0]);
  for (mo::int64 t = gid; t < p.tiles; t += grid_size) {
    ranges[2 * t] = int(mo::gtb_first_of_tile(keys, m, t));
    ranges[2 * t + 1] = int(mo::gtb_first_of_tile(keys, m, t + 1));
  }
}
