// The fixed-order sum of partial results (kernels/cuda/sum_parts.h).
#include "kernels/cuda/sum_parts.h"

#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

__global__ void SumPartsKernel(const float* __restrict__ parts, int count, int64_t n, float* __restrict__ out) {
  for (int64_t j = GlobalThreadIndex(); j < n; j += GlobalThreadCount()) {
    float s = parts[j];
    for (int p = 1; p < count; ++p) s += parts[p * n + j];
    out[j] = s;
  }
}

}  // namespace

cudaError_t LaunchSumParts(const float* parts, int count, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SumPartsKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(parts, count, n, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo
