// SceneContract's Metal plans (kernels/scene_contract/scene_contract_plan.h).
#include "kernels/scene_contract/scene_contract_plan.h"

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

Plan SceneContractForward(Dtype dtype, int64_t n, int norm) {
  return OnePass(kSceneContractSlots, "scene_contract", Name("forward", norm, dtype), static_cast<uint64_t>(n),
                 {{kSceneContractX, kSceneContractSlotX}}, {{kSceneContractY, kSceneContractSlotY}},
                 kSceneContractParams, SceneContractParams{n});
}

Plan SceneContractBackward(Dtype dtype, int64_t n, int norm) {
  return OnePass(kSceneContractGradSlots, "scene_contract", Name("backward", norm, dtype), static_cast<uint64_t>(n),
                 {{kSceneContractGradGrad, kSceneContractGradSlotGrad}, {kSceneContractGradX, kSceneContractGradSlotX}},
                 {{kSceneContractGradDx, kSceneContractGradSlotDx}}, kSceneContractGradParams, SceneContractParams{n});
}

}  // namespace metal_plan
}  // namespace mo
