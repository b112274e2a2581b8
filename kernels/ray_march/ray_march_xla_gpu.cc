// The CUDA handler of the XLA kernel of MetalOpsRayMarchStatic
// (kernels/ray_march/ray_march_xla.cc): RayMarch's CUDA kernels (count pass,
// prefix sum, fill) into the outputs sized to sample_budget, with the rays
// kept, the layout, the counts and the padding worked out on the device
// (cuda::LaunchRayMarchStatic, kernels/ray_march/ray_march_cuda.h): no read-back, no
// synchronisation of XLA's stream. The seed stays in device memory (XLA keeps
// every operand there); the kernels read it. The attributes are rebuilt and
// checked by the spec's AttrsFromValues, as in the host handler. Compiled in
// the CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstddef>
#include <cstdint>

#include "kernels/ray_march/ray_march.h"
#include "kernels/ray_march/ray_march_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/ray_march/ray_march_spec.h"
#include "kernels/ray_march/ray_march_xla.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Static(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer origins,
                  ffi::AnyBuffer directions, ffi::AnyBuffer near, ffi::AnyBuffer far, ffi::AnyBuffer occupancy,
                  ffi::AnyBuffer seed, RetBuffer t_starts, RetBuffer t_ends, RetBuffer ray_indices,
                  RetBuffer ray_offsets, RetBuffer ray_counts, RetBuffer num_samples, RetBuffer num_rays,
                  RayMarchStaticCallAttrs attrs) {
  ray_march::Attrs a;
  ffi::Error error = RayMarchStaticAttrsOf(attrs, origins, directions, near, far, occupancy, seed, &a);
  if (error.failure()) return error;
  const int64_t rays = origins.dimensions()[0];
  const RayMarchParams p = ray_march::MakeParams(a, rays, occupancy.dimensions()[0]);
  // in.seed is unused: the kernels read the seed from device memory.
  const RayMarchInputs in = RayMarchInputsOf(origins, directions, near, far, occupancy, 0u);
  const RayMarchStaticOutputs out =
      RayMarchStaticOutputsOf(t_starts, t_ends, ray_indices, ray_offsets, ray_counts, num_samples, num_rays);
  const size_t scratch_bytes = rays > 0 ? cuda::RayMarchCountScratchBytes(p.num_rays) : 0;
  char* workspace = nullptr;
  if (scratch_bytes > 0) {
    error = ScratchOf(scratch, scratch_bytes, "RayMarchStatic", &workspace);
    if (error.failure()) return error;
  }
  return ToError(cuda::LaunchStatus(
      "RayMarchStatic", cuda::LaunchRayMarchStatic(p, in, Data<int32_t>(seed), attrs.sample_budget, out, workspace,
                                                   scratch_bytes, stream)));
}

MO_XLA_FFI_HANDLER("MetalOpsRayMarchStatic", "CUDA", Static, BindRayMarchStatic(BindStreamScratch()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
