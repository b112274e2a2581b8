// The XLA kernel of MetalOpsRayMarchStatic (kernels/xla/xla_kernel.h) and its
// host handler: the CPU functor of kernels/ray_march/ray_march_functor.h. The
// attributes travel as FFI attributes (aabb as six floats); the handler
// rebuilds and checks them with the spec's AttrsFromValues. MetalOpsRayMarch
// has no XLA kernel: its outputs' size depends on the data.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/ray_march/ray_march_functor.h"
#include "kernels/ray_march/ray_march_spec.h"
#include "kernels/ray_march/ray_march_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

constexpr const char* kAabb[6] = {"aabb_min_x", "aabb_min_y", "aabb_min_z", "aabb_max_x", "aabb_max_y", "aabb_max_z"};

void CompileRayMarchStatic(XlaOpKernelContext* ctx, const ray_march::StaticAttrs& attrs) {
  const ray_march::Attrs& a = attrs.march;
  OP_REQUIRES_OK(ctx, checks::ToStatus(ray_march::Shapes(InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2),
                                                         InputDims(ctx, 3), InputDims(ctx, 4), InputDims(ctx, 5),
                                                         a)));
  const int64_t rays = InputDims(ctx, 0)[0], budget = attrs.sample_budget;
  FfiAttrs ffi_attrs;
  for (int i = 0; i < 6; ++i) ffi_attrs.Float(kAabb[i], a.aabb[i]);
  ffi_attrs.Int("grid_resolution", a.grid_resolution)
      .Float("step_size", a.step_size)
      .Float("cone_angle", a.cone_angle)
      .Float("max_step_size", a.max_step_size)
      .Int("max_samples", a.max_samples)
      .Int("jitter", a.jitter)
      .Int("sample_budget", budget);
  EmitFfiCall(ctx, "MetalOpsRayMarchStatic", InputsUpTo(ctx, 6),
              {ArrayShape(::xla::F32, {budget}), ArrayShape(::xla::F32, {budget}), ArrayShape(::xla::S32, {budget}),
               ArrayShape(::xla::S32, {rays}), ArrayShape(::xla::S32, {rays}), ArrayShape(::xla::S32, {}),
               ArrayShape(::xla::S32, {})},
              ffi_attrs);
}

using RayMarchStaticXlaOp = XlaOpWithAttrs<ray_march::StaticAttrs, CompileRayMarchStatic>;
MO_REGISTER_XLA_OP(Name("MetalOpsRayMarchStatic"), RayMarchStaticXlaOp);

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
}  // namespace xla_kernels
}  // namespace mo
