// The TF GPU functor of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad (the
// kernel classes of volume_render.h), its registrations and XLA's CUDA
// handlers, on the launchers of volume_render.cu.cc. Compiled only when the
// installed TensorFlow is a CUDA build (GOOGLE_CUDA); `make cuda-check`
// syntax-checks it.
//
// Invalid rays (sigma < 0 or NaN, t decreasing) get the CPU kernel's error
// (volume_render::BadRay): the forward kernel lowers two device words to the
// first bad ray (sigma, t), one 16-byte copy to the host (a synchronisation
// of the stream per call) reads them back, and only on failure that ray's
// samples are copied for the message. The words are device scratch from the
// caller's allocator (TensorFlow's temp, XLA's scratch); with validate=False
// the launch alone, no words, no synchronisation.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

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
#define MO_TF_KERNEL  // volume_render.h's kernel classes
#include "kernels/volume_render/volume_render.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

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

#if MO_XLA
#include "kernels/xla/render_xla.h"
#include "kernels/xla/xla_ffi_cuda.h"

MO_RENDER_XLA_FFI_ATTRS(volume_render);

// XLA's CUDA handlers: the same launches on XLA's stream, the check's two
// device words from XLA's scratch allocator. The forward reads the first
// invalid ray back with a synchronous copy on XLA's stream (as the GPU kernel
// does on TensorFlow's), so a negative or NaN sigma or a decreasing t is an
// XLA error with the CPU kernel's message.
namespace mo::xla_ffi {
namespace {

using volume_render::Attrs;
using volume_render::GradAttrs;

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb,
                   ffi::AnyBuffer t, ffi::AnyBuffer background, RetBuffer out_rgb, RetBuffer depth,
                   RetBuffer opacity, RetBuffer weights, Attrs attrs) {
  const int64_t rays = sigma.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "VolumeRender", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderForwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, attrs.early_termination, attrs.validate), SamplesOf<T>(t),
        RenderOutputsOf<T>(out_rgb, depth, opacity, weights)};
    return LaunchWithCheckWords(scratch, attrs.validate ? 2 : 0, "VolumeRender", [&](unsigned long long* words) {
      return cuda::VolumeRenderForwardChecked<T>(a, words, stream);
    });
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer sigma, ffi::AnyBuffer rgb, ffi::AnyBuffer t,
                    ffi::AnyBuffer background, ffi::AnyBuffer out_rgb, ffi::AnyBuffer depth, ffi::AnyBuffer opacity,
                    ffi::AnyBuffer weights, ffi::AnyBuffer grad_rgb, ffi::AnyBuffer grad_depth,
                    ffi::AnyBuffer grad_opacity, ffi::AnyBuffer grad_weights, RetBuffer grad_sigma,
                    RetBuffer grad_samples_rgb, RetBuffer grad_background, GradAttrs attrs) {
  const int64_t rays = sigma.dimensions()[0];
  return ForTypeUnlessEmpty<float, double>(sigma.element_type(), rays, "VolumeRenderGrad", [&](auto type) {
    using T = decltype(type);
    const VolumeRenderBackwardArgs<T> a = {
        RenderArgsOf<T>(rays, sigma, rgb, background, attrs.early_termination, attrs.validate),
        SamplesOf<T>(t),
        RenderGradsOf<T>(out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights,
                         grad_sigma, grad_samples_rgb, grad_background)};
    return ToError(cuda::VolumeRenderBackward<T>(a, stream));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsVolumeRender", "CUDA", Forward, BindStreamScratchBuffers<4, 4>().Attrs<Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsVolumeRenderGrad", "CUDA", Backward, BindStreamBuffers<12, 3>().Attrs<GradAttrs>());

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA

#endif  // GOOGLE_CUDA
