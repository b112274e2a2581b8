// VolumeRender's Metal plans (float32; shaders volume_render.metal, one thread
// per ray), which every Metal path runs (kernels/metal_plan/plan.h): the CPU
// functor's cpu::MetalOrCpu, the MSL shim and, on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), MetalOpsVolumeRender /
// MetalOpsVolumeRenderGrad through the shared glue (metal_kernel.h).
//
// Value checks: the shaders give invalid rays (negative/NaN sigma, decreasing
// t) NaN outputs; the Metal kernels do not wait for the GPU to report them.
#include <cstdint>
#include <string>
#include <vector>

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

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;

// ---- forward ------------------------------------------------------------------------

void Forward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& kernel = *static_cast<const mo::volume_render::Attrs*>(kernel_ptr);
  const std::vector<TF_Tensor*> in = call.Inputs(4);
  mo::volume_render::RayShapes shapes;
  if (!call.ok() || !call.Check(mo::volume_render::InputShapes(mo::volume_render::kForward, DimsOf(in[0]),
                                                               DimsOf(in[1]), DimsOf(in[2]), DimsOf(in[3]), &shapes))) {
    return;
  }
  const int64_t R = shapes.rays, S = shapes.samples;
  const bool per_ray = shapes.background_per_ray;
  // out_rgb [R, 3], depth [R], opacity [R], weights [R, S] or [R, 0].
  TF_Tensor* out[4] = {call.Output(0, TF_FLOAT, {R, 3}), call.Output(1, TF_FLOAT, {R}),
                       call.Output(2, TF_FLOAT, {R}), call.Output(3, TF_FLOAT, {R, kernel.return_weights ? S : 0})};
  if (!call.ok() || R == 0) return;
  const mo::metal_plan::VolumeRenderLayout layout = {R, S, kernel.early_termination, per_ray};
  call.RunPlan(mo::metal_plan::VolumeRenderForward(layout, kernel.return_weights),
               {in[0], in[1], in[2], in[3], out[0], out[1], out[2], out[3]});
}

// ---- backward -----------------------------------------------------------------------

void Backward(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& kernel = *static_cast<const mo::volume_render::GradAttrs*>(kernel_ptr);
  const std::vector<TF_Tensor*> in = call.Inputs(12);
  mo::volume_render::RayShapes shapes;
  bool has_weight_grad = false;
  if (!call.ok() ||
      !call.Check(mo::volume_render::InputShapes(mo::volume_render::kBackward, DimsOf(in[0]), DimsOf(in[1]),
                                                 DimsOf(in[2]), DimsOf(in[3]), &shapes)) ||
      !call.Check(mo::volume_render::GradInputShapes(mo::volume_render::kBackward, shapes, DimsOf(in[4]), DimsOf(in[5]),
                                                     DimsOf(in[6]), DimsOf(in[7]), DimsOf(in[8]), DimsOf(in[9]),
                                                     DimsOf(in[10]), DimsOf(in[11]), &has_weight_grad))) {
    return;
  }
  const int64_t R = shapes.rays, S = shapes.samples;
  const bool per_ray = shapes.background_per_ray;
  // grad_sigma [R, S], grad_rgb [R, S, 3], grad_background [R, 3].
  TF_Tensor* out[3] = {call.Output(0, TF_FLOAT, {R, S}), call.Output(1, TF_FLOAT, {R, S, 3}),
                       call.Output(2, TF_FLOAT, {R, 3})};
  if (!call.ok() || R == 0) return;
  const mo::metal_plan::VolumeRenderLayout layout = {R, S, kernel.early_termination, per_ray};
  call.RunPlan(mo::metal_plan::VolumeRenderBackward(layout, has_weight_grad),
               {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], in[10], in[11], out[0], out[1],
                out[2]});
}

// MSL has no double: float32 only.
const bool registered_forward = mo::metal::RegisterWithAttrs<mo::volume_render::Attrs>(
    "MetalOpsVolumeRender", {TF_FLOAT}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::volume_render::GradAttrs>(
    "MetalOpsVolumeRenderGrad", {TF_FLOAT}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__
