// The CPU functor of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad, run
// by the TensorFlow kernels (kernels/distortion_loss/distortion_loss_kernels.cc, kernel
// class kernels/distortion_loss/distortion_loss_kernel.h) and the XLA host handler
// (kernels/distortion_loss/distortion_loss_xla.cc): the context's pool, one ray per work
// item, O(S) per ray, or the op's Metal plans where kernels/cpu/metal_offload.h
// sends the call. The arithmetic is kernels/distortion_loss/distortion_loss.h.
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_FUNCTOR_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_FUNCTOR_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "kernels/distortion_loss/distortion_loss.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/distortion_loss/distortion_loss_kernel.h"
#include "kernels/distortion_loss/distortion_loss_plan.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/distortion_loss/distortion_loss_spec.h"

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

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_FUNCTOR_H_
