// DistortionLoss on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsDistortionLoss / MetalOpsDistortionLossGrad (the kernel classes of
// distortion_loss.h over the CUDA functor below) and XLA's CUDA handlers, for
// the calls distortion_loss_xla.cc emits; both run the launchers of
// distortion_loss.cu.cc with the check that t is sorted along every ray.
// Unsorted t gets the CPU kernel's error (distortion_loss.h RaySorted): a
// check kernel finds the first bad ray on the device, one 8-byte copy to the
// host (a synchronisation of the stream per call) reads it back, and only on
// failure that ray's t row is copied for the message. Compiled only when the
// installed TensorFlow is a CUDA build (and into `make cuda-lib`); here `make
// cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <vector>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // distortion_loss.h's kernel classes
#include "kernels/distortion_loss/distortion_loss.h"

namespace mo {
namespace cuda {
namespace {

// The launches with their check, shared by the GPU kernels and the XLA CUDA
// handlers. `word` is one 8-byte word of device scratch from the caller's
// allocator. The error naming the first ray whose t decreases; OK when every
// ray is sorted.
absl::Status DistortionLossCheckSorted(const float* t, int64_t rays, int64_t samples, unsigned long long* word,
                                       cudaStream_t stream) {
  cudaError_t err = LaunchDistortionLossCheck(t, rays, samples, word, stream);
  unsigned long long host = 0;
  if (err == cudaSuccess) err = CopyToHost(&host, word, sizeof(host), stream);
  TF_RETURN_IF_ERROR(CudaStatus("DistortionLoss CUDA check", err));
  if (host >= static_cast<unsigned long long>(rays)) return absl::OkStatus();
  // The bad ray's boundaries, on the host, for the CPU kernel's message.
  const int64_t r = static_cast<int64_t>(host);
  std::vector<float> row(samples + 1);
  TF_RETURN_IF_ERROR(CudaStatus("DistortionLoss CUDA check",
                                CopyToHost(row.data(), t + r * (samples + 1), row.size() * sizeof(float), stream)));
  return checks::ToStatus(distortion_loss::RaySorted(row.data(), r, samples));
}

absl::Status DistortionLossForward(const float* w, const float* t, int64_t rays, int64_t samples, float* loss,
                                   unsigned long long* word, cudaStream_t stream) {
  TF_RETURN_IF_ERROR(DistortionLossCheckSorted(t, rays, samples, word, stream));
  return LaunchStatus("DistortionLoss", LaunchDistortionLossForward(w, t, loss, rays, samples, stream));
}

absl::Status DistortionLossBackward(const float* grad, const float* w, const float* t, int64_t rays,
                                    int64_t samples, float* grad_w, float* grad_t, unsigned long long* word,
                                    cudaStream_t stream) {
  TF_RETURN_IF_ERROR(DistortionLossCheckSorted(t, rays, samples, word, stream));
  return LaunchStatus("DistortionLossGrad",
                      LaunchDistortionLossBackward(grad, w, t, grad_w, grad_t, rays, samples, stream));
}

}  // namespace
}  // namespace cuda

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

}  // namespace mo

MO_REGISTER_DISTORTION_LOSS(DEVICE_GPU, ::mo::GPUDevice);

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

// XLA's CUDA handlers (no attribute): the GPU kernels' launches with their
// check on XLA's stream, the check's device word from XLA's scratch
// allocator. The check reads the first bad ray back with a synchronous copy
// on XLA's stream (as the GPU kernels do on TensorFlow's), so unsorted t is
// an XLA error with the CPU kernel's message.
namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer w, ffi::AnyBuffer t,
                   RetBuffer loss) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return LaunchWithCheckWords(scratch, 1, "DistortionLoss", [&](unsigned long long* word) {
    return cuda::DistortionLossForward(Data<float>(w), Data<float>(t), rays, samples, Data<float>(loss), word, stream);
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad, ffi::AnyBuffer w,
                    ffi::AnyBuffer t, RetBuffer grad_w, RetBuffer grad_t) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return LaunchWithCheckWords(scratch, 1, "DistortionLossGrad", [&](unsigned long long* word) {
    return cuda::DistortionLossBackward(Data<float>(grad), Data<float>(w), Data<float>(t), rays, samples,
                                        Data<float>(grad_w), Data<float>(grad_t), word, stream);
  });
}

MO_XLA_FFI_HANDLER("MetalOpsDistortionLoss", "CUDA", Forward, BindStreamScratchBuffers<2, 1>());
MO_XLA_FFI_HANDLER("MetalOpsDistortionLossGrad", "CUDA", Backward, BindStreamScratchBuffers<3, 2>());

}  // namespace
}  // namespace xla_ffi
}  // namespace mo
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
