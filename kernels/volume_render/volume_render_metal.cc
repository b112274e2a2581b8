// MetalOpsVolumeRender / MetalOpsVolumeRenderGrad on the Metal PluggableDevice
// ("GPU" with tensorflow-metal), float32, through the shared glue
// (metal_kernel.h). The work is the plan of kernels/volume_render/volume_render_plan.cc
// (shaders: kernels/volume_render/volume_render.metal, one thread per ray).
//
// Value checks: the shaders give invalid rays (negative/NaN sigma, decreasing
// t) NaN outputs; the host does not wait for the GPU to report them.
#include "kernels/metal/metal_kernel.h"

#include <string>
#include <vector>

#include "kernels/volume_render/volume_render_plan.h"
#include "kernels/volume_render/volume_render_spec.h"

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
  const auto& kernel = *static_cast<const mo::volume_render::Attrs*>(kernel_ptr);
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

// MSL has no double: float32 only. ReadAttrs(get, forward, &attrs): the
// forward's attributes or the backward's.
const bool registered_forward = mo::metal::RegisterWithAttrs<mo::volume_render::Attrs, true>(
    "MetalOpsVolumeRender", {TF_FLOAT}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::volume_render::Attrs, false>(
    "MetalOpsVolumeRenderGrad", {TF_FLOAT}, &mo::metal::Compute<Backward>);

}  // namespace
