// C-ABI entry points for testing the RobustLoss CUDA kernels without TensorFlow
// (tests/cuda/test_robust_loss_cuda.py drives them with CuPy device pointers).
#include "kernels/cuda/robust_loss.h"

extern "C" {

int metal_ops_robust_loss_forward_float32(const float* x, const float* alpha, const float* scale,
                                          float* out, int64_t n, int64_t channels, int alpha_vec,
                                          int scale_vec, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchRobustLossForward(x, alpha, scale, out, n, channels,
                                                            alpha_vec != 0, scale_vec != 0, stream));
}
int metal_ops_robust_loss_forward_float16(const __half* x, const float* alpha, const float* scale,
                                          __half* out, int64_t n, int64_t channels, int alpha_vec,
                                          int scale_vec, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchRobustLossForward(x, alpha, scale, out, n, channels,
                                                            alpha_vec != 0, scale_vec != 0, stream));
}
int metal_ops_robust_loss_backward_float32(const float* grad, const float* x, const float* alpha,
                                           const float* scale, float* dx, float* dalpha,
                                           float* dscale, int64_t n, int64_t channels,
                                           int alpha_vec, int scale_vec, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchRobustLossBackward(grad, x, alpha, scale, dx, dalpha, dscale, n,
                                                             channels, alpha_vec != 0, scale_vec != 0, stream));
}
int metal_ops_robust_loss_backward_float16(const __half* grad, const __half* x, const float* alpha,
                                           const float* scale, __half* dx, float* dalpha,
                                           float* dscale, int64_t n, int64_t channels,
                                           int alpha_vec, int scale_vec, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchRobustLossBackward(grad, x, alpha, scale, dx, dalpha, dscale, n,
                                                             channels, alpha_vec != 0, scale_vec != 0, stream));
}

}  // extern "C"
