// The CPU registrations of MetalOpsRobustLoss / MetalOpsRobustLossGrad: the
// kernel class kernels/robust_loss/robust_loss_kernel.h with the CPU functor of
// kernels/robust_loss/robust_loss_functor.h (which the XLA host handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/robust_loss/robust_loss_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/robust_loss/robust_loss_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_CPU, CPUDevice, Eigen::half);
MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_CPU, CPUDevice, ::tensorflow::bfloat16);

}  // namespace mo
