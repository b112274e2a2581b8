// RayMarch's CUDA kernels and their launchers (declared in ray_march.h): one
// thread per ray for both passes (the march is ray_march.h's); the prefix sum
// between them is CUB's device scan with a 64-bit accumulator, so a total
// above 2^31 is reported, not wrapped. RayMarchStatic (LaunchRayMarchStatic) runs the same kernels, with
// the cut at the sample budget, the layout and the padding between and after
// them on the device.
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include "kernels/ray_march/ray_march.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

// The inputs with the op's seed: in.seed, or *seed where the seed is in
// device memory (RayMarchStatic under XLA).
__device__ __forceinline__ RayMarchInputs WithSeed(RayMarchInputs in, const int32_t* seed) {
  if (seed != nullptr) in.seed = static_cast<uint32_t>(*seed);
  return in;
}

__global__ void RayMarchCountKernel(RayMarchParams p, RayMarchInputs in, const int32_t* __restrict__ seed,
                                    int32_t* __restrict__ counts) {
  const RayMarchInputs local = WithSeed(in, seed);
  for (int64_t r = GlobalThreadIndex(); r < p.num_rays; r += GlobalThreadCount()) {
    counts[r] = rm_march_ray(local, static_cast<int32>(r), p, 0, RayMarchSamples{nullptr, nullptr, nullptr});
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

// The rays [0, *rays) from offsets[r] on (all p.num_rays when rays is null).
__global__ void RayMarchFillKernel(RayMarchParams p, RayMarchInputs in, const int32_t* __restrict__ seed,
                                   const int32_t* __restrict__ rays, const int32_t* __restrict__ offsets,
                                   RayMarchSamples out) {
  const RayMarchInputs local = WithSeed(in, seed);
  const int64_t end = rays != nullptr ? *rays : p.num_rays;
  for (int64_t r = GlobalThreadIndex(); r < end; r += GlobalThreadCount()) {
    rm_march_ray(local, static_cast<int32>(r), p, offsets[r], out);
  }
}

// RayMarchStatic's rays kept: ray r is kept while its samples end within the
// budget (the inclusive prefix sum grows with r, so the kept rays are a
// prefix). The thread of the first ray not kept (or of the last ray, when
// all are) writes num_rays and num_samples.
__global__ void RayMarchStaticKeptKernel(const long long* __restrict__ offsets64, const int32_t* __restrict__ counts,
                                         int32_t rays, long long budget, int32_t* __restrict__ num_samples,
                                         int32_t* __restrict__ num_rays) {
  for (int64_t r = GlobalThreadIndex(); r < rays; r += GlobalThreadCount()) {
    const bool kept = offsets64[r] + counts[r] <= budget;
    const bool previous_kept = r == 0 || offsets64[r - 1] + counts[r - 1] <= budget;
    if (!kept && previous_kept) {
      *num_rays = static_cast<int32_t>(r);
      *num_samples = static_cast<int32_t>(offsets64[r]);
    } else if (kept && r == rays - 1) {
      *num_rays = rays;
      *num_samples = static_cast<int32_t>(offsets64[r] + counts[r]);
    }
  }
}

// The layout: kept rays at their offsets, the others none from num_samples on.
__global__ void RayMarchStaticLayoutKernel(const long long* __restrict__ offsets64, int32_t rays,
                                           const int32_t* __restrict__ num_samples,
                                           const int32_t* __restrict__ num_rays, int32_t* __restrict__ offsets,
                                           int32_t* __restrict__ counts) {
  const int32_t kept = *num_rays, end = *num_samples;
  for (int64_t r = GlobalThreadIndex(); r < rays; r += GlobalThreadCount()) {
    if (r < kept) {
      offsets[r] = static_cast<int32_t>(offsets64[r]);
    } else {
      offsets[r] = end;
      counts[r] = 0;
    }
  }
}

// Samples [num_samples, budget): zero-length intervals of rm_static_pad_ray.
__global__ void RayMarchStaticPadKernel(const int32_t* __restrict__ num_samples, int64_t budget, int32_t pad_ray,
                                        float* __restrict__ t_starts, float* __restrict__ t_ends,
                                        int32_t* __restrict__ ray_indices) {
  for (int64_t i = *num_samples + GlobalThreadIndex(); i < budget; i += GlobalThreadCount()) {
    t_starts[i] = 0.f;
    t_ends[i] = 0.f;
    ray_indices[i] = pad_ray;
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

namespace {

// Pass 1 and the 64-bit exclusive prefix sum: counts [R], offsets64 (the
// front of `scratch`) [R].
cudaError_t CountAndScan(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* seed, int32_t* counts,
                         void* scratch, cudaStream_t stream) {
  RayMarchCountKernel<<<GridStrideBlocks(p.num_rays, kRayThreads), kRayThreads, 0, stream>>>(p, in, seed, counts);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  auto* offsets64 = static_cast<long long*>(scratch);
  char* cub_scratch = static_cast<char*>(scratch) + AlignUp(sizeof(long long) * static_cast<size_t>(p.num_rays));
  size_t cub_bytes = CubScanBytes(p.num_rays);
  return cub::DeviceScan::ExclusiveScan(cub_scratch, cub_bytes, counts, offsets64, ::cuda::std::plus<>{}, 0LL,
                                        p.num_rays, stream);
}

}  // namespace

cudaError_t LaunchRayMarchCount(const RayMarchParams& p, const RayMarchInputs& in, int32_t* counts,
                                int32_t* offsets, long long* total, void* scratch, size_t scratch_bytes,
                                cudaStream_t stream) {
  if (p.num_rays <= 0) return cudaSuccess;
  if (scratch_bytes < RayMarchCountScratchBytes(p.num_rays)) return cudaErrorInvalidValue;
  cudaError_t err = CountAndScan(p, in, nullptr, counts, scratch, stream);
  if (err != cudaSuccess) return err;
  RayMarchOffsetsKernel<<<GridStrideBlocks(p.num_rays), kThreadsPerBlock, 0, stream>>>(
      static_cast<const long long*>(scratch), counts, p.num_rays, offsets, total);
  return cudaGetLastError();
}

cudaError_t LaunchRayMarchFill(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* offsets,
                               float* t_starts, float* t_ends, int32_t* ray_indices, cudaStream_t stream) {
  if (p.num_rays <= 0) return cudaSuccess;
  RayMarchFillKernel<<<GridStrideBlocks(p.num_rays, kRayThreads), kRayThreads, 0, stream>>>(
      p, in, nullptr, nullptr, offsets, RayMarchSamples{t_starts, t_ends, ray_indices});
  return cudaGetLastError();
}

cudaError_t LaunchRayMarchStatic(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* seed,
                                 int64_t sample_budget, const RayMarchStaticOutputs& out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  if (p.num_rays > 0) {
    if (scratch_bytes < RayMarchCountScratchBytes(p.num_rays)) return cudaErrorInvalidValue;
    err = CountAndScan(p, in, seed, out.ray_counts, scratch, stream);
    if (err != cudaSuccess) return err;
    const auto* offsets64 = static_cast<const long long*>(scratch);
    const unsigned int blocks = GridStrideBlocks(p.num_rays);
    RayMarchStaticKeptKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(offsets64, out.ray_counts, p.num_rays,
                                                                      sample_budget, out.num_samples, out.num_rays);
    RayMarchStaticLayoutKernel<<<blocks, kThreadsPerBlock, 0, stream>>>(offsets64, p.num_rays, out.num_samples,
                                                                        out.num_rays, out.ray_offsets, out.ray_counts);
    RayMarchFillKernel<<<GridStrideBlocks(p.num_rays, kRayThreads), kRayThreads, 0, stream>>>(
        p, in, seed, out.num_rays, out.ray_offsets, RayMarchSamples{out.t_starts, out.t_ends, out.ray_indices});
  } else {
    // No ray: no sample kept.
    err = cudaMemsetAsync(out.num_samples, 0, sizeof(int32_t), stream);
    if (err == cudaSuccess) err = cudaMemsetAsync(out.num_rays, 0, sizeof(int32_t), stream);
    if (err != cudaSuccess) return err;
  }
  if (sample_budget > 0) {
    RayMarchStaticPadKernel<<<GridStrideBlocks(sample_budget), kThreadsPerBlock, 0, stream>>>(
        out.num_samples, sample_budget, rm_static_pad_ray(p.num_rays), out.t_starts, out.t_ends, out.ray_indices);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo
