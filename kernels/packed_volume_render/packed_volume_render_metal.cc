// PackedVolumeRender's Metal plans (float32; shaders
// packed_volume_render.metal, one thread per ray), which every Metal path
// runs (kernels/metal_plan/plan.h): the CPU functor's cpu::MetalOrCpu, the
// MSL shim and, on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// MetalOpsPackedVolumeRender / ...Grad through the shared glue
// (metal_kernel.h).
//
// Layout and value checks: the plan's validation passes leave the first
// invalid ray's check in a shared buffer; the call waits for its command
// buffer (outside the stream's queue: KernelCall::RunPlan with wait, host_path.h RunOnStream) and reports
// it as the CPU kernel does (packed_volume_render::BadCheck), an
// InvalidArgument error naming the argument, ray and sample.
#include <cstdint>
#include <initializer_list>
#include <vector>

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

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const mo::packed_volume_render::Attrs& attrs = *static_cast<mo::packed_volume_render::Attrs*>(kernel);
  const std::vector<TF_Tensor*> in = call.Inputs(7);
  mo::packed_volume_render::RayShapes shapes;
  if (!call.ok() || !call.Check(mo::packed_volume_render::InputShapes(
                        mo::packed_volume_render::kForward, DimsOf(in[0]), DimsOf(in[1]), DimsOf(in[2]), DimsOf(in[3]),
                        DimsOf(in[4]), DimsOf(in[5]), DimsOf(in[6]), &shapes))) {
    return;
  }
  const int64_t R = shapes.rays, N = shapes.samples;
  // out_rgb [R, 3], depth [R], opacity [R], weights [N] or [0].
  TF_Tensor* out[4] = {call.Output(0, TF_FLOAT, {R, 3}), call.Output(1, TF_FLOAT, {R}),
                       call.Output(2, TF_FLOAT, {R}), call.Output(3, TF_FLOAT, {attrs.return_weights ? N : 0})};
  if (!call.ok() || R == 0) return;
  const mo::metal_plan::PackedVolumeRenderLayout layout = {R, N, attrs.early_termination, shapes.background_per_ray};
  mo::mtl::Buffer* check = call.SharedBuffer(sizeof(mo::PvrCheckResult));
  call.RunPlan(mo::metal_plan::PackedVolumeRenderForward(layout, attrs.return_weights),
               {in[0], in[1], in[2], in[3], in[4], in[5], in[6], out[0], out[1], out[2], out[3], check}, true);
  if (!call.ok() || !attrs.validate) return;  // without validate, invalid rays are NaN
  call.Check(mo::packed_volume_render::BadCheck(mo::packed_volume_render::kForward,
                                                *static_cast<const mo::PvrCheckResult*>(check->Contents()), N));
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const mo::packed_volume_render::GradAttrs& attrs = *static_cast<mo::packed_volume_render::GradAttrs*>(kernel);
  const std::vector<TF_Tensor*> in = call.Inputs(15);
  if (!call.ok()) return;
  auto dims = [&](int i) { return DimsOf(in[i]); };
  mo::packed_volume_render::RayShapes shapes;
  bool has_weight_grad = false;
  if (!call.Check(mo::packed_volume_render::InputShapes(mo::packed_volume_render::kBackward, dims(0), dims(1), dims(2),
                                                        dims(3), dims(4), dims(5), dims(6), &shapes)) ||
      !call.Check(mo::packed_volume_render::GradInputShapes(mo::packed_volume_render::kBackward, shapes, dims(7),
                                                            dims(8), dims(9), dims(10), dims(11), dims(12), dims(13),
                                                            dims(14), &has_weight_grad))) {
    return;
  }
  const int64_t R = shapes.rays, N = shapes.samples;
  // grad_sigma [N], grad_rgb [N, 3], grad_background [R, 3].
  TF_Tensor* out[3] = {call.Output(0, TF_FLOAT, {N}), call.Output(1, TF_FLOAT, {N, 3}),
                       call.Output(2, TF_FLOAT, {R, 3})};
  if (!call.ok() || R == 0) return;
  const mo::metal_plan::PackedVolumeRenderLayout layout = {R, N, attrs.early_termination, shapes.background_per_ray};
  mo::mtl::Buffer* check = call.SharedBuffer(sizeof(mo::PvrCheckResult));
  call.RunPlan(mo::metal_plan::PackedVolumeRenderBackward(layout, has_weight_grad),
               {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], in[10], in[11], in[12], in[13],
                in[14], out[0], out[1], out[2], check},
               true);
  if (!call.ok() || !attrs.validate) return;
  call.Check(mo::packed_volume_render::BadCheck(mo::packed_volume_render::kBackward,
                                                *static_cast<const mo::PvrCheckResult*>(check->Contents()), N));
}

// MSL has no double: float32 only.
const bool registered_forward =
    mo::metal::RegisterWithAttrs<mo::packed_volume_render::Attrs>(
        "MetalOpsPackedVolumeRender", {TF_FLOAT}, &mo::metal::Compute<Forward>);
const bool registered_backward =
    mo::metal::RegisterWithAttrs<mo::packed_volume_render::GradAttrs>(
        "MetalOpsPackedVolumeRenderGrad", {TF_FLOAT}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__
