// DistortionLoss's Metal plan: which shader, which tensor slot at which of its
// named buffer indices (kernels/distortion_loss/distortion_loss.h), how many threads, which
// zero-fills. Built from shapes and attributes only; every Metal path runs it
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_PLAN_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_PLAN_H_

#include "kernels/metal_plan/plan.h"  // Plan, Dtype, <cstdint>

namespace mo::metal_plan {

// DistortionLoss (float32): forward slots {weights, t, loss}, backward {grad,
// weights, t, grad_weights, grad_t}; rays > 0, one thread per ray.
enum DistortionLossSlots { kDistortionLossSlotW, kDistortionLossSlotT, kDistortionLossSlotLoss, kDistortionLossSlots };
enum DistortionLossGradSlots {
  kDistortionLossGradSlotGrad,
  kDistortionLossGradSlotW,
  kDistortionLossGradSlotT,
  kDistortionLossGradSlotDw,
  kDistortionLossGradSlotDt,
  kDistortionLossGradSlots
};
Plan DistortionLossForward(int64_t rays, int64_t samples);
Plan DistortionLossBackward(int64_t rays, int64_t samples);

}  // namespace mo::metal_plan

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_PLAN_H_
