// The CUDA functor of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad (the
// kernel class is kernels/distortion_loss_kernel.h) and its GPU registration.
// Compiled only when the installed TensorFlow is a CUDA build; here it is
// syntax-checked by `make cuda-check`. Launchers: kernels/cuda/distortion_loss.cu.cc.
//
// Unsorted t gets the CPU kernel's error (kernels/spec/distortion_loss_spec.h): a
// check kernel finds the first bad ray on the device, one 8-byte copy to the
// host (a stream synchronisation per call) reads it back, and only on failure
// that ray's t row is copied for the message.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <vector>

#include "kernels/cuda/distortion_loss.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/distortion_loss_kernel.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/distortion_loss_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

using ::tensorflow::OpKernelContext;

// The error naming the first ray whose t decreases.
absl::Status CheckSorted(OpKernelContext* ctx, const float* t, int64_t rays, int64_t samples, cudaStream_t stream) {
  ::tensorflow::Tensor first_bad;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), &first_bad));
  auto* dev = reinterpret_cast<unsigned long long*>(first_bad.flat<int64_t>().data());
  cudaError_t err = cuda::LaunchDistortionLossCheck(t, rays, samples, dev, stream);
  unsigned long long host = 0;
  if (err == cudaSuccess) err = cuda::CopyToHost(&host, dev, sizeof(host), stream);
  TF_RETURN_IF_ERROR(cuda::CudaStatus("DistortionLoss CUDA check", err));
  if (host >= static_cast<unsigned long long>(rays)) return absl::OkStatus();
  // The bad ray's boundaries, on the host, for the CPU kernel's message.
  const int64_t r = static_cast<int64_t>(host);
  std::vector<float> row(samples + 1);
  TF_RETURN_IF_ERROR(cuda::CudaStatus(
      "DistortionLoss CUDA check", cuda::CopyToHost(row.data(), t + r * (samples + 1), row.size() * sizeof(float), stream)));
  return checks::ToStatus(distortion_loss::RaySorted(row.data(), r, samples));
}

}  // namespace

template <>
struct DistortionLossFunctor<GPUDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const float* w, const float* t, int64_t rays, int64_t samples,
                              float* loss) {
    const cudaStream_t stream = cuda::Stream(ctx);
    TF_RETURN_IF_ERROR(CheckSorted(ctx, t, rays, samples, stream));
    return cuda::LaunchStatus("DistortionLoss", cuda::LaunchDistortionLossForward(w, t, loss, rays, samples, stream));
  }

  static absl::Status Backward(OpKernelContext* ctx, const float* grad, const float* w, const float* t, int64_t rays,
                               int64_t samples, float* grad_w, float* grad_t) {
    const cudaStream_t stream = cuda::Stream(ctx);
    TF_RETURN_IF_ERROR(CheckSorted(ctx, t, rays, samples, stream));
    return cuda::LaunchStatus("DistortionLossGrad", cuda::LaunchDistortionLossBackward(grad, w, t, grad_w, grad_t,
                                                                                       rays, samples, stream));
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_GPU),
                        DistortionLossOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_GPU),
                        DistortionLossGradOp<GPUDevice>);

}  // namespace mo

#endif  // GOOGLE_CUDA
