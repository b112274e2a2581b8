// RobustLoss's Metal plan (kernels/robust_loss/robust_loss_plan.h).
#include "kernels/robust_loss/robust_loss_plan.h"

#include <string>

#include "kernels/robust_loss/robust_loss.h"

namespace mo::metal_plan {

namespace {
RobustLossParams RobustParams(const RobustLossLayout& layout) {
  RobustLossParams p = {};
  p.num_elements = layout.num_elements;
  p.channels = layout.channels;
  p.rows = layout.channels > 0 ? layout.num_elements / layout.channels : 0;
  p.alpha_vec = layout.alpha_vec ? 1 : 0;
  p.scale_vec = layout.scale_vec ? 1 : 0;
  return p;
}
}  // namespace

Plan RobustLossForward(Dtype dtype, const RobustLossLayout& layout) {
  if (layout.num_elements == 0) return PlanBuilder(kRobustLossSlots).Finish();
  return OnePass(kRobustLossSlots, "robust_loss", std::string("robust_loss_forward_") + DtypeSuffix(dtype),
                 static_cast<uint64_t>(layout.num_elements),
                 {{kRobustLossX, kRobustLossSlotX}, {kRobustLossAlpha, kRobustLossSlotAlpha},
                  {kRobustLossScale, kRobustLossSlotScale}},
                 {{kRobustLossOut, kRobustLossSlotOut}}, kRobustLossParams, RobustParams(layout));
}

Plan RobustLossBackward(Dtype dtype, const RobustLossLayout& layout, int64_t alpha_count, int64_t scale_count) {
  PlanBuilder b(kRobustLossGradSlots);
  // The shader adds each thread's sums to dalpha / dscale with atomics: zero
  // them first (also when x is empty, so the gradients are zeros).
  b.Zero(kRobustLossGradSlotDalpha, static_cast<uint64_t>(alpha_count) * sizeof(float));
  b.Zero(kRobustLossGradSlotDscale, static_cast<uint64_t>(scale_count) * sizeof(float));
  const int64_t n = layout.num_elements;
  if (n == 0) return b.Finish();
  b.OrderDependent();  // dalpha / dscale: float atomics
  const uint64_t threads = static_cast<uint64_t>(n) < kRobustLossMaxGradThreads ? static_cast<uint64_t>(n)
                                                                                : kRobustLossMaxGradThreads;
  b.Threads("robust_loss", std::string("robust_loss_backward_") + DtypeSuffix(dtype), threads)
      .Tensors({{kRobustLossGradGrad, kRobustLossGradSlotGrad}, {kRobustLossGradX, kRobustLossGradSlotX},
                {kRobustLossGradAlpha, kRobustLossGradSlotAlpha}, {kRobustLossGradScale, kRobustLossGradSlotScale}},
               {{kRobustLossGradDx, kRobustLossGradSlotDx}, {kRobustLossGradDalpha, kRobustLossGradSlotDalpha},
                {kRobustLossGradDscale, kRobustLossGradSlotDscale}})
      .Value(kRobustLossGradParams, RobustParams(layout));
  return b.Finish();
}

}  // namespace mo::metal_plan
