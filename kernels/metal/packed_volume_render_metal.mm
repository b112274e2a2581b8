// MetalOpsPackedVolumeRender / ...Grad on the Metal PluggableDevice ("GPU"
// with tensorflow-metal), float32, through the shared glue (metal_kernel.h).
// Shaders: kernels/metal/packed_volume_render.metal (one thread per ray).
//
// Layout and value checks run in the shaders: a ray that breaks the layout
// rule or has invalid samples gets NaN outputs; the host does not wait for the
// GPU to report them. The per-sample outputs are zero-filled first, so samples
// no valid ray owns (only under an invalid layout) hold 0, not stale memory.
#import "kernels/metal/metal_kernel.h"

#include <cstdint>

#include "kernels/common/packed_volume_render.h"
#include "kernels/spec/packed_volume_render_spec.h"

namespace {

using mo::metal::DimsOf;

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const mo::packed_volume_render::Attrs& attrs = *static_cast<mo::packed_volume_render::Attrs*>(kernel);
  TF_Tensor* in[7];
  for (int i = 0; i < 7; ++i) in[i] = call.Input(i);
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
  const mo::VolumeRenderParams params = mo::make_volume_render_params(
      R, N, attrs.early_termination, shapes.background_per_ray, attrs.return_weights, false);
  id<MTLComputePipelineState> pipeline = call.Pipeline("packed_volume_render", "packed_volume_render_forward_float32");
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Zero(out[3]);
    e.Tensor(mo::kPvrForwardSigma, in[0]).Tensor(mo::kPvrForwardRgb, in[1]);
    e.Tensor(mo::kPvrForwardTStarts, in[2]).Tensor(mo::kPvrForwardTEnds, in[3]);
    e.Tensor(mo::kPvrForwardRayOffsets, in[4]).Tensor(mo::kPvrForwardRayCounts, in[5]);
    e.Tensor(mo::kPvrForwardBackground, in[6]);
    e.Tensor(mo::kPvrForwardOutRgb, out[0]).Tensor(mo::kPvrForwardDepth, out[1]);
    e.Tensor(mo::kPvrForwardOpacity, out[2]).Tensor(mo::kPvrForwardWeights, out[3]);
    e.Value(mo::kPvrForwardParams, params).Dispatch(pipeline, static_cast<uint64_t>(R));
  });
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const mo::packed_volume_render::Attrs& attrs = *static_cast<mo::packed_volume_render::Attrs*>(kernel);
  TF_Tensor* in[15];
  for (int i = 0; i < 15; ++i) in[i] = call.Input(i);
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
  const mo::VolumeRenderParams params = mo::make_volume_render_params(
      R, N, attrs.early_termination, shapes.background_per_ray, false, has_weight_grad);
  id<MTLComputePipelineState> pipeline =
      call.Pipeline("packed_volume_render", "packed_volume_render_backward_float32");
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Zero(out[0]).Zero(out[1]);
    e.Tensor(mo::kPvrBackwardSigma, in[0]).Tensor(mo::kPvrBackwardRgb, in[1]);
    e.Tensor(mo::kPvrBackwardTStarts, in[2]).Tensor(mo::kPvrBackwardTEnds, in[3]);
    e.Tensor(mo::kPvrBackwardRayOffsets, in[4]).Tensor(mo::kPvrBackwardRayCounts, in[5]);
    e.Tensor(mo::kPvrBackwardBackground, in[6]);
    e.Tensor(mo::kPvrBackwardOutRgb, in[7]).Tensor(mo::kPvrBackwardDepth, in[8]);
    e.Tensor(mo::kPvrBackwardOpacity, in[9]).Tensor(mo::kPvrBackwardWeights, in[10]);
    e.Tensor(mo::kPvrBackwardGradRgb, in[11]).Tensor(mo::kPvrBackwardGradDepth, in[12]);
    e.Tensor(mo::kPvrBackwardGradOpacity, in[13]).Tensor(mo::kPvrBackwardGradWeights, in[14]);
    e.Tensor(mo::kPvrBackwardGradSigma, out[0]).Tensor(mo::kPvrBackwardGradSamplesRgb, out[1]);
    e.Tensor(mo::kPvrBackwardGradBackground, out[2]);
    e.Value(mo::kPvrBackwardParams, params).Dispatch(pipeline, static_cast<uint64_t>(R));
  });
}

// MSL has no double: float32 only.
const bool registered_forward =
    mo::metal::RegisterWithAttrs<mo::packed_volume_render::Attrs, mo::packed_volume_render::kForward, true>(
        "MetalOpsPackedVolumeRender", {TF_FLOAT}, &mo::metal::Compute<Forward>);
const bool registered_backward =
    mo::metal::RegisterWithAttrs<mo::packed_volume_render::Attrs, mo::packed_volume_render::kBackward, false>(
        "MetalOpsPackedVolumeRenderGrad", {TF_FLOAT}, &mo::metal::Compute<Backward>);

}  // namespace
