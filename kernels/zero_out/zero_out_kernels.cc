// The CPU registrations of ZeroOut: the kernel class kernels/zero_out/zero_out_kernel.h
// with the CPU functor of kernels/zero_out/zero_out_functor.h (which the XLA host
// handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/zero_out/zero_out_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/zero_out/zero_out_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER("ZeroOut", DEVICE_CPU, int32_t, ZeroOutOp<CPUDevice, int32_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, int64_t, ZeroOutOp<CPUDevice, int64_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, float, ZeroOutOp<CPUDevice, float>);
MO_REGISTER("ZeroOut", DEVICE_CPU, double, ZeroOutOp<CPUDevice, double>);

}  // namespace mo
