// The CUDA functor of ZeroOut (the kernel class is kernels/zero_out/zero_out_kernel.h) and
// its GPU registration. Compiled only when the installed TensorFlow is a CUDA
// build (`make` then defines GOOGLE_CUDA and links kernels/*/*.cu.cc); here
// it is syntax-checked by `make cuda-check`. Launcher: kernels/zero_out/zero_out.cu.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cuda/tf_gpu.h"
#include "kernels/zero_out/zero_out_cuda.h"
#include "kernels/zero_out/zero_out_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

template <typename T>
struct ZeroOutFunctor<GPUDevice, T> {
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const T* in, T* out, int64_t n,
                              int64_t preserve_index) {
    return cuda::LaunchStatus("ZeroOut", cuda::LaunchZeroOut(in, out, n, preserve_index, cuda::Stream(ctx)));
  }
};

// int32 stays on the host by TensorFlow's convention for GPU devices.
MO_REGISTER("ZeroOut", DEVICE_GPU, int64_t, ZeroOutOp<GPUDevice, int64_t>);
MO_REGISTER("ZeroOut", DEVICE_GPU, float, ZeroOutOp<GPUDevice, float>);
MO_REGISTER("ZeroOut", DEVICE_GPU, double, ZeroOutOp<GPUDevice, double>);

}  // namespace mo

#endif  // GOOGLE_CUDA
