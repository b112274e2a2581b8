// What the CUDA paths of PackedVolumeRender that TensorFlow runs share (the
// GPU kernel, kernels/packed_volume_render/packed_volume_render_gpu.cc, and the XLA CUDA
// handler, kernels/packed_volume_render/packed_volume_render_xla_gpu.cc): the launches with
// their checks. Rays with an invalid layout (offsets, counts) or invalid
// samples get the CPU kernel's error (kernels/packed_volume_render/packed_volume_render_spec.h):
// the kernels lower a device word to the first bad ray, one 8-byte copy to
// the host (a synchronisation of the stream per call) reads it back, and only
// on failure the few values its message needs are copied and checked on the
// host by the CPU kernel's checks. `word` is one 8-byte word of device
// scratch from the caller's allocator (none where the op's validate is
// false: the launch alone, no synchronisation).
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_GPU_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_GPU_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/common/render_args.h"
#include "kernels/packed_volume_render/packed_volume_render_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/packed_volume_render/packed_volume_render_spec.h"

namespace mo {
namespace cuda {

// After the launch: reads the first invalid ray back and, when there is one,
// copies the few values its message needs to the host and runs the CPU
// kernel's checks on them (the same message on both devices).
template <typename T>
absl::Status PackedVolumeRenderFirstBadRay(const char* op, cudaError_t err, const unsigned long long* bad, int64_t R,
                                           int64_t N, const int32_t* offsets, const int32_t* counts, const T* sigma,
                                           const T* t_starts, const T* t_ends, cudaStream_t stream) {
  unsigned long long host_bad = ~0ull;
  if (err == cudaSuccess) err = CopyToHost(&host_bad, bad, sizeof(host_bad), stream);
  TF_RETURN_IF_ERROR(LaunchStatus(op, err));
  if (host_bad == ~0ull) return absl::OkStatus();
  const int64_t r = static_cast<int64_t>(host_bad);
  const int64_t first = r > 0 ? r - 1 : r;
  const size_t n = r > 0 ? 2 : 1;
  int32_t off[2] = {0, 0}, cnt[2] = {0, 0};
  err = CopyToHost(off, offsets + first, n * sizeof(int32_t), stream);
  if (err == cudaSuccess) err = CopyToHost(cnt, counts + first, n * sizeof(int32_t), stream);
  TF_RETURN_IF_ERROR(CudaStatus("MetalOpsPackedVolumeRender CUDA check", err));
  const int64_t prev_end = r > 0 ? int64_t{off[0]} + cnt[0] : 0;
  const int64_t offset = off[n - 1], count = cnt[n - 1];
  const int32_t code = pvr_layout_code(r, R, N, prev_end, offset, count);
  if (code != kVrOk) return checks::ToStatus(packed_volume_render::BadLayout(op, code, r, N, prev_end, offset, count));
  std::vector<T> s(count), t0(count), t1(count);
  err = CopyToHost(s.data(), sigma + offset, count * sizeof(T), stream);
  if (err == cudaSuccess) err = CopyToHost(t0.data(), t_starts + offset, count * sizeof(T), stream);
  if (err == cudaSuccess) err = CopyToHost(t1.data(), t_ends + offset, count * sizeof(T), stream);
  TF_RETURN_IF_ERROR(CudaStatus("MetalOpsPackedVolumeRender CUDA check", err));
  const VrCheck check = vr_check_samples(s.data(), t0.data(), t1.data(), count);
  if (check.code == kVrOk) return ::tensorflow::errors::Internal(op, ": ray ", r, " was reported invalid");
  const int64_t i = check.sample;
  return checks::ToStatus(packed_volume_render::BadSample(check.code, r, offset + i, s[i], t0[i], t1[i]));
}

// Launches launch(a, word, stream) with `word` set to UINT64_MAX for the
// first invalid ray, and returns PackedVolumeRenderFirstBadRay's verdict.
// With a.validate false: the launch alone (`word` may be nullptr), nothing
// read back, so the host does not wait for the kernel.
template <typename Args, typename Launch>
absl::Status PackedVolumeRenderChecked(const char* op, const Args& a, Launch launch, unsigned long long* word,
                                       cudaStream_t stream) {
  if (!a.validate) return LaunchStatus(op, launch(a, nullptr, stream));
  TF_RETURN_IF_ERROR(CudaStatus("MetalOpsPackedVolumeRender CUDA check",
                                cudaMemsetAsync(word, 0xFF, sizeof(unsigned long long), stream)));
  const cudaError_t err = launch(a, word, stream);
  return PackedVolumeRenderFirstBadRay(op, err, word, a.rays, a.samples, a.offsets, a.counts, a.sigma, a.t_starts,
                                       a.t_ends, stream);
}

template <typename T>
absl::Status PackedVolumeRenderForward(const PackedVolumeRenderForwardArgs<T>& a, unsigned long long* word,
                                       cudaStream_t stream) {
  return PackedVolumeRenderChecked(packed_volume_render::kForward, a, LaunchPackedVolumeRenderForward<T>, word,
                                   stream);
}

template <typename T>
absl::Status PackedVolumeRenderBackward(const PackedVolumeRenderBackwardArgs<T>& a, unsigned long long* word,
                                        cudaStream_t stream) {
  return PackedVolumeRenderChecked(packed_volume_render::kBackward, a, LaunchPackedVolumeRenderBackward<T>, word,
                                   stream);
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_GPU_H_
