// The CPU registrations of MetalOpsTruncExp / MetalOpsTruncExpGrad: the kernel
// class kernels/trunc_exp/trunc_exp_kernel.h with the CPU functor of
// kernels/trunc_exp/trunc_exp_functor.h (which the XLA host handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/trunc_exp/trunc_exp_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/trunc_exp/trunc_exp_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsTruncExp", TruncExp, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsTruncExp", TruncExp, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
