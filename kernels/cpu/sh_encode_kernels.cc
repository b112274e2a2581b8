// The CPU registrations of MetalOpsSHEncode / MetalOpsSHEncodeGrad: the kernel
// class kernels/sh_encode_kernel.h with the CPU functor of
// kernels/cpu/sh_encode_cpu.h (which the XLA host handler runs too).
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cpu/sh_encode_cpu.h"
#include "kernels/register_kernels.h"
#include "kernels/sh_encode_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsSHEncode", SHEncode, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsSHEncode", SHEncode, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
