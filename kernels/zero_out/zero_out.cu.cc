// ZeroOut's CUDA kernel and its launcher (declared in zero_out.h). The
// per-element rule is kernels/zero_out/zero_out.h's.
#include "kernels/zero_out/zero_out.h"
#include "kernels/cuda/cuda_launch.h"

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
cudaError_t LaunchZeroOut(const T* in, T* out, int64_t n, const zero_out::Attrs& a, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ZeroOutKernel<T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(in, out, n, a.preserve_index);
  return cudaGetLastError();
}

#define MO_INSTANTIATE_ZERO_OUT(T) \
  template cudaError_t LaunchZeroOut<T>(const T*, T*, int64_t, const zero_out::Attrs&, cudaStream_t);
MO_INSTANTIATE_ZERO_OUT(int32_t)
MO_INSTANTIATE_ZERO_OUT(int64_t)
MO_INSTANTIATE_ZERO_OUT(float)
MO_INSTANTIATE_ZERO_OUT(double)
#undef MO_INSTANTIATE_ZERO_OUT

}  // namespace cuda
}  // namespace mo
