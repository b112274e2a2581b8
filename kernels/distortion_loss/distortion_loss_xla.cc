// The XLA kernels of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad
// (kernels/xla/xla_kernel.h), which emit the calls that their handlers take:
// the host handlers of distortion_loss_cpu.cc, the CUDA handlers of
// distortion_loss_cuda.cc. The shape checks run while XLA compiles; the check
// that t is sorted along every ray runs in the handlers (as in the TensorFlow
// kernels) and comes back as an XLA error naming the ray.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/distortion_loss/distortion_loss.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileDistortionLoss(XlaOpKernelContext* ctx) {
  const checks::Dims w = InputDims(ctx, 0);
  OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::Shapes(w, InputDims(ctx, 1))));
  EmitFfiCall(ctx, "MetalOpsDistortionLoss", InputsUpTo(ctx, 2), {ArrayShape(::xla::F32, {w[0]})});
}

void CompileDistortionLossGrad(XlaOpKernelContext* ctx) {
  const checks::Dims w = InputDims(ctx, 1), t = InputDims(ctx, 2);
  OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::Shapes(w, t)));
  OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::GradShape(InputDims(ctx, 0), w[0])));
  EmitFfiCall(ctx, "MetalOpsDistortionLossGrad", InputsUpTo(ctx, 3),
              {ArrayShape(::xla::F32, w), ArrayShape(::xla::F32, t)});
}

MO_REGISTER_XLA_OP(Name("MetalOpsDistortionLoss"), XlaOp<CompileDistortionLoss>);
MO_REGISTER_XLA_OP(Name("MetalOpsDistortionLossGrad"), XlaOp<CompileDistortionLossGrad>);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
