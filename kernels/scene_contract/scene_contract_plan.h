// SceneContract's Metal plans (shaders: kernels/scene_contract/scene_contract.metal,
// buffer indices kernels/scene_contract/scene_contract.h): one thread per point, the
// entry point picked by norm and dtype. Every Metal path runs them
// (kernels/metal_plan/plan.h).
#ifndef MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_PLAN_H_
#define MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_PLAN_H_

#include <cstdint>

#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// Forward slots {x, y}, backward {grad, x, dx}, each [n, 3]; n > 0 points;
// norm a SceneContractNorm.
enum SceneContractSlots { kSceneContractSlotX, kSceneContractSlotY, kSceneContractSlots };
enum SceneContractGradSlots {
  kSceneContractGradSlotGrad,
  kSceneContractGradSlotX,
  kSceneContractGradSlotDx,
  kSceneContractGradSlots
};
Plan SceneContractForward(Dtype dtype, int64_t n, int norm);
Plan SceneContractBackward(Dtype dtype, int64_t n, int norm);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_PLAN_H_
