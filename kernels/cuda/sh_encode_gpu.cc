// The CUDA functor of MetalOpsSHEncode / MetalOpsSHEncodeGrad (the kernel class
// is kernels/sh_encode_op.h) and its GPU registration, float32 and float16.
// Compiled only when the installed TensorFlow is a CUDA build; here it is
// syntax-checked by `make cuda-check`. Launchers: kernels/cuda/sh_encode.cu.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/cuda/sh_encode.h"
#include "kernels/sh_encode_op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

// TF dtype -> CUDA element type of the same layout.
template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<Eigen::half> { using type = __half; };
static_assert(sizeof(Eigen::half) == sizeof(__half), "half layouts differ");

absl::Status LaunchStatus(const char* op, cudaError_t err) {
  return err == cudaSuccess ? absl::OkStatus()
                            : ::tensorflow::errors::Internal(op, " CUDA launch failed: ", cudaGetErrorString(err));
}

}  // namespace

using GPUDevice = Eigen::GpuDevice;

template <typename T>
struct SHEncodeFunctor<GPUDevice, T> {
  using CT = typename CudaType<T>::type;

  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* dirs, int64_t n, int degree, T* values) {
    return LaunchStatus("SHEncode", cuda::LaunchSHEncodeForward(reinterpret_cast<const CT*>(dirs),
                                                                reinterpret_cast<CT*>(values), n, degree,
                                                                ctx->eigen_device<GPUDevice>().stream()));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* dirs, int64_t n,
                               int degree, T* grad_dirs) {
    return LaunchStatus("SHEncodeGrad", cuda::LaunchSHEncodeBackward(
                                            reinterpret_cast<const CT*>(grad), reinterpret_cast<const CT*>(dirs),
                                            reinterpret_cast<CT*>(grad_dirs), n, degree,
                                            ctx->eigen_device<GPUDevice>().stream()));
  }
};

METAL_OPS_REGISTER_SH_ENCODE(DEVICE_GPU, GPUDevice, float);
METAL_OPS_REGISTER_SH_ENCODE(DEVICE_GPU, GPUDevice, Eigen::half);

}  // namespace mo

#endif  // GOOGLE_CUDA
