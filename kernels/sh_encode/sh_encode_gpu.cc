// The CUDA functor of MetalOpsSHEncode / MetalOpsSHEncodeGrad (the kernel class
// is kernels/sh_encode/sh_encode_kernel.h) and its GPU registration, float32 and float16.
// Compiled only when the installed TensorFlow is a CUDA build; here it is
// syntax-checked by `make cuda-check`. Launchers: kernels/sh_encode/sh_encode.cu.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/sh_encode/sh_encode_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/sh_encode/sh_encode_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

template <typename T>
struct SHEncodeFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* dirs, int64_t n, int degree, T* values) {
    return cuda::LaunchStatus("SHEncode", cuda::LaunchSHEncodeForward(cuda::AsCuda(dirs), cuda::AsCuda(values), n,
                                                                      degree, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* dirs, int64_t n,
                               int degree, T* grad_dirs) {
    return cuda::LaunchStatus("SHEncodeGrad",
                              cuda::LaunchSHEncodeBackward(cuda::AsCuda(grad), cuda::AsCuda(dirs),
                                                           cuda::AsCuda(grad_dirs), n, degree,
                                                           cuda::Stream(ctx)));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsSHEncode", SHEncode, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsSHEncode", SHEncode, DEVICE_GPU, GPUDevice, Eigen::half);

}  // namespace mo

#endif  // GOOGLE_CUDA
