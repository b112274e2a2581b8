// RayMarch CUDA kernels: one thread per ray for both passes (the march is
// kernels/common/ray_march.h); the prefix sum between them is CUB's device
// scan with a 64-bit accumulator, so a total above 2^31 is reported, not
// wrapped.
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include "kernels/common/ray_march.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/ray_march.h"

namespace mo {
namespace cuda {
namespace {

__global__ void RayMarchCountKernel(RayMarchParams p, RayMarchInputs in, int32_t* __restrict__ counts) {
  for (int64_t r = GlobalThreadIndex(); r < p.num_rays; r += GlobalThreadCount()) {
    counts[r] = rm_march_ray(in, static_cast<int32>(r), p, 0, RayMarchSamples{nullptr, nullptr, nullptr});
  }
}

// 64-bit offsets to the int32 output, and the total.
__global__ void RayMarchOffsetsKernel(const long long* __restrict__ offsets64, const int32_t* __restrict__ counts,
                                      int32_t rays, int32_t* __restrict__ offsets, long long* __restrict__ total) {
  for (int64_t r = GlobalThreadIndex(); r < rays; r += GlobalThreadCount()) {
    const long long o = offsets64[r];
    offsets[r] = static_cast<int32_t>(o < 2147483647LL ? o : 2147483647LL);
    if (r == rays - 1) *total = o + counts[r];
  }
}

__global__ void RayMarchFillKernel(RayMarchParams p, RayMarchInputs in, const int32_t* __restrict__ offsets,
                                   RayMarchSamples out) {
  for (int64_t r = GlobalThreadIndex(); r < p.num_rays; r += GlobalThreadCount()) {
    rm_march_ray(in, static_cast<int32>(r), p, offsets[r], out);
  }
}

constexpr int kRayThreads = 128;

size_t CubScanBytes(int32_t rays) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveScan(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                 static_cast<long long*>(nullptr), ::cuda::std::plus<>{}, 0LL, rays);
  return bytes;
}

size_t AlignUp(size_t n) { return (n + 255) & ~size_t(255); }

}  // namespace

size_t RayMarchCountScratchBytes(int32_t rays) {
  return AlignUp(sizeof(long long) * static_cast<size_t>(rays)) + AlignUp(CubScanBytes(rays));
}

cudaError_t LaunchRayMarchCount(const RayMarchParams& p, const RayMarchInputs& in, int32_t* counts,
                                int32_t* offsets, long long* total, void* scratch, size_t scratch_bytes,
                                cudaStream_t stream) {
  if (p.num_rays <= 0) return cudaSuccess;
  if (scratch_bytes < RayMarchCountScratchBytes(p.num_rays)) return cudaErrorInvalidValue;
  RayMarchCountKernel<<<GridStrideBlocks(p.num_rays, kRayThreads), kRayThreads, 0, stream>>>(p, in, counts);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  auto* offsets64 = static_cast<long long*>(scratch);
  char* cub_scratch = static_cast<char*>(scratch) + AlignUp(sizeof(long long) * static_cast<size_t>(p.num_rays));
  size_t cub_bytes = CubScanBytes(p.num_rays);
  err = cub::DeviceScan::ExclusiveScan(cub_scratch, cub_bytes, counts, offsets64, ::cuda::std::plus<>{}, 0LL,
                                       p.num_rays, stream);
  if (err != cudaSuccess) return err;
  RayMarchOffsetsKernel<<<GridStrideBlocks(p.num_rays), kThreadsPerBlock, 0, stream>>>(offsets64, counts,
                                                                                        p.num_rays, offsets, total);
  return cudaGetLastError();
}

cudaError_t LaunchRayMarchFill(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* offsets,
                               float* t_starts, float* t_ends, int32_t* ray_indices, cudaStream_t stream) {
  if (p.num_rays <= 0) return cudaSuccess;
  RayMarchFillKernel<<<GridStrideBlocks(p.num_rays, kRayThreads), kRayThreads, 0, stream>>>(
      p, in, offsets, RayMarchSamples{t_starts, t_ends, ray_indices});
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo
