// The XLA kernels of MetalOpsTruncExp / MetalOpsTruncExpGrad (kernels/xla/xla_kernel.h), which emit
// the calls that their handlers take: the host handlers of trunc_exp_cpu.cc,
// the CUDA handlers of trunc_exp_cuda.cc.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/trunc_exp/trunc_exp.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileTruncExp(XlaOpKernelContext* ctx) {
  EmitFfiCall(ctx, "MetalOpsTruncExp", {ctx->Input(0)}, {ShapeLike(ctx, 0)});
}

void CompileTruncExpGrad(XlaOpKernelContext* ctx) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(trunc_exp::GradShape(InputDims(ctx, 0), InputDims(ctx, 1))));
  EmitFfiCall(ctx, "MetalOpsTruncExpGrad", InputsUpTo(ctx, 2), {ShapeLike(ctx, 1)});
}

MO_REGISTER_XLA_OP(Name("MetalOpsTruncExp").TypeConstraint("T", kFloatTypes), XlaOp<CompileTruncExp>);
MO_REGISTER_XLA_OP(Name("MetalOpsTruncExpGrad").TypeConstraint("T", kFloatTypes), XlaOp<CompileTruncExpGrad>);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
