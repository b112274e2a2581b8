// The CPU registrations of MetalOpsRayMarch and MetalOpsRayMarchStatic (the
// kernel classes are kernels/ray_march/ray_march_kernel.h, the functor
// kernels/ray_march/ray_march_functor.h), and XLA's host handler of
// MetalOpsRayMarchStatic (kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/ray_march/ray_march_functor.h"
#include "kernels/ray_march/ray_march_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#if MO_XLA
#include "kernels/ray_march/ray_march_xla.h"
#endif

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarch").Device(::tensorflow::DEVICE_CPU), RayMarchOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarchStatic").Device(::tensorflow::DEVICE_CPU),
                        RayMarchStaticOp<CPUDevice>);


}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/ray_march/ray_march_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Static(ffi::AnyBuffer origins, ffi::AnyBuffer directions, ffi::AnyBuffer near, ffi::AnyBuffer far,
                  ffi::AnyBuffer occupancy, ffi::AnyBuffer seed, RetBuffer t_starts, RetBuffer t_ends,
                  RetBuffer ray_indices, RetBuffer ray_offsets, RetBuffer ray_counts, RetBuffer num_samples,
                  RetBuffer num_rays, xla_ffi::RayMarchStaticCallAttrs attrs) {
  ray_march::Attrs a;
  ffi::Error error =
      xla_ffi::RayMarchStaticAttrsOf(attrs, origins, directions, near, far, occupancy, seed, &a);
  if (error.failure()) return error;
  const int64_t rays = origins.dimensions()[0];
  const RayMarchInputs in = xla_ffi::RayMarchInputsOf(origins, directions, near, far, occupancy,
                                                      static_cast<uint32_t>(*Data<int32_t>(seed)));
  const RayMarchStaticOutputs out = xla_ffi::RayMarchStaticOutputsOf(t_starts, t_ends, ray_indices, ray_offsets,
                                                                     ray_counts, num_samples, num_rays);
  return xla_ffi::ToError(RayMarchFunctor<Eigen::ThreadPoolDevice>::Static(
      HostContext(), ray_march::MakeParams(a, rays, occupancy.dimensions()[0]), in, attrs.sample_budget, out));
}

MO_XLA_FFI_HANDLER("MetalOpsRayMarchStatic", "Host", Static, xla_ffi::BindRayMarchStatic(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
