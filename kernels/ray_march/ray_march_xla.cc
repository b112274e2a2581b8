// The XLA kernel of MetalOpsRayMarchStatic (kernels/xla/xla_kernel.h), which emits the call that
// its host handler takes: the CPU functor of kernels/ray_march/ray_march_functor.h, registered in
// kernels/ray_march/ray_march_kernels.cc. The attributes travel as FFI attributes (aabb as six
// floats); the handler rebuilds and checks them with the spec's AttrsFromValues. MetalOpsRayMarch
// has no XLA kernel: its outputs' size depends on the data.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/ray_march/ray_march_spec.h"

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

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
