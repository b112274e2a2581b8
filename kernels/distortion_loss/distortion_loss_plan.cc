// DistortionLoss's Metal plan (kernels/distortion_loss/distortion_loss_plan.h).
#include "kernels/distortion_loss/distortion_loss_plan.h"

#include "kernels/distortion_loss/distortion_loss.h"

namespace mo::metal_plan {

Plan DistortionLossForward(int64_t rays, int64_t samples) {
  if (rays == 0) return PlanBuilder(kDistortionLossSlots).Finish();
  return OnePass(kDistortionLossSlots, "distortion_loss", "distortion_loss_forward", static_cast<uint64_t>(rays),
                 {{kDistortionLossW, kDistortionLossSlotW}, {kDistortionLossT, kDistortionLossSlotT}},
                 {{kDistortionLossLoss, kDistortionLossSlotLoss}}, kDistortionLossParams,
                 DistortionLossParams{rays, samples});
}

Plan DistortionLossBackward(int64_t rays, int64_t samples) {
  if (rays == 0) return PlanBuilder(kDistortionLossGradSlots).Finish();
  return OnePass(kDistortionLossGradSlots, "distortion_loss", "distortion_loss_backward", static_cast<uint64_t>(rays),
                 {{kDistortionLossGradGrad, kDistortionLossGradSlotGrad},
                  {kDistortionLossGradW, kDistortionLossGradSlotW},
                  {kDistortionLossGradT, kDistortionLossGradSlotT}},
                 {{kDistortionLossGradDw, kDistortionLossGradSlotDw},
                  {kDistortionLossGradDt, kDistortionLossGradSlotDt}},
                 kDistortionLossGradParams, DistortionLossParams{rays, samples});
}

}  // namespace mo::metal_plan
