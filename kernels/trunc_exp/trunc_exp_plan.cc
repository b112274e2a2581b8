// TruncExp's Metal plan (kernels/trunc_exp/trunc_exp_plan.h).
#include "kernels/trunc_exp/trunc_exp_plan.h"

#include <string>

#include "kernels/trunc_exp/trunc_exp.h"

namespace mo::metal_plan {

Plan TruncExpForward(Dtype dtype, int64_t n) {
  return OnePass(kTruncExpSlots, "trunc_exp", std::string("trunc_exp_forward_") + DtypeSuffix(dtype),
                 static_cast<uint64_t>(n), {{kTruncExpX, kTruncExpSlotX}}, {{kTruncExpY, kTruncExpSlotY}},
                 kTruncExpParams, TruncExpParams{n});
}

Plan TruncExpBackward(Dtype dtype, int64_t n) {
  return OnePass(kTruncExpGradSlots, "trunc_exp", std::string("trunc_exp_backward_") + DtypeSuffix(dtype),
                 static_cast<uint64_t>(n),
                 {{kTruncExpGradDy, kTruncExpGradSlotDy}, {kTruncExpGradX, kTruncExpGradSlotX}},
                 {{kTruncExpGradDx, kTruncExpGradSlotDx}}, kTruncExpGradParams, TruncExpParams{n});
}

}  // namespace mo::metal_plan
