// C-ABI entry points for testing the RobustLoss CUDA kernels without TensorFlow
// (tests/cuda/test_robust_loss_cuda.py drives them with CuPy device pointers);
// the launchers are declared in kernels/robust_loss/robust_loss.h.
#include "kernels/robust_loss/robust_loss.h"

#define MO_ROBUST_LOSS_HARNESS(SUFFIX, T)                                                                      \
  int metal_ops_robust_loss_forward_##SUFFIX(const T* x, const float* alpha, const float* scale, T* out, int64_t n,  \
                                             int64_t channels, int alpha_vec, int scale_vec, cudaStream_t stream) { \
    return static_cast<int>(mo::cuda::LaunchRobustLossForward(x, alpha, scale, out, n, channels, alpha_vec != 0,   \
                                                              scale_vec != 0, stream));                            \
  }                                                                                                               \
  int metal_ops_robust_loss_backward_##SUFFIX(const T* grad, const T* x, const float* alpha, const float* scale,   \
                                              T* dx, float* dalpha, float* dscale, int64_t n, int64_t channels,   \
                                              int alpha_vec, int scale_vec, cudaStream_t stream) {                \
    return static_cast<int>(mo::cuda::LaunchRobustLossBackward(grad, x, alpha, scale, dx, dalpha, dscale, n,       \
                                                               channels, alpha_vec != 0, scale_vec != 0, stream)); \
  }

extern "C" {
MO_ROBUST_LOSS_HARNESS(float32, float)
MO_ROBUST_LOSS_HARNESS(float16, __half)
}  // extern "C"

#undef MO_ROBUST_LOSS_HARNESS
