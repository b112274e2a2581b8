// C-ABI entry points for testing the DistortionLoss CUDA kernels without
// TensorFlow (tests/cuda/test_distortion_loss_cuda.py).
#include "kernels/distortion_loss/distortion_loss.h"

extern "C" {

int metal_ops_distortion_loss_check(const float* t, int64_t rays, int64_t samples,
                                    unsigned long long* first_bad, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchDistortionLossCheck(t, rays, samples, first_bad, stream));
}
int metal_ops_distortion_loss_forward(const float* w, const float* t, float* loss, int64_t rays,
                                      int64_t samples, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchDistortionLossForward(w, t, loss, rays, samples, stream));
}
int metal_ops_distortion_loss_backward(const float* g, const float* w, const float* t, float* gw,
                                       float* gt, int64_t rays, int64_t samples, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchDistortionLossBackward(g, w, t, gw, gt, rays, samples, stream));
}

}  // extern "C"
