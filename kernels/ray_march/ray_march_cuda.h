// RayMarch CUDA launchers: plain C++ declarations (no TensorFlow), shared by
// the TF GPU kernel (ray_march_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_CUDA_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_CUDA_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ray_march/ray_march.h"

namespace mo {
namespace cuda {

// Bytes of device scratch LaunchRayMarchCount needs for p.num_rays rays.
size_t RayMarchCountScratchBytes(int32_t rays);

// Pass 1: counts[r] = ray r's sample count, offsets[r] = their exclusive
// prefix sum (clamped to 2^31 - 1), *total (device) = the sum, in 64 bits.
cudaError_t LaunchRayMarchCount(const RayMarchParams& p, const RayMarchInputs& in, int32_t* counts,
                                int32_t* offsets, long long* total, void* scratch, size_t scratch_bytes,
                                cudaStream_t stream);

// Pass 2: ray r's samples from offsets[r] on.
cudaError_t LaunchRayMarchFill(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* offsets,
                               float* t_starts, float* t_ends, int32_t* ray_indices, cudaStream_t stream);

// RayMarchStatic on the device, no read-back: pass 1 and the prefix sum of
// LaunchRayMarchCount, then the rays kept in order while their samples fit
// in sample_budget (each with all its samples; the others count 0, offset
// num_samples), pass 2 for the kept rays, and samples [num_samples,
// sample_budget) padded (rm_static_pad_ray), as the CPU functor
// (kernels/ray_march/ray_march_functor.h). `seed`: the op's seed in device memory,
// read by the kernels in place of in.seed; nullptr to use in.seed. Scratch:
// RayMarchCountScratchBytes(p.num_rays).
cudaError_t LaunchRayMarchStatic(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* seed,
                                 int64_t sample_budget, const RayMarchStaticOutputs& out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_CUDA_H_
