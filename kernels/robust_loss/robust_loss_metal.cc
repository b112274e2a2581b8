// RobustLoss on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// through the shared glue (metal_kernel.h). The work is the plan of
// kernels/robust_loss/robust_loss_plan.cc (shaders: robust_loss.metal). float32 and float16 (MSL's
// bfloat needs Metal 3.1 and is not registered). alpha / scale stay on the
// device: invalid values give NaN elements (no host read-back).
#include "kernels/metal/metal_kernel.h"

#include "kernels/robust_loss/robust_loss_plan.h"
#include "kernels/robust_loss/robust_loss_spec.h"

namespace {

using mo::metal::DimsOf;

// The layout of x / alpha / scale, or false having failed the call naming the argument.
bool LayoutOf(mo::metal::KernelCall& call, TF_Tensor* x, TF_Tensor* alpha, TF_Tensor* scale,
              mo::metal_plan::RobustLossLayout* out) {
  mo::robust_loss::ParamLayout layout;
  if (!call.Check(mo::robust_loss::ParamShapes(DimsOf(x), DimsOf(alpha), DimsOf(scale), &layout))) return false;
  *out = {TF_TensorElementCount(x), layout.channels, layout.alpha_vec, layout.scale_vec};
  return true;
}

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  TF_Tensor* alpha = call.Input(1);
  TF_Tensor* scale = call.Input(2);
  mo::metal_plan::RobustLossLayout layout = {};
  if (!call.ok() || !LayoutOf(call, x, alpha, scale, &layout)) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* out = call.Output(0, dtype, DimsOf(x));
  if (!call.ok() || layout.num_elements == 0) return;
  call.RunPlan(mo::metal_plan::RobustLossForward(mo::metal::PlanDtype(dtype), layout), {x, alpha, scale, out});
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* x = call.Input(1);
  TF_Tensor* alpha = call.Input(2);
  TF_Tensor* scale = call.Input(3);
  if (!call.ok()) return;
  if (!call.Check(mo::robust_loss::GradShape(DimsOf(grad), DimsOf(x)))) return;
  mo::metal_plan::RobustLossLayout layout = {};
  if (!LayoutOf(call, x, alpha, scale, &layout)) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  TF_Tensor* dalpha = call.Output(1, TF_FLOAT, DimsOf(alpha));
  TF_Tensor* dscale = call.Output(2, TF_FLOAT, DimsOf(scale));
  if (!call.ok()) return;
  call.RunPlan(mo::metal_plan::RobustLossBackward(mo::metal::PlanDtype(dtype), layout, TF_TensorElementCount(alpha),
                                                  TF_TensorElementCount(scale)),
               {grad, x, alpha, scale, dx, dalpha, dscale});
}

const bool registered = mo::metal::RegisterStateless("MetalOpsRobustLoss", &mo::metal::Compute<Forward>,
                                                     "MetalOpsRobustLossGrad", &mo::metal::Compute<Backward>,
                                                     {TF_FLOAT, TF_HALF});

}  // namespace
