// The CPU registrations of MetalOpsFusedMLP / MetalOpsFusedMLPGrad: the kernel
// class kernels/fused_mlp/fused_mlp_kernel.h with the CPU functor of
// kernels/fused_mlp/fused_mlp_functor.h (which the XLA host handler runs too).
#include "kernels/fused_mlp/fused_mlp_functor.h"  // first: it includes the intrinsics headers, then kernels/framework/tf_eigen.h

#include "kernels/fused_mlp/fused_mlp_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
