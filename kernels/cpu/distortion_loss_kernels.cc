// The CPU functor of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad (the
// kernel class is kernels/distortion_loss_kernel.h): TF's intra-op thread pool,
// one ray per work item, O(S) per ray. The arithmetic is
// kernels/common/distortion_loss.h.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <atomic>
#include <cstdint>

#include "kernels/common/distortion_loss.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/distortion_loss_kernel.h"
#include "kernels/metal_plan/simple_plans.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/distortion_loss_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

using ::tensorflow::OpKernelContext;

// The error naming the first ray whose t decreases (NaN counts).
absl::Status CheckSorted(OpKernelContext* ctx, const float* t, int64_t rays, int64_t samples) {
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

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <>
struct DistortionLossFunctor<CPUDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const float* w, const float* t, int64_t rays, int64_t samples,
                              float* loss) {
    TF_RETURN_IF_ERROR(CheckSorted(ctx, t, rays, samples));
    absl::Status status;
    const uint64_t w_bytes = static_cast<uint64_t>(rays * samples) * sizeof(float);
    const uint64_t t_bytes = static_cast<uint64_t>(rays * (samples + 1)) * sizeof(float);
    if (cpu::RunOnMetal(ctx, rays * (samples + 1), [&] { return metal_plan::DistortionLossForward(rays, samples); },
                        {cpu::Slot(w, w_bytes), cpu::Slot(t, t_bytes), cpu::Slot(loss, rays * sizeof(float))},
                        &status)) {
      return status;
    }
    cpu::ParallelFor(ctx, rays, 12 * (samples + 1), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        loss[r] = distortion_loss_ray(w + r * samples, t + r * (samples + 1), samples);
      }
    });
    return absl::OkStatus();
  }

  static absl::Status Backward(OpKernelContext* ctx, const float* grad, const float* w, const float* t, int64_t rays,
                               int64_t samples, float* grad_w, float* grad_t) {
    TF_RETURN_IF_ERROR(CheckSorted(ctx, t, rays, samples));
    absl::Status status;
    const uint64_t w_bytes = static_cast<uint64_t>(rays * samples) * sizeof(float);
    const uint64_t t_bytes = static_cast<uint64_t>(rays * (samples + 1)) * sizeof(float);
    if (cpu::RunOnMetal(ctx, rays * (samples + 1), [&] { return metal_plan::DistortionLossBackward(rays, samples); },
                        {cpu::Slot(grad, rays * sizeof(float)), cpu::Slot(w, w_bytes), cpu::Slot(t, t_bytes),
                         cpu::Slot(grad_w, w_bytes), cpu::Slot(grad_t, t_bytes)},
                        &status)) {
      return status;
    }
    cpu::ParallelFor(ctx, rays, 30 * (samples + 1), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        distortion_loss_grad_ray(grad[r], w + r * samples, t + r * (samples + 1), samples, grad_w + r * samples,
                                 grad_t + r * (samples + 1));
      }
    });
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossGradOp<CPUDevice>);

}  // namespace mo
