// VolumeRender's Metal plans (float32; shaders: kernels/volume_render/volume_render.metal,
// one thread per ray): which tensor slot at which named buffer index
// (kernels/volume_render/volume_render.h), how many threads. Every Metal path runs
// them (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_PLAN_H_
#define MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_PLAN_H_

#include <cstdint>

#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// The op's inputs then its outputs, in the op's order. weights is [R, S] when
// written, else empty.
enum VolumeRenderSlots {
  kVrSlotSigma,
  kVrSlotRgb,
  kVrSlotT,
  kVrSlotBackground,
  kVrSlotOutRgb,
  kVrSlotDepth,
  kVrSlotOpacity,
  kVrSlotWeights,
  kVrSlots
};
// The backward's twelve inputs (weights and grad_weights empty without a
// weights gradient), then grad_sigma, grad_samples_rgb, grad_background.
enum VolumeRenderGradSlots {
  kVrGradSlotSigma,
  kVrGradSlotRgb,
  kVrGradSlotT,
  kVrGradSlotBackground,
  kVrGradSlotOutRgb,
  kVrGradSlotDepth,
  kVrGradSlotOpacity,
  kVrGradSlotWeights,
  kVrGradSlotGradRgb,
  kVrGradSlotGradDepth,
  kVrGradSlotGradOpacity,
  kVrGradSlotGradWeights,
  kVrGradSlotGradSigma,
  kVrGradSlotGradSamplesRgb,
  kVrGradSlotGradBackground,
  kVrGradSlots
};

// The rays of a render (PackedVolumeRender's too: PackedVolumeRenderLayout).
struct VolumeRenderLayout {
  int64_t rays;     // > 0
  int64_t samples;  // per ray (S); PackedVolumeRender: in all (N)
  float early_termination;
  bool background_per_ray;
};
Plan VolumeRenderForward(const VolumeRenderLayout& layout, bool write_weights);
Plan VolumeRenderBackward(const VolumeRenderLayout& layout, bool has_weight_grad);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_PLAN_H_
