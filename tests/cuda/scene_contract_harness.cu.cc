// C-ABI entry points for testing the SceneContract CUDA kernels without
// TensorFlow (tests/cuda/test_scene_contract_cuda.py drives them with CuPy
// device pointers). norm: 0 "l2", 1 "linf" (kernels/scene_contract/scene_contract.h).
#include "kernels/scene_contract/scene_contract.h"

namespace {

mo::scene_contract::Attrs WithNorm(int norm) {
  mo::scene_contract::Attrs a;
  a.norm = norm;
  return a;
}

}  // namespace

extern "C" {

int metal_ops_scene_contract_forward_float32(const float* x, float* y, int64_t n, int norm, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractForward(x, y, n, WithNorm(norm), stream));
}
int metal_ops_scene_contract_forward_float16(const __half* x, __half* y, int64_t n, int norm, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractForward(x, y, n, WithNorm(norm), stream));
}
int metal_ops_scene_contract_backward_float32(const float* grad, const float* x, float* dx, int64_t n, int norm,
                                              cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractBackward(grad, x, dx, n, WithNorm(norm), stream));
}
int metal_ops_scene_contract_backward_float16(const __half* grad, const __half* x, __half* dx, int64_t n, int norm,
                                              cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractBackward(grad, x, dx, n, WithNorm(norm), stream));
}

}  // extern "C"
