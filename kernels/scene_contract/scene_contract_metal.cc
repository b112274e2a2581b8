// SceneContract on Metal: the op's Metal plans (which shader of
// scene_contract.metal, one entry point per norm and dtype, which tensor slot
// at which buffer index, how many threads; every Metal path runs them: the CPU
// kernels' offload, the MSL shim, tensorflow-metal) and, on macOS, its kernels
// on the Metal PluggableDevice ("GPU" with tensorflow-metal) through the
// shared glue (kernels/metal/metal_kernel.h), float32 and float16.
#include <string>

#include "kernels/scene_contract/scene_contract.h"

namespace mo {
namespace metal_plan {
namespace {

// scene_contract_<kind>_<l2|linf>_<dtype>, the shader's host names.
std::string Name(const char* kind, int norm, Dtype dtype) {
  return std::string("scene_contract_") + kind + (norm == kSceneContractL2 ? "_l2_" : "_linf_") + DtypeSuffix(dtype);
}

}  // namespace

Plan SceneContractForward(Dtype dtype, int64_t n, const scene_contract::Attrs& a) {
  return OnePass(kSceneContractSlots, "scene_contract", Name("forward", a.norm, dtype), static_cast<uint64_t>(n),
                 {{kSceneContractX, kSceneContractSlotX}}, {{kSceneContractY, kSceneContractSlotY}},
                 kSceneContractParams, SceneContractParams{n});
}

Plan SceneContractBackward(Dtype dtype, int64_t n, const scene_contract::Attrs& a) {
  return OnePass(kSceneContractGradSlots, "scene_contract", Name("backward", a.norm, dtype), static_cast<uint64_t>(n),
                 {{kSceneContractGradGrad, kSceneContractGradSlotGrad}, {kSceneContractGradX, kSceneContractGradSlotX}},
                 {{kSceneContractGradDx, kSceneContractGradSlotDx}}, kSceneContractGradParams, SceneContractParams{n});
}

}  // namespace metal_plan
}  // namespace mo

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;
using mo::scene_contract::Attrs;

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* x = call.Input(0);
  if (!call.ok() || !call.Check(mo::scene_contract::XShape(DimsOf(x)))) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* y = call.Output(0, dtype, DimsOf(x));
  const int64_t n = TF_TensorElementCount(x) / mo::scene_contract::kPointSize;
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::SceneContractForward(mo::metal::PlanDtype(dtype), n, a), {x, y});
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* x = call.Input(1);
  if (!call.ok() || !call.Check(mo::scene_contract::GradShapes(a, DimsOf(grad), DimsOf(x)))) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  const int64_t n = TF_TensorElementCount(x) / mo::scene_contract::kPointSize;
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::SceneContractBackward(mo::metal::PlanDtype(dtype), n, a), {grad, x, dx});
}

const bool registered_forward = mo::metal::RegisterWithAttrs<Attrs>(
    "MetalOpsSceneContract", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<Attrs>(
    "MetalOpsSceneContractGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__
