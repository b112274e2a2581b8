// C-ABI entry points for testing the ZeroOut CUDA kernel without TensorFlow
// (tests/cuda/test_zero_out_cuda.py drives them through ctypes with device
// pointers); the launcher is declared in kernels/zero_out/zero_out.h, the
// index passed as the op's Attrs {preserve_index}.
#include "kernels/zero_out/zero_out.h"

extern "C" {

int metal_ops_zero_out_int32(const int32_t* in, int32_t* out, int64_t n, int64_t preserve_index, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchZeroOut(in, out, n, {preserve_index}, stream));
}
int metal_ops_zero_out_int64(const int64_t* in, int64_t* out, int64_t n, int64_t preserve_index, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchZeroOut(in, out, n, {preserve_index}, stream));
}
int metal_ops_zero_out_float32(const float* in, float* out, int64_t n, int64_t preserve_index, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchZeroOut(in, out, n, {preserve_index}, stream));
}
int metal_ops_zero_out_float64(const double* in, double* out, int64_t n, int64_t preserve_index, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchZeroOut(in, out, n, {preserve_index}, stream));
}

}  // extern "C"
