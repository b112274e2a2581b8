// Runs the RayMarch Metal shaders on the CPU (see tests/metal_shim/msl_shim.h):
// the five dispatches of kernels/ray_march/ray_march_metal.cc, in its order. The
// attributes reach it through the op's own checks in ray_march_shim_attrs.cc
// (a C++ translation unit: the MSL shim's address-space macros would break
// the standard headers those checks need).
#include "tests/metal_shim/msl_shim.h"
#include "ray_march.metal"  // the expanded source the library embeds ($(BUILD)/gen)

static_assert(sizeof(mo::RayMarchParams) == 64, "RayMarchParams layout differs from the C++ build");

extern "C" {

// The total sample count; the samples are written when it fits `capacity`.
long long shim_ray_march_dispatch(const void* params, int seed, const float* origins, const float* directions,
                                  const float* near, const float* far, const uchar* occupancy, int* counts,
                                  int* offsets, float* t_starts, float* t_ends, int* ray_indices, long long capacity,
                                  uint grid, int scan_threads) {
  const mo::RayMarchParams& p = *static_cast<const mo::RayMarchParams*>(params);
  if (p.num_rays == 0) return 0;
  const mo::RayMarchScanParams s = mo::rm_scan_params(p.num_rays, scan_threads);
  for (uint gid = 0; gid < grid; ++gid) {
    ray_march_count(origins, directions, near, far, occupancy, &seed, counts, p, gid, grid);
  }
  ulong* sums = new ulong[s.chunks];
  ulong total = 0;
  for (uint gid = 0; gid < uint(scan_threads); ++gid) ray_march_chunk_sums(counts, sums, s, gid, scan_threads);
  ray_march_scan_chunk_sums(sums, &total, s, 0);
  for (uint gid = 0; gid < uint(scan_threads); ++gid) ray_march_offsets(counts, sums, offsets, s, gid, scan_threads);
  delete[] sums;
  if (static_cast<long long>(total) <= capacity) {
    for (uint gid = 0; gid < grid; ++gid) {
      ray_march_fill(origins, directions, near, far, occupancy, &seed, offsets, t_starts, t_ends, ray_indices, p, gid,
                     grid);
    }
  }
  return static_cast<long long>(total);
}

}  // extern "C"
