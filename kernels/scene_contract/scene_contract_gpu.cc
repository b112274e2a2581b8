// The CUDA functor of MetalOpsSceneContract / MetalOpsSceneContractGrad (the
// kernel class is kernels/scene_contract/scene_contract_kernel.h) and its GPU registration,
// float32 and float16. Compiled only when the installed TensorFlow is a CUDA
// build; here it is syntax-checked by `make cuda-check`. Launchers:
// kernels/scene_contract/scene_contract.cu.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/scene_contract/scene_contract_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/scene_contract/scene_contract_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

template <typename T>
struct SceneContractFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, int norm, T* y) {
    return cuda::LaunchStatus("SceneContract", cuda::LaunchSceneContractForward(cuda::AsCuda(x), cuda::AsCuda(y), n,
                                                                                norm, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* x, int64_t n, int norm,
                               T* dx) {
    return cuda::LaunchStatus("SceneContractGrad",
                              cuda::LaunchSceneContractBackward(cuda::AsCuda(grad), cuda::AsCuda(x), cuda::AsCuda(dx),
                                                                n, norm, cuda::Stream(ctx)));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsSceneContract", SceneContract, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsSceneContract", SceneContract, DEVICE_GPU, GPUDevice, Eigen::half);

}  // namespace mo

#endif  // GOOGLE_CUDA
