// ZeroOut's Metal plan: which shader, which tensor slot at which of its
// named buffer indices (kernels/zero_out/zero_out.h), how many threads, which
// zero-fills. Built from shapes and attributes only; every Metal path runs it
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_PLAN_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_PLAN_H_

#include "kernels/metal_plan/plan.h"  // Plan, Dtype, <cstdint>

namespace mo::metal_plan {

// ZeroOut: slots {input, output}; n > 0 elements.
enum ZeroOutSlots { kZeroOutInput, kZeroOutOutput, kZeroOutSlots };
Plan ZeroOut(Dtype dtype, int64_t n, int64_t preserve_index);

}  // namespace mo::metal_plan

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_PLAN_H_
