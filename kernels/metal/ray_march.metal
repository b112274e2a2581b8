// RayMarch Metal shaders: one thread per ray for the count and fill passes
// (the march is kernels/common/ray_march.h), and the prefix sum between them
// in three dispatches whose threads never wait on each other
// (RayMarchScanParams). The seed is the op's int32 input, read here.
#include "kernels/common/ray_march.h"

kernel void ray_march_count(device const float* origins [[buffer(0)]],
                            device const float* directions [[buffer(1)]],
                            device const float* near [[buffer(2)]],
                            device const float* far [[buffer(3)]],
                            device const uchar* occupancy [[buffer(4)]],
                            device const int* seed [[buffer(5)]],
                            device int* counts [[buffer(6)]],
                            constant mo::RayMarchParams& p [[buffer(7)]],
                            uint gid [[thread_position_in_grid]],
                            uint grid_size [[threads_per_grid]]) {
  const uint s = uint(seed[0]);
  for (uint r = gid; r < uint(p.num_rays); r += grid_size) {
    counts[r] = mo::rm_march_ray(origins, directions, near, far, occupancy, int(r), p, s, 0, nullptr, nullptr,
                                 nullptr);
  }
}

kernel void ray_march_chunk_sums(device const int* counts [[buffer(0)]],
                                 device ulong* sums [[buffer(1)]],
                                 constant mo::RayMarchScanParams& s [[buffer(2)]],
                                 uint gid [[thread_position_in_grid]],
                                 uint grid_size [[threads_per_grid]]) {
  for (uint i = gid; i < uint(s.chunks); i += grid_size) sums[i] = mo::rm_chunk_sum(counts, int(i), s);
}

// One thread: the chunk sums' exclusive scan and the total (host-visible).
kernel void ray_march_scan_chunk_sums(device ulong* sums [[buffer(0)]],
                                      device ulong* total [[buffer(1)]],
                                      constant mo::RayMarchScanParams& s [[buffer(2)]],
                                      uint gid [[thread_position_in_grid]]) {
  if (gid == 0) total[0] = mo::rm_scan_chunk_sums(sums, s);
}

kernel void ray_march_offsets(device const int* counts [[buffer(0)]],
                              device const ulong* sums [[buffer(1)]],
                              device int* offsets [[buffer(2)]],
                              constant mo::RayMarchScanParams& s [[buffer(3)]],
                              uint gid [[thread_position_in_grid]],
                              uint grid_size [[threads_per_grid]]) {
  for (uint i = gid; i < uint(s.chunks); i += grid_size) mo::rm_chunk_offsets(counts, sums[i], int(i), offsets, s);
}

kernel void ray_march_fill(device const float* origins [[buffer(0)]],
                           device const float* directions [[buffer(1)]],
                           device const float* near [[buffer(2)]],
                           device const float* far [[buffer(3)]],
                           device const uchar* occupancy [[buffer(4)]],
                           device const int* seed [[buffer(5)]],
                           device const int* offsets [[buffer(6)]],
                           device float* t_starts [[buffer(7)]],
                           device float* t_ends [[buffer(8)]],
                           device int* ray_indices [[buffer(9)]],
                           constant mo::RayMarchParams& p [[buffer(10)]],
                           uint gid [[thread_position_in_grid]],
                           uint grid_size [[threads_per_grid]]) {
  const uint s = uint(seed[0]);
  for (uint r = gid; r < uint(p.num_rays); r += grid_size) {
    mo::rm_march_ray(origins, directions, near, far, occupancy, int(r), p, s, offsets[r], t_starts, t_ends,
                     ray_indices);
  }
}
