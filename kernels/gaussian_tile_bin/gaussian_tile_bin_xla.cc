// The XLA kernel of MetalOpsGaussianTileBinStatic (kernels/xla/xla_kernel.h),
// which emits the call that its handlers take, with the op's attributes
// (FfiAttrsOf): the host handler of gaussian_tile_bin_cpu.cc, the CUDA handler
// of gaussian_tile_bin_cuda.cc. MetalOpsGaussianTileBin has no XLA kernel:
// its outputs' size depends on the data.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileGaussianTileBinStatic(XlaOpKernelContext* ctx, const gaussian_tile_bin::StaticAttrs& attrs) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_tile_bin::Shapes(InputDims(ctx, 0), InputDims(ctx, 1),
                                                                 InputDims(ctx, 2))));
  EmitFfiCall(ctx, "MetalOpsGaussianTileBinStatic", InputsUpTo(ctx, 3),
              {ArrayShape(::xla::S32, {attrs.max_intersections}),
               ArrayShape(::xla::S32, {gaussian_tile_bin::Tiles(attrs), 2}), ArrayShape(::xla::S32, {}),
               ArrayShape(::xla::S32, {})},
              FfiAttrsOf(attrs));
}

MO_REGISTER_XLA_OP(Name("MetalOpsGaussianTileBinStatic"),
                   XlaOpWithAttrs<gaussian_tile_bin::StaticAttrs, CompileGaussianTileBinStatic>);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
