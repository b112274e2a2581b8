// The TensorFlow kernels of MetalOpsSceneContract / MetalOpsSceneContractGrad, once for
// every C++-API device: the point-by-point kernel classes of
// kernels/framework/pointwise_kernel.h over the attribute and checks of kernels/scene_contract/scene_contract_spec.h
// and SceneContractFunctor<Device, T>, the work, defined per device:
//   CPU  kernels/scene_contract/scene_contract_kernels.cc (the functor; registers SceneContractOp<CPUDevice, T>)
//   CUDA kernels/scene_contract/scene_contract_gpu.cc    (the functor; registers SceneContractOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_KERNEL_H_
#define MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_KERNEL_H_

#include <cstdint>

#include "kernels/framework/pointwise_kernel.h"
#include "kernels/scene_contract/scene_contract_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

// Defined per device, for n > 0 points (x, y, grad and dx [n, 3]).
template <typename Device, typename T>
struct SceneContractFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, int norm, T* y);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* x, int64_t n, int norm,
                               T* dx);
};

// SceneContract in kernels/framework/pointwise_kernel.h: points of 3; the functor takes the norm.
template <typename Device, typename T>
using SceneContractOp =
    PointwiseOp<SceneContractFunctor<Device, T>, T, scene_contract::Attrs, 3, &scene_contract::Attrs::norm>;
template <typename Device, typename T>
using SceneContractGradOp =
    PointwiseGradOp<SceneContractFunctor<Device, T>, T, scene_contract::Attrs, 3, &scene_contract::Attrs::norm>;

}  // namespace mo

#endif  // MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_KERNEL_H_
