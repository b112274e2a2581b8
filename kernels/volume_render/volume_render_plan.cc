// VolumeRender's Metal plans (kernels/volume_render/volume_render_plan.h).
#include "kernels/volume_render/volume_render_plan.h"

#include "kernels/volume_render/volume_render.h"

namespace mo {
namespace metal_plan {

Plan VolumeRenderForward(const VolumeRenderLayout& layout, bool write_weights) {
  const VolumeRenderParams params = make_volume_render_params(
      layout.rays, layout.samples, layout.early_termination, layout.background_per_ray, write_weights, false);
  return OnePass(kVrSlots, "volume_render", "volume_render_forward_float32", static_cast<uint64_t>(layout.rays),
                 {{kVrForwardSigma, kVrSlotSigma}, {kVrForwardRgb, kVrSlotRgb}, {kVrForwardT, kVrSlotT},
                  {kVrForwardBackground, kVrSlotBackground}},
                 {{kVrForwardOutRgb, kVrSlotOutRgb}, {kVrForwardDepth, kVrSlotDepth},
                  {kVrForwardOpacity, kVrSlotOpacity}, {kVrForwardWeights, kVrSlotWeights}},
                 kVrForwardParams, params);
}

Plan VolumeRenderBackward(const VolumeRenderLayout& layout, bool has_weight_grad) {
  const VolumeRenderParams params = make_volume_render_params(
      layout.rays, layout.samples, layout.early_termination, layout.background_per_ray, false, has_weight_grad);
  return OnePass(kVrGradSlots, "volume_render", "volume_render_backward_float32", static_cast<uint64_t>(layout.rays),
                 {{kVrBackwardSigma, kVrGradSlotSigma}, {kVrBackwardRgb, kVrGradSlotRgb},
                  {kVrBackwardT, kVrGradSlotT}, {kVrBackwardBackground, kVrGradSlotBackground},
                  {kVrBackwardOutRgb, kVrGradSlotOutRgb}, {kVrBackwardDepth, kVrGradSlotDepth},
                  {kVrBackwardOpacity, kVrGradSlotOpacity}, {kVrBackwardWeights, kVrGradSlotWeights},
                  {kVrBackwardGradRgb, kVrGradSlotGradRgb}, {kVrBackwardGradDepth, kVrGradSlotGradDepth},
                  {kVrBackwardGradOpacity, kVrGradSlotGradOpacity}, {kVrBackwardGradWeights, kVrGradSlotGradWeights}},
                 {{kVrBackwardGradSigma, kVrGradSlotGradSigma}, {kVrBackwardGradSamplesRgb, kVrGradSlotGradSamplesRgb},
                  {kVrBackwardGradBackground, kVrGradSlotGradBackground}},
                 kVrBackwardParams, params);
}

}  // namespace metal_plan
}  // namespace mo
