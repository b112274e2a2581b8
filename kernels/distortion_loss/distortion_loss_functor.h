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

}  // namespace distortion_loss_cpu

template <>
struct DistortionLossFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Forward(cpu::Context ctx, const float* w, const float* t, int64_t rays, int64_t samples,
                              float* loss) {
    TF_RETURN_IF_ERROR(distortion_loss_cpu::CheckSorted(ctx, t, rays, samples));
    const uint64_t w_bytes = static_cast<uint64_t>(rays * samples) * sizeof(float);
    const uint64_t t_bytes = static_cast<uint64_t>(rays * (samples + 1)) * sizeof(float);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(rays * (samples + 1), [&] { return metal_plan::DistortionLossForward(rays, samples); },
                           {cpu::Slot(w, w_bytes), cpu::Slot(t, t_bytes), cpu::Slot(loss, rays * sizeof(float))});
        },
        [&] {
          cpu::ParallelFor(ctx, rays, 12 * (samples + 1), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              loss[r] = distortion_loss_ray(w + r * samples, t + r * (samples + 1), samples);
            }
          });
        });
  }

  static absl::Status Backward(cpu::Context ctx, const float* grad, const float* w, const float* t, int64_t rays,
                               int64_t samples, float* grad_w, float* grad_t) {
    TF_RETURN_IF_ERROR(distortion_loss_cpu::CheckSorted(ctx, t, rays, samples));
    const uint64_t w_bytes = static_cast<uint64_t>(rays * samples) * sizeof(float);
    const uint64_t t_bytes = static_cast<uint64_t>(rays * (samples + 1)) * sizeof(float);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(rays * (samples + 1), [&] { return metal_plan::DistortionLossBackward(rays, samples); },
                           {cpu::Slot(grad, rays * sizeof(float)), cpu::Slot(w, w_bytes), cpu::Slot(t, t_bytes),
                            cpu::Slot(grad_w, w_bytes), cpu::Slot(grad_t, t_bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, rays, 30 * (samples + 1), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              distortion_loss_grad_ray(grad[r], w + r * samples, t + r * (samples + 1), samples, grad_w + r * samples,
                                       grad_t + r * (samples + 1));
            }
          });
        });
  }
};

}  // namespace mo

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_FUNCTOR_H_
