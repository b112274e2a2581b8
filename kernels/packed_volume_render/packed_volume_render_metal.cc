// MetalOpsPackedVolumeRender / ...Grad on the Metal PluggableDevice ("GPU"
// with tensorflow-metal), float32, through the shared glue (metal_kernel.h).
// The work is the plan of kernels/packed_volume_render/packed_volume_render_plan.cc
// (shaders: kernels/packed_volume_render/packed_volume_render.metal, one thread per ray).
//
// Layout and value checks: the plan's validation passes leave the first
// invalid ray's check in a shared buffer; the call waits for its command
// buffer (outside the stream's queue: KernelCall::RunPlan with wait, host_path.h RunOnStream) and reports
// it as the CPU kernel does (packed_volume_render::BadCheck), an
// InvalidArgument error naming the argument, ray and sample.
#include "kernels/metal/metal_kernel.h"

#include <cstdint>

#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/packed_volume_render/packed_volume_render_plan.h"
#include "kernels/packed_volume_render/packed_volume_render_spec.h"

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
  const mo::packed_volume_render::Attrs& attrs = *static_cast<mo::packed_volume_render::Attrs*>(kernel);
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
    mo::metal::RegisterWithAttrs<mo::packed_volume_render::Attrs, mo::packed_volume_render::kForward, true>(
        "MetalOpsPackedVolumeRender", {TF_FLOAT}, &mo::metal::Compute<Forward>);
const bool registered_backward =
    mo::metal::RegisterWithAttrs<mo::packed_volume_render::Attrs, mo::packed_volume_render::kBackward, false>(
        "MetalOpsPackedVolumeRenderGrad", {TF_FLOAT}, &mo::metal::Compute<Backward>);

}  // namespace
