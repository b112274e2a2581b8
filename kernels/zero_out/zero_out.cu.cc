// ZeroOut CUDA kernel. The per-element rule comes from kernels/zero_out/zero_out.h.
#include "kernels/zero_out/zero_out.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/zero_out/zero_out_cuda.h"

namespace mo {
namespace cuda {
namespace {

template <typename T>
__global__ void ZeroOutKernel(const T* __restrict__ in, T* __restrict__ out,
                              int64_t n, int64_t preserve_index) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    out[i] = zero_out_element(in[i], i, preserve_index);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchZeroOut(const T* in, T* out, int64_t n, int64_t preserve_index,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ZeroOutKernel<T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(
      in, out, n, preserve_index);
  return cudaGetLastError();
}

template cudaError_t LaunchZeroOut<int32_t>(const int32_t*, int32_t*, int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchZeroOut<int64_t>(const int64_t*, int64_t*, int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchZeroOut<float>(const float*, float*, int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchZeroOut<double>(const double*, double*, int64_t, int64_t, cudaStream_t);

}  // namespace cuda
}  // namespace mo
