// The XLA kernels of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad (kernels/xla/xla_kernel.h;
// FusedConv2D's gradient is TensorFlow's convolution gradients and FusedActivationGrad), which emit
// the calls that their handlers take (fused_conv2d_cpu.cc's host ones, fused_conv2d_cuda.cc's CUDA
// ones). The shapes are checked while XLA compiles (fused_conv2d::Inputs); the attributes travel
// whole (FfiAttrsOf), and the handlers rebuild the geometry from them and the buffers' shapes.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/fused_conv2d/fused_conv2d.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileFusedConv2D(XlaOpKernelContext* ctx, const fused_conv2d::Attrs& attrs) {
  auto dims = [&](int i) { return InputDims(ctx, i); };
  fused_conv2d::ConvGeometry g;
  OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Inputs(attrs, dims, &g)));
  std::vector<::xla::XlaOp> operands;
  const int num_inputs = 2 + static_cast<int>(attrs.num_bias + attrs.num_residual);
  for (int i = 0; i < num_inputs; ++i) operands.push_back(ctx->Input(i));
  EmitFfiCall(ctx, "MetalOpsFusedConv2D", operands, {ArrayShape(::xla::F32, g.output_dims())}, FfiAttrsOf(attrs));
}

void CompileFusedActivationGrad(XlaOpKernelContext* ctx, const fused_activation_grad::Attrs& attrs) {
  auto dims = [&](int i) { return InputDims(ctx, i); };
  OP_REQUIRES_OK(ctx, checks::ToStatus(fused_activation_grad::Inputs(attrs, dims)));
  std::vector<::xla::XlaOp> operands = {ctx->Input(0), ctx->Input(1)};
  if (attrs.num_features == 1) operands.push_back(ctx->Input(2));
  EmitFfiCall(ctx, "MetalOpsFusedActivationGrad", operands, {ArrayShape(::xla::F32, dims(0))},
              FfiAttrsOf(attrs));
}

using FusedConv2DXlaOp = XlaOpWithAttrs<fused_conv2d::Attrs, CompileFusedConv2D>;
using FusedActivationGradXlaOp =
    XlaOpWithAttrs<fused_activation_grad::Attrs, CompileFusedActivationGrad>;
MO_REGISTER_XLA_OP(Name("MetalOpsFusedConv2D"), FusedConv2DXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsFusedActivationGrad"), FusedActivationGradXlaOp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
