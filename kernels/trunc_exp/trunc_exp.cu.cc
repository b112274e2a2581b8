// TruncExp CUDA kernels and their launchers (declared in trunc_exp.h): one thread per element, grid-stride with 64-bit
// indices; the formula is kernels/trunc_exp/trunc_exp.h (FusedMLP's trunc_exp).
#include "kernels/trunc_exp/trunc_exp.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

template <typename T>
__global__ void TruncExpForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    y[i] = T(trunc_exp_forward(static_cast<float>(x[i])));
  }
}

template <typename T>
__global__ void TruncExpBackwardKernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                       int64_t n) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    dx[i] = T(trunc_exp_grad(static_cast<float>(dy[i]), static_cast<float>(x[i])));
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchTruncExpForward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TruncExpForwardKernel<T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTruncExpBackward(const T* dy, const T* x, T* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TruncExpBackwardKernel<T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(dy, x, dx, n);
  return cudaGetLastError();
}

#define MO_INSTANTIATE_TRUNC_EXP(T)                                                \
  template cudaError_t LaunchTruncExpForward<T>(const T*, T*, int64_t, cudaStream_t); \
  template cudaError_t LaunchTruncExpBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t);
MO_INSTANTIATE_TRUNC_EXP(float)
MO_INSTANTIATE_TRUNC_EXP(__half)
#undef MO_INSTANTIATE_TRUNC_EXP

}  // namespace cuda
}  // namespace mo
