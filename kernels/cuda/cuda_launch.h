// Launch arithmetic shared by every CUDA kernel in the library, in one place.
// No TensorFlow headers here: this file is also compiled into the C-ABI
// harness (build/libmetal_ops_cuda.so) that runs on machines without TF.
#ifndef MO_KERNELS_CUDA_CUDA_LAUNCH_H_
#define MO_KERNELS_CUDA_CUDA_LAUNCH_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace mo {
namespace cuda {

constexpr int kThreadsPerBlock = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never
// more than CUDA's grid limit (kernels loop over the remainder with 64-bit
// indices, so n may exceed 2^31).
inline unsigned int GridStrideBlocks(int64_t n, int threads = kThreadsPerBlock) {
  const int64_t wanted = (n + threads - 1) / threads;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(wanted, 65535LL * 32)));
}

// 64-bit grid-stride loop: `for (int64_t i : GridStride(n))` is not possible in
// device code, so kernels spell it with these two helpers.
__device__ __forceinline__ int64_t GlobalThreadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GlobalThreadCount() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_CUDA_LAUNCH_H_
