// The CUDA functor of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad (the
// kernel class is kernels/volume_render/volume_render_kernel.h) and its GPU registration.
// Compiled only when the installed TensorFlow is a CUDA build: the Makefile
// then defines GOOGLE_CUDA and links kernels/volume_render/volume_render.cu.cc. The
// launchers are tested through the harness (tests/cuda); the forward's checks
// are kernels/volume_render/volume_render_gpu.h, shared with the XLA CUDA handler.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/volume_render/volume_render_gpu.h"
#include "kernels/volume_render/volume_render_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

template <typename T>
struct VolumeRenderFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const VolumeRenderForwardArgs<T>& a) {
    // Two device words record the first invalid ray (sigma, t); read back once (validate only).
    ::tensorflow::Tensor words;
    if (a.validate) {
      TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({2}), &words));
    }
    return cuda::VolumeRenderForwardChecked<T>(
        a, a.validate ? reinterpret_cast<unsigned long long*>(words.flat<int64_t>().data()) : nullptr,
        cuda::Stream(ctx));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const VolumeRenderBackwardArgs<T>& a) {
    return cuda::VolumeRenderBackward<T>(a, cuda::Stream(ctx));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_GPU, GPUDevice, double);

}  // namespace mo

#endif  // GOOGLE_CUDA
