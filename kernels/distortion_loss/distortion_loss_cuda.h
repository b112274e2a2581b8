// DistortionLoss CUDA launchers: plain C++ declarations (no TensorFlow), shared
// by the TF GPU kernels (distortion_loss_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_CUDA_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// *first_bad (device) = smallest ray r whose t decreases (NaN counts), or
// UINT64_MAX when every ray is sorted.
cudaError_t LaunchDistortionLossCheck(const float* t, int64_t rays, int64_t samples,
                                      unsigned long long* first_bad, cudaStream_t stream);

// loss[r] for weights [R, S], t [R, S + 1]: one warp per ray, 32 samples per
// round with warp prefix sums (O(S) work per ray). NaN for unsorted rays.
cudaError_t LaunchDistortionLossForward(const float* weights, const float* t, float* loss,
                                        int64_t rays, int64_t samples, cudaStream_t stream);

// grad_weights = grad[r] * dL/dw, grad_t = grad[r] * dL/dt (same warp scheme).
cudaError_t LaunchDistortionLossBackward(const float* grad, const float* weights, const float* t,
                                         float* grad_weights, float* grad_t, int64_t rays,
                                         int64_t samples, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_CUDA_H_
