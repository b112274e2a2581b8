// The CPU registrations of MetalOpsPackedVolumeRender / ...Grad: the kernel
// classes of kernels/packed_volume_render_kernel.h with the CPU functor of
// kernels/cpu/packed_volume_render_cpu.h (which the XLA host handler runs too).
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cpu/packed_volume_render_cpu.h"
#include "kernels/packed_volume_render_kernel.h"
#include "kernels/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;
using ::tensorflow::DEVICE_CPU;

MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_CPU, CPUDevice, double);

}  // namespace mo
