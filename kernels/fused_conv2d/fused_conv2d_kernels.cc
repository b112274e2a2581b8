// The CPU registrations of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad:
// the kernel classes of kernels/fused_conv2d/fused_conv2d_kernel.h with the CPU functors of
// kernels/fused_conv2d/fused_conv2d_functor.h (which the XLA host handlers run too).
#define EIGEN_USE_THREADS

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/fused_conv2d/fused_conv2d_functor.h"
#include "kernels/fused_conv2d/fused_conv2d_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER("MetalOpsFusedConv2D", DEVICE_CPU, float, FusedConv2DOp<CPUDevice>);
MO_REGISTER("MetalOpsFusedActivationGrad", DEVICE_CPU, float, FusedActivationGradOp<CPUDevice>);

}  // namespace mo
