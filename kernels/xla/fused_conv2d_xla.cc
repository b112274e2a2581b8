// The XLA kernels of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad
// (kernels/xla/xla_kernel.h; FusedConv2D's gradient is TensorFlow's
// convolution gradients and FusedActivationGrad) and their host handlers: the
// CPU functors of kernels/cpu/fused_conv2d_cpu.h. FusedConv2D's geometry is
// computed while XLA compiles (fused_conv2d::Geometry) and travels as FFI
// attributes, the padding resolved; the handlers rebuild it from them and the
// buffers' shapes (kernels/xla/fused_conv2d_xla.h).
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/cpu/fused_conv2d_cpu.h"
#include "kernels/spec/fused_conv2d_spec.h"
#include "kernels/xla/fused_conv2d_xla.h"

namespace mo {
namespace xla_kernels {
namespace {

class FusedConv2DXlaOp : public XlaOpKernel {
 public:
  explicit FusedConv2DXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    const checks::Dims filter = InputDims(ctx, 1);
    fused_conv2d::ConvGeometry g;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Geometry(attrs_, InputDims(ctx, 0), filter, &g)));
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::GemmSizes(g, filter)));
    std::vector<::xla::XlaOp> operands = {ctx->Input(0), ctx->Input(1)};
    if (attrs_.num_bias == 1) {
      OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Bias(InputDims(ctx, 2), g.out_depth)));
      operands.push_back(ctx->Input(2));
    }
    if (attrs_.num_residual == 1) {
      const int r = 2 + static_cast<int>(attrs_.num_bias);
      OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Residual(InputDims(ctx, r), g.output_dims())));
      operands.push_back(ctx->Input(r));
    }
    EmitFfiCall(ctx, "MetalOpsFusedConv2D", operands, {ArrayShape(::xla::F32, g.output_dims())},
                FfiAttrs()
                    .Int("has_bias", attrs_.num_bias)
                    .Int("has_residual", attrs_.num_residual)
                    .Int("stride_rows", g.stride_rows)
                    .Int("stride_cols", g.stride_cols)
                    .Int("dilation_rows", g.dilation_rows)
                    .Int("dilation_cols", g.dilation_cols)
                    .Int("pad_top", g.pad_top)
                    .Int("pad_bottom", g.pad_bottom)
                    .Int("pad_left", g.pad_left)
                    .Int("pad_right", g.pad_right)
                    .Int("activation", attrs_.act)
                    .Float("alpha", attrs_.alpha));
  }

 private:
  fused_conv2d::ConvAttrs attrs_;
};

class FusedActivationGradXlaOp : public XlaOpKernel {
 public:
  explicit FusedActivationGradXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    const checks::Dims grads = InputDims(ctx, 0);
    const bool has_features = attrs_.num_features == 1;
    const checks::Dims features = has_features ? InputDims(ctx, 2) : checks::Dims();
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::ActivationGradShapes(grads, InputDims(ctx, 1),
                                                                            has_features ? &features : nullptr)));
    std::vector<::xla::XlaOp> operands = {ctx->Input(0), ctx->Input(1)};
    if (has_features) operands.push_back(ctx->Input(2));
    EmitFfiCall(ctx, "MetalOpsFusedActivationGrad", operands, {ArrayShape(::xla::F32, grads)},
                FfiAttrs().Int("activation", attrs_.act).Float("alpha", attrs_.alpha));
  }

 private:
  fused_conv2d::ActivationGradAttrs attrs_;
};

MO_REGISTER_XLA_OP(Name("MetalOpsFusedConv2D"), FusedConv2DXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsFusedActivationGrad"), FusedActivationGradXlaOp);

namespace ffi = ::xla::ffi;

ffi::Error Conv(ffi::AnyBuffer input, ffi::AnyBuffer filter, ffi::RemainingArgs rest, xla_ffi::RetBuffer output,
                int64_t has_bias, int64_t has_residual, int64_t stride_rows, int64_t stride_cols,
                int64_t dilation_rows, int64_t dilation_cols, int64_t pad_top, int64_t pad_bottom, int64_t pad_left,
                int64_t pad_right, int64_t activation, float alpha) {
  FusedConv2DArgs args;
  ffi::Error error = xla_ffi::FusedConv2DArgsOf(input, filter, rest, output, has_bias, has_residual, stride_rows,
                                                stride_cols, dilation_rows, dilation_cols, pad_top, pad_bottom,
                                                pad_left, pad_right, activation, alpha, &args);
  if (error.failure() || args.g.pixels() * args.g.out_depth == 0) return error;
  return xla_ffi::ToError(
      FusedConv2DFunctor<Eigen::ThreadPoolDevice>::Compute(HostContext(), args, xla_ffi::Data<float>(output)));
}

ffi::Error ActivationGrad(ffi::Buffer<ffi::F32> grads, ffi::Buffer<ffi::F32> outputs, ffi::RemainingArgs rest,
                          ffi::ResultBuffer<ffi::F32> backprops, int64_t activation, float alpha) {
  std::vector<ffi::AnyBuffer> features;
  ffi::Error error = xla_ffi::BuffersOf(rest, &features);
  if (error.failure()) return error;
  const int64_t n = static_cast<int64_t>(grads.element_count());
  if (n == 0) return ffi::Error::Success();
  return xla_ffi::ToError(FusedActivationGradFunctor<Eigen::ThreadPoolDevice>::Compute(
      HostContext(), grads.typed_data(), outputs.typed_data(),
      features.empty() ? nullptr : xla_ffi::Data<float>(features[0]), n, static_cast<int>(activation), alpha,
      backprops->typed_data()));
}

XLA_FFI_DEFINE_HANDLER(kConv, Conv,
                       xla_ffi::BindConvAttrs(ffi::Ffi::Bind()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .RemainingArgs()
                                                  .Ret<ffi::AnyBuffer>()));
XLA_FFI_DEFINE_HANDLER(kActivationGrad, ActivationGrad,
                       ffi::Ffi::Bind()
                           .Arg<ffi::Buffer<ffi::F32>>()
                           .Arg<ffi::Buffer<ffi::F32>>()
                           .RemainingArgs()
                           .Ret<ffi::Buffer<ffi::F32>>()
                           .Attr<int64_t>("activation")
                           .Attr<float>("alpha"));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsFusedConv2D", "Host", kConv);
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsFusedActivationGrad", "Host", kActivationGrad);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
