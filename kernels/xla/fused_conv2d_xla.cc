// The XLA kernels of MetalOpsFusedConv2D and MetalOpsFusedActivationGrad
// (kernels/xla/xla_kernel.h; FusedConv2D's gradient is TensorFlow's
// convolution gradients and FusedActivationGrad) and their host handlers: the
// CPU functors of kernels/cpu/fused_conv2d_cpu.h. FusedConv2D's geometry is
// computed while XLA compiles (fused_conv2d::Geometry) and travels as FFI
// attributes, the padding resolved; the handler rebuilds it from them and the
// buffers' shapes.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>
#include <vector>

#include "kernels/cpu/fused_conv2d_cpu.h"
#include "kernels/spec/fused_conv2d_spec.h"

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

ffi::Error Conv(ffi::Buffer<ffi::F32> input, ffi::Buffer<ffi::F32> filter, ffi::RemainingArgs rest,
                ffi::ResultBuffer<ffi::F32> output, int64_t has_bias, int64_t has_residual, int64_t stride_rows,
                int64_t stride_cols, int64_t dilation_rows, int64_t dilation_cols, int64_t pad_top,
                int64_t pad_bottom, int64_t pad_left, int64_t pad_right, int64_t activation, float alpha) {
  std::vector<ffi::AnyBuffer> extra;
  ffi::Error error = xla_ffi::BuffersOf(rest, &extra);
  if (error.failure()) return error;
  if (extra.size() != static_cast<size_t>(has_bias + has_residual)) {
    return ffi::Error::Internal("FusedConv2D: the XLA call has the wrong number of operands");
  }
  const auto in = input.dimensions(), f = filter.dimensions(), out = output->dimensions();
  FusedConv2DArgs args{};
  fused_conv2d::ConvGeometry& g = args.g;
  g.batch = in[0], g.in_rows = in[1], g.in_cols = in[2], g.in_depth = in[3];
  g.filter_rows = f[0], g.filter_cols = f[1], g.out_depth = f[3];
  g.out_rows = out[1], g.out_cols = out[2];
  g.stride_rows = stride_rows, g.stride_cols = stride_cols;
  g.dilation_rows = dilation_rows, g.dilation_cols = dilation_cols;
  g.pad_top = pad_top, g.pad_bottom = pad_bottom, g.pad_left = pad_left, g.pad_right = pad_right;
  if (g.pixels() * g.out_depth == 0) return ffi::Error::Success();
  args.input = input.typed_data();
  args.filter = filter.typed_data();
  args.bias = has_bias ? xla_ffi::Data<float>(extra[0]) : nullptr;
  args.residual = has_residual ? xla_ffi::Data<float>(extra[has_bias]) : nullptr;
  args.act = static_cast<int>(activation);
  args.alpha = alpha;
  return xla_ffi::ToError(
      FusedConv2DFunctor<Eigen::ThreadPoolDevice>::Compute(HostContext(), args, output->typed_data()));
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
                       ffi::Ffi::Bind()
                           .Arg<ffi::Buffer<ffi::F32>>()
                           .Arg<ffi::Buffer<ffi::F32>>()
                           .RemainingArgs()
                           .Ret<ffi::Buffer<ffi::F32>>()
                           .Attr<int64_t>("has_bias")
                           .Attr<int64_t>("has_residual")
                           .Attr<int64_t>("stride_rows")
                           .Attr<int64_t>("stride_cols")
                           .Attr<int64_t>("dilation_rows")
                           .Attr<int64_t>("dilation_cols")
                           .Attr<int64_t>("pad_top")
                           .Attr<int64_t>("pad_bottom")
                           .Attr<int64_t>("pad_left")
                           .Attr<int64_t>("pad_right")
                           .Attr<int64_t>("activation")
                           .Attr<float>("alpha"));
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
