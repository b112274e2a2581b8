// PackedVolumeRender's Metal plans (float32; shaders:
// kernels/packed_volume_render/packed_volume_render.metal, buffer indices
// kernels/packed_volume_render/packed_volume_render.h). Each plan first runs the two
// validation passes, which leave the first invalid ray's check in the
// `check` slot (a PvrCheckResult the caller reads once the plan has run:
// packed_volume_render::BadCheck gives the op's error), then zero-fills the
// per-sample outputs and renders, one thread per ray. Every Metal path runs
// them (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_PLAN_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_PLAN_H_

#include <cstdint>

#include "kernels/metal_plan/plan.h"
#include "kernels/volume_render/volume_render_plan.h"

namespace mo {
namespace metal_plan {

// The op's seven inputs, its four outputs (weights [N] when written, else
// empty), the check result.
enum PackedVolumeRenderSlots {
  kPvrSlotSigma,
  kPvrSlotRgb,
  kPvrSlotTStarts,
  kPvrSlotTEnds,
  kPvrSlotOffsets,
  kPvrSlotCounts,
  kPvrSlotBackground,
  kPvrSlotOutRgb,
  kPvrSlotDepth,
  kPvrSlotOpacity,
  kPvrSlotWeights,
  kPvrSlotCheck,
  kPvrSlots
};
// The backward's fifteen inputs (weights and grad_weights empty without a
// weights gradient), its three outputs, the check result.
enum PackedVolumeRenderGradSlots {
  kPvrGradSlotSigma,
  kPvrGradSlotRgb,
  kPvrGradSlotTStarts,
  kPvrGradSlotTEnds,
  kPvrGradSlotOffsets,
  kPvrGradSlotCounts,
  kPvrGradSlotBackground,
  kPvrGradSlotOutRgb,
  kPvrGradSlotDepth,
  kPvrGradSlotOpacity,
  kPvrGradSlotWeights,
  kPvrGradSlotGradRgb,
  kPvrGradSlotGradDepth,
  kPvrGradSlotGradOpacity,
  kPvrGradSlotGradWeights,
  kPvrGradSlotGradSigma,
  kPvrGradSlotGradSamplesRgb,
  kPvrGradSlotGradBackground,
  kPvrGradSlotCheck,
  kPvrGradSlots
};

// Threads of the first validation pass (PvrCheckParams).
constexpr int32_t kPvrCheckThreads = 1024;

// VolumeRender's layout, with samples = N (all rays' samples).
using PackedVolumeRenderLayout = VolumeRenderLayout;
Plan PackedVolumeRenderForward(const PackedVolumeRenderLayout& layout, bool write_weights);
Plan PackedVolumeRenderBackward(const PackedVolumeRenderLayout& layout, bool has_weight_grad);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_PLAN_H_
