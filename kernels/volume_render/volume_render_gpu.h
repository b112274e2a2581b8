// What the CUDA paths of VolumeRender that TensorFlow runs share (the GPU
// kernel, kernels/volume_render/volume_render_gpu.cc, and the XLA CUDA handler,
// kernels/volume_render/volume_render_xla_gpu.cc): the forward launch with its checks.
// Invalid rays (sigma < 0 or NaN, t decreasing) get the CPU kernel's error
// (kernels/volume_render/volume_render_spec.h): the forward kernel lowers two device
// words to the first bad ray (sigma, t), one 16-byte copy to the host (a
// synchronisation of the stream per call) reads them back, and only on
// failure that ray's samples are copied for the message. `words` is two
// 8-byte words of device scratch from the caller's allocator (none where the
// op's validate is false: the launch alone, no synchronisation).
#ifndef MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_GPU_H_
#define MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_GPU_H_

#include <cstdint>
#include <vector>

#include "kernels/common/render_args.h"
#include "kernels/volume_render/volume_render.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/volume_render/volume_render_cuda.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/volume_render/volume_render_spec.h"

namespace mo {
namespace cuda {

template <typename T>
absl::Status VolumeRenderForwardChecked(const VolumeRenderForwardArgs<T>& a, unsigned long long* words,
                                        cudaStream_t stream) {
  if (!a.validate) return LaunchStatus("MetalOpsVolumeRender", LaunchVolumeRenderForward<T>(a, nullptr, stream));
  const int64_t S = a.samples;
  cudaError_t err = cudaMemsetAsync(words, 0xFF, 2 * sizeof(unsigned long long), stream);
  if (err == cudaSuccess) err = LaunchVolumeRenderForward<T>(a, words, stream);
  unsigned long long host_bad[2] = {0, 0};
  if (err == cudaSuccess) err = CopyToHost(host_bad, words, sizeof(host_bad), stream);
  TF_RETURN_IF_ERROR(LaunchStatus("MetalOpsVolumeRender", err));
  for (int which = 0; which < 2; ++which) {
    if (host_bad[which] == ~0ull) continue;
    // The bad ray's samples, on the host, for the CPU kernel's message.
    const int64_t r = static_cast<int64_t>(host_bad[which]);
    std::vector<T> sigma_row(S), t_row(S + 1);
    err = CopyToHost(sigma_row.data(), a.sigma + r * S, S * sizeof(T), stream);
    if (err == cudaSuccess) err = CopyToHost(t_row.data(), a.t + r * (S + 1), (S + 1) * sizeof(T), stream);
    TF_RETURN_IF_ERROR(CudaStatus("MetalOpsVolumeRender CUDA check", err));
    const VrCheck check = vr_check_ray(sigma_row.data(), t_row.data(), S);
    return checks::ToStatus(volume_render::BadRay(check, r, sigma_row.data(), t_row.data()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status VolumeRenderBackward(const VolumeRenderBackwardArgs<T>& a, cudaStream_t stream) {
  return LaunchStatus("MetalOpsVolumeRenderGrad", LaunchVolumeRenderBackward<T>(a, stream));
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_GPU_H_
