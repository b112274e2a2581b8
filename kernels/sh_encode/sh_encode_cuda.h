// SHEncode CUDA launchers: plain C++ declarations (no TensorFlow), shared by
// the TF GPU kernels (sh_encode_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_SH_ENCODE_SH_ENCODE_CUDA_H_
#define MO_KERNELS_SH_ENCODE_SH_ENCODE_CUDA_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// values [n, degree**2] of dirs [n, 3], degree in 1..4 (else
// cudaErrorInvalidValue). T is float or __half (computed in float).
template <typename T>
cudaError_t LaunchSHEncodeForward(const T* dirs, T* values, int64_t n, int degree, cudaStream_t stream);

// grad_dirs [n, 3] = sum_k grad[:, k] dY_k/d dirs, grad [n, degree**2].
template <typename T>
cudaError_t LaunchSHEncodeBackward(const T* grad, const T* dirs, T* grad_dirs, int64_t n, int degree,
                                   cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_SH_ENCODE_SH_ENCODE_CUDA_H_
