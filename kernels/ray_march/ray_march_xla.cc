// The XLA kernel of MetalOpsRayMarchStatic (kernels/xla/xla_kernel.h), which
// emits the call that its handlers take, with the op's attributes
// (FfiAttrsOf; aabb as an array of six floats): the host handler of
// ray_march_cpu.cc, the CUDA handler of ray_march_cuda.cc. MetalOpsRayMarch
// has no XLA kernel: its outputs' size depends on the data.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/ray_march/ray_march.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileRayMarchStatic(XlaOpKernelContext* ctx, const ray_march::StaticAttrs& attrs) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(ray_march::Shapes(InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2),
                                                         InputDims(ctx, 3), InputDims(ctx, 4), InputDims(ctx, 5),
                                                         attrs)));
  const int64_t rays = InputDims(ctx, 0)[0], budget = attrs.sample_budget;
  EmitFfiCall(ctx, "MetalOpsRayMarchStatic", InputsUpTo(ctx, 6),
              {ArrayShape(::xla::F32, {budget}), ArrayShape(::xla::F32, {budget}), ArrayShape(::xla::S32, {budget}),
               ArrayShape(::xla::S32, {rays}), ArrayShape(::xla::S32, {rays}), ArrayShape(::xla::S32, {}),
               ArrayShape(::xla::S32, {})},
              FfiAttrsOf(attrs));
}

using RayMarchStaticXlaOp = XlaOpWithAttrs<ray_march::StaticAttrs, CompileRayMarchStatic>;
MO_REGISTER_XLA_OP(Name("MetalOpsRayMarchStatic"), RayMarchStaticXlaOp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
