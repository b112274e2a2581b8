// The CPU registrations of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad:
// the kernel classes of kernels/fused_conv2d/fused_conv2d_kernel.h with the CPU functors of
// kernels/fused_conv2d/fused_conv2d_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#define EIGEN_USE_THREADS

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/fused_conv2d/fused_conv2d_functor.h"
#include "kernels/fused_conv2d/fused_conv2d_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include <vector>

#if MO_XLA
#include "kernels/fused_conv2d/fused_conv2d_xla.h"
#endif

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER("MetalOpsFusedConv2D", DEVICE_CPU, float, FusedConv2DOp<CPUDevice>);
MO_REGISTER("MetalOpsFusedActivationGrad", DEVICE_CPU, float, FusedActivationGradOp<CPUDevice>);


}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/fused_conv2d/fused_conv2d_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Conv(ffi::AnyBuffer input, ffi::AnyBuffer filter, ffi::RemainingArgs rest, RetBuffer output,
                xla_ffi::ConvCallAttrs attrs) {
  FusedConv2DArgs args;
  ffi::Error error = xla_ffi::FusedConv2DArgsOf(input, filter, rest, output, attrs, &args);
  if (error.failure() || args.g.pixels() * args.g.out_depth == 0) return error;
  return xla_ffi::ToError(
      FusedConv2DFunctor<Eigen::ThreadPoolDevice>::Compute(HostContext(), args, Data<float>(output)));
}

ffi::Error ActivationGrad(ffi::AnyBuffer grads, ffi::AnyBuffer outputs, ffi::RemainingArgs rest,
                          RetBuffer backprops, int64_t activation, float alpha) {
  const float* features = nullptr;
  ffi::Error error = xla_ffi::ActivationFeaturesOf(rest, &features);
  const int64_t n = static_cast<int64_t>(grads.element_count());
  if (error.failure() || n == 0) return error;
  return xla_ffi::ToError(FusedActivationGradFunctor<Eigen::ThreadPoolDevice>::Compute(
      HostContext(), Data<float>(grads), Data<float>(outputs), features, n,
      static_cast<int>(activation), alpha, Data<float>(backprops)));
}

MO_XLA_FFI_HANDLER("MetalOpsFusedConv2D", "Host", Conv, xla_ffi::BindConv(ffi::Ffi::Bind()));
MO_XLA_FFI_HANDLER("MetalOpsFusedActivationGrad", "Host", ActivationGrad,
                   xla_ffi::BindActivationGrad(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
