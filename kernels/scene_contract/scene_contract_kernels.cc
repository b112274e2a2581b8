// The CPU registrations of MetalOpsSceneContract / MetalOpsSceneContractGrad:
// the kernel class kernels/scene_contract/scene_contract_kernel.h with the CPU
// functor of kernels/scene_contract/scene_contract_functor.h.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/framework/register_kernels.h"
#include "kernels/scene_contract/scene_contract_functor.h"
#include "kernels/scene_contract/scene_contract_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

MO_REGISTER_CPU_WITH_GRAD("MetalOpsSceneContract", SceneContract, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsSceneContract", SceneContract, Eigen::half);
