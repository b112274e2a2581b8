// SceneContract on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// through the shared glue (metal_kernel.h), float32 and float16. The work is
// the plan of kernels/scene_contract/scene_contract_plan.cc (shaders:
// scene_contract.metal, one entry point per norm and dtype).
#include "kernels/metal/metal_kernel.h"

#include "kernels/scene_contract/scene_contract_plan.h"
#include "kernels/scene_contract/scene_contract_spec.h"

namespace {

using mo::metal::DimsOf;

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const int norm = static_cast<mo::scene_contract::Attrs*>(kernel)->norm;
  TF_Tensor* x = call.Input(0);
  if (!call.ok() || !call.Check(mo::scene_contract::XShape(DimsOf(x)))) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* y = call.Output(0, dtype, DimsOf(x));
  const int64_t n = TF_TensorElementCount(x) / 3;
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::SceneContractForward(mo::metal::PlanDtype(dtype), n, norm), {x, y});
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const int norm = static_cast<mo::scene_contract::Attrs*>(kernel)->norm;
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* x = call.Input(1);
  if (!call.ok() || !call.Check(mo::scene_contract::XShape(DimsOf(x))) ||
      !call.Check(mo::scene_contract::GradShape(DimsOf(grad), DimsOf(x)))) {
    return;
  }
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  const int64_t n = TF_TensorElementCount(x) / 3;
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::SceneContractBackward(mo::metal::PlanDtype(dtype), n, norm), {grad, x, dx});
}

const bool registered_forward = mo::metal::RegisterWithAttrs<mo::scene_contract::Attrs>(
    "MetalOpsSceneContract", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::scene_contract::Attrs>(
    "MetalOpsSceneContractGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
