// The XLA kernels of MetalOpsFusedMLP / MetalOpsFusedMLPGrad (kernels/xla/xla_kernel.h), which emit
// the calls that their handlers take, with the op's attributes (FfiAttrsOf): the host handlers of
// fused_mlp_cpu.cc, the CUDA handlers of fused_mlp_cuda.cc. The call's operands are x, the N
// kernels and the N biases (forward) or grad_y, x, the N kernels, y and hidden (backward). Under
// XLA every output is computed (XLA does not say which it reads).
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/fused_mlp/fused_mlp.h"

namespace mo {
namespace xla_kernels {
namespace {

std::vector<checks::Dims> DimsOfList(const std::vector<::tensorflow::TensorShape>& shapes) {
  std::vector<checks::Dims> dims;
  for (const auto& shape : shapes) dims.push_back(checks::DimsOf(shape));
  return dims;
}

void CompileFusedMlp(XlaOpKernelContext* ctx, const fused_mlp::Attrs& attrs) {
  std::vector<::xla::XlaOp> kernels, biases;
  std::vector<::tensorflow::TensorShape> kernel_shapes, bias_shapes;
  OP_REQUIRES_OK(ctx, ctx->InputList("kernels", &kernels, &kernel_shapes));
  OP_REQUIRES_OK(ctx, ctx->InputList("biases", &biases, &bias_shapes));
  const checks::Dims x = InputDims(ctx, 0);
  fused_mlp::Net net;
  OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::Shapes(x, DimsOfList(kernel_shapes), DimsOfList(bias_shapes), &net)));
  std::vector<::xla::XlaOp> operands = {ctx->Input(0)};
  operands.insert(operands.end(), kernels.begin(), kernels.end());
  operands.insert(operands.end(), biases.begin(), biases.end());
  const ::xla::PrimitiveType type = ElementType(ctx, 0);
  EmitFfiCall(ctx, "MetalOpsFusedMLP", operands,
              {ArrayShape(type, {x[0], net.out_dim}), ArrayShape(type, {net.hidden_layers, x[0], net.width})},
              FfiAttrsOf(attrs));
}

void CompileFusedMlpGrad(XlaOpKernelContext* ctx, const fused_mlp::Attrs& attrs) {
  std::vector<::xla::XlaOp> kernels;
  std::vector<::tensorflow::TensorShape> kernel_shapes;
  OP_REQUIRES_OK(ctx, ctx->InputList("kernels", &kernels, &kernel_shapes));
  const int num = static_cast<int>(kernels.size());
  // The biases' shapes follow from the kernels' (as in the TensorFlow kernel).
  std::vector<checks::Dims> bias_dims;
  for (const auto& k : kernel_shapes) bias_dims.push_back({k.dims() == 2 ? k.dim_size(1) : 0});
  const checks::Dims x = InputDims(ctx, 1);
  fused_mlp::Net net;
  OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::Shapes(x, DimsOfList(kernel_shapes), bias_dims, &net)));
  OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::GradShapes(net, x[0], InputDims(ctx, 0), InputDims(ctx, 2 + num),
                                                             InputDims(ctx, 3 + num))));
  std::vector<::xla::XlaOp> operands = {ctx->Input(0), ctx->Input(1)};
  operands.insert(operands.end(), kernels.begin(), kernels.end());
  operands.push_back(ctx->Input(2 + num));
  operands.push_back(ctx->Input(3 + num));
  const ::xla::PrimitiveType type = ElementType(ctx, 1);
  std::vector<::xla::Shape> results = {ArrayShape(type, x)};
  for (const auto& k : kernel_shapes) results.push_back(ArrayShape(type, checks::DimsOf(k)));
  for (const auto& k : kernel_shapes) results.push_back(ArrayShape(type, {k.dim_size(1)}));
  EmitFfiCall(ctx, "MetalOpsFusedMLPGrad", operands, results, FfiAttrsOf(attrs));
}

MO_REGISTER_XLA_OP_WITH_GRAD("MetalOpsFusedMLP", kFloatTypes, fused_mlp::Attrs, CompileFusedMlp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
