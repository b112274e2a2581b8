// PackedVolumeRender's Metal plans (kernels/packed_volume_render/packed_volume_render_plan.h).
#include "kernels/packed_volume_render/packed_volume_render_plan.h"

#include "kernels/packed_volume_render/packed_volume_render.h"

namespace mo {
namespace metal_plan {
namespace {

// The two validation passes over the slots of the layout and sample tensors.
void Check(PlanBuilder& b, const PackedVolumeRenderLayout& layout, bool check_samples, int offsets, int counts,
           int sigma, int t_starts, int t_ends, int result) {
  const PvrCheckParams q = pvr_check_params(layout.rays, layout.samples, kPvrCheckThreads, check_samples);
  const int firsts = b.NewScratch(uint64_t(q.chunks) * sizeof(int64));
  const std::initializer_list<Arg> reads = {{kPvrCheckRayOffsets, offsets}, {kPvrCheckRayCounts, counts},
                                            {kPvrCheckSigma, sigma}, {kPvrCheckTStarts, t_starts},
                                            {kPvrCheckTEnds, t_ends}};
  b.Threads("packed_volume_render", "packed_volume_render_check_chunks", uint64_t(q.chunks))
      .Tensors(reads, {})
      .Scratch(kPvrCheckFirsts, firsts)
      .Value(kPvrCheckParams, q);
  b.Threads("packed_volume_render", "packed_volume_render_check_first", 1)
      .Tensors(reads, {})
      .Scratch(kPvrCheckFirsts, firsts)
      .Output(kPvrCheckResult, result)
      .Value(kPvrCheckParams, q);
}

}  // namespace

Plan PackedVolumeRenderForward(const PackedVolumeRenderLayout& layout, bool write_weights) {
  const VolumeRenderParams params = make_volume_render_params(
      layout.rays, layout.samples, layout.early_termination, layout.background_per_ray, write_weights, false);
  PlanBuilder b(kPvrSlots);
  Check(b, layout, true, kPvrSlotOffsets, kPvrSlotCounts, kPvrSlotSigma, kPvrSlotTStarts, kPvrSlotTEnds,
        kPvrSlotCheck);
  // Samples that no valid ray owns (only under an invalid layout) hold 0.
  if (write_weights) b.Zero(kPvrSlotWeights, uint64_t(layout.samples) * sizeof(float));
  b.Threads("packed_volume_render", "packed_volume_render_forward_float32", uint64_t(layout.rays))
      .Tensors({{kPvrForwardSigma, kPvrSlotSigma}, {kPvrForwardRgb, kPvrSlotRgb},
                {kPvrForwardTStarts, kPvrSlotTStarts}, {kPvrForwardTEnds, kPvrSlotTEnds},
                {kPvrForwardRayOffsets, kPvrSlotOffsets}, {kPvrForwardRayCounts, kPvrSlotCounts},
                {kPvrForwardBackground, kPvrSlotBackground}},
               {{kPvrForwardOutRgb, kPvrSlotOutRgb}, {kPvrForwardDepth, kPvrSlotDepth},
                {kPvrForwardOpacity, kPvrSlotOpacity}, {kPvrForwardWeights, kPvrSlotWeights}})
      .Value(kPvrForwardParams, params);
  return b.Finish();
}

Plan PackedVolumeRenderBackward(const PackedVolumeRenderLayout& layout, bool has_weight_grad) {
  const VolumeRenderParams params = make_volume_render_params(
      layout.rays, layout.samples, layout.early_termination, layout.background_per_ray, false, has_weight_grad);
  PlanBuilder b(kPvrGradSlots);
  Check(b, layout, false, kPvrGradSlotOffsets, kPvrGradSlotCounts, kPvrGradSlotSigma, kPvrGradSlotTStarts,
        kPvrGradSlotTEnds, kPvrGradSlotCheck);
  const uint64_t n = uint64_t(layout.samples);
  b.Zero(kPvrGradSlotGradSigma, n * sizeof(float)).Zero(kPvrGradSlotGradSamplesRgb, n * 3 * sizeof(float));
  b.Threads("packed_volume_render", "packed_volume_render_backward_float32", uint64_t(layout.rays))
      .Tensors({{kPvrBackwardSigma, kPvrGradSlotSigma}, {kPvrBackwardRgb, kPvrGradSlotRgb},
                {kPvrBackwardTStarts, kPvrGradSlotTStarts}, {kPvrBackwardTEnds, kPvrGradSlotTEnds},
                {kPvrBackwardRayOffsets, kPvrGradSlotOffsets}, {kPvrBackwardRayCounts, kPvrGradSlotCounts},
                {kPvrBackwardBackground, kPvrGradSlotBackground}, {kPvrBackwardOutRgb, kPvrGradSlotOutRgb},
                {kPvrBackwardDepth, kPvrGradSlotDepth}, {kPvrBackwardOpacity, kPvrGradSlotOpacity},
                {kPvrBackwardWeights, kPvrGradSlotWeights}, {kPvrBackwardGradRgb, kPvrGradSlotGradRgb},
                {kPvrBackwardGradDepth, kPvrGradSlotGradDepth}, {kPvrBackwardGradOpacity, kPvrGradSlotGradOpacity},
                {kPvrBackwardGradWeights, kPvrGradSlotGradWeights}},
               {{kPvrBackwardGradSigma, kPvrGradSlotGradSigma},
                {kPvrBackwardGradSamplesRgb, kPvrGradSlotGradSamplesRgb},
                {kPvrBackwardGradBackground, kPvrGradSlotGradBackground}})
      .Value(kPvrBackwardParams, params);
  return b.Finish();
}

}  // namespace metal_plan
}  // namespace mo
