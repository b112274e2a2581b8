// The Metal plans of the element-wise ops (ZeroOut, TruncExp, SHEncode,
// RobustLoss): which shader, which tensor slot at which of its named buffer
// indices (kernels/common/<op>.h), how many threads, which zero-fills. Built
// from shapes and attributes only; every Metal path runs them
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_METAL_PLAN_SIMPLE_PLANS_H_
#define MO_KERNELS_METAL_PLAN_SIMPLE_PLANS_H_

#include <cstdint>

#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// ZeroOut: slots {input, output}; n > 0 elements.
enum ZeroOutSlots { kZeroOutInput, kZeroOutOutput, kZeroOutSlots };
Plan ZeroOut(Dtype dtype, int64_t n, int64_t preserve_index);

// TruncExp: forward slots {x, y}, backward {dy, x, dx}; n > 0 elements.
enum TruncExpSlots { kTruncExpSlotX, kTruncExpSlotY, kTruncExpSlots };
enum TruncExpGradSlots { kTruncExpGradSlotDy, kTruncExpGradSlotX, kTruncExpGradSlotDx, kTruncExpGradSlots };
Plan TruncExpForward(Dtype dtype, int64_t n);
Plan TruncExpBackward(Dtype dtype, int64_t n);

// SHEncode: forward slots {dirs, values}, backward {grad, dirs, grad_dirs};
// n > 0 directions, degree in 1..4.
enum SHEncodeSlots { kSHEncodeSlotDirs, kSHEncodeSlotValues, kSHEncodeSlots };
enum SHEncodeGradSlots { kSHEncodeGradSlotGrad, kSHEncodeGradSlotDirs, kSHEncodeGradSlotOut, kSHEncodeGradSlots };
Plan SHEncodeForward(Dtype dtype, int64_t n, int degree);
Plan SHEncodeBackward(Dtype dtype, int64_t n, int degree);

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
  int64_t channels;     // kernels/spec/robust_loss_spec.h ParamShapes
  bool alpha_vec;
  bool scale_vec;
};
Plan RobustLossForward(Dtype dtype, const RobustLossLayout& layout);
// The backward's grid: threads loop over rows; the cap bounds the number of atomics.
constexpr uint64_t kRobustLossMaxGradThreads = uint64_t(1) << 16;
Plan RobustLossBackward(Dtype dtype, const RobustLossLayout& layout, int64_t alpha_count, int64_t scale_count);

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

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_METAL_PLAN_SIMPLE_PLANS_H_
