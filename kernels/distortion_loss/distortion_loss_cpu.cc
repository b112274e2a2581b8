// DistortionLoss on the CPU: the TensorFlow kernels of MetalOpsDistortionLoss /
// MetalOpsDistortionLossGrad (the kernel classes of distortion_loss.h over the
// CPU functor below) and XLA's host handlers of the same functor, for the calls
// distortion_loss_xla.cc emits. The functor runs the context's pool, one ray
// per work item, O(S) per ray, or the op's Metal plans where
// kernels/cpu/metal_offload.h sends the call. The arithmetic is
// distortion_loss.h's.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // distortion_loss.h's kernel classes
#include "kernels/distortion_loss/distortion_loss.h"

namespace mo {
namespace distortion_loss_cpu {

// The error naming the first ray whose t decreases (NaN counts).
inline absl::Status CheckSorted(const cpu::Context& ctx, const float* t, int64_t rays, int64_t samples) {
  std::atomic<int64_t> first_bad(rays);
  cpu::ParallelFor(ctx, rays, 4 * (samples + 1), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end && r < first_bad.load(std::memory_order_relaxed); ++r) {
      if (dl_first_decrease(t + r * (samples + 1), samples) >= 0) {
        int64_t cur = first_bad.load();
        while (r < cur && !first_bad.compare_exchange_weak(cur, r)) {
        }
        return;
      }
    }
  });
  const int64_t r = first_bad.load();
  if (r == rays) return absl::OkStatus();
  return checks::ToStatus(distortion_loss::RaySorted(t + r * (samples + 1), r, samples));
}

// The bytes of w [R, S], t [R, S + 1] and a per-ray value [R].
struct Bytes {
  Bytes(int64_t rays, int64_t samples)
      : w(static_cast<uint64_t>(rays * samples) * sizeof(float)),
        t(static_cast<uint64_t>(rays * (samples + 1)) * sizeof(float)),
        ray(static_cast<uint64_t>(rays) * sizeof(float)) {}
  uint64_t w, t, ray;
};

// One pass over the rays once t is checked sorted: Metal's plan build() on
// `slots`, or ray(r) for every ray on the CPU, `cycles` a sample.
template <typename BuildPlan, typename Ray>
absl::Status Pass(const cpu::Context& ctx, const float* t, int64_t rays, int64_t samples, const BuildPlan& build,
                  std::initializer_list<metal_plan::HostTensor> slots, int cycles, const Ray& ray) {
  TF_RETURN_IF_ERROR(CheckSorted(ctx, t, rays, samples));
  return cpu::MetalOrCpu(
      ctx, [&](const cpu::MetalRoute& metal) { return metal.Run(rays * (samples + 1), build, slots); },
      [&] {
        cpu::ParallelFor(ctx, rays, cycles * (samples + 1), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) ray(r);
        });
      });
}

}  // namespace distortion_loss_cpu

template <>
struct DistortionLossFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Forward(cpu::Context ctx, const float* w, const float* t, int64_t rays, int64_t samples,
                              float* loss) {
    const distortion_loss_cpu::Bytes b(rays, samples);
    return distortion_loss_cpu::Pass(
        ctx, t, rays, samples, [&] { return metal_plan::DistortionLossForward(rays, samples); },
        {cpu::Slot(w, b.w), cpu::Slot(t, b.t), cpu::Slot(loss, b.ray)}, 12,
        [&](int64_t r) { loss[r] = distortion_loss_ray(w + r * samples, t + r * (samples + 1), samples); });
  }

  static absl::Status Backward(cpu::Context ctx, const float* grad, const float* w, const float* t, int64_t rays,
                               int64_t samples, float* grad_w, float* grad_t) {
    const distortion_loss_cpu::Bytes b(rays, samples);
    return distortion_loss_cpu::Pass(
        ctx, t, rays, samples, [&] { return metal_plan::DistortionLossBackward(rays, samples); },
        {cpu::Slot(grad, b.ray), cpu::Slot(w, b.w), cpu::Slot(t, b.t), cpu::Slot(grad_w, b.w), cpu::Slot(grad_t, b.t)},
        30, [&](int64_t r) {
          distortion_loss_grad_ray(grad[r], w + r * samples, t + r * (samples + 1), samples, grad_w + r * samples,
                                   grad_t + r * (samples + 1));
        });
  }
};

}  // namespace mo

MO_REGISTER_DISTORTION_LOSS(DEVICE_CPU, ::Eigen::ThreadPoolDevice);

#if MO_XLA
// XLA's host handlers of the same functor (no attribute).
namespace mo::xla_kernels {
namespace {

using Functor = DistortionLossFunctor<Eigen::ThreadPoolDevice>;

ffi::Error Forward(ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> t, ffi::ResultBuffer<ffi::F32> loss) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return xla_ffi::ToError(Functor::Forward(HostContext(), w.typed_data(), t.typed_data(), rays, samples,
                                           loss->typed_data()));
}

ffi::Error Backward(ffi::Buffer<ffi::F32> grad, ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> t,
                    ffi::ResultBuffer<ffi::F32> grad_w, ffi::ResultBuffer<ffi::F32> grad_t) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return xla_ffi::ToError(Functor::Backward(HostContext(), grad.typed_data(), w.typed_data(), t.typed_data(), rays,
                                            samples, grad_w->typed_data(), grad_t->typed_data()));
}

MO_XLA_FFI_HANDLER("MetalOpsDistortionLoss", "Host", Forward, xla_ffi::BindBuffers<2, 1, ffi::Buffer<ffi::F32>>());
MO_XLA_FFI_HANDLER("MetalOpsDistortionLossGrad", "Host", Backward, xla_ffi::BindBuffers<3, 2, ffi::Buffer<ffi::F32>>());

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
