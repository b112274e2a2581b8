// The XLA kernels of MetalOpsRobustLoss / MetalOpsRobustLossGrad
// (kernels/xla/xla_kernel.h), which emit the calls that their handlers take:
// the host handlers of robust_loss_cpu.cc, the CUDA handlers of
// robust_loss_cuda.cc. The shape checks run while XLA compiles, the checks of
// alpha's and scale's values in the host handlers (as in the CPU kernels).
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/robust_loss/robust_loss.h"

namespace mo {
namespace xla_kernels {
namespace {

// Inputs x, alpha, scale from `first` on.
absl::Status CheckParams(XlaOpKernelContext* ctx, int first) {
  robust_loss::ParamLayout layout;
  return checks::ToStatus(robust_loss::ParamShapes(InputDims(ctx, first), InputDims(ctx, first + 1),
                                                   InputDims(ctx, first + 2), &layout));
}

void CompileRobustLoss(XlaOpKernelContext* ctx) {
  OP_REQUIRES_OK(ctx, CheckParams(ctx, 0));
  EmitFfiCall(ctx, "MetalOpsRobustLoss", InputsUpTo(ctx, 3), {ShapeLike(ctx, 0)});
}

void CompileRobustLossGrad(XlaOpKernelContext* ctx) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss::GradShape(InputDims(ctx, 0), InputDims(ctx, 1))));
  OP_REQUIRES_OK(ctx, CheckParams(ctx, 1));
  EmitFfiCall(ctx, "MetalOpsRobustLossGrad", InputsUpTo(ctx, 4),
              {ShapeLike(ctx, 1), ArrayShape(::xla::F32, InputDims(ctx, 2)),
               ArrayShape(::xla::F32, InputDims(ctx, 3))});
}

MO_REGISTER_XLA_OP(Name("MetalOpsRobustLoss").TypeConstraint("T", kFloatAndBfloat16Types),
                   XlaOp<CompileRobustLoss>);
MO_REGISTER_XLA_OP(Name("MetalOpsRobustLossGrad").TypeConstraint("T", kFloatAndBfloat16Types),
                   XlaOp<CompileRobustLossGrad>);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
