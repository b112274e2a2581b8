// SceneContract CUDA kernels: one thread per point, grid-stride with 64-bit
// indices, the norm a template parameter; the formula is
// kernels/scene_contract/scene_contract.h.
#include "kernels/scene_contract/scene_contract.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

template <int Norm, typename T>
__global__ void SceneContractForwardKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    float out[3];
    scene_contract_forward(static_cast<float>(x[3 * i]), static_cast<float>(x[3 * i + 1]),
                           static_cast<float>(x[3 * i + 2]), Norm, out);
    for (int k = 0; k < 3; ++k) y[3 * i + k] = T(out[k]);
  }
}

template <int Norm, typename T>
__global__ void SceneContractBackwardKernel(const T* __restrict__ grad, const T* __restrict__ x, T* __restrict__ dx,
                                            int64_t n) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    float out[3];
    scene_contract_grad(static_cast<float>(x[3 * i]), static_cast<float>(x[3 * i + 1]),
                        static_cast<float>(x[3 * i + 2]), Norm, static_cast<float>(grad[3 * i]),
                        static_cast<float>(grad[3 * i + 1]), static_cast<float>(grad[3 * i + 2]), out);
    for (int k = 0; k < 3; ++k) dx[3 * i + k] = T(out[k]);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchSceneContractForward(const T* x, T* y, int64_t n, const scene_contract::Attrs& a,
                                       cudaStream_t stream) {
  const int norm = a.norm;
  if (n == 0) return cudaSuccess;
  if (norm == kSceneContractL2) {
    SceneContractForwardKernel<kSceneContractL2, T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(x, y, n);
  } else {
    SceneContractForwardKernel<kSceneContractLinf, T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(x, y, n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSceneContractBackward(const T* grad, const T* x, T* dx, int64_t n, const scene_contract::Attrs& a,
                                        cudaStream_t stream) {
  const int norm = a.norm;
  if (n == 0) return cudaSuccess;
  if (norm == kSceneContractL2) {
    SceneContractBackwardKernel<kSceneContractL2, T>
        <<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(grad, x, dx, n);
  } else {
    SceneContractBackwardKernel<kSceneContractLinf, T>
        <<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(grad, x, dx, n);
  }
  return cudaGetLastError();
}

#define MO_INSTANTIATE_SCENE_CONTRACT(T)                                                     \
  template cudaError_t LaunchSceneContractForward<T>(const T*, T*, int64_t, const scene_contract::Attrs&,         \
                                                     cudaStream_t);                                              \
  template cudaError_t LaunchSceneContractBackward<T>(const T*, const T*, T*, int64_t, const scene_contract::Attrs&, \
                                                      cudaStream_t);
MO_INSTANTIATE_SCENE_CONTRACT(float)
MO_INSTANTIATE_SCENE_CONTRACT(__half)
#undef MO_INSTANTIATE_SCENE_CONTRACT

}  // namespace cuda
}  // namespace mo
