// VolumeRender's Metal plans (kernels/metal_plan/volume_render_plan.h).
#include "kernels/metal_plan/volume_render_plan.h"

#include "kernels/common/volume_render.h"

namespace mo {
namespace metal_plan {

Plan VolumeRenderForward(const VolumeRenderLayout& layout, bool write_weights) {
  const VolumeRenderParams params = make_volume_render_params(
      layout.rays, layout.samples, layout.early_termination, layout.background_per_ray, write_weights, false);
  PlanBuilder b(kVrSlots);
  b.Threads("volume_render", "volume_render_forward_float32", static_cast<uint64_t>(layout.rays))
      .Tensor(kVrForwardSigma, kVrSlotSigma)
      .Tensor(kVrForwardRgb, kVrSlotRgb)
      .Tensor(kVrForwardT, kVrSlotT)
      .Tensor(kVrForwardBackground, kVrSlotBackground)
      .Output(kVrForwardOutRgb, kVrSlotOutRgb)
      .Output(kVrForwardDepth, kVrSlotDepth)
      .Output(kVrForwardOpacity, kVrSlotOpacity)
      .Output(kVrForwardWeights, kVrSlotWeights)
      .Value(kVrForwardParams, params);
  return b.Finish();
}

Plan VolumeRenderBackward(const VolumeRenderLayout& layout, bool has_weight_grad) {
  const VolumeRenderParams params = make_volume_render_params(
      layout.rays, layout.samples, layout.early_termination, layout.background_per_ray, false, has_weight_grad);
  PlanBuilder b(kVrGradSlots);
  b.Threads("volume_render", "volume_render_backward_float32", static_cast<uint64_t>(layout.rays))
      .Tensor(kVrBackwardSigma, kVrGradSlotSigma)
      .Tensor(kVrBackwardRgb, kVrGradSlotRgb)
      .Tensor(kVrBackwardT, kVrGradSlotT)
      .Tensor(kVrBackwardBackground, kVrGradSlotBackground)
      .Tensor(kVrBackwardOutRgb, kVrGradSlotOutRgb)
      .Tensor(kVrBackwardDepth, kVrGradSlotDepth)
      .Tensor(kVrBackwardOpacity, kVrGradSlotOpacity)
      .Tensor(kVrBackwardWeights, kVrGradSlotWeights)
      .Tensor(kVrBackwardGradRgb, kVrGradSlotGradRgb)
      .Tensor(kVrBackwardGradDepth, kVrGradSlotGradDepth)
      .Tensor(kVrBackwardGradOpacity, kVrGradSlotGradOpacity)
      .Tensor(kVrBackwardGradWeights, kVrGradSlotGradWeights)
      .Output(kVrBackwardGradSigma, kVrGradSlotGradSigma)
      .Output(kVrBackwardGradSamplesRgb, kVrGradSlotGradSamplesRgb)
      .Output(kVrBackwardGradBackground, kVrGradSlotGradBackground)
      .Value(kVrBackwardParams, params);
  return b.Finish();
}

}  // namespace metal_plan
}  // namespace mo
