// C-ABI entry points for testing the SceneContract CUDA kernels without
// TensorFlow (tests/cuda/test_scene_contract_cuda.py drives them with CuPy
// device pointers). norm: 0 "l2", 1 "linf"
// (kernels/scene_contract/scene_contract.h), passed as the op's Attrs {norm}.
#include "kernels/scene_contract/scene_contract.h"

extern "C" {

int metal_ops_scene_contract_forward_float32(const float* x, float* y, int64_t n, int norm, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractForward(x, y, n, {norm}, stream));
}
int metal_ops_scene_contract_forward_float16(const __half* x, __half* y, int64_t n, int norm, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractForward(x, y, n, {norm}, stream));
}
int metal_ops_scene_contract_backward_float32(const float* grad, const float* x, float* dx, int64_t n, int norm,
                                              cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractBackward(grad, x, dx, n, {norm}, stream));
}
int metal_ops_scene_contract_backward_float16(const __half* grad, const __half* x, __half* dx, int64_t n, int norm,
                                              cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchSceneContractBackward(grad, x, dx, n, {norm}, stream));
}

}  // extern "C"
