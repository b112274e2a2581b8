// The CPU registrations of MetalOpsSceneContract / MetalOpsSceneContractGrad:
// the kernel class kernels/scene_contract/scene_contract_kernel.h with the CPU
// functor of kernels/scene_contract/scene_contract_functor.h.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/framework/register_kernels.h"
#include "kernels/scene_contract/scene_contract_functor.h"
#include "kernels/scene_contract/scene_contract_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsSceneContract", SceneContract, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsSceneContract", SceneContract, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
