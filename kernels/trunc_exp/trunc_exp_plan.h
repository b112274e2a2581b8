// TruncExp's Metal plan: which shader, which tensor slot at which of its
// named buffer indices (kernels/trunc_exp/trunc_exp.h), how many threads, which
// zero-fills. Built from shapes and attributes only; every Metal path runs it
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_PLAN_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_PLAN_H_

#include "kernels/metal_plan/plan.h"  // Plan, Dtype, <cstdint>

namespace mo::metal_plan {

// TruncExp: forward slots {x, y}, backward {dy, x, dx}; n > 0 elements.
enum TruncExpSlots { kTruncExpSlotX, kTruncExpSlotY, kTruncExpSlots };
enum TruncExpGradSlots { kTruncExpGradSlotDy, kTruncExpGradSlotX, kTruncExpGradSlotDx, kTruncExpGradSlots };
Plan TruncExpForward(Dtype dtype, int64_t n);
Plan TruncExpBackward(Dtype dtype, int64_t n);

}  // namespace mo::metal_plan

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_PLAN_H_
