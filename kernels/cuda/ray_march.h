// RayMarch CUDA launchers: plain C++ declarations (no TensorFlow), shared by
// the TF GPU kernel (ray_march_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_CUDA_RAY_MARCH_H_
#define MO_KERNELS_CUDA_RAY_MARCH_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/ray_march.h"

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

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_RAY_MARCH_H_
