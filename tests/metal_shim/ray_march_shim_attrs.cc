// The attribute side of the RayMarch shim runner (ray_march_shim.cc): the
// op's own checks and MakeParams (kernels/ray_march/ray_march.h), as the Metal
// kernel's host code runs them.
#include <cstring>

#include "kernels/ray_march/ray_march.h"

static_assert(sizeof(mo::RayMarchParams) == 64, "RayMarchParams layout differs from the shader build");

extern "C" {

long long shim_ray_march_dispatch(const void* params, int seed, const float* origins, const float* directions,
                                  const float* near, const float* far, const unsigned char* occupancy, int* counts,
                                  int* offsets, float* t_starts, float* t_ends, int* ray_indices, long long capacity,
                                  unsigned grid, int scan_threads);

// Returns the total sample count, or -1 (the check's message in `error`) for
// bad attributes; writes the samples when the total fits `capacity`.
long long shim_ray_march(const float* aabb, int grid_resolution, int cascades, float step_size, float cone_angle,
                         float max_step_size, int max_samples, int jitter, int seed, int rays, const float* origins,
                         const float* directions, const float* near, const float* far,
                         const unsigned char* occupancy, int* counts, int* offsets, float* t_starts, float* t_ends,
                         int* ray_indices, long long capacity, unsigned grid, int scan_threads, char* error,
                         int error_bytes) {
  mo::ray_march::Attrs a;
  const mo::checks::Result checked = mo::ray_march::AttrsFromValues(aabb, grid_resolution, step_size, cone_angle,
                                                                    max_step_size, max_samples, jitter != 0, &a);
  if (!checked.ok) {
    std::strncpy(error, checked.message.c_str(), error_bytes - 1);
    error[error_bytes - 1] = 0;
    return -1;
  }
  const mo::RayMarchParams p = mo::ray_march::MakeParams(a, rays, cascades);
  return shim_ray_march_dispatch(&p, seed, origins, directions, near, far, occupancy, counts, offsets, t_starts,
                                 t_ends, ray_indices, capacity, grid, scan_threads);
}

}  // extern "C"
