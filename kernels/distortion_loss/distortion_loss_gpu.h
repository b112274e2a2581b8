// What the CUDA paths of DistortionLoss that TensorFlow runs share (the GPU
// kernel, kernels/distortion_loss/distortion_loss_gpu.cc, and the XLA CUDA handler,
// kernels/distortion_loss/distortion_loss_xla_gpu.cc): the launches with the check that t
// is sorted along every ray. Unsorted t gets the CPU kernel's error
// (kernels/distortion_loss/distortion_loss_spec.h): a check kernel finds the first bad
// ray on the device, one 8-byte copy to the host (a synchronisation of the
// stream per call) reads it back, and only on failure that ray's t row is
// copied for the message. `word` is one 8-byte word of device scratch from
// the caller's allocator.
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_GPU_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_GPU_H_

#include <cstdint>
#include <vector>

#include "kernels/distortion_loss/distortion_loss_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/distortion_loss/distortion_loss_spec.h"

namespace mo {
namespace cuda {

// The error naming the first ray whose t decreases; OK when every ray is sorted.
inline absl::Status DistortionLossCheckSorted(const float* t, int64_t rays, int64_t samples, unsigned long long* word,
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

inline absl::Status DistortionLossForward(const float* w, const float* t, int64_t rays, int64_t samples, float* loss,
                                          unsigned long long* word, cudaStream_t stream) {
  TF_RETURN_IF_ERROR(DistortionLossCheckSorted(t, rays, samples, word, stream));
  return LaunchStatus("DistortionLoss", LaunchDistortionLossForward(w, t, loss, rays, samples, stream));
}

inline absl::Status DistortionLossBackward(const float* grad, const float* w, const float* t, int64_t rays,
                                           int64_t samples, float* grad_w, float* grad_t, unsigned long long* word,
                                           cudaStream_t stream) {
  TF_RETURN_IF_ERROR(DistortionLossCheckSorted(t, rays, samples, word, stream));
  return LaunchStatus("DistortionLossGrad",
                      LaunchDistortionLossBackward(grad, w, t, grad_w, grad_t, rays, samples, stream));
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_GPU_H_
