// C-ABI entry points for testing the SHEncode CUDA kernels without TensorFlow
// (tests/cuda/test_sh_encode_cuda.py drives them with CuPy device pointers);
// the launchers are declared in kernels/sh_encode/sh_encode.h, the degree
// passed as the op's Attrs {degree}.
#include "kernels/sh_encode/sh_encode.h"

extern "C" {

int metal_ops_sh_encode_forward_float32(const float* dirs, float* values, int64_t n, int degree,
                                        cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSHEncodeForward(dirs, values, n, {degree}, stream));
}
int metal_ops_sh_encode_forward_float16(const __half* dirs, __half* values, int64_t n, int degree,
                                        cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSHEncodeForward(dirs, values, n, {degree}, stream));
}
int metal_ops_sh_encode_backward_float32(const float* grad, const float* dirs, float* grad_dirs, int64_t n,
                                         int degree, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSHEncodeBackward(grad, dirs, grad_dirs, n, {degree}, stream));
}
int metal_ops_sh_encode_backward_float16(const __half* grad, const __half* dirs, __half* grad_dirs, int64_t n,
                                         int degree, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSHEncodeBackward(grad, dirs, grad_dirs, n, {degree}, stream));
}

}  // extern "C"
