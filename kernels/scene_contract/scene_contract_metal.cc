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

// SceneContract's plans over its points, with the op's attributes.
std::function<mo::metal_plan::Plan(mo::metal_plan::Dtype, int64_t)> Plans(const Attrs& a, bool backward) {
  return [&a, backward](mo::metal_plan::Dtype dtype, int64_t n) {
    return backward ? mo::metal_plan::SceneContractBackward(dtype, n, a)
                    : mo::metal_plan::SceneContractForward(dtype, n, a);
  };
}

void Forward(void* kernel, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  if (!call.ok() || !call.Check(mo::scene_contract::XShape(DimsOf(x)))) return;
  call.RunPointwise(x, DimsOf(x), mo::scene_contract::kPointSize, {x}, Plans(*static_cast<Attrs*>(kernel), false));
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* x = call.Input(1);
  if (!call.ok() || !call.Check(mo::scene_contract::GradShapes(a, DimsOf(grad), DimsOf(x)))) return;
  call.RunPointwise(x, DimsOf(x), mo::scene_contract::kPointSize, {grad, x}, Plans(a, true));
}

const bool registered_forward = mo::metal::RegisterWithAttrs<Attrs>(
    "MetalOpsSceneContract", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<Attrs>(
    "MetalOpsSceneContractGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__
