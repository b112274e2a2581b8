// DistortionLoss on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// through the shared glue (metal_kernel.h). Shaders: distortion_loss.metal (one
// thread per ray, kernels/common/distortion_loss.h).
//
// Unsorted t is not reported as an error on Metal (that would need a read-back
// and a wait on the command buffer): those rays get NaN loss and gradients.
#import "kernels/metal/metal_kernel.h"

#include <string>

#include "kernels/common/distortion_loss.h"

namespace {

using mo::metal::DimsOf;
using mo::metal::ShapeString;

// weights [R, S], t [R, S + 1]; false (call failed, naming the argument) otherwise.
bool ReadShapes(mo::metal::KernelCall& call, const char* op, TF_Tensor* w, TF_Tensor* t,
                mo::DistortionLossParams* params) {
  if (TF_NumDims(w) != 2) {
    call.InvalidArgument(std::string(op) + ": 'weights' must be [R, S], got shape " + ShapeString(DimsOf(w)));
    return false;
  }
  if (TF_NumDims(t) != 2 || TF_Dim(t, 0) != TF_Dim(w, 0) || TF_Dim(t, 1) != TF_Dim(w, 1) + 1) {
    call.InvalidArgument(std::string(op) + ": 't' must be [R, S + 1] for 'weights' " + ShapeString(DimsOf(w)) +
                         ", got shape " + ShapeString(DimsOf(t)));
    return false;
  }
  params->num_rays = TF_Dim(w, 0);
  params->num_samples = TF_Dim(w, 1);
  return true;
}

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* w = call.Input(0);
  TF_Tensor* t = call.Input(1);
  mo::DistortionLossParams params = {};
  if (!call.ok() || !ReadShapes(call, "MetalOpsDistortionLoss", w, t, &params)) return;
  TF_Tensor* loss = call.Output(0, TF_FLOAT, {params.num_rays});
  if (!call.ok() || params.num_rays == 0) return;
  call.Encode([&](mo::metal::Encoder& e) {
    id<MTLComputePipelineState> pipeline = e.Pipeline("distortion_loss", "distortion_loss_forward");
    if (!e.ok()) return;
    e.Tensor(0, w).Tensor(1, t).Tensor(2, loss).Value(3, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_rays));
  });
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* g = call.Input(0);
  TF_Tensor* w = call.Input(1);
  TF_Tensor* t = call.Input(2);
  mo::DistortionLossParams params = {};
  if (!call.ok() || !ReadShapes(call, "MetalOpsDistortionLossGrad", w, t, &params)) return;
  if (TF_NumDims(g) != 1 || TF_Dim(g, 0) != params.num_rays) {
    call.InvalidArgument("MetalOpsDistortionLossGrad: 'grad' must be [R] = [" + std::to_string(params.num_rays) +
                         "], got shape " + ShapeString(DimsOf(g)));
    return;
  }
  TF_Tensor* gw = call.Output(0, TF_FLOAT, {params.num_rays, params.num_samples});
  TF_Tensor* gt = call.Output(1, TF_FLOAT, {params.num_rays, params.num_samples + 1});
  if (!call.ok() || params.num_rays == 0) return;
  call.Encode([&](mo::metal::Encoder& e) {
    id<MTLComputePipelineState> pipeline = e.Pipeline("distortion_loss", "distortion_loss_backward");
    if (!e.ok()) return;
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
