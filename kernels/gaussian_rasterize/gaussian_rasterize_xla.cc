// The XLA kernels of MetalOpsGaussianRasterize / MetalOpsGaussianRasterizeGrad
// (kernels/xla/xla_kernel.h), which emit the calls that their handlers take,
// with the op's attributes (FfiAttrsOf): the host handlers of
// gaussian_rasterize_cpu.cc, the CUDA handlers of gaussian_rasterize_cuda.cc.
// The shape checks run while XLA compiles; the host handlers check the index
// values (as the CPU kernels do), the CUDA kernels skip ids and clamp ranges
// outside their bounds. Static shapes: gaussian_ids of a static size come from
// MetalOpsGaussianTileBinStatic, whose padding no tile range covers.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

namespace mo {
namespace xla_kernels {
namespace {

gaussian_rasterize::InputDims GaussianRasterizeInputDims(XlaOpKernelContext* ctx) {
  return {InputDims(ctx, 0), InputDims(ctx, 1), InputDims(ctx, 2), InputDims(ctx, 3),
          InputDims(ctx, 4), InputDims(ctx, 5), InputDims(ctx, 6)};
}

void CompileGaussianRasterize(XlaOpKernelContext* ctx, const gaussian_rasterize::Attrs& attrs) {
  checks::Dims image, pixels;
  OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_rasterize::Shapes(attrs, GaussianRasterizeInputDims(ctx), &image,
                                                                  &pixels)));
  EmitFfiCall(ctx, "MetalOpsGaussianRasterize", InputsUpTo(ctx, 7),
              {ArrayShape(::xla::F32, image), ArrayShape(::xla::F32, pixels), ArrayShape(::xla::S32, pixels)},
              FfiAttrsOf(attrs));
}

void CompileGaussianRasterizeGrad(XlaOpKernelContext* ctx, const gaussian_rasterize::Attrs& attrs) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_rasterize::GradShapes(attrs, GaussianRasterizeInputDims(ctx),
                                                                      InputDims(ctx, 7), InputDims(ctx, 8),
                                                                      InputDims(ctx, 9), InputDims(ctx, 10))));
  EmitFfiCall(ctx, "MetalOpsGaussianRasterizeGrad", InputsUpTo(ctx, 11),
              {ShapeLike(ctx, 0), ShapeLike(ctx, 1), ShapeLike(ctx, 2), ShapeLike(ctx, 3), ShapeLike(ctx, 4)},
              FfiAttrsOf(attrs));
}

MO_REGISTER_XLA_OP_AND_GRAD("MetalOpsGaussianRasterize", gaussian_rasterize::Attrs, CompileGaussianRasterize);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
