// The CPU registrations of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad:
// the kernel class kernels/volume_render/volume_render_kernel.h with the CPU functor of
// kernels/volume_render/volume_render_functor.h (which the XLA host handler runs too).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/volume_render/volume_render_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/volume_render/volume_render_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using ::tensorflow::DEVICE_CPU;
using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_CPU, CPUDevice, double);

}  // namespace mo
