// The TF GPU functor of MetalOpsPackedVolumeRender / ...Grad (the kernel
// classes of packed_volume_render.h), its registrations and XLA's CUDA
// handlers, on the launchers of packed_volume_render.cu.cc. Compiled only when
// the installed TensorFlow is a CUDA build (GOOGLE_CUDA); `make cuda-check`
// syntax-checks it.
//
// Rays with an invalid layout (offsets, counts) or invalid samples get the
// CPU kernel's error (packed_volume_render.h's checks): the kernels lower a
// device word to the first bad ray, one 8-byte copy to the host (a
// synchronisation of the stream per call) reads it back, and only on failure
// the few values its message needs are copied and checked on the host by the
// CPU kernel's checks. The word is device scratch from the caller's allocator
// (TensorFlow's temp, XLA's scratch); with validate=False the launch alone,
// no word, no synchronisation, and XLA's launches run ahead of the GPU.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/framework/render_op.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#define MO_TF_KERNEL  // packed_volume_render.h's kernel classes
#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

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

#if MO_XLA
#include "kernels/xla/render_xla.h"
#include "kernels/xla/xla_ffi_cuda.h"

MO_RENDER_XLA_FFI_ATTRS(packed_volume_render);

// XLA's CUDA handlers: the same launches with their checks on XLA's stream,
// the check's device word from XLA's scratch allocator, read back with a
// synchronous copy on XLA's stream (as the GPU kernel does on TensorFlow's),
// so an invalid ray is an XLA error with the CPU kernel's message.
namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb,
                   ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends, ffi::AnyBuffer offsets, ffi::AnyBuffer counts,
                   ffi::AnyBuffer background, RetBuffer out_rgb, RetBuffer depth, RetBuffer opacity,
                   RetBuffer weights, packed_volume_render::Attrs attrs) {
  const int64_t rays = counts.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "PackedVolumeRender", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderForwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, attrs.early_termination, attrs.validate),
        SamplesOf<T>(t_starts, t_ends, offsets, counts), RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    const int words = attrs.validate ? 1 : 0;
    return LaunchWithCheckWords(scratch, words, "PackedVolumeRender", [&](unsigned long long* word) {
      return cuda::PackedVolumeRenderForward<T>(a, word, stream);
    });
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb,
                    ffi::AnyBuffer t_starts, ffi::AnyBuffer t_ends, ffi::AnyBuffer offsets, ffi::AnyBuffer counts,
                    ffi::AnyBuffer background, ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity,
                    ffi::AnyBuffer weights, ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth,
                    ffi::AnyBuffer grad_opacity, ffi::AnyBuffer grad_weights, RetBuffer grad_sigma,
                    RetBuffer grad_samples_rgb, RetBuffer grad_background,
                    packed_volume_render::GradAttrs attrs) {
  const int64_t rays = counts.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "PackedVolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const PackedVolumeRenderBackwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, attrs.early_termination, attrs.validate),
        SamplesOf<T>(t_starts, t_ends, offsets, counts),
        RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                         grad_sigma, grad_samples_rgb, grad_background)};
    const int words = attrs.validate ? 1 : 0;
    return LaunchWithCheckWords(scratch, words, "PackedVolumeRenderGrad", [&](unsigned long long* word) {
      return cuda::PackedVolumeRenderBackward<T>(a, word, stream);
    });
  });
}

MO_XLA_FFI_HANDLER("MetalOpsPackedVolumeRender", "CUDA", Forward,
                   BindStreamScratchBuffers<7, 4>().Attrs<packed_volume_render::Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsPackedVolumeRenderGrad", "CUDA", Backward,
                   BindStreamScratchBuffers<15, 3>().Attrs<packed_volume_render::GradAttrs>());

}  // namespace
}  // namespace xla_ffi
}  // namespace mo
#endif  // MO_XLA

#endif  // GOOGLE_CUDA
