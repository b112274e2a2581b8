// DistortionLoss on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// through the shared glue (metal_kernel.h). Shaders: distortion_loss.metal (one
// thread per ray, kernels/common/distortion_loss.h).
//
// Unsorted t is not reported as an error on Metal (that would need a read-back
// and a wait on the command buffer): those rays get NaN loss and gradients.
#import "kernels/metal/metal_kernel.h"

#include <string>

#include "kernels/common/distortion_loss.h"
#include "kernels/spec/distortion_loss_spec.h"

namespace {

using mo::metal::DimsOf;

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* w = call.Input(0);
  TF_Tensor* t = call.Input(1);
  if (!call.ok() || !call.Check(mo::distortion_loss::Shapes(DimsOf(w), DimsOf(t)))) return;
  const mo::DistortionLossParams params = {TF_Dim(w, 0), TF_Dim(w, 1)};
  TF_Tensor* loss = call.Output(0, TF_FLOAT, {params.num_rays});
  if (!call.ok() || params.num_rays == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("distortion_loss", "distortion_loss_forward");
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, w).Tensor(1, t).Tensor(2, loss).Value(3, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_rays));
  });
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* g = call.Input(0);
  TF_Tensor* w = call.Input(1);
  TF_Tensor* t = call.Input(2);
  if (!call.ok() || !call.Check(mo::distortion_loss::Shapes(DimsOf(w), DimsOf(t))) ||
      !call.Check(mo::distortion_loss::GradShape(DimsOf(g), TF_Dim(w, 0)))) {
    return;
  }
  const mo::DistortionLossParams params = {TF_Dim(w, 0), TF_Dim(w, 1)};
  TF_Tensor* gw = call.Output(0, TF_FLOAT, {params.num_rays, params.num_samples});
  TF_Tensor* gt = call.Output(1, TF_FLOAT, {params.num_rays, params.num_samples + 1});
  if (!call.ok() || params.num_rays == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("distortion_loss", "distortion_loss_backward");
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, g).Tensor(1, w).Tensor(2, t).Tensor(3, gw).Tensor(4, gt).Value(5, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_rays));
  });
}

bool Register() {
  using mo::metal::Compute;
  using mo::metal::CreateNothing;
  using mo::metal::DeleteNothing;
  using mo::metal::kNoTypeConstraint;
  mo::metal::RegisterKernel("MetalOpsDistortionLoss", kNoTypeConstraint, &CreateNothing, &Compute<Forward>,
                            &DeleteNothing);
  mo::metal::RegisterKernel("MetalOpsDistortionLossGrad", kNoTypeConstraint, &CreateNothing, &Compute<Backward>,
                            &DeleteNothing);
  return true;
}

const bool registered = Register();

}  // namespace
