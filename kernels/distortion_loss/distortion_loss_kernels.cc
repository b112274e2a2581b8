// The CPU registrations of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad:
// the kernel class kernels/distortion_loss/distortion_loss_kernel.h with the CPU functor of
// kernels/distortion_loss/distortion_loss_functor.h (which the XLA host handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/distortion_loss/distortion_loss_functor.h"
#include "kernels/distortion_loss/distortion_loss_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossGradOp<CPUDevice>);

}  // namespace mo
