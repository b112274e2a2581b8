// The CPU registrations of MetalOpsRayMarch and MetalOpsRayMarchStatic (the
// kernel classes are kernels/ray_march/ray_march_kernel.h, the functor
// kernels/ray_march/ray_march_functor.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/ray_march/ray_march_functor.h"
#include "kernels/ray_march/ray_march_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarch").Device(::tensorflow::DEVICE_CPU), RayMarchOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarchStatic").Device(::tensorflow::DEVICE_CPU),
                        RayMarchStaticOp<CPUDevice>);

}  // namespace mo
