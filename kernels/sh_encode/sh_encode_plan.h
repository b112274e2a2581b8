// SHEncode's Metal plan: which shader, which tensor slot at which of its
// named buffer indices (kernels/sh_encode/sh_encode.h), how many threads, which
// zero-fills. Built from shapes and attributes only; every Metal path runs it
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_SH_ENCODE_SH_ENCODE_PLAN_H_
#define MO_KERNELS_SH_ENCODE_SH_ENCODE_PLAN_H_

#include "kernels/metal_plan/plan.h"  // Plan, Dtype, <cstdint>

namespace mo::metal_plan {

// SHEncode: forward slots {dirs, values}, backward {grad, dirs, grad_dirs};
// n > 0 directions, degree in 1..4.
enum SHEncodeSlots { kSHEncodeSlotDirs, kSHEncodeSlotValues, kSHEncodeSlots };
enum SHEncodeGradSlots { kSHEncodeGradSlotGrad, kSHEncodeGradSlotDirs, kSHEncodeGradSlotOut, kSHEncodeGradSlots };
Plan SHEncodeForward(Dtype dtype, int64_t n, int degree);
Plan SHEncodeBackward(Dtype dtype, int64_t n, int degree);

}  // namespace mo::metal_plan

#endif  // MO_KERNELS_SH_ENCODE_SH_ENCODE_PLAN_H_
