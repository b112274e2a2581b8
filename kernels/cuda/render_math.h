// What the two volume renderers' CUDA kernels share: the math
// policies of kernels/common/volume_render_math.h (VrFloatMath for float, CUDA's
// exp / expm1 for double: the shared header has no double) and the launch of
// one thread per ray.
#ifndef MO_KERNELS_CUDA_RENDER_MATH_H_
#define MO_KERNELS_CUDA_RENDER_MATH_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/volume_render_math.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {

struct VrDoubleMath {
  static __host__ __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __host__ __device__ __forceinline__ double expm1(double x) { return ::expm1(x); }
};

template <typename T> struct VrMathFor;
template <> struct VrMathFor<float> { typedef VrFloatMath type; };
template <> struct VrMathFor<double> { typedef VrDoubleMath type; };

constexpr int kRayThreads = 128;

// Launches kernel(args...) on `stream` with one thread per ray (a 64-bit
// grid-stride loop over `rays`); nothing for no rays.
template <typename... Params, typename... Args>
cudaError_t LaunchPerRay(void (*kernel)(Params...), int64_t rays, cudaStream_t stream, Args... args) {
  if (rays == 0) return cudaSuccess;
  kernel<<<GridStrideBlocks(rays, kRayThreads), kRayThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_RENDER_MATH_H_
