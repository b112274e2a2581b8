// The XLA kernels of MetalOpsSHEncode / MetalOpsSHEncodeGrad (kernels/xla/xla_kernel.h), which emit
// the calls that their handlers take, with the op's attributes (FfiAttrsOf): the
// host handlers of sh_encode_cpu.cc, the CUDA handlers of sh_encode_cuda.cc.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/sh_encode/sh_encode.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileSHEncode(XlaOpKernelContext* ctx, const sh_encode::Attrs& attrs) {
  const checks::Dims dirs = InputDims(ctx, 0);
  OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::DirsShape(dirs)));
  EmitFfiCall(ctx, "MetalOpsSHEncode", {ctx->Input(0)},
              {ArrayShape(ElementType(ctx, 0), sh_encode::OutputDims(dirs, attrs))},
              FfiAttrsOf(attrs));
}

void CompileSHEncodeGrad(XlaOpKernelContext* ctx, const sh_encode::Attrs& attrs) {
  const checks::Dims dirs = InputDims(ctx, 1);
  OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::DirsShape(dirs)));
  OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::GradShape(InputDims(ctx, 0), dirs, attrs)));
  EmitFfiCall(ctx, "MetalOpsSHEncodeGrad", InputsUpTo(ctx, 2), {ShapeLike(ctx, 1)},
              FfiAttrsOf(attrs));
}

MO_REGISTER_XLA_OP_WITH_GRAD("MetalOpsSHEncode", kFloatTypes, sh_encode::Attrs, CompileSHEncode);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
