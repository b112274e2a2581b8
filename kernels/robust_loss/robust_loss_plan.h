// RobustLoss's Metal plan: which shader, which tensor slot at which of its
// named buffer indices (kernels/robust_loss/robust_loss.h), how many threads, which
// zero-fills. Built from shapes and attributes only; every Metal path runs it
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_PLAN_H_
#define MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_PLAN_H_

#include "kernels/metal_plan/plan.h"  // Plan, Dtype, <cstdint>

namespace mo::metal_plan {

// RobustLoss: forward slots {x, alpha, scale, loss}; backward {grad, x, alpha,
// scale, dx, dalpha, dscale}. n elements (the backward zero-fills dalpha and
// dscale, float32 tensors of alpha_count / scale_count elements, also when n == 0).
enum RobustLossSlots { kRobustLossSlotX, kRobustLossSlotAlpha, kRobustLossSlotScale, kRobustLossSlotOut, kRobustLossSlots };
enum RobustLossGradSlots {
  kRobustLossGradSlotGrad,
  kRobustLossGradSlotX,
  kRobustLossGradSlotAlpha,
  kRobustLossGradSlotScale,
  kRobustLossGradSlotDx,
  kRobustLossGradSlotDalpha,
  kRobustLossGradSlotDscale,
  kRobustLossGradSlots
};
struct RobustLossLayout {
  int64_t num_elements;
  int64_t channels;     // kernels/robust_loss/robust_loss_spec.h ParamShapes
  bool alpha_vec;
  bool scale_vec;
};
Plan RobustLossForward(Dtype dtype, const RobustLossLayout& layout);
// The backward's grid: threads loop over rows; the cap bounds the number of atomics.
constexpr uint64_t kRobustLossMaxGradThreads = uint64_t(1) << 16;
Plan RobustLossBackward(Dtype dtype, const RobustLossLayout& layout, int64_t alpha_count, int64_t scale_count);

}  // namespace mo::metal_plan

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_PLAN_H_
