// RayMarch Metal shaders: one thread per ray for the count and fill passes
// (the march is kernels/ray_march/ray_march.h), and the prefix sum between them
// in three dispatches whose threads never wait on each other
// (RayMarchScanParams). The seed is the op's int32 input, read here.
#include "kernels/ray_march/ray_march.h"

kernel void ray_march_count(device const float* origins [[buffer(mo::kRmOrigins)]],
                            device const float* directions [[buffer(mo::kRmDirections)]],
                            device const float* near [[buffer(mo::kRmNear)]],
                            device const float* far [[buffer(mo::kRmFar)]],
                            device const uchar* occupancy [[buffer(mo::kRmOccupancy)]],
                            device const int* seed [[buffer(mo::kRmSeed)]],
                            device int* counts [[buffer(mo::kRmCountCounts)]],
                            constant mo::RayMarchParams& p [[buffer(mo::kRmCountParams)]],
                            uint gid [[thread_position_in_grid]],
                            uint grid_size [[threads_per_grid]]) {
  const mo::RayMarchInputs in = {origins, directions, near, far, occupancy, uint(seed[0])};
  const mo::RayMarchSamples none = {nullptr, nullptr, nullptr};
  for (uint r = gid; r < uint(p.num_rays); r += grid_size) counts[r] = mo::rm_march_ray(in, int(r), p, 0, none);
}

kernel void ray_march_chunk_sums(device const int* counts [[buffer(mo::kRmChunkSumsCounts)]],
                                 device ulong* sums [[buffer(mo::kRmChunkSumsSums)]],
                                 constant mo::RayMarchScanParams& s [[buffer(mo::kRmChunkSumsParams)]],
                                 uint gid [[thread_position_in_grid]],
                                 uint grid_size [[threads_per_grid]]) {
  for (uint i = gid; i < uint(s.chunks); i += grid_size) sums[i] = mo::rm_chunk_sum(counts, int(i), s);
}

// One thread: the chunk sums' exclusive scan and the total (host-visible).
kernel void ray_march_scan_chunk_sums(device ulong* sums [[buffer(mo::kRmScanSums)]],
                                      device ulong* total [[buffer(mo::kRmScanTotal)]],
                                      constant mo::RayMarchScanParams& s [[buffer(mo::kRmScanParams)]],
                                      uint gid [[thread_position_in_grid]]) {
  if (gid == 0) total[0] = mo::rm_scan_chunk_sums(sums, s);
}

kernel void ray_march_offsets(device const int* counts [[buffer(mo::kRmOffsetsCounts)]],
                              device const ulong* sums [[buffer(mo::kRmOffsetsSums)]],
                              device int* offsets [[buffer(mo::kRmOffsetsOut)]],
                              constant mo::RayMarchScanParams& s [[buffer(mo::kRmOffsetsParams)]],
                              uint gid [[thread_position_in_grid]],
                              uint grid_size [[threads_per_grid]]) {
  for (uint i = gid; i < uint(s.chunks); i += grid_size) mo::rm_chunk_offsets(counts, sums[i], int(i), offsets, s);
}

kernel void ray_march_fill(device const float* origins [[buffer(mo::kRmOrigins)]],
                           device const float* directions [[buffer(mo::kRmDirections)]],
                           device const float* near [[buffer(mo::kRmNear)]],
                           device const float* far [[buffer(mo::kRmFar)]],
                           device const uchar* occupancy [[buffer(mo::kRmOccupancy)]],
                           device const int* seed [[buffer(mo::kRmSeed)]],
                           device const int* offsets [[buffer(mo::kRmFillOffsets)]],
                           device float* t_starts [[buffer(mo::kRmFillTStarts)]],
                           device float* t_ends [[buffer(mo::kRmFillTEnds)]],
                           device int* ray_indices [[buffer(mo::kRmFillRayIndices)]],
                           constant mo::RayMarchParams& p [[buffer(mo::kRmFillParams)]],
                           uint gid [[thread_position_in_grid]],
                           uint grid_size [[threads_per_grid]]) {
  const mo::RayMarchInputs in = {origins, directions, near, far, occupancy, uint(seed[0])};
  const mo::RayMarchSamples out = {t_starts, t_ends, ray_indices};
  for (uint r = gid; r < uint(p.num_rays); r += grid_size) mo::rm_march_ray(in, int(r), p, offsets[r], out);
}
