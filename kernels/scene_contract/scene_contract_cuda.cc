// SceneContract on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsSceneContract / MetalOpsSceneContractGrad
// (kernels/framework/pointwise_kernel.h over the CUDA functor below), which run
// the launchers of scene_contract.cu.cc on the op's stream, float32 and
// float16. Compiled only when the installed TensorFlow is a CUDA build (and
// into `make cuda-lib`); here `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/scene_contract/scene_contract.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace scene_contract {
namespace {

// The functor, for n > 0 points.
template <typename T>
struct Cuda {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, const Attrs& a, T* y) {
    return cuda::LaunchStatus("SceneContract", cuda::LaunchSceneContractForward(cuda::AsCuda(x), cuda::AsCuda(y), n,
                                                                                a, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* x, int64_t n,
                               const Attrs& a, T* dx) {
    return cuda::LaunchStatus("SceneContractGrad",
                              cuda::LaunchSceneContractBackward(cuda::AsCuda(grad), cuda::AsCuda(x), cuda::AsCuda(dx),
                                                                n, a, cuda::Stream(ctx)));
  }
};

}  // namespace
}  // namespace scene_contract
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsSceneContract", DEVICE_GPU, ::mo::scene_contract::Cuda, ::mo::scene_contract);

#endif  // GOOGLE_CUDA
