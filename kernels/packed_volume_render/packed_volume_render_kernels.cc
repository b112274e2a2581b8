// The CPU registrations of MetalOpsPackedVolumeRender / ...Grad: the kernel
// classes of kernels/packed_volume_render/packed_volume_render_kernel.h with the CPU functor of
// kernels/packed_volume_render/packed_volume_render_functor.h (which the XLA host handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/packed_volume_render/packed_volume_render_functor.h"
#include "kernels/packed_volume_render/packed_volume_render_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;
using ::tensorflow::DEVICE_CPU;

MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, DEVICE_CPU, CPUDevice, double);

}  // namespace mo
