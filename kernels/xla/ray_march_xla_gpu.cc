// The CUDA handler of the XLA kernel of MetalOpsRayMarchStatic
// (kernels/xla/ray_march_xla.cc): RayMarch's CUDA kernels (count pass,
// prefix sum, fill) into the outputs sized to sample_budget, with the rays
// kept, the layout, the counts and the padding worked out on the device
// (cuda::LaunchRayMarchStatic, kernels/cuda/ray_march.h): no read-back, no
// synchronisation of XLA's stream. The seed stays in device memory (XLA keeps
// every operand there); the kernels read it. The attributes are rebuilt and
// checked by the spec's AttrsFromValues, as in the host handler. Compiled in
// the CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstddef>
#include <cstdint>

#include "kernels/common/ray_march.h"
#include "kernels/cuda/ray_march.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/spec/ray_march_spec.h"
#include "kernels/xla/ray_march_xla.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Static(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer origins,
                  ffi::AnyBuffer directions, ffi::AnyBuffer near, ffi::AnyBuffer far, ffi::AnyBuffer occupancy,
                  ffi::AnyBuffer seed, RetBuffer t_starts, RetBuffer t_ends, RetBuffer ray_indices,
                  RetBuffer ray_offsets, RetBuffer ray_counts, RetBuffer num_samples, RetBuffer num_rays,
                  float aabb_min_x, float aabb_min_y, float aabb_min_z, float aabb_max_x, float aabb_max_y,
                  float aabb_max_z, int64_t grid_resolution, float step_size, float cone_angle, float max_step_size,
                  int64_t max_samples, int64_t jitter, int64_t sample_budget) {
  const float aabb[6] = {aabb_min_x, aabb_min_y, aabb_min_z, aabb_max_x, aabb_max_y, aabb_max_z};
  ray_march::Attrs a;
  ffi::Error error = ToError(ray_march::AttrsFromValues(aabb, static_cast<int>(grid_resolution), step_size,
                                                        cone_angle, max_step_size, static_cast<int>(max_samples),
                                                        jitter != 0, &a));
  if (error.failure()) return error;
  error = ToError(ray_march::CheckSampleBudget(sample_budget));
  if (error.failure()) return error;
  error = ToError(ray_march::Shapes(DimsOf(origins), DimsOf(directions), DimsOf(near), DimsOf(far),
                                    DimsOf(occupancy), DimsOf(seed), a));
  if (error.failure()) return error;
  const int64_t rays = origins.dimensions()[0];
  const RayMarchParams p = ray_march::MakeParams(a, rays, occupancy.dimensions()[0]);
  // in.seed is unused: the kernels read the seed from device memory.
  const RayMarchInputs in{Data<float>(origins), Data<float>(directions), Data<float>(near), Data<float>(far),
                          Data<uint8_t>(occupancy), 0u};
  const RayMarchStaticOutputs out = {Data<float>(t_starts),      Data<float>(t_ends),     Data<int32_t>(ray_indices),
                                     Data<int32_t>(ray_offsets), Data<int32_t>(ray_counts), Data<int32_t>(num_samples),
                                     Data<int32_t>(num_rays)};
  const size_t scratch_bytes = rays > 0 ? cuda::RayMarchCountScratchBytes(p.num_rays) : 0;
  char* workspace = nullptr;
  if (scratch_bytes > 0) {
    error = ScratchOf(scratch, scratch_bytes, "RayMarchStatic", &workspace);
    if (error.failure()) return error;
  }
  return ToError(cuda::LaunchStatus(
      "RayMarchStatic", cuda::LaunchRayMarchStatic(p, in, Data<int32_t>(seed), sample_budget, out, workspace,
                                                   scratch_bytes, stream)));
}

XLA_FFI_DEFINE_HANDLER(kStatic, Static,
                       BindRayMarchStaticAttrs(BindBuffersFrom<6, 7>(
                           ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::ScratchAllocator>())));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsRayMarchStatic", "CUDA", kStatic);

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
