// The CPU registrations of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad:
// the kernel class kernels/distortion_loss_kernel.h with the CPU functor of
// kernels/cpu/distortion_loss_cpu.h (which the XLA host handler runs too).
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cpu/distortion_loss_cpu.h"
#include "kernels/distortion_loss_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossGradOp<CPUDevice>);

}  // namespace mo
