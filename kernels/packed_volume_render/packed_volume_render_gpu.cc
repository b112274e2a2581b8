// The CUDA functor of MetalOpsPackedVolumeRender / ...Grad (the kernel
// classes are kernels/packed_volume_render/packed_volume_render_kernel.h) and the GPU registrations.
// Compiled only when the installed TensorFlow is a CUDA build: the Makefile
// then defines GOOGLE_CUDA and links kernels/packed_volume_render/packed_volume_render.cu.cc.
// The launchers are tested through the harness (tests/cuda); the launches
// with their checks are kernels/packed_volume_render/packed_volume_render_gpu.h, shared with
// the XLA CUDA handler.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/packed_volume_render/packed_volume_render_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/packed_volume_render/packed_volume_render_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {
namespace {

// A device word for the first invalid ray (none without validate).
absl::Status BadRayWord(::tensorflow::OpKernelContext* ctx, bool validate, ::tensorflow::Tensor* word,
                        unsigned long long** bad) {
  if (!validate) return absl::OkStatus();
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), word));
  *bad = reinterpret_cast<unsigned long long*>(word->flat<int64_t>().data());
  return absl::OkStatus();
}

}  // namespace

template <typename T>
struct PackedVolumeRenderFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderForwardArgs<T>& a) {
    ::tensorflow::Tensor word;
    unsigned long long* bad = nullptr;
    TF_RETURN_IF_ERROR(BadRayWord(ctx, a.validate, &word, &bad));
    return cuda::PackedVolumeRenderForward<T>(a, bad, cuda::Stream(ctx));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderBackwardArgs<T>& a) {
    ::tensorflow::Tensor word;
    unsigned long long* bad = nullptr;
    TF_RETURN_IF_ERROR(BadRayWord(ctx, a.validate, &word, &bad));
    return cuda::PackedVolumeRenderBackward<T>(a, bad, cuda::Stream(ctx));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_GPU, GPUDevice, double);

}  // namespace mo

#endif  // GOOGLE_CUDA
