// DistortionLoss on Metal: the op's Metal plans (which shader of
// distortion_loss.metal, one thread per ray, which tensor slot at which buffer
// index; every Metal path runs them: the CPU kernels' offload, the MSL shim,
// tensorflow-metal) and, on macOS, its kernels on the Metal PluggableDevice
// ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h), float32.
//
// Unsorted t is not reported as an error on Metal (that would need a read-back
// and a wait on the command buffer): those rays get NaN loss and gradients.
#include "kernels/distortion_loss/distortion_loss.h"

namespace mo::metal_plan {

Plan DistortionLossForward(int64_t rays, int64_t samples) {
  if (rays == 0) return PlanBuilder(kDistortionLossSlots).Finish();
  return OnePass(kDistortionLossSlots, "distortion_loss", "distortion_loss_forward", static_cast<uint64_t>(rays),
                 {{kDistortionLossW, kDistortionLossSlotW}, {kDistortionLossT, kDistortionLossSlotT}},
                 {{kDistortionLossLoss, kDistortionLossSlotLoss}}, kDistortionLossParams,
                 DistortionLossParams{rays, samples});
}

Plan DistortionLossBackward(int64_t rays, int64_t samples) {
  if (rays == 0) return PlanBuilder(kDistortionLossGradSlots).Finish();
  return OnePass(kDistortionLossGradSlots, "distortion_loss", "distortion_loss_backward", static_cast<uint64_t>(rays),
                 {{kDistortionLossGradGrad, kDistortionLossGradSlotGrad},
                  {kDistortionLossGradW, kDistortionLossGradSlotW},
                  {kDistortionLossGradT, kDistortionLossGradSlotT}},
                 {{kDistortionLossGradDw, kDistortionLossGradSlotDw},
                  {kDistortionLossGradDt, kDistortionLossGradSlotDt}},
                 kDistortionLossGradParams, DistortionLossParams{rays, samples});
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;
using mo::metal::KernelCall;

void Forward(void*, KernelCall& call) {
  TF_Tensor* w = call.Input(0);
  TF_Tensor* t = call.Input(1);
  if (!call.ok() || !call.Check(mo::distortion_loss::Shapes(DimsOf(w), DimsOf(t)))) return;
  const int64_t rays = TF_Dim(w, 0), samples = TF_Dim(w, 1);
  TF_Tensor* loss = call.Output(0, TF_FLOAT, {rays});
  if (!call.ok() || rays == 0) return;
  call.RunPlan(mo::metal_plan::DistortionLossForward(rays, samples), {w, t, loss});
}

void Backward(void*, KernelCall& call) {
  TF_Tensor* g = call.Input(0);
  TF_Tensor* w = call.Input(1);
  TF_Tensor* t = call.Input(2);
  if (!call.ok() || !call.Check(mo::distortion_loss::Shapes(DimsOf(w), DimsOf(t))) ||
      !call.Check(mo::distortion_loss::GradShape(DimsOf(g), TF_Dim(w, 0)))) {
    return;
  }
  const int64_t rays = TF_Dim(w, 0), samples = TF_Dim(w, 1);
  TF_Tensor* gw = call.Output(0, TF_FLOAT, {rays, samples});
  TF_Tensor* gt = call.Output(1, TF_FLOAT, {rays, samples + 1});
  if (!call.ok() || rays == 0) return;
  call.RunPlan(mo::metal_plan::DistortionLossBackward(rays, samples), {g, w, t, gw, gt});
}

const bool registered =
    mo::metal::RegisterStateless("MetalOpsDistortionLoss", &mo::metal::Compute<Forward>, "MetalOpsDistortionLossGrad",
                                 &mo::metal::Compute<Backward>, {mo::metal::kNoTypeConstraint});

}  // namespace
#endif  // __APPLE__
