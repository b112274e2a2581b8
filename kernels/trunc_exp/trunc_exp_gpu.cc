// The CUDA functor of MetalOpsTruncExp / MetalOpsTruncExpGrad (the kernel class
// is kernels/trunc_exp/trunc_exp_kernel.h) and its GPU registration, float32 and float16.
// Compiled only when the installed TensorFlow is a CUDA build; here it is
// syntax-checked by `make cuda-check`. Launchers: kernels/trunc_exp/trunc_exp.cu.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cuda/tf_gpu.h"
#include "kernels/trunc_exp/trunc_exp_cuda.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/trunc_exp/trunc_exp_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

template <typename T>
struct TruncExpFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, T* y) {
    return cuda::LaunchStatus("TruncExp",
                              cuda::LaunchTruncExpForward(cuda::AsCuda(x), cuda::AsCuda(y), n, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* dy, const T* x, int64_t n, T* dx) {
    return cuda::LaunchStatus("TruncExpGrad", cuda::LaunchTruncExpBackward(cuda::AsCuda(dy), cuda::AsCuda(x),
                                                                           cuda::AsCuda(dx), n, cuda::Stream(ctx)));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsTruncExp", TruncExp, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsTruncExp", TruncExp, DEVICE_GPU, GPUDevice, Eigen::half);

}  // namespace mo

#endif  // GOOGLE_CUDA
