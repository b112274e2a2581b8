// The CUDA functor of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad (the
// kernel class is kernels/distortion_loss/distortion_loss_kernel.h) and its GPU registration.
// Compiled only when the installed TensorFlow is a CUDA build; here it is
// syntax-checked by `make cuda-check`. Launchers: kernels/distortion_loss/distortion_loss.cu.cc;
// the launches with their check that t is sorted (one read-back per call):
// kernels/distortion_loss/distortion_loss_gpu.h, shared with the XLA CUDA handler.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/distortion_loss/distortion_loss_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/distortion_loss/distortion_loss_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

using ::tensorflow::OpKernelContext;

// One device word for the check's first bad ray.
absl::Status CheckWord(OpKernelContext* ctx, ::tensorflow::Tensor* word, unsigned long long** dev) {
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), word));
  *dev = reinterpret_cast<unsigned long long*>(word->flat<int64_t>().data());
  return absl::OkStatus();
}

}  // namespace

template <>
struct DistortionLossFunctor<GPUDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const float* w, const float* t, int64_t rays, int64_t samples,
                              float* loss) {
    ::tensorflow::Tensor word;
    unsigned long long* dev = nullptr;
    TF_RETURN_IF_ERROR(CheckWord(ctx, &word, &dev));
    return cuda::DistortionLossForward(w, t, rays, samples, loss, dev, cuda::Stream(ctx));
  }

  static absl::Status Backward(OpKernelContext* ctx, const float* grad, const float* w, const float* t, int64_t rays,
                               int64_t samples, float* grad_w, float* grad_t) {
    ::tensorflow::Tensor word;
    unsigned long long* dev = nullptr;
    TF_RETURN_IF_ERROR(CheckWord(ctx, &word, &dev));
    return cuda::DistortionLossBackward(grad, w, t, rays, samples, grad_w, grad_t, dev, cuda::Stream(ctx));
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_GPU),
                        DistortionLossOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_GPU),
                        DistortionLossGradOp<GPUDevice>);

}  // namespace mo

#endif  // GOOGLE_CUDA
