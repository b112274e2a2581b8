// C-ABI entry points for testing the RayMarch CUDA kernels without
// TensorFlow (tests/cuda/test_ray_march_cuda.py). The attributes go through
// the op's own checks and MakeParams (kernels/ray_march/ray_march.h).
#include <cstring>

#include "kernels/ray_march/ray_march.h"

namespace {

// Returns 0, or -1 with the check's message in `error` (error_bytes long).
int Params(const float* aabb, int grid_resolution, int cascades, float step_size, float cone_angle,
           float max_step_size, int max_samples, int jitter, int rays, mo::RayMarchParams* p, char* error,
           int error_bytes) {
  mo::ray_march::Attrs a;
  const mo::checks::Result r = mo::ray_march::AttrsFromValues(aabb, grid_resolution, step_size, cone_angle,
                                                              max_step_size, max_samples, jitter != 0, &a);
  if (!r.ok) {
    if (error_bytes > 0) {
      std::strncpy(error, r.message.c_str(), error_bytes - 1);
      error[error_bytes - 1] = 0;
    }
    return -1;
  }
  *p = mo::ray_march::MakeParams(a, rays, cascades);
  return 0;
}

}  // namespace

extern "C" {

size_t metal_ops_ray_march_scratch_bytes(int rays) { return mo::cuda::RayMarchCountScratchBytes(rays); }

int metal_ops_ray_march_count(const float* aabb, int grid_resolution, int cascades, float step_size,
                              float cone_angle, float max_step_size, int max_samples, int jitter, int seed, int rays,
                              const float* origins, const float* directions, const float* near, const float* far,
                              const unsigned char* occupancy, int32_t* counts, int32_t* offsets, long long* total,
                              void* scratch, size_t scratch_bytes, cudaStream_t stream, char* error,
                              int error_bytes) {
  mo::RayMarchParams p;
  if (Params(aabb, grid_resolution, cascades, step_size, cone_angle, max_step_size, max_samples, jitter, rays, &p,
             error, error_bytes) != 0) {
    return -1;
  }
  const mo::RayMarchInputs in{origins, directions, near, far, occupancy, static_cast<uint32_t>(seed)};
  return static_cast<int>(
      mo::cuda::LaunchRayMarchCount(p, in, counts, offsets, total, scratch, scratch_bytes, stream));
}

int metal_ops_ray_march_fill(const float* aabb, int grid_resolution, int cascades, float step_size, float cone_angle,
                             float max_step_size, int max_samples, int jitter, int seed, int rays,
                             const float* origins, const float* directions, const float* near, const float* far,
                             const unsigned char* occupancy, const int32_t* offsets, float* t_starts, float* t_ends,
                             int32_t* ray_indices, cudaStream_t stream, char* error, int error_bytes) {
  mo::RayMarchParams p;
  if (Params(aabb, grid_resolution, cascades, step_size, cone_angle, max_step_size, max_samples, jitter, rays, &p,
             error, error_bytes) != 0) {
    return -1;
  }
  const mo::RayMarchInputs in{origins, directions, near, far, occupancy, static_cast<uint32_t>(seed)};
  return static_cast<int>(mo::cuda::LaunchRayMarchFill(p, in, offsets, t_starts, t_ends, ray_indices, stream));
}

// RayMarchStatic into outputs of sample_budget samples, the seed read from
// device memory (`seed`), as the XLA CUDA handler runs it.
int metal_ops_ray_march_static(const float* aabb, int grid_resolution, int cascades, float step_size,
                               float cone_angle, float max_step_size, int max_samples, int jitter, const int32_t* seed,
                               int rays, const float* origins, const float* directions, const float* near,
                               const float* far, const unsigned char* occupancy, long long sample_budget,
                               float* t_starts, float* t_ends, int32_t* ray_indices, int32_t* offsets,
                               int32_t* counts, int32_t* num_samples, int32_t* num_rays, void* scratch,
                               size_t scratch_bytes, cudaStream_t stream, char* error, int error_bytes) {
  mo::RayMarchParams p;
  if (Params(aabb, grid_resolution, cascades, step_size, cone_angle, max_step_size, max_samples, jitter, rays, &p,
             error, error_bytes) != 0) {
    return -1;
  }
  const mo::RayMarchInputs in{origins, directions, near, far, occupancy, 0u};
  const mo::RayMarchStaticOutputs out{t_starts, t_ends, ray_indices, offsets, counts, num_samples, num_rays};
  return static_cast<int>(
      mo::cuda::LaunchRayMarchStatic(p, in, seed, sample_budget, out, scratch, scratch_bytes, stream));
}

}  // extern "C"
