// RobustLoss CUDA launchers: plain C++ declarations (no TensorFlow), shared by
// the TF GPU kernels (robust_loss_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_CUDA_H_
#define MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// out[i] = rho(x[i], alpha[col], scale[col]), col = i % channels for a
// per-channel parameter (alpha_vec / scale_vec), else element 0. T is float,
// __half or __nv_bfloat16 (computed in float). out may be x.
template <typename T>
cudaError_t LaunchRobustLossForward(const T* x, const float* alpha, const float* scale, T* out,
                                    int64_t n, int64_t channels, bool alpha_vec, bool scale_vec,
                                    cudaStream_t stream);

// dx[i] = grad[i] * drho/dx; dalpha / dscale (one element, or `channels`) receive
// the sums of grad * drho/dalpha, grad * drho/dscale (zeroed here first).
// Per-thread register sums, block reduction in shared memory, one atomicAdd
// per block and channel. dx may be grad.
template <typename T>
cudaError_t LaunchRobustLossBackward(const T* grad, const T* x, const float* alpha,
                                     const float* scale, T* dx, float* dalpha, float* dscale,
                                     int64_t n, int64_t channels, bool alpha_vec, bool scale_vec,
                                     cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_CUDA_H_
