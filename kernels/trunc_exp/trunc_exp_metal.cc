// TruncExp on the Metal PluggableDevice ("GPU" with tensorflow-metal), through
// the shared glue (metal_kernel.h), float32 and float16. The work is the plan
// of kernels/trunc_exp/trunc_exp_plan.cc (shaders: trunc_exp.metal).
#include "kernels/metal/metal_kernel.h"

#include "kernels/trunc_exp/trunc_exp_plan.h"
#include "kernels/trunc_exp/trunc_exp_spec.h"

namespace {

using mo::metal::DimsOf;

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  if (!call.ok()) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* y = call.Output(0, dtype, DimsOf(x));
  const int64_t n = TF_TensorElementCount(x);
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::TruncExpForward(mo::metal::PlanDtype(dtype), n), {x, y});
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* x = call.Input(1);
  if (!call.ok() || !call.Check(mo::trunc_exp::GradShape(DimsOf(dy), DimsOf(x)))) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  const int64_t n = TF_TensorElementCount(x);
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::TruncExpBackward(mo::metal::PlanDtype(dtype), n), {dy, x, dx});
}

const bool registered = mo::metal::RegisterStateless("MetalOpsTruncExp", &mo::metal::Compute<Forward>,
                                                     "MetalOpsTruncExpGrad", &mo::metal::Compute<Backward>,
                                                     {TF_FLOAT, TF_HALF});

}  // namespace
