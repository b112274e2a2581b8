// C-ABI entry points for testing the TruncExp CUDA kernels without TensorFlow
// (tests/cuda/test_trunc_exp_cuda.py drives them with CuPy device pointers);
// the launchers are declared in kernels/trunc_exp/trunc_exp.h.
#include "kernels/trunc_exp/trunc_exp.h"

extern "C" {

int metal_ops_trunc_exp_forward_float32(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchTruncExpForward(x, y, n, stream));
}
int metal_ops_trunc_exp_forward_float16(const __half* x, __half* y, int64_t n, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchTruncExpForward(x, y, n, stream));
}
int metal_ops_trunc_exp_backward_float32(const float* dy, const float* x, float* dx, int64_t n,
                                         cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchTruncExpBackward(dy, x, dx, n, stream));
}
int metal_ops_trunc_exp_backward_float16(const __half* dy, const __half* x, __half* dx, int64_t n,
                                         cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchTruncExpBackward(dy, x, dx, n, stream));
}

}  // extern "C"
