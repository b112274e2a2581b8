// TruncExp CUDA launchers: plain C++ declarations (no TensorFlow), shared by
// the TF GPU kernels (trunc_exp_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_CUDA_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_CUDA_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// y[i] = exp(x[i]) for n elements. T is float or __half (computed in float).
template <typename T>
cudaError_t LaunchTruncExpForward(const T* x, T* y, int64_t n, cudaStream_t stream);

// dx[i] = dy[i] * exp(clamp(x[i], -15, 15)).
template <typename T>
cudaError_t LaunchTruncExpBackward(const T* dy, const T* x, T* dx, int64_t n, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_CUDA_H_
