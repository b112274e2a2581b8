// The CPU registrations of MetalOpsSHEncode / MetalOpsSHEncodeGrad: the kernel
// class kernels/sh_encode/sh_encode_kernel.h with the CPU functor of
// kernels/sh_encode/sh_encode_functor.h (which the XLA host handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/sh_encode/sh_encode_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/sh_encode/sh_encode_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsSHEncode", SHEncode, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsSHEncode", SHEncode, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
