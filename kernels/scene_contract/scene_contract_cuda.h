// SceneContract CUDA launchers: plain C++ declarations (no TensorFlow), shared
// by the TF GPU kernels (scene_contract_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_CUDA_H_
#define MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_CUDA_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// y[i, :] = contract(x[i, :]) for n points [n, 3] in `norm` (SceneContractNorm).
// T is float or __half (computed in float).
template <typename T>
cudaError_t LaunchSceneContractForward(const T* x, T* y, int64_t n, int norm, cudaStream_t stream);

// dx[i, :] = grad[i, :]^T d contract / d x[i, :].
template <typename T>
cudaError_t LaunchSceneContractBackward(const T* grad, const T* x, T* dx, int64_t n, int norm, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_CUDA_H_
